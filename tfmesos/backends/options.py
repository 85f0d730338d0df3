"""What every backend's options have in common.

Light on purpose (no asyncio): ``tfrun --help`` reads the Slurm backend's,
which derive from these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from tfmesos import runs

__all__ = ["BackendOptions"]

_Options = TypeVar("_Options", bound="BackendOptions")


@dataclass(frozen=True)
class BackendOptions:
    """What a user may choose about a backend, beyond the job itself. Each
    backend declares its own (a frozen dataclass deriving from this one) as
    :attr:`Backend.options_type`; the CLI and ``tfmesos.cluster`` build them
    by name (:func:`tfmesos.backends.backend_options`)."""

    log_dir: str | None = None
    """Where the full output of each task this machine can see is kept: the
    tasks' own where they share its file system (local, Slurm), else the
    chief's (it runs beside tfrun). None: a new directory per run."""

    @classmethod
    def from_given(cls: type[_Options], given: Mapping[str, Any]) -> _Options:
        """The options among ``given`` (the CLI's or ``cluster()``'s keywords)
        that this backend takes; ``None`` is "not given". Others are not its
        business: each backend's own check says what it refuses."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in given.items() if k in names and v is not None})

    def for_restarts(self: _Options) -> _Options:
        """These options for a job that may start again (``--max-restarts``):
        every run keeps its logs in the same directory."""
        if self.log_dir:
            return self
        return dataclasses.replace(self, log_dir=str(runs.new_run_dir()))
