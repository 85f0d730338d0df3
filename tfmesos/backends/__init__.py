"""Backends, looked up by name; each is imported only when it is used."""

from __future__ import annotations

import importlib

from tfmesos.backends.base import Backend
from tfmesos.errors import SpecError
from tfmesos.spec import ClusterSpec

__all__ = ["BACKENDS", "Backend", "create_backend"]

BACKENDS = {
    "local": "tfmesos.backends.local:LocalBackend",
    "mesos": "tfmesos.backends.mesos:MesosBackend",
    "slurm": "tfmesos.backends.slurm:SlurmBackend",
}


def create_backend(name: str, spec: ClusterSpec, **options: object) -> Backend:
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
    backend_class: type[Backend] = getattr(module, class_name)
    return backend_class(spec, **options)
