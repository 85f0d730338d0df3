"""The Mesos backend, a package of its parts (see docs/architecture.md):

- :mod:`.backend`: :class:`MesosBackend`, which carries out what the parts
  decide and reports to the launcher;
- :mod:`.hold`: the offer hold (gang placement, backoff, GPU agents kept for
  GPU tasks), an object that returns decisions rather than sending calls;
- :mod:`.pins`: relaunches pinned to their agent and port;
- :mod:`.taskinfo`: the ``FrameworkInfo`` and ``TaskInfo`` it sends, pure.

Its options are :mod:`tfmesos.backends.mesos_options`, outside this package:
tfrun reads every backend's options, and this package is imported only for a
Mesos job.
"""

from __future__ import annotations

from tfmesos.backends.mesos.backend import MesosBackend
from tfmesos.backends.mesos.hold import DECLINE_IDLE_SECONDS, DECLINE_SECONDS, GPU_AGENT_GRACE
from tfmesos.backends.mesos.taskinfo import framework_capabilities, task_info
from tfmesos.backends.mesos_options import MesosOptions

__all__ = [
    "DECLINE_IDLE_SECONDS",
    "DECLINE_SECONDS",
    "GPU_AGENT_GRACE",
    "MesosBackend",
    "MesosOptions",
    "framework_capabilities",
    "task_info",
]
