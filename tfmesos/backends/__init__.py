"""Backends, looked up by name; each is imported only when it is used.

The registry below is the one place that names them: a backend declares its
own options (:attr:`Backend.options_type`, a frozen dataclass) and whether the
chief runs beside the launcher (:attr:`Backend.chief_beside_launcher`); the
CLI, :mod:`tfmesos.run` and :func:`tfmesos.cluster` ask it by name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tfmesos.backends.options import BackendOptions
from tfmesos.errors import SpecError

if TYPE_CHECKING:
    from tfmesos.backends.base import Backend
    from tfmesos.spec import ClusterSpec

__all__ = ["BACKENDS", "BackendOptions", "backend_class", "backend_options", "create_backend"]

BACKENDS = {
    "local": "tfmesos.backends.local:LocalBackend",
    "mesos": "tfmesos.backends.mesos:MesosBackend",
    "slurm": "tfmesos.backends.slurm:SlurmBackend",
}


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


def backend_options(name: str, **given: Any) -> BackendOptions:
    """The options of backend ``name`` from those a user gave (the CLI's flags,
    :func:`tfmesos.cluster`'s keywords); ``None`` is "not given"."""
    return backend_class(name).options_type.from_given(given)


def create_backend(name: str, spec: ClusterSpec, options: BackendOptions | None = None) -> Backend:
    backend_type = backend_class(name)
    return backend_type.from_options(spec, options or backend_type.options_type())
