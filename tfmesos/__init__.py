"""tfmesos: run distributed TensorFlow, PyTorch and JAX jobs on Apache Mesos,
Slurm or this machine.

Importing this package imports nothing: every name below is loaded on first
use. The in-task agent lives in this package and starts in every task, so it
must not pay for the launcher's modules (measured in bench/agent_cost.py).
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
