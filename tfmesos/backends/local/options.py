"""The local backend's options: only where the tasks' logs go (``--log-dir``).
Apart from :mod:`tfmesos.backends.local.backend`, so that tfrun checks a job
against them without importing the backend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tfmesos.backends.options import BackendOptions

if TYPE_CHECKING:
    from tfmesos.spec import ClusterSpec

__all__ = ["LocalOptions"]


@dataclass(frozen=True)
class LocalOptions(BackendOptions):
    """The local backend's options: only where the tasks' logs go (``--log-dir``)."""

    @classmethod
    def task_limit(cls, tasks: int, nproc: int = 1) -> str | None:
        from tfmesos.common.resources import local_task_limit

        return local_task_limit(tasks, nproc)

    def start_early(self, spec: ClusterSpec) -> None:
        from tfmesos.backends.local import forkstart

        if not forkstart.runs_tasks_itself(spec):
            # Its start overlaps the launcher's imports (docs/benchmarks.md).
            forkstart.start()

    def discard_early(self) -> None:
        from tfmesos.backends.local import forkstart

        forkstart.discard()
