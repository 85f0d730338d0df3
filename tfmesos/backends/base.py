"""The one interface every backend implements.

A backend only starts tasks, kills them, and reports what happened to them; the
launcher owns everything else (states, retries, teardown order, exit status).
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tfmesos.backends.options import BackendOptions
from tfmesos.common.advertise import advertised_host
from tfmesos.common.pathtext import shown_path
from tfmesos.common.proctree import bootstrap_command
from tfmesos.errors import EXIT_TFRUN_FAILED, SpecError
from tfmesos.rendezvous.reports import RendezvousEvent
from tfmesos.spec import ClusterSpec, TaskSpec

__all__ = [
    "NOT_PLACED",
    "Backend",
    "BackendAttached",
    "BackendEvent",
    "BackendFailed",
    "BackendOptions",
    "EventSink",
    "InProcessRendezvous",
    "Launch",
    "TaskEnded",
    "TaskPlaced",
    "advertised_host",
    "agent_command",
    "make_log_dir",
]


def agent_command() -> list[str]:
    """This Python, without ``site``, running the agent from this package
    (the agent needs only the standard library and its own package): how
    the local and Slurm backends start one."""
    return bootstrap_command("tfmesos.agent.main")


def make_log_dir(log_dir: Path) -> None:
    """Make the run's directory for the tasks' logs, the user's alone (0700);
    :class:`SpecError` (bad usage) where it cannot be."""
    try:
        log_dir.mkdir(0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(
            f"cannot use {shown_path(log_dir)} for the tasks' logs: {exc.strerror}"
        ) from None


@dataclass(frozen=True, slots=True)
class Launch:
    """One attempt at running one task."""

    task_id: str
    task: TaskSpec
    env: Mapping[str, str]
    """The agent's environment: rendezvous address, task id, secret."""


@dataclass(frozen=True, slots=True)
class TaskPlaced:
    task_id: str
    host: str


NOT_PLACED = "not placed"
"""``TaskEnded.state`` of a task the backend could not start where it was
asked to (:meth:`Backend.launch_at`): its message says why."""


@dataclass(frozen=True, slots=True)
class TaskEnded:
    task_id: str
    state: str
    """``exited`` for a process the backend watched; a Mesos ``TASK_*`` state;
    ``NOT_PLACED``."""
    exit_code: int | None
    message: str = ""
    host: str = ""
    output_tail: tuple[str, ...] = ()
    """The task's last lines of output, where the backend can see them: they
    explain a task that died before it could stream anything."""
    limited: bool = False
    """Its container's limit ended it (Mesos: a memory or disk limitation):
    a better account of a SIGKILLed command than the signal."""
    drained: bool = False
    """The operator's drain of its host ended it (Mesos's ``DRAIN_AGENT``):
    no fault of the task's, so a restart it causes is not counted."""


@dataclass(frozen=True, slots=True)
class BackendFailed:
    """The backend itself can no longer run the job (lost its master, say)."""

    message: str
    exit_status: int = EXIT_TFRUN_FAILED
    """tfrun's exit status for it (that of the error behind it)."""


@dataclass(frozen=True, slots=True)
class BackendAttached:
    """A cluster backend has its hold on the cluster: what the cluster's own
    tools know the job by (Mesos: the framework, on the master it subscribed
    to; Slurm: a job sbatch took). Reported again for each new one: a
    re-subscription, another sbatch job."""

    backend: str
    """The backend's name (``Backend.name``)."""
    details: Mapping[str, str | list[str] | None]
    """The ``backend_attached`` event's own fields, as docs/running.md's schema
    names them for this backend (``framework_id``, ``job_id``, ...)."""


BackendEvent = TaskPlaced | TaskEnded | BackendFailed | BackendAttached
EventSink = Callable[[BackendEvent], None]


class InProcessRendezvous:
    """The launcher's rendezvous as a task that runs inside the launcher's
    own process sees it (the local backend's tasks without an agent,
    :mod:`tfmesos.backends.local.directtask`): the same ``admit``, the same events
    (``Registered``, ``Output``, ``Exited``...) delivered to the same sink,
    and the same output ``flow``, with no socket between."""

    __slots__ = ("admit", "deliver", "flow", "held")

    def __init__(
        self,
        admit: Callable[[str], bool],
        deliver: Callable[[RendezvousEvent], None],
        flow: Callable[[str], Awaitable[None]],
        held: Callable[[str], bool],
    ) -> None:
        self.admit = admit
        """Whether this task may register now."""
        self.deliver = deliver
        """Hand the launcher what a task's agent would have sent."""
        self.flow = flow
        """Awaited after a task's output is delivered: returns once the
        launcher can take more of it (a slow terminal)."""
        self.held = held
        """Whether :attr:`flow` would wait now: only then is it awaited."""


