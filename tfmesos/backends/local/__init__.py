"""The local backend: every task a process on this machine.

Light on purpose: tfrun imports :mod:`.forkstart` before anything else, and
the backend itself (:mod:`.backend`) only for a local job.
"""
