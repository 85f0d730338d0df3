"""The one exception tree of tfmesos.

Every error the launcher raises on purpose is a :class:`TFMesosError`, so a
caller can catch them all in one place; the subclasses say which stage failed.
Bad input found while building a spec is a :class:`SpecError`, which is also a
``ValueError`` because that is what Python code expects from bad arguments.
"""

from __future__ import annotations

__all__ = [
    "ClusterStartError",
    "JobFailedError",
    "ResourceError",
    "SpecError",
    "TFMesosError",
    "TaskFailure",
]

from dataclasses import dataclass, field


class TFMesosError(Exception):
    """Base class of every error tfmesos raises on purpose."""


class SpecError(TFMesosError, ValueError):
    """A job definition or a command line is invalid; nothing was started."""


class ResourceError(TFMesosError):
    """The job asks for more than the backend can ever give it."""


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

    def describe(self, context: str = "") -> str:
        """What happened, then ``context`` (what the launcher does about it),
        then the task's last output on lines of their own."""
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

    def __init__(self, failure: TaskFailure, exit_code: int = 1) -> None:
        super().__init__(failure.describe())
        self.failure = failure
        self.exit_code = exit_code
