"""The local backend: every task a process on this machine.

Light on purpose: tfrun imports :mod:`.options` on every job, :mod:`.forkstart`
as soon as it knows the job is local (before the launcher's imports), and
the backend itself (:mod:`.backend`) only for a local job.
"""
