"""The one exception tree of tfmesos: every error raised on purpose is a
:class:`TFMesosError`, its subclass naming the stage that failed. A
:class:`SpecError` is also a ``ValueError``, as Python code expects from bad
arguments.
"""

from __future__ import annotations

__all__ = [
    "EXIT_NEVER_UP",
    "EXIT_NOT_PERMITTED",
    "EXIT_TASK_FAILED",
    "EXIT_TFRUN_FAILED",
    "EXIT_USAGE",
    "ClusterStartError",
    "JobFailedError",
    "ResourceError",
    "SignalInterrupt",
    "SpecError",
    "TFMesosError",
    "TaskFailure",
    "interrupted_status",
    "task_status",
]

import signal
from dataclasses import dataclass, field

# tfrun's exit statuses. What tfrun itself reports has statuses of its own,
# as timeout(1) keeps 124-127 for its own: a script can tell a job that never
# ran, or that tfrun gave up on, from a task that failed. A failed task's own
# status is passed through, unless it is one of tfrun's own below (a task's
# argparse exits 2): then tfrun exits 1, which is always a task's failure, as
# torchrun exits 1 for any failed worker; the verdict says the task's status.

EXIT_TASK_FAILED = 1
"""A task failed: its status was 1, one of tfrun's own, or none at all (the
task was lost, or a ps exited while the cluster was running)."""
EXIT_USAGE = 2
"""Bad usage: a bad flag or value, a job the machine can never hold; nothing
was started. argparse's status, kept."""
EXIT_NEVER_UP = 124
"""The cluster never came up: not within ``--timeout``, or a task kept dying
before it registered (timeout(1)'s "timed out")."""
EXIT_TFRUN_FAILED = 125
"""tfrun itself failed: it could not reach the Mesos master within its
reconnect budget, or lost it for good, or the master refused the framework,
or an error in tfrun (timeout(1)'s "timeout itself failed")."""
EXIT_NOT_PERMITTED = 77
"""The Mesos master refused the framework's credentials (HTTP 401: a wrong
principal or secret, or none where it demands them). sysexits.h's
``EX_NOPERM`` ("you did not have sufficient permission"): a script can tell
credentials to fix from a master to wait for (125); retrying cannot help."""
INTERRUPTING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that stop tfrun and its job; it then exits 128 + the signal,
as a shell reports a command those signals ended: 130, 143, 129."""

TFRUN_STATUSES = frozenset(
    {
        EXIT_USAGE,
        EXIT_NOT_PERMITTED,
        EXIT_NEVER_UP,
        EXIT_TFRUN_FAILED,
        *(128 + s for s in INTERRUPTING_SIGNALS),
    }
)
"""Statuses that only tfrun itself reports, never as a task's."""


def task_status(code: int | None) -> int:
    """tfrun's exit status for a task that failed with ``code`` (None: no
    status, the task was lost): the task's own, unless that would read as
    one of tfrun's, or is none, or is out of a status's range; then 1."""
    if code is None or not 0 < code < 256 or code in TFRUN_STATUSES:
        return EXIT_TASK_FAILED
    return code


class SignalInterrupt(KeyboardInterrupt):
    """SIGTERM or SIGHUP before the event loop handles signals, raised like
    ``KeyboardInterrupt``, so tfrun ends with its verdict rather than by the
    signal's default action."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def interrupted_status(signum: int) -> int:
    """tfrun's exit status when ``signum`` stopped it: 128 + the signal."""
    return 128 + signum


class TFMesosError(Exception):
    """Base class of every error tfmesos raises on purpose."""

    exit_status: int = EXIT_TFRUN_FAILED
    """tfrun's exit status when this error ends the run (a subclass, or an
    error that carries another's, says otherwise)."""


class SpecError(TFMesosError, ValueError):
    """A job definition or a command line is invalid; nothing was started."""

    exit_status = EXIT_USAGE


class ResourceError(TFMesosError):
    """The job asks for more than the backend can ever give it."""

    exit_status = EXIT_USAGE


@dataclass(frozen=True)
class TaskFailure:
    """How one task ended badly: enough to tell the user what and where."""

    task: str
    """The task's name, ``job:index`` (``worker:1``)."""
    reason: str
    """What happened, in words (``exited with status 3``)."""
    host: str = ""
    output_tail: tuple[str, ...] = field(default=())
    """The last lines the task printed, oldest first."""
    drained: bool = False
    """The operator's drain of its host ended it, not a fault of its own."""

    def describe(self, context: str = "") -> str:
        """What happened, then ``context``, then the task's last output."""
        where = f" on {self.host}" if self.host else ""
        text = f"task {self.task}{where} {self.reason}{context}"
        if self.output_tail:
            lines = "\n".join(f"  | {line}" for line in self.output_tail)
            text += f"; its last output:\n{lines}"
        return text


class ClusterStartError(TFMesosError):
    """The cluster could not be brought up (tasks kept failing, or a timeout)."""

    def __init__(self, message: str, failure: TaskFailure | None = None) -> None:
        super().__init__(message)
        self.failure = failure


class JobFailedError(TFMesosError):
    """A task failed after the cluster was up; the job was stopped."""

    def __init__(self, failure: TaskFailure, exit_code: int = EXIT_TASK_FAILED) -> None:
        super().__init__(failure.describe())
        self.failure = failure
        self.exit_code = exit_code
        """tfrun's exit status for it (:func:`task_status` of the task's own)."""
