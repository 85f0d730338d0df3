"""A test double of an Apache Mesos master: the v1 scheduler HTTP API, for real.

It follows the published protocol, not any one client, and where the documents
are silent it does what Mesos does; docs/test-master.md lists every behaviour,
its source and what is left out. Accepted tasks run as local processes, each in
its own process group and sandbox, on agents configured like
``--switch_user=false --isolation=posix/cpu,posix/mem``; what real Mesos's own
tests cover (images, volumes, memory limits, the fetcher) fails to launch,
saying so. Stopping the master kills every task.

Run it with ``python -m tfmesos.testing.master``, ``async with
TestMaster(...)`` or ``with ThreadedTestMaster(...)``; faults and inspection
are methods of both and routes under ``/__test__/``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tfmesos.testing.master.allocator import DEFAULT_REFUSE_SECONDS, MAX_REFUSE_SECONDS
    from tfmesos.testing.master.cli import main
    from tfmesos.testing.master.master import TestMaster
    from tfmesos.testing.master.resources import Ranges, Resources, parse_ranges
    from tfmesos.testing.master.schema import (
        JSON,
        NAME_MAX,
        ProtocolError,
        parse_call,
        recordio_encode,
    )
    from tfmesos.testing.master.state import (
        DEFAULT_KILL_GRACE_SECONDS,
        MESOS_VERSION,
        SCHEDULER_PATH,
        TERMINAL_STATES,
        Agent,
        Framework,
        MasterConfig,
        Offer,
        Subscription,
        Task,
    )
    from tfmesos.testing.master.threaded import ThreadedTestMaster

__all__ = [
    "DEFAULT_KILL_GRACE_SECONDS",
    "DEFAULT_REFUSE_SECONDS",
    "JSON",
    "MAX_REFUSE_SECONDS",
    "MESOS_VERSION",
    "NAME_MAX",
    "SCHEDULER_PATH",
    "TERMINAL_STATES",
    "Agent",
    "Framework",
    "MasterConfig",
    "Offer",
    "ProtocolError",
    "Ranges",
    "Resources",
    "Subscription",
    "Task",
    "TestMaster",
    "ThreadedTestMaster",
    "main",
    "parse_call",
    "parse_ranges",
    "recordio_encode",
]

_HOMES = {
    "DEFAULT_REFUSE_SECONDS": "tfmesos.testing.master.allocator",
    "MAX_REFUSE_SECONDS": "tfmesos.testing.master.allocator",
    "main": "tfmesos.testing.master.cli",
    "TestMaster": "tfmesos.testing.master.master",
    "Ranges": "tfmesos.testing.master.resources",
    "Resources": "tfmesos.testing.master.resources",
    "parse_ranges": "tfmesos.testing.master.resources",
    "JSON": "tfmesos.testing.master.schema",
    "NAME_MAX": "tfmesos.testing.master.schema",
    "ProtocolError": "tfmesos.testing.master.schema",
    "parse_call": "tfmesos.testing.master.schema",
    "recordio_encode": "tfmesos.testing.master.schema",
    "DEFAULT_KILL_GRACE_SECONDS": "tfmesos.testing.master.state",
    "MESOS_VERSION": "tfmesos.testing.master.state",
    "SCHEDULER_PATH": "tfmesos.testing.master.state",
    "TERMINAL_STATES": "tfmesos.testing.master.state",
    "Agent": "tfmesos.testing.master.state",
    "Framework": "tfmesos.testing.master.state",
    "MasterConfig": "tfmesos.testing.master.state",
    "Offer": "tfmesos.testing.master.state",
    "Subscription": "tfmesos.testing.master.state",
    "Task": "tfmesos.testing.master.state",
    "ThreadedTestMaster": "tfmesos.testing.master.threaded",
}

_NEEDS_AIOHTTP = "the test master needs aiohttp, which tfmesos's mesos extra installs: pip install 'tfmesos[mesos]'"


def __getattr__(name: str) -> object:
    # Lazy, so that the package imports without aiohttp (only the `mesos`
    # extra installs it) and `python -m tfmesos.testing.master` can say so.
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(home)
    except ModuleNotFoundError as exc:
        if exc.name != "aiohttp" and not (exc.name or "").startswith("aiohttp."):
            raise
        raise ModuleNotFoundError(_NEEDS_AIOHTTP, name="aiohttp") from exc
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
