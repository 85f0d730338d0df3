"""The Mesos backend, a package of its parts (see docs/architecture.md):

- :mod:`.backend`: :class:`MesosBackend`, which carries out what the parts
  decide and reports to the launcher;
- :mod:`.hold`: the offer hold (gang placement, backoff, GPU agents kept for
  GPU tasks), an object that returns decisions rather than sending calls;
- :mod:`.pins`: relaunches pinned to their agent and port;
- :mod:`.taskinfo`: the ``FrameworkInfo`` and ``TaskInfo`` it sends, pure;
- :mod:`.options`: :class:`MesosOptions`, its flags.

Lazy on purpose: tfrun reads every backend's options (:mod:`.options`)
before it starts anything, so this package is imported on every job; the
backend and its client only for a Mesos job (``tests/test_fixed_cost.py``).
The names below are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tfmesos.backends.mesos.backend import MesosBackend
    from tfmesos.backends.mesos.hold import (
        DECLINE_IDLE_SECONDS,
        DECLINE_SECONDS,
        GPU_AGENT_GRACE,
    )
    from tfmesos.backends.mesos.options import MesosOptions
    from tfmesos.backends.mesos.taskinfo import framework_capabilities, task_info

__all__ = [
    "DECLINE_IDLE_SECONDS",
    "DECLINE_SECONDS",
    "GPU_AGENT_GRACE",
    "MesosBackend",
    "MesosOptions",
    "framework_capabilities",
    "task_info",
]

_WHERE = {
    "MesosBackend": "backend",
    "DECLINE_IDLE_SECONDS": "hold",
    "DECLINE_SECONDS": "hold",
    "GPU_AGENT_GRACE": "hold",
    "MesosOptions": "options",
    "framework_capabilities": "taskinfo",
    "task_info": "taskinfo",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
