"""Backends, looked up by name; each is imported only when it is used.

The registry below is the one place that names them. Each backend is a
package of its own (``backends/local/``, ``backends/mesos/``,
``backends/slurm/``) with three parts: its :class:`~tfmesos.backends.base.Backend`
(one run of a job's tasks, driven by the launcher: a job submitted
attached), its options (:attr:`Backend.options_type`, a frozen dataclass
that declares its flags), and its store of detached jobs
(:class:`~tfmesos.backends.jobs.JobStore`: submit detached, list, status,
logs, stop). The CLI, :mod:`tfmesos.launcher.run` and
:func:`tfmesos.cluster` ask for them by name.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tfmesos.backends.options import BackendOptions
from tfmesos.errors import SpecError

if TYPE_CHECKING:
    import argparse

    from tfmesos.backends.base import Backend
    from tfmesos.backends.jobs import JobStore
    from tfmesos.spec import ClusterSpec

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "BackendOptions",
    "backend_class",
    "backend_options",
    "choose_backend",
    "chosen_backends",
    "create_backend",
    "default_backend",
    "foreign_options",
    "job_store",
    "job_store_class",
    "options_class",
]

BACKENDS = {
    "local": "tfmesos.backends.local.backend:LocalBackend",
    "mesos": "tfmesos.backends.mesos.backend:MesosBackend",
    "slurm": "tfmesos.backends.slurm.backend:SlurmBackend",
}
OPTIONS = {
    "local": "tfmesos.backends.local.options:LocalOptions",
    "mesos": "tfmesos.backends.mesos.options:MesosOptions",
    "slurm": "tfmesos.backends.slurm.options:SlurmOptions",
}
"""Each backend's options class (its :attr:`Backend.options_type`), in a
module light enough for tfrun to check a job against before it starts."""
JOBS = {
    "local": "tfmesos.backends.local.jobs:LocalJobs",
    "mesos": "tfmesos.backends.mesos.jobs:MesosJobs",
    "slurm": "tfmesos.backends.slurm.jobs:SlurmJobs",
}
"""Each backend's store of detached jobs (:class:`~tfmesos.backends.jobs.JobStore`)."""
RUN_DIRECTORY_STORES = frozenset({"local", "slurm"})
"""The backends whose stores keep a job in a run directory on this machine
(:class:`~tfmesos.backends.rundirjobs.RunDirJobs`): told without importing
the others', whose client libraries (the Mesos one's aiohttp) a machine that
only lists its runs may lack."""
DEFAULT_BACKEND = "local"
"""The backend used when nothing given chooses one."""


def _load(path: str) -> Any:
    module_name, name = path.split(":")
    return getattr(importlib.import_module(module_name), name)


def backend_class(name: str) -> type[Backend]:
    """The backend called ``name``, its module imported now."""
    try:
        module_name, class_name = BACKENDS[name].split(":")
    except KeyError:
        raise SpecError(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})") from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(
            f"the {name} backend needs {exc.name}, which is not installed: "
            f"pip install 'tfmesos[{name}]'"
        ) from None
    found: type[Backend] = getattr(module, class_name)
    return found


def options_class(name: str) -> type[BackendOptions]:
    """The options of the backend called ``name``, without importing the backend."""
    if name not in OPTIONS:
        raise SpecError(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})")
    found: type[BackendOptions] = _load(OPTIONS[name])
    return found


def backend_options(name: str, **given: Any) -> BackendOptions:
    """Backend ``name``'s options from those the user gave; ``None`` means "not
    given"."""
    return options_class(name).from_given(given)


def chosen_backends(given: Mapping[str, Any]) -> list[tuple[str, tuple[str, str]]]:
    """The backends that options among ``given`` choose when none is named
    (``-m``: Mesos; a Slurm option: Slurm), each with the first that does, as
    (name given under, tfrun flag). More than one is the user's to settle."""
    chosen = []
    for name in OPTIONS:
        choosing = options_class(name).chosen_by(given)
        if choosing:
            chosen.append((name, choosing[0]))
    return chosen


def default_backend() -> str:
    """The backend that chooses itself (Mesos, with ``$MESOS_MASTER``), else
    :data:`DEFAULT_BACKEND`."""
    return next((n for n in OPTIONS if options_class(n).chosen_by_default()), DEFAULT_BACKEND)


def foreign_options(name: str, given: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """The first of ``given`` that belongs to a backend other than ``name``:
    (the name it was given under, its tfrun flag, that backend); None if none."""
    for other in OPTIONS:
        if other != name:
            for keyword, flag in options_class(other).given_flags(given):
                return keyword, flag, other
    return None


def choose_backend(named: str | None, given: Mapping[str, Any], *, as_flags: bool) -> str:
    """The backend for a job: ``named`` (``--backend``, ``backend=``), else the
    one ``given`` chooses (:func:`chosen_backends`), else the default. Raises
    :class:`SpecError` when options choose two backends or one of them belongs
    to another backend than the job's, naming what the user wrote: tfrun's
    flags (``as_flags``) or ``tfmesos.cluster``'s keywords."""
    if named is None:
        chosen = chosen_backends(given)
        if len(chosen) > 1:
            (first, (first_name, first_flag)), (second, (second_name, second_flag)) = (
                chosen[-1],
                chosen[0],
            )
            raise SpecError(
                f"{first_flag} is a {options_class(first).label} flag and {second_flag} a "
                f"{options_class(second).label} one: give --backend"
                if as_flags
                else f"{first_name}= is for the {first} backend and {second_name}= for the "
                f"{second} one: give backend="
            )
        named = chosen[0][0] if chosen else default_backend()
    foreign = foreign_options(named, given)
    if foreign is not None:
        name, flag, owner = foreign
        raise SpecError(
            f"{flag} is a {options_class(owner).label} flag: it needs --backend {owner}"
            if as_flags
            else f"{name}= is for the {owner} backend, not {named!r}"
        )
    return named


def create_backend(name: str, spec: ClusterSpec, options: BackendOptions | None = None) -> Backend:
    backend_type = backend_class(name)
    return backend_type.from_options(spec, options or backend_type.options_type())


def job_store_class(name: str) -> type[JobStore]:
    """The store of detached jobs of the backend called ``name``, its module imported now."""
    if name not in JOBS:
        raise SpecError(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})")
    found: type[JobStore] = _load(JOBS[name])
    return found


def job_store(named: str | None, args: argparse.Namespace) -> JobStore:
    """The store a job command (``tfrun list``, ...) asks: the backend
    ``named`` (``--backend``), else the one its flags or the job's id claim
    (:meth:`BackendOptions.claims_job`), else the local one (whose run
    directories hold the Slurm backend's jobs too)."""
    if named is None:
        named = next((n for n in OPTIONS if options_class(n).claims_job(args)), DEFAULT_BACKEND)
    return job_store_class(named).from_flags(args)
