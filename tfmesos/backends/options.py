"""What every backend's options share; no asyncio, since ``tfrun --help`` reads
them.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from tfmesos.common import rundirs

if TYPE_CHECKING:
    from tfmesos.common.flagtypes import FlagGroup
    from tfmesos.spec import ClusterSpec

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

    label: ClassVar[str] = ""
    """The backend's name as messages say it ("Mesos")."""
    flags: ClassVar[Mapping[str, str]] = {}
    """This backend's own options, by the name they are given under
    (``tfmesos.cluster``'s keyword, tfrun's argparse destination), each with
    its tfrun flag: given to another backend, they are refused, naming both."""
    choosing: ClassVar[frozenset[str]] = frozenset()
    """Those of :attr:`flags` that choose this backend when none is named."""

    @classmethod
    def add_arguments(cls, group: FlagGroup) -> None:
        """Add to tfrun's parser the flags this backend declares itself."""

    @classmethod
    def gather_arguments(cls, args: argparse.Namespace) -> None:
        """Put this backend's parsed flags in ``args`` under the names
        :meth:`from_given` reads."""

    @classmethod
    def given_flags(cls, given: Mapping[str, Any]) -> list[tuple[str, str]]:
        """This backend's own options among ``given``, as (name, flag); an
        empty or false value is not given (``-f`` not there, no ``-V``), bar
        ``False`` for an option that is on by default: that is its
        ``--no-`` flag, given (``--no-checkpoint``)."""
        on = {f.name for f in dataclasses.fields(cls) if f.default is True}
        found = []
        for name, flag in cls.flags.items():
            value = given.get(name)
            if value is False and name in on:
                found.append((name, "--no-" + flag.removeprefix("--")))
            elif value:
                found.append((name, flag))
        return found

    @classmethod
    def chosen_by(cls, given: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Those of :meth:`given_flags` that choose this backend."""
        return [(name, flag) for name, flag in cls.given_flags(given) if name in cls.choosing]

    @classmethod
    def chosen_by_default(cls) -> bool:
        """Whether this backend is used when no flag chooses one."""
        return False

    @classmethod
    def task_limit(cls, tasks: int, nproc: int = 1) -> str | None:
        """Why a job of ``tasks`` tasks, each of ``nproc`` processes, can
        never run on this backend, said before anything is built per task;
        None: it may."""
        return None

    def check_spec(self, spec: ClusterSpec) -> None:
        """Raise :class:`~tfmesos.errors.SpecError` where these options
        cannot run ``spec`` (Mesos: the Docker containerizer with GPUs)."""

    @classmethod
    def from_given(cls: type[_Options], given: Mapping[str, Any]) -> _Options:
        """The options among ``given`` (the CLI's or ``cluster()``'s keywords)
        that this backend takes; ``None`` is "not given". Others are not its
        business: each backend's own check says what it refuses."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in given.items() if k in names and v is not None})

    @classmethod
    def from_record(cls: type[_Options], record: Mapping[str, Any]) -> _Options:
        """The options a detached job's description holds
        (:mod:`tfmesos.backends.jobspec`: JSON of these fields, a tuple as a
        list); a backend whose fields JSON does not hold as they are
        (Mesos's volumes) rebuilds them."""
        fields: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in record.items()
        }
        return cls(**fields)

    @classmethod
    def add_job_flags(cls, parser: argparse.ArgumentParser) -> None:
        """Add to the job commands' parser (``tfrun list``, ``status``, ...)
        the flags that say where this backend's detached jobs are found
        (Mesos: its master, and as whom); the store reads them
        (:meth:`tfmesos.backends.jobs.JobStore.from_flags`)."""

    @classmethod
    def claims_job(cls, args: argparse.Namespace) -> bool:
        """Whether a job command given no ``--backend`` is for this backend's
        jobs (Mesos: ``-m``, or an id of its own form)."""
        return False

    def start_early(self, spec: ClusterSpec) -> None:
        """What to start as soon as tfrun knows the job is this backend's,
        before the launcher's imports (local: the fork server)."""

    def discard_early(self) -> None:
        """Let go of what :meth:`start_early` started and the job did not take."""

    def for_restarts(self: _Options) -> _Options:
        """These options for a job that may restart: every run logs to one
        directory."""
        if self.log_dir:
            return self
        return dataclasses.replace(self, log_dir=str(rundirs.new_run_dir()))
