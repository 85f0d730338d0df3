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
]

__version__ = "1.0.0.dev0"
