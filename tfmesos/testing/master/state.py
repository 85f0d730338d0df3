"""The master's state: its configuration, agents, frameworks, tasks and offers.

One :class:`MasterState` is shared by every part of the test master. The data
classes model what ``src/master/master.hpp`` keeps (``Slave``, ``Framework``,
``Task``, ``Offer``, the ``HttpConnection`` of a subscription) and what the
agent knows of a task; the messages they render are those of
``include/mesos/v1/mesos.proto`` and ``include/mesos/v1/scheduler/scheduler.proto``.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import socket
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tfmesos.testing.master.resources import Resources
from tfmesos.testing.master.schema import JSON, recordio_encode

T = TypeVar("T")

MESOS_VERSION = "1.11.0"
"""The Mesos version this double reports in ``master_info`` and ``/state``."""

SCHEDULER_PATH = "/api/v1/scheduler"

TERMINAL_STATES = frozenset(
    {
        "TASK_FINISHED",
        "TASK_FAILED",
        "TASK_KILLED",
        "TASK_ERROR",
        "TASK_LOST",
        "TASK_DROPPED",
        "TASK_GONE",
        "TASK_GONE_BY_OPERATOR",
    }
)
"""What ``protobuf::isTerminalState`` calls terminal (``src/common/protobuf_utils.cpp``)."""

# The command executor's default kill grace period (src/launcher/executor.cpp).
DEFAULT_KILL_GRACE_SECONDS = 3.0


def now() -> float:
    return time.time()


def new_uuid_b64() -> str:
    """A random RFC 4122 UUID as JSON encodes ``bytes``: base64 of the 16 bytes."""
    return base64.b64encode(uuid.uuid4().bytes).decode("ascii")


def mesos_id(value: str) -> JSON:
    """An ``ID`` message (``FrameworkID``, ``TaskID``, ...): ``{"value": ...}``."""
    return {"value": value}


def resolve(hostname: str, fallback: str) -> str:
    """The IPv4 address of ``hostname`` (``fallback`` if it does not resolve)."""
    try:
        socket.inet_aton(hostname)
        return hostname
    except OSError:
        pass
    try:
        return socket.gethostbyname(hostname)
    except OSError:
        return fallback


@dataclasses.dataclass
class MasterConfig:
    """Everything a :class:`TestMaster` can be told. Every field is a keyword of TestMaster."""

    agents: int = 3
    """How many agents (all of them this machine)."""
    cpus: float = 4.0
    mem: float = 8192.0
    """Memory per agent, in MB."""
    disk: float = 10240.0
    """Disk per agent, in MB (0: no disk resource). Real agents always offer disk."""
    gpus: int = 0
    gpu_agents: int | None = None
    """How many of the agents have the ``gpus`` (None: all of them)."""
    ports: str = "31000-32000"
    """The ``ports`` range(s), Mesos style: ``31000-32000`` or ``[31000-31099,32000-32099]``."""
    split_ports: bool = True
    """When agents share a hostname, cut ``ports`` into disjoint slices, one per agent,
    so tasks on two "agents" of this one machine are never offered the same port."""
    hostname: str = "127.0.0.1"
    """The hostname the master and (unless ``agent_hostnames``) every agent advertise."""
    agent_hostnames: Sequence[str] | None = None
    attributes: Mapping[str, str | float] | None = None
    """Attributes of every agent: numbers become SCALAR, ``[a-b]`` RANGES, others TEXT."""
    ip: str = "127.0.0.1"
    """The address to listen on."""
    port: int = 0
    """The port to listen on (0: a free one, see :attr:`TestMaster.url`)."""
    heartbeat_interval: float = 15.0
    """Seconds between HEARTBEAT events (``heartbeat_interval_seconds``)."""
    allocation_interval: float = 1.0
    """Seconds between allocation rounds (the master's ``--allocation_interval``)."""
    offer_timeout: float | None = None
    """Rescind offers not answered within this many seconds (``--offer_timeout``; None: never)."""
    filter_gpu_resources: bool = True
    """As the master's ``--filter_gpu_resources``: agents with GPUs are offered only to
    frameworks with the GPU_RESOURCES capability. When False, GPU-unaware frameworks get
    those agents' other resources."""
    update_retry_interval: float = 10.0
    """First retry of an unacknowledged status update (the agent's 10 s), then doubling."""
    update_retry_max: float = 600.0
    """Longest wait between retries of one status update (the agent's 10 min)."""
    shutdown_grace_period: float = DEFAULT_KILL_GRACE_SECONDS
    """SIGTERM to SIGKILL when a framework's tasks are shut down (teardown, failover timeout)."""
    work_dir: str | None = None
    """Where the sandboxes go (None: a new temporary directory, removed on stop)."""
    keep_work_dir: bool = False
    """Keep a temporary ``work_dir`` after stop."""
    inherit_env: bool = True
    """Tasks get the master process's environment under their own (False: PATH only)."""
    leader: bool = True
    leader_address: str | None = None
    """``host:port`` of the leading master when this one is not the leader."""
    redirect_location: str | None = None
    """An exact ``Location`` to answer with when not the leader (overrides leader_address)."""
    kill_on_orphan: bool = True
    """Run a small reaper process that SIGKILLs every live task process group if this
    process dies without stopping the master (a crash, SIGKILL)."""
    call_delay: tuple[float, float] | None = None
    """Hold every request to the scheduler endpoint for a random ``uniform(low, high)``
    seconds before the master takes it, as a loaded network would: concurrent calls
    then reach the master, which applies calls in arrival order, in any order."""
    call_delay_seed: int | None = None
    """Seed the random ``call_delay`` for a repeatable run (None: a fresh seed)."""
    root_submissions: bool = True
    """As the master's ``--root_submissions``: when False, a SUBSCRIBE whose
    ``FrameworkInfo.user`` is ``root`` is refused (``Master::validateFramework``)."""


@dataclasses.dataclass
class Agent:
    id: str
    hostname: str
    port: int
    total: Resources
    attributes: list[JSON]
    state: str = "active"  # active | unreachable | gone
    used: Resources = dataclasses.field(default_factory=Resources)
    unreachable_time: float | None = None

    @property
    def has_gpus(self) -> bool:
        return self.total.scalars.get("gpus", 0) > 0


@dataclasses.dataclass
class Offer:
    id: str
    framework_id: str
    agent_id: str
    role: str
    resources: Resources
    timer: asyncio.TimerHandle | None = None


@dataclasses.dataclass
class Filter:
    agent_id: str
    role: str
    resources: Resources
    expires: float


class CloseStream:
    """Queue sentinel: end the stream (``abort``: drop the connection instead)."""

    def __init__(self, abort: bool) -> None:
        self.abort = abort


class Subscription:
    """One SUBSCRIBE connection: its stream ID and the events waiting to be written."""

    def __init__(self, stream_id: str) -> None:
        self.stream_id = stream_id
        self.queue: asyncio.Queue[bytes | CloseStream] = asyncio.Queue()
        self.closed = False
        self.ended = asyncio.Event()
        """Set once the stream's end is written (or its connection dropped)."""
        self.heartbeat: asyncio.Task[None] | None = None
        self.framework_id: str | None = None

    def send(self, event: JSON) -> None:
        if not self.closed:
            self.queue.put_nowait(recordio_encode(event))

    def close(self, abort: bool = False) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(CloseStream(abort))


@dataclasses.dataclass
class Task:
    """A task as the master and its agent know it."""

    task_id: str
    name: str
    framework_id: str
    agent_id: str
    executor_id: str
    info: JSON
    """The TaskInfo as the scheduler sent it."""
    resources: Resources
    role: str
    container_id: str
    sandbox: Path
    group_executor: JSON | None = None
    """The ExecutorInfo of a LAUNCH_GROUP; None for a command task."""
    state: str = "TASK_STAGING"
    """The latest state (the agent's view)."""
    status_update_state: str | None = None
    """The state of the latest update forwarded to the scheduler (what reconciliation reports)."""
    statuses: list[JSON] = dataclasses.field(default_factory=list)
    pending: deque[JSON] = dataclasses.field(default_factory=deque)
    retry_handle: asyncio.TimerHandle | None = None
    retry_interval: float = 0.0
    process: asyncio.subprocess.Process | None = None
    pid: int | None = None
    returncode: int | None = None
    inject_failure: str | None = None
    kill_requested: bool = False
    kill_grace: float = DEFAULT_KILL_GRACE_SECONDS
    kill_timer: asyncio.TimerHandle | None = None
    released: bool = False
    """Its resources went back to the agent (it reached a terminal state)."""
    finalized: bool = False
    """The master is done with it (agent lost, framework removed): no more updates."""
    runner: asyncio.Task[None] | None = None
    launched_at: float = dataclasses.field(default_factory=now)
    ended_at: float | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def snapshot(self) -> JSON:
        return {
            "task_id": self.task_id,
            "name": self.name,
            "framework_id": self.framework_id,
            "agent_id": self.agent_id,
            "executor_id": self.executor_id,
            "state": self.state,
            "status_update_state": self.status_update_state,
            "pid": self.pid,
            "returncode": self.returncode,
            "sandbox": str(self.sandbox),
            "container_id": self.container_id,
            "role": self.role,
            "resources": self.resources.summary(),
            "task_info": self.info,
            "container": self.info.get("container"),
            "executor": self.group_executor,
            "statuses": list(self.statuses),
            "pending_updates": len(self.pending),
            "launched_at": self.launched_at,
            "ended_at": self.ended_at,
        }


class Framework:
    """A framework as the master knows it: its FrameworkInfo, subscription, tasks, filters."""

    def __init__(self, framework_id: str, info: JSON) -> None:
        self.id = framework_id
        self.info: JSON = info
        self.suppressed: set[str] = set()
        self.filters: list[Filter] = []
        self.subscription: Subscription | None = None
        self.failover_timer: asyncio.TimerHandle | None = None
        self.tasks: dict[str, Task] = {}
        self.completed_tasks: dict[str, Task] = {}
        self.unreachable_tasks: dict[str, Task] = {}
        self.registered_time = now()
        self.unregistered_time: float | None = None
        self.events: list[JSON] = []

    @property
    def capabilities(self) -> set[str]:
        return {c["type"] for c in self.info.get("capabilities", []) if "type" in c}

    @property
    def multi_role(self) -> bool:
        return "MULTI_ROLE" in self.capabilities

    @property
    def partition_aware(self) -> bool:
        return "PARTITION_AWARE" in self.capabilities

    @property
    def roles(self) -> list[str]:
        if self.multi_role:
            return list(self.info.get("roles", []))
        return [self.info.get("role", "*")]

    @property
    def connected(self) -> bool:
        return self.subscription is not None

    @property
    def failover_timeout(self) -> float:
        value = self.info.get("failover_timeout", 0.0)
        return float(value) if isinstance(value, (int, float)) else 0.0

    def send(self, event: JSON) -> None:
        if self.subscription is not None:
            self.events.append(event)
            self.subscription.send(event)

    def snapshot(self) -> JSON:
        return {
            "id": self.id,
            "name": self.info.get("name"),
            "framework_info": self.info,
            "roles": self.roles,
            "capabilities": sorted(self.capabilities),
            "connected": self.connected,
            "active": self.connected,
            "stream_id": self.subscription.stream_id if self.subscription else None,
            "suppressed_roles": sorted(self.suppressed),
            "filters": [
                {
                    "agent_id": f.agent_id,
                    "role": f.role,
                    "resources": f.resources.summary(),
                    "expires_in": round(f.expires - time.monotonic(), 3),
                }
                for f in self.filters
                if f.expires > time.monotonic()
            ],
            "task_ids": sorted(self.tasks),
            "completed_task_ids": sorted(self.completed_tasks),
            "unreachable_task_ids": sorted(self.unreachable_tasks),
            "registered_time": self.registered_time,
            "unregistered_time": self.unregistered_time,
        }


class MasterState:
    """Everything the master knows, shared by its parts; the registries are keyed by ID."""

    def __init__(self, config: MasterConfig) -> None:
        self.config = config
        self.master_id = str(uuid.uuid4())
        self.master_info: JSON = {}
        self.agents_by_id: dict[str, Agent] = {}
        self.frameworks_by_id: dict[str, Framework] = {}
        self.completed_frameworks: dict[str, Framework] = {}
        self.offers_by_id: dict[str, Offer] = {}
        self.received_calls: list[JSON] = []
        self.executors: dict[tuple[str, str, str], Resources] = {}
        """Running default executors, (framework, agent, executor) -> what they hold."""
        self.framework_seq = 0
        self.offer_seq = 0
        self.agent_seq = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.port = 0
        self.work_dir_path: Path | None = None
        self.own_work_dir = False
        self.started_at = 0.0
        self.stopping = False
        self.background: set[asyncio.Task[Any]] = set()

    @property
    def url(self) -> str:
        return f"http://{self.config.ip}:{self.port}"

    @property
    def work_dir(self) -> Path:
        assert self.work_dir_path is not None
        return self.work_dir_path

    def spawn(self, coro: Awaitable[T]) -> asyncio.Task[T]:
        """Run ``coro`` in the background; :meth:`TestMaster.stop` cancels what is left."""
        task: asyncio.Task[T] = asyncio.ensure_future(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return task

    def all_frameworks(self) -> list[Framework]:
        return [*self.frameworks_by_id.values(), *self.completed_frameworks.values()]

    @staticmethod
    def framework_tasks(framework: Framework) -> list[Task]:
        return [
            *framework.tasks.values(),
            *framework.completed_tasks.values(),
            *framework.unreachable_tasks.values(),
        ]

    def find_task(self, task_id: str, framework_id: str | None = None) -> Task | None:
        for framework in self.all_frameworks():
            if framework_id is not None and framework.id != framework_id:
                continue
            for tasks in (framework.tasks, framework.unreachable_tasks, framework.completed_tasks):
                if task_id in tasks:
                    return tasks[task_id]
        return None

    def offers_of(self, framework: Framework) -> list[Offer]:
        return [o for o in self.offers_by_id.values() if o.framework_id == framework.id]
