"""The local backend's fork server, started before ``tfrun`` imports its launcher,
so its start-up overlaps the launcher's imports;
:meth:`tfmesos.backends.local.forking.ForkServer.start` adopts it, and
:func:`discard` closes one not adopted. Imports only what starting a process
needs.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from typing import Any

from tfmesos.common.proctree import bootstrap_command

__all__ = [
    "LOCAL_AGENTS",
    "NO_FORK_SERVER",
    "OWN_PROCESS_GROUP",
    "command",
    "discard",
    "popen",
    "raise_open_file_limit",
    "runs_tasks_itself",
    "start",
    "take",
]

NO_FORK_SERVER = "TFMESOS_NO_FORK_SERVER"
"""Set (to anything) to start each agent as a new interpreter instead of a fork."""
LOCAL_AGENTS = "TFMESOS_LOCAL_AGENTS"
"""Set (to anything) to run every local task through an agent of its own, as
on a cluster, rather than have the launcher run a plain task itself."""


def runs_tasks_itself(spec: Any) -> bool:
    """Whether the local backend runs this job's tasks in the launcher's own
    process (:mod:`tfmesos.backends.local.directtask`) rather than through agents:
    replica mode, with no initializer or finalizer (the agent's sequence of
    commands), unless agents are asked for (``TFMESOS_LOCAL_AGENTS``, or
    ``TFMESOS_NO_FORK_SERVER``: agents as interpreters of their own)."""
    return (
        bool(spec.replica)
        and not spec.initializer
        and not spec.finalizer
        and not os.environ.get(LOCAL_AGENTS)
        and not os.environ.get(NO_FORK_SERVER)
    )


OWN_PROCESS_GROUP: dict[str, Any] = (
    {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
)
"""Popen's keywords for a child in a process group of its own."""

_started: tuple[int, subprocess.Popen[bytes]] | None = None
"""The server started early, with the pid of the launcher that started it."""


def command() -> list[str]:
    """The fork server's command line, for the launcher that runs it (this process)."""
    return [
        *bootstrap_command("tfmesos.agent.forkserver", "main(int(sys.argv[1]))"),
        str(os.getpid()),
    ]


def popen() -> subprocess.Popen[bytes]:
    """Start a fork server: requests on its stdin, replies on its stdout, in
    a process group of its own (Ctrl-C at the terminal is the launcher's)."""
    return subprocess.Popen(
        command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, **OWN_PROCESS_GROUP
    )


def start() -> None:
    """Start the fork server now, for the local backend to adopt; nothing if
    agents are not to be forked (``TFMESOS_NO_FORK_SERVER``) or it cannot start."""
    global _started
    if _started is not None or os.environ.get(NO_FORK_SERVER):
        return
    # Before the server starts: it, its agents and their commands inherit the limit.
    raise_open_file_limit()
    with contextlib.suppress(OSError):
        _started = (os.getpid(), popen())


def take() -> subprocess.Popen[bytes] | None:
    """The server started early, if it still runs; the caller owns it from now on."""
    global _started
    started, _started = _started, None
    if started is None:
        return None
    pid, proc = started
    if pid != os.getpid() or proc.poll() is not None:
        if pid == os.getpid():
            _close(proc)
        return None
    return proc


def discard() -> None:
    """Close and reap a server started early that nobody adopted."""
    proc = take()
    if proc is not None:
        _close(proc)


def _close(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    try:
        proc.wait(5.0)  # it ends when its stdin does
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def raise_open_file_limit() -> None:
    """The launcher holds two descriptors per task (its connection and its
    pidfd): 500 tasks pass the common soft limit of 1024. Raise it to the
    hard limit, which needs no privilege."""
    try:
        import resource
    except ImportError:  # not on a POSIX system
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