class Backend(abc.ABC):
    name: ClassVar[str]
    options_type: ClassVar[type[BackendOptions]] = BackendOptions
    """The options this backend takes (:meth:`from_options`)."""
    chief_beside_launcher: ClassVar[bool] = True
    """Whether replica mode runs the chief (worker 0) beside the launcher, on
    this machine, rather than as one of this backend's tasks: its exit decides
    the job's, and its output is the user's to watch."""
    rendezvous_bind: str = "0.0.0.0"
    """Where the launcher's rendezvous listens so that this backend's tasks reach it."""
    log_dir: Path | None = None
    """The directory on this machine where each task's full output is kept
    (the run's log directory, ``--log-dir``), or None where there is none."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec

    @classmethod
    def from_options(cls, spec: ClusterSpec, options: BackendOptions) -> Backend:
        """This backend for ``spec``, with ``options`` (of :attr:`options_type`)."""
        fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
        return cls(spec, **fields)

    @property
    def rendezvous_host(self) -> str:
        """The host name tasks dial to reach the rendezvous."""
        return advertised_host()

    def check(self, tasks: Sequence[TaskSpec]) -> None:  # noqa: B027 - optional hook
        """Raise :class:`~tfmesos.errors.ResourceError` for a task that can never run."""

    @abc.abstractmethod
    async def start(self, sink: EventSink) -> None:
        """Get ready to launch; report events to ``sink`` from now on."""

    @abc.abstractmethod
    async def launch(self, launch: Launch) -> None:
        """Start one task, now or once resources allow."""

    async def launch_many(self, launches: Sequence[Launch]) -> None:
        """Start tasks that the launcher starts together (every task at the
        start, the relaunches of one round): one by one unless the backend
        has a way to start them as one (Slurm: one allocation)."""
        for launch in launches:
            await self.launch(launch)

    kill_reason_timeout: ClassVar[float] = 0.0
    """How long this backend's own word on a task whose command was SIGKILLed
    may take, where it can say more than the signal (Mesos: the memory limit
    that killed it, ``TaskEnded.limited``); the launcher waits for it that
    long at most before it says how the task ended. 0: it has nothing to add."""
    output_through_launcher: ClassVar[bool] = False
    """Its tasks' copies in :meth:`logs_location` are what reached the
    launcher (Mesos), not written by the tasks themselves: what the
    launcher could not hear is missing there."""
    keeps_addresses: ClassVar[bool] = False
    """Whether :meth:`launch_at` can start a task where an earlier attempt ran."""

    async def launch_at(self, launch: Launch, earlier: str, port: int) -> None:
        """Start ``launch`` on the host (Mesos: the agent) where the attempt
        ``earlier`` (a task id) ran, at ``port``, once that attempt is over.
        Where the port cannot be had there (in use, not offered within a
        bound), report ``TaskEnded`` with state ``NOT_PLACED``, saying why.
        Only where :attr:`keeps_addresses`; fine-grained mode relaunches a
        dead worker's server with it (:mod:`tfmesos.launcher.relaunch`)."""
        raise NotImplementedError(f"the {self.name} backend cannot start a task at a given port")

    def attach_rendezvous(self, rendezvous: InProcessRendezvous) -> None:  # noqa: B027
        """The launcher's rendezvous, for tasks this backend runs inside the
        launcher's own process (the local backend's); called once, before
        :meth:`start`. Backends whose tasks dial in ignore it."""

    def admit(self, peer_id: str) -> bool:
        """Whether a rendezvous peer that is no task of the job, and proved
        the job's secret, is one of this backend's own helpers (Slurm's job
        script) and may register now."""
        return False

    def on_peer(self, event: RendezvousEvent) -> None:  # noqa: B027 - optional hook
        """What one of the backend's own helpers (:meth:`admit`) did on its
        connection."""

    def task_output(self, task_id: str, data: bytes) -> None:  # noqa: B027 - optional hook
        """What one of this backend's tasks printed, as it reached the
        launcher (forwarded to the terminal or not): a backend whose tasks
        keep their output elsewhere (Mesos: their sandboxes) keeps it on this
        machine too."""

    @abc.abstractmethod
    async def kill(self, task_id: str) -> None:
        """Stop one task at once."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop every task still running and release everything. Idempotent."""

    def progress(self) -> str:
        """A line on what the backend is waiting for, for the user."""
        return ""

    def unseen_output_location(self, host: str = "") -> str:
        """Where a task that never reached the launcher keeps its output."""
        return self.logs_location()

    def lost_logs(self) -> list[str]:
        """The tasks whose output could not all be kept; each got a warning."""
        return []

    @abc.abstractmethod
    def logs_location(self) -> str:
        """Where the full output of this backend's tasks is kept, for the user:
        each backend's own (no default: one backend's place would be wrong
        for the others)."""
