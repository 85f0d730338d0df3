"""The rendezvous: where a job's tasks dial in to their launcher.

:mod:`~tfmesos.rendezvous.protocol` is the contract between the two ends,
:mod:`~tfmesos.rendezvous.server` the launcher's end and
:mod:`~tfmesos.rendezvous.client` the task's (the agent's, and the Slurm job
script's). This module imports none of them: the agent imports the protocol
and the client under ``python -S`` and must not pay for the server's asyncio.
"""
