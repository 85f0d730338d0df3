"""A test double of an Apache Mesos master: the v1 scheduler HTTP API, for real.

It follows the published protocol (``docs/scheduler-http-api.md``,
``docs/recordio.md``, ``docs/reconciliation.md``, the v1 ``mesos.proto`` and
``scheduler/scheduler.proto``), not any one client, and where the documents are
silent it does what the Mesos master and agent do. ``docs/test-master.md`` in
this repository lists every behaviour, where it came from and what is left out,
and which module of this package owns it.

Accepted tasks run for real, as local processes, each in its own process group
and sandbox directory; every "agent" is this machine. Nothing a task starts
outlives the master: stopping it kills every task's process group.

Three ways to run it:

* ``python -m tfmesos.testing.master --port 5050 --agents 3 --cpus 4 --mem 8192``
* ``async with TestMaster(agents=2) as master: ...`` in a coroutine
* ``with ThreadedTestMaster(agents=2) as master: ...`` in synchronous code

Fault injection and inspection are methods of both classes and also plain HTTP
endpoints under ``/__test__/`` (see :meth:`HttpApi._control_routes
<tfmesos.testing.master.http.HttpApi._control_routes>`).
"""

from __future__ import annotations

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
