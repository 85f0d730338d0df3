"""tfmesos: run distributed TensorFlow on Apache Mesos, or on this machine.

Importing this package imports nothing beyond the standard library: the
in-task agent lives in it too and must start fast in any image.
"""

from __future__ import annotations

from tfmesos.errors import (
    ClusterStartError,
    JobFailedError,
    ResourceError,
    SpecError,
    TaskFailure,
    TFMesosError,
)
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


def __getattr__(name: str) -> object:
    # `cluster` pulls in the launcher; the agent imports this package and must
    # not pay for it.
    if name == "cluster":
        from tfmesos.finegrained import cluster

        return cluster
    raise AttributeError(f"module 'tfmesos' has no attribute {name!r}")
