"""tfmesos: run distributed TensorFlow, PyTorch and JAX jobs on Apache Mesos,
Slurm or this machine.

Importing this package imports nothing: names load on first use, so the in-task
agent, which lives here too, does not pay for the launcher.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tfmesos.errors import (
        ClusterStartError,
        JobFailedError,
        ResourceError,
        SpecError,
        TaskFailure,
        TFMesosError,
    )
    from tfmesos.finegrained import cluster
    from tfmesos.spec import ClusterSpec, Job, TaskSpec

__all__ = [
    "ClusterSpec",
    "ClusterStartError",
    "Job",
    "JobFailedError",
    "ResourceError",
    "SpecError",
    "TFMesosError",
    "TaskFailure",
    "TaskSpec",
    "__version__",
    "cluster",
]

__version__ = "1.0.0.dev0"

_HOMES = {
    "ClusterSpec": "tfmesos.spec",
    "Job": "tfmesos.spec",
    "TaskSpec": "tfmesos.spec",
    "ClusterStartError": "tfmesos.errors",
    "JobFailedError": "tfmesos.errors",
    "ResourceError": "tfmesos.errors",
    "SpecError": "tfmesos.errors",
    "TFMesosError": "tfmesos.errors",
    "TaskFailure": "tfmesos.errors",
    "cluster": "tfmesos.finegrained",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'tfmesos' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
