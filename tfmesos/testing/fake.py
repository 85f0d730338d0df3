"""An in-memory backend: the launcher's rules tested without a process.

:class:`FakeBackend` starts nothing: each launch plays a scripted :data:`Plan`,
and tasks dial in through :class:`FakeNetwork`, which delivers the real
rendezvous's events in its order without a socket. A test reads what the
launcher did from the backend's record::

    backend = FakeBackend(spec, plans={"worker:1": [DiesEarly(), Runs()]})
    launcher = backend.launcher()
    await launcher.start()

Everything happens on the loop's next turns, never inside the launcher's own
call, as with a real backend.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from tfmesos.backends.base import (
    Backend,
    BackendAttached,
    BackendEvent,
    BackendFailed,
    BackendOptions,
    EventSink,
    Launch,
    TaskEnded,
    TaskPlaced,
)
from tfmesos.errors import ResourceError
from tfmesos.launcher import Launcher
from tfmesos.launcher.events import NO_EVENTS, Events
from tfmesos.rendezvous.reports import (
    Connection,
    Disconnected,
    Exited,
    Output,
    Ready,
    Registered,
    RendezvousEvent,
)
from tfmesos.rendezvous.server import RendezvousServer
from tfmesos.spec import ClusterSpec, TaskSpec

__all__ = [
    "BreaksBackend",
    "DiesEarly",
    "FakeBackend",
    "FakeConnection",
    "FakeNetwork",
    "FakeRuns",
    "Hangs",
    "Killed",
    "Lost",
    "Plan",
    "Runs",
]


@dataclass(frozen=True)
class Runs:
    """Dials in, prints ``output`` and exits with ``exit_code`` (``None``: until
    stopped)."""

    exit_code: int | None = 0
    output: bytes = b""


@dataclass(frozen=True)
class DiesEarly:
    """Is placed, then ends before it dials in (a bad image, a crash at
    start-up): the backend reports the end, with the task's last lines."""

    exit_code: int = 1
    output_tail: tuple[str, ...] = ("the task died at start-up",)


@dataclass(frozen=True)
class Hangs:
    """Is accepted and never starts (no resources, a queue that never moves)."""


@dataclass(frozen=True)
class Lost:
    """Dials in, then its machine goes: the connection drops and the task is lost."""

    message: str = "agent lost"


@dataclass(frozen=True)
class BreaksBackend:
    """Dials in, then the backend itself fails (it lost its master, say)."""

    message: str = "master gone for good"


@dataclass(frozen=True)
class Killed:
    """Dials in; once it has the cluster, its command is SIGKILLed (a memory
    limit): the task reports that exit, and the backend its own word
    (``message``) ``after`` seconds later (None: never)."""

    message: str = "killed for exceeding its memory limit"
    after: float | None = 0.1
    limited: bool = True
    """The backend's word names a container's limit (``TaskEnded.limited``)."""
    out_of_memory: bool = False
    """The task's report says the kernel's OOM killer did it (``Exited.out_of_memory``)."""


Plan = Runs | DiesEarly | Hangs | Lost | BreaksBackend | Killed
"""What one attempt at one task does."""


def default_plan(task: TaskSpec) -> Plan:
    """As a healthy replica-mode job: workers exit 0, the rest run until stopped."""
    return Runs(0) if task.job_name == "worker" else Runs(None)


class FakeConnection(Connection):
    """A fake task's connection: records what the launcher sends; answers as an
    agent would."""

    def __init__(self, task: _FakeTask) -> None:
        # No socket: the real class's state is not needed.
        self._task = task
        self.closed = False
        self.sent: list[dict[str, Any]] = []

    def seal(self, message: dict[str, Any]) -> dict[str, Any]:
        return dict(message)

    def send(self, message: dict[str, Any]) -> None:
        if self.closed:
            return
        self.sent.append(message)
        kind = message.get("type")
        if kind == "cluster":
            self._task.got_cluster()
        elif kind == "stop":
            self._task.stop()

    def close(self) -> None:
        self.closed = True


class FakeNetwork:
    """Stands in for the launcher's rendezvous: fake tasks dial in through
    it. One per launcher; a launcher's backends (its chief's too) share it."""

    def __init__(self) -> None:
        self.server: FakeRendezvous | None = None

    def rendezvous(
        self,
        secret: bytes,
        admit: Callable[[str], bool],
        sink: Callable[[RendezvousEvent], None],
        flow: Callable[[str], Awaitable[None]],
    ) -> RendezvousServer:
        """The launcher's ``rendezvous`` factory (:data:`tfmesos.launcher.RendezvousFactory`)."""
        self.server = FakeRendezvous(secret, admit, sink, flow)
        return self.server

    def deliver(self, event: RendezvousEvent) -> None:
        assert self.server is not None, "no launcher made this network's rendezvous"
        if self.server.open:
            self.server.sink(event)

    def admit(self, task_id: str) -> bool:
        assert self.server is not None, "no launcher made this network's rendezvous"
        return self.server.open and self.server.admit(task_id)


