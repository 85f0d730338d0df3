"""A test double of an Apache Mesos master: the v1 scheduler HTTP API, for real.

It follows the published protocol (``docs/scheduler-http-api.md``,
``docs/recordio.md``, ``docs/reconciliation.md``, the v1 ``mesos.proto`` and
``scheduler/scheduler.proto``), not any one client, and where the documents are
silent it does what the Mesos master and agent do. ``docs/test-master.md`` in
this repository lists every behaviour, where it came from and what is left out,
and which module of this package owns it.

Accepted tasks run for real, as local processes, each in its own process group
and sandbox directory; every "agent" is this machine, configured as a real
agent with ``--switch_user=false --isolation=posix/cpu,posix/mem``. What real
Mesos's own tests cover (images, the user switch, volumes, memory limits, the
fetcher) is not emulated: such a task fails to launch, saying so. Nothing a
task starts outlives the master: stopping it kills every task's process group.

Three ways to run it:

* ``python -m tfmesos.testing.master --port 5050 --agents 3 --cpus 4 --mem 8192``
* ``async with TestMaster(agents=2) as master: ...`` in a coroutine
* ``with ThreadedTestMaster(agents=2) as master: ...`` in synchronous code

Fault injection and inspection are methods of both classes and also plain HTTP
endpoints under ``/__test__/`` (see :meth:`HttpApi._control_routes
<tfmesos.testing.master.http.HttpApi._control_routes>`).
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
