"""A job's life on a backend, from outside it: the interface each backend
implements for ``tfrun --detach`` and ``tfrun list``, ``status``, ``logs``,
``wait``, ``stop`` and ``attach`` (:mod:`tfmesos.cli.jobs`).

Beside :class:`tfmesos.backends.base.Backend`, not in it, as TorchX keeps its
``Scheduler`` apart from what runs a job's tasks: a ``Backend`` is one run of
one job, inside the launcher, asynchronous, built from the job's spec; a
:class:`JobStore` is every job of one backend, seen from any machine that
reaches it, synchronous, with no spec, light to import (``tfrun list``).
A job submitted attached is :func:`tfmesos.launcher.run.run_replica_job`
driving the backend's ``Backend``; submitted detached, it is
:meth:`JobStore.submit`, whose launcher (a daemon, a Slurm job, a Mesos task)
then runs it attached, elsewhere. Each backend's store is in its own
package (``backends/local/jobs.py``, ...), named in the registry
(:mod:`tfmesos.backends`); the flags that find its jobs are its options
class's (:meth:`~tfmesos.backends.options.BackendOptions.add_job_flags`).
"""

from __future__ import annotations

import abc
import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from tfmesos.backends.jobstate import JobState
from tfmesos.errors import EXIT_USAGE

if TYPE_CHECKING:
    from tfmesos.backends.options import BackendOptions
    from tfmesos.spec import ClusterSpec

__all__ = ["DetachedJob", "JobError", "JobStore", "Run"]


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


@dataclasses.dataclass(frozen=True)
class DetachedJob:
    """A job to run detached, as tfrun parsed and checked it: what its
    launcher runs, wherever that is."""

    backend: str
    spec: ClusterSpec
    options: BackendOptions
    verbose: bool = False
    """``-v``: the launcher's own detail."""
    events: str | None = None
    """``--events FILE``: where the launcher writes the event stream too."""
    argv: tuple[str, ...] = dataclasses.field(default=(), compare=False)
    """tfrun's arguments as the user gave them, for the job's record
    (``job.json``) only: never sent to the launcher, never parsed again."""


class JobStore(abc.ABC):
    """One backend's detached jobs: how one is submitted, found, read,
    followed and stopped. Every method but :meth:`submit` may be called from
    any machine that reaches the backend, long after the submitter is gone."""

    backend: str

    @classmethod
    def from_flags(cls, args: argparse.Namespace) -> JobStore:
        """This backend's store, found where the job command's flags say
        (:meth:`BackendOptions.add_job_flags`)."""
        return cls()

    @classmethod
    @abc.abstractmethod
    def submit(cls, job: DetachedJob) -> NoReturn:
        """Start ``job``'s launcher where it outlives this tfrun, hand it
        the job's description (:mod:`tfmesos.backends.jobspec`), print the
        job's id last on standard output (how to follow it on standard
        error), and exit 0 once the launcher has the job; exit as an
        attached tfrun would where it cannot."""

    @abc.abstractmethod
    def runs(self) -> list[Run]:
        """This user's jobs, oldest first (``tfrun list``)."""

    @abc.abstractmethod
    def find(self, job_id: str) -> Run:
        """The job ``job_id``; :class:`JobError` where there is none."""

    @abc.abstractmethod
    def state(self, run: Run) -> JobState:
        """What its events say of it, and whether its launcher runs (``status``, ``wait``)."""

    @abc.abstractmethod
    def task_logs(self, run: Run, state: JobState, task: str) -> list[Path]:
        """The task's latest attempt's log, its rotated half first where
        there is one (``logs``; ``-f`` reads them again as they grow)."""

    @abc.abstractmethod
    def console(self, run: Run) -> Path:
        """What the job's tfrun says, as an attached tfrun's terminal shows it (``attach``)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Let go of what the store holds (Mesos: its client's connections)."""

    @abc.abstractmethod
    def stop(self, run: Run) -> bool:
        """End the job as Ctrl-C ends an attached one, or what an ended job
        left behind (a Mesos framework whose launcher was lost); return once
        it is over, with whether there was anything to end."""