class FakeRendezvous(RendezvousServer):
    """A rendezvous that listens nowhere: :class:`FakeNetwork` delivers its events."""

    def __init__(
        self,
        secret: bytes,
        admit: Callable[[str], bool],
        sink: Callable[[RendezvousEvent], None],
        flow: Callable[[str], Awaitable[None]],
    ) -> None:
        super().__init__(secret, admit, sink, flow=flow)
        self.admit = admit
        self.sink = sink
        self.open = False
        self.closed = False

    async def start(self, host: str, port: int = 0, tls: Any = None) -> int:
        self.open = True
        self.port = 1
        return self.port

    async def close(self, linger: float = 0.0) -> None:
        self.open = False
        self.closed = True


@dataclass
class _FakeTask:
    backend: FakeBackend
    launch: Launch
    plan: Plan
    connection: FakeConnection | None = None
    ended: bool = False

    @property
    def task_id(self) -> str:
        return self.launch.task_id

    def begin(self) -> None:
        if isinstance(self.plan, Hangs) or self.ended:
            return
        self.backend.report(TaskPlaced(self.task_id, self.backend.host))
        if isinstance(self.plan, DiesEarly):
            self.end(self.plan.exit_code, "exited", f"exited with status {self.plan.exit_code}")
            return
        network = self.backend.network
        if not network.admit(self.task_id):
            # The agent is turned away and exits 1, as a real one does.
            self.end(1, "exited", "exited with status 1")
            return
        self.connection = FakeConnection(self)
        network.deliver(Registered(self.task_id, f"{self.backend.host}:1", self.connection))

    def got_cluster(self) -> None:
        self.backend.loop.call_soon(self._run)

    def _run(self) -> None:
        if self.ended:
            return
        network = self.backend.network
        plan = self.plan
        network.deliver(Ready(self.task_id))
        if isinstance(plan, Runs):
            if plan.output:
                network.deliver(Output(self.task_id, plan.output))
            if plan.exit_code is not None:
                network.deliver(Exited(self.task_id, plan.exit_code))
                self.end(plan.exit_code, "exited", f"exited with status {plan.exit_code}")
        elif isinstance(plan, Lost):
            self.end(None, "lost", plan.message)
        elif isinstance(plan, BreaksBackend):
            self.backend.report(BackendFailed(plan.message))
        elif isinstance(plan, Killed):
            sigkill = signal.SIGKILL
            network.deliver(Exited(self.task_id, 128 + sigkill, sigkill, None, plan.out_of_memory))
            if plan.after is not None:
                self.backend.loop.call_later(plan.after, self.end_killed, plan)

    def end_killed(self, plan: Killed) -> None:
        """The backend's word on a command SIGKILLed (:class:`Killed`)."""
        if self.ended:
            return
        self.ended = True
        self.backend.network.deliver(Disconnected(self.task_id))
        self.backend.report(
            TaskEnded(
                self.task_id,
                "TASK_FAILED",
                137,
                plan.message,
                self.backend.host,
                limited=plan.limited,
            )
        )

    def stop(self) -> None:
        """Told to stop: it ends as an agent stops its command, by SIGTERM."""
        self.backend.loop.call_soon(self._stopped)

    def _stopped(self) -> None:
        if self.ended:
            return
        code = 128 + signal.SIGTERM
        self.backend.network.deliver(Exited(self.task_id, code, signal=signal.SIGTERM))
        self.end(code, "exited", "killed by SIGTERM")

    def end(self, code: int | None, state: str, message: str) -> None:
        """The connection drops, then the backend says why: the launcher hears
        both at once."""
        if self.ended:
            return
        self.ended = True
        if self.connection is not None:
            self.backend.network.deliver(Disconnected(self.task_id))
        tail = self.plan.output_tail if isinstance(self.plan, DiesEarly) else ()
        self.backend.report(TaskEnded(self.task_id, state, code, message, self.backend.host, tail))


