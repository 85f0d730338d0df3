"""What every backend's store of detached jobs is (:class:`JobStore`), the
job it finds (:class:`Run`), and the one error its commands say
(:class:`JobError`): the interface ``tfrun list``, ``status``, ``logs``,
``wait``, ``stop`` and ``attach`` (:mod:`tfmesos.cli.jobs`) know, which the
local and Slurm store there and the Mesos one (:mod:`tfmesos.backends.mesos.jobs`)
implement."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Protocol

from tfmesos.backends.jobstate import JobState
from tfmesos.errors import EXIT_USAGE

__all__ = ["JobError", "JobStore", "Run"]


class JobError(Exception):
    """A job's command that cannot be done: said in one line, with a status."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True)
class Run:
    """One job a store knows: its id, and what was said of it at its start."""

    id: str
    backend: str
    where: Path
    """Its run directory (on a cluster backend: where its records are kept)."""
    record: dict[str, Any]
    """``job.json``."""

    @property
    def name(self) -> str:
        return str(self.record.get("name") or "")


class JobStore(Protocol):
    """What the commands need of a backend's detached jobs."""

    backend: str

    def runs(self) -> list[Run]:
        """This user's jobs, oldest first."""
        ...

    def find(self, job_id: str) -> Run:
        """The job ``job_id``; :class:`JobError` where there is none."""
        ...

    def state(self, run: Run) -> JobState: ...

    def task_logs(self, run: Run, state: JobState, task: str) -> list[Path]:
        """The task's latest attempt's log, its rotated half first where there is one."""
        ...

    def console(self, run: Run) -> Path:
        """What the job's tfrun says, as an attached tfrun's terminal shows it."""
        ...

    def stop(self, run: Run) -> bool:
        """End the job as Ctrl-C ends an attached one, or what an ended job
        left behind (a Mesos framework whose launcher was lost); return once
        it is over, with whether there was anything to end."""
        ...
