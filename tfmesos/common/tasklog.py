"""The task's log: the agent's stdout, rotated under a cap where the backend
sets one (:data:`tfmesos.rendezvous.protocol.ENV_LOG_MAX`).

Standard library only: the agent imports it.
"""

from __future__ import annotations

import contextlib
import errno
import os
from typing import TYPE_CHECKING

from tfmesos.rendezvous import protocol

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["TaskLog", "log_name", "log_stem", "new_task_id"]

NONCE_HEX = 8
"""Hex digits of a task id's random end (:func:`new_task_id`)."""


def log_stem(job_name: str, index: int, restart: int = 0, attempt: int = 1) -> str:
    """What a task's log is called, but for ``.log``: ``worker.1`` for the
    job's first run's first attempt, ``worker.1.attempt-2`` for the task
    launched again in that run, ``worker.1.restart-1`` (and
    ``worker.1.restart-1.attempt-2``) in the job's first restart
    (``--max-restarts``): one name for each, known before the job starts."""
    stem = f"{job_name}.{index}"
    if restart:
        stem += f".restart-{restart}"
    if attempt > 1:
        stem += f".attempt-{attempt}"
    return stem


def new_task_id(job_name: str, index: int, restart: int = 0, attempt: int = 1) -> str:
    """A task attempt's id: its log's stem and a random end, which keeps it
    apart from any other job's on a node (the Slurm job script and the
    sweepers find a task's processes by the id in their environment)."""
    return f"{log_stem(job_name, index, restart, attempt)}.{os.urandom(NONCE_HEX // 2).hex()}"


def log_name(task_id: str) -> str:
    """The file name of the log of task ``task_id`` in its run's directory:
    the id without its random end (``worker.1.log``); an id made otherwise
    names its log whole."""
    stem, _, nonce = task_id.rpartition(".")
    if stem and len(nonce) == NONCE_HEX and all(c in "0123456789abcdef" for c in nonce):
        return f"{stem}.log"
    return f"{task_id}.log"


class TaskLog:
    """The agent's stdout, where everything the task prints is kept (its
    sandbox log on Mesos, its log file locally). Given a file and a cap, the
    file is rotated once it holds half the cap: the file and ``FILE.1``
    together never hold more than the cap, and the newest output is kept.

    A log that cannot be written (its disk is full) is given up, never the
    task: :meth:`write` says why once, and what the log holds is kept."""

    def __init__(
        self, path: str | None = None, cap: int = 0, fds: tuple[int, ...] = (1, 2)
    ) -> None:
        self.path = path
        self.half = cap // 2 if path and cap > 1 else 0
        self.fds = fds
        """The descriptors open on the log, the first written to: the agent's
        stdout and stderr; one of its own for a task the launcher runs."""
        self.failed = False
        """A write failed: the log is given up, its descriptors point at /dev/null."""
        try:
            self.size = os.fstat(fds[0]).st_size
        except OSError:
            self.size = 0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> TaskLog:
        cap = environ.get(protocol.ENV_LOG_MAX, "")
        return cls(environ.get(protocol.ENV_LOG_FILE) or None, int(cap) if cap.isdigit() else 0)

    def write(self, data: bytes) -> str | None:
        """Append ``data``; where the log cannot take it, give the log up and
        return, this once, what went wrong, in words."""
        if self.failed:
            return None
        view = memoryview(data)
        while view:
            chunk = view
            if self.half:
                if self.size >= self.half:
                    problem = self._rotate()
                    if problem is not None:
                        return problem
                chunk = view[: max(self.half - self.size, 1)]
            try:
                written = os.write(self.fds[0], chunk)
            except InterruptedError:
                continue
            except OSError as exc:
                return self._give_up(exc)
            self.size += written
            view = view[written:]
        return None

    def _give_up(self, exc: OSError) -> str:
        where = self.path or _target(self.fds[0])
        self.failed = True
        # Nothing else the agent prints (a note, a traceback) may fail on it.
        try:
            null = os.open(os.devnull, os.O_WRONLY)
        except OSError:
            pass
        else:
            for target in self.fds:
                os.dup2(null, target, inheritable=target <= 2)
            os.close(null)
        return describe_failure(where, exc)

    def _rotate(self) -> str | None:
        """Start the log afresh, the full half moved to ``FILE.1``; where
        that cannot be done, the log is given up as for a failed write
        (:meth:`_give_up`), since writing on would break the cap, or would
        fill a file nobody can find: what it says is returned."""
        assert self.path is not None
        rotated = self.path + ".1"
        try:
            os.replace(self.path, rotated)
        except OSError as exc:  # the directory is gone, or not writable
            return self._give_up(exc)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        except OSError as exc:  # no inode left for a new file, a quota
            # The log keeps its name, and what it holds: it is not written
            # on as FILE.1, past the cap.
            with contextlib.suppress(OSError):
                os.replace(rotated, self.path)
            return self._give_up(exc)
        for target in self.fds:
            # A descriptor of the launcher's own (a task it runs itself)
            # stays its own: no command may inherit it.
            os.dup2(fd, target, inheritable=target <= 2)
        os.close(fd)
        self.size = 0
        return None


def _target(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "its stdout"


def _mount_point(path: str) -> str:
    """The mount point of the filesystem that holds ``path``."""
    current = os.path.dirname(os.path.abspath(path))
    while not os.path.ismount(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def describe_failure(path: str, exc: OSError) -> str:
    """Why the log at ``path`` could not be written, and what that costs, in
    words that follow the task's name."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC:
        reason += f": the log disk is full (the filesystem at {_mount_point(path)})"
    elif exc.errno == errno.EDQUOT:
        reason += f": the disk quota on the filesystem at {_mount_point(path)} is used up"
    elif exc.errno == errno.ENOENT:
        reason += f": its directory {os.path.dirname(path)} was removed"
    elif exc.errno == errno.EFBIG:
        reason += ": the log reached the largest file this process may write (ulimit -f)"
    return (
        f"cannot write its log {path} ({reason}); what the log holds is kept, the rest of "
        "the task's output is not kept there but still reaches tfrun (and the terminal, "
        "where it is shown); the task goes on"
    )