class FakeBackend(Backend):
    """A backend that starts nothing and plays each launch's :data:`Plan`.

    ``plans`` maps a task name to its attempts' plans (the last repeats; an
    absent task does :func:`default_plan`). ``refuse`` and ``start_error`` make
    :meth:`check` and :meth:`start` raise; ``network`` is shared with the
    chief's fake backend; ``attached`` and ``log_dir`` are what it reports, as
    a cluster backend would."""

    name = "fake"
    options_type = BackendOptions
    chief_beside_launcher = False

    def __init__(
        self,
        spec: ClusterSpec,
        plans: Mapping[str, Plan | Sequence[Plan]] | None = None,
        *,
        network: FakeNetwork | None = None,
        host: str = "fake-host",
        refuse: str | None = None,
        start_error: BaseException | None = None,
        log_dir: str | None = None,
        attached: Mapping[str, str | list[str] | None] | None = None,
    ) -> None:
        super().__init__(spec)
        self.plans = {
            name: (list(plan) if isinstance(plan, Sequence) else [plan])
            for name, plan in (plans or {}).items()
        }
        self.network = network or FakeNetwork()
        self.host = host
        self.refuse = refuse
        self.start_error = start_error
        self.log_dir = Path(log_dir) if log_dir else None
        self.attached = attached
        self.checked: list[str] = []
        """Names of the tasks :meth:`check` was asked about."""
        self.launched: list[str] = []
        """Names of the tasks launched, in order, one entry per attempt."""
        self.attempts: Counter[str] = Counter()
        self.killed: list[str] = []
        """Names of the tasks :meth:`kill` was asked to kill."""
        self.started = False
        self.closed = 0
        """How many times :meth:`close` was called."""
        self.tasks: dict[str, _FakeTask] = {}
        self._sink: EventSink | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def rendezvous_host(self) -> str:
        return self.host

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "start() first"
        return self._loop

    def launcher(
        self,
        *,
        chief_backend: FakeBackend | None = None,
        restart: int = 0,
        output: BinaryIO | None = None,
        events: Events = NO_EVENTS,
    ) -> Launcher:
        """A launcher driving this backend (and ``chief_backend``, which must
        share its network) through the fake rendezvous, its events to
        ``events`` (an :class:`EventRecorder` keeps them for the test)."""
        import io

        if chief_backend is not None:
            assert chief_backend.network is self.network, "one network per launcher"
        return Launcher(
            self.spec,
            self,
            chief_backend=chief_backend,
            restart=restart,
            output=output if output is not None else io.BytesIO(),
            colour=False,
            notes_after_output=False,
            rendezvous=self.network.rendezvous,
            events=events,
        )

    def plan_for(self, task: TaskSpec, attempt: int) -> Plan:
        plans = self.plans.get(task.name)
        if not plans:
            return default_plan(task)
        return plans[min(attempt, len(plans)) - 1]

    def sent(self, name: str) -> list[dict[str, Any]]:
        """What the launcher sent the latest attempt at task ``name``."""
        for task in reversed(self.tasks.values()):
            if task.launch.task.name == name and task.connection is not None:
                return task.connection.sent
        return []

    def report(self, event: BackendEvent) -> None:
        if self._sink is not None and self.closed == 0:
            self._sink(event)

    # -- Backend --------------------------------------------------------------

    def check(self, tasks: Sequence[TaskSpec]) -> None:
        self.checked.extend(t.name for t in tasks)
        if self.refuse is not None:
            raise ResourceError(self.refuse)

    async def start(self, sink: EventSink) -> None:
        self._loop = asyncio.get_running_loop()
        if self.start_error is not None:
            raise self.start_error
        self._sink = sink
        self.started = True
        if self.attached is not None:
            self.loop.call_soon(self.report, BackendAttached(self.name, self.attached))

    async def launch(self, launch: Launch) -> None:
        name = launch.task.name
        self.launched.append(name)
        self.attempts[name] += 1
        task = _FakeTask(self, launch, self.plan_for(launch.task, self.attempts[name]))
        self.tasks[launch.task_id] = task
        self.loop.call_soon(task.begin)

    async def kill(self, task_id: str) -> None:
        task = self.tasks.get(task_id)
        if task is None:
            return
        self.killed.append(task.launch.task.name)
        self.loop.call_soon(task.end, None, "killed", "killed by the launcher")

    async def close(self) -> None:
        for task in self.tasks.values():
            task.end(None, "killed", "the backend closed")
        self.closed += 1

    def progress(self) -> str:
        waiting = [t.launch.task.name for t in self.tasks.values() if isinstance(t.plan, Hangs)]
        return f"{len(waiting)} never started" if waiting else ""

    def logs_location(self) -> str:
        return "nowhere (a fake backend)"


@dataclass
class FakeRuns:
    """Fake backends for each run of a job that restarts (``--max-restarts``):
    :meth:`make` is a :data:`tfmesos.launcher.run.LauncherFactory`; ``plans_by_run``
    gives each run's plans (runs past the list: the default plans)."""

    spec: ClusterSpec
    plans_by_run: Sequence[Mapping[str, Plan | Sequence[Plan]]] = ()
    backends: list[FakeBackend] = field(default_factory=list)

    def make(self, restart: int) -> Launcher:
        plans = self.plans_by_run[restart] if restart < len(self.plans_by_run) else {}
        backend = FakeBackend(self.spec, plans)
        self.backends.append(backend)
        return backend.launcher(restart=restart)
