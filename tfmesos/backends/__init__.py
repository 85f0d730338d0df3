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
}


def create_backend(name: str, spec: ClusterSpec, **options: object) -> Backend:
    try:
        module_name, class_name = BACKENDS[name].split(":")
    except KeyError:
        raise SpecError(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})") from None
    backend_class: type[Backend] = getattr(importlib.import_module(module_name), class_name)
    return backend_class(spec, **options)
