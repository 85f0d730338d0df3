"""The launcher: it owns one job from the first launch to the last teardown.

The supervision loop is written once, here; backends only start, kill and
report. Every task moves through

    pending -> launched -> registered -> running -> finished | failed | stopped

A task that ends before the cluster is up is relaunched (``MAX_ATTEMPTS`` per
task, as the original allowed); once the cluster is up, a task that fails ends
the job, but in fine-grained mode, where a dead worker's server may come back
at its address (:mod:`tfmesos.server_relaunch`). Those rules are decided in
:mod:`tfmesos.policy`, as pure functions; this module carries them out. Every
way out of :meth:`Launcher.start`, :meth:`Launcher.watch` and
:meth:`Launcher.stop` goes through teardown.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, BinaryIO

from tfmesos import server_relaunch, taskenv, wire
from tfmesos.backends.base import (
    NOT_PLACED,
    Backend,
    BackendEvent,
    BackendFailed,
    Launch,
    TaskEnded,
    TaskPlaced,
)
from tfmesos.console import (
    ConsoleWriter,
    binary_stream,
    colour_prefix,
    same_destination,
    use_colour,
)
from tfmesos.errors import (
    ClusterStartError,
    JobFailedError,
    SpecError,
    TaskFailure,
    TFMesosError,
    task_status,
)
from tfmesos.policy import (
    MAX_ATTEMPTS,
    Action,
    Phase,
    TaskView,
    on_backend_failure,
    on_registered,
    on_task_end,
)
from tfmesos.rendezvous import (
    Connection,
    Disconnected,
    Exited,
    Message,
    Output,
    Ready,
    Registered,
    RendezvousEvent,
    RendezvousServer,
)
from tfmesos.spec import ClusterSpec, TaskSpec

if TYPE_CHECKING:
    import ssl

__all__ = ["MAX_ATTEMPTS", "Launcher", "TaskState"]

logger = logging.getLogger("tfmesos")

TAIL_BYTES = 4096
"""How much of each task's latest output is kept to explain a failure."""
TAIL_LINES = 15
PROGRESS_INTERVAL = 15.0
LOST_CONNECTION_GRACE = 10.0
"""After a task's connection drops, how long to wait for its backend to say why."""
OUTPUT_LINGER = 2.0
"""At teardown, how long the tasks' connections get to deliver their last output."""
DISCONNECT_GRACE = 2.0
"""After a backend says a task ended, how long to wait for its last output."""
OUTPUT_STALL = 2.0
"""After a failure or a signal, how long a terminal may take no output at all
before what is not written yet is dropped."""


class TaskState(enum.Enum):
    PENDING = "pending"
    LAUNCHED = "launched"
    REGISTERED = "registered"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def over(self) -> bool:
        return self in (TaskState.FINISHED, TaskState.FAILED, TaskState.STOPPED)


@dataclass
class _Task:
    """The launcher's mutable record of one attempt at one task."""

    spec: TaskSpec
    task_id: str
    attempt: int
    prefix: bytes
    forward: bool
    state: TaskState = TaskState.PENDING
    addr: str = ""
    host: str = ""
    connection: Connection | None = None
    disconnected: bool = False
    disconnected_at: float = 0.0
    ready: bool = False
    ended: TaskEnded | None = None
    ended_at: float = 0.0
    keep_address: str = ""
    """Where this attempt must serve: the address of the attempt it replaces,
    for a fine-grained relaunch (:mod:`tfmesos.server_relaunch`); else empty."""
    exit_code: int | None = None
    tail: bytearray = field(default_factory=bytearray)
    cut: bool = False
    """Its output is no longer shown: the job is stopping and the terminal
    did not keep up (what is shown stays a prefix of what it printed)."""

    def tail_lines(self) -> tuple[str, ...]:
        text = self.tail.decode("utf-8", "replace")
        return tuple(text.splitlines()[-TAIL_LINES:])


@dataclass(frozen=True)
class _Tick:
    """Wakes the loop to re-check one task's grace deadline."""

    task_id: str


Event = RendezvousEvent | BackendEvent | _Tick

RendezvousFactory = Callable[
    [
        bytes,
        Callable[[str], bool],
        Callable[[RendezvousEvent], None],
        Callable[[str], Awaitable[None]],
    ],
    RendezvousServer,
]
"""Makes the launcher's rendezvous from its secret, its ``admit``, its event
sink and its output ``flow`` (:class:`RendezvousServer`'s own arguments): the
seam through which :mod:`tfmesos.testing.fake` stands in for the network."""


def _real_rendezvous(
    secret: bytes,
    admit: Callable[[str], bool],
    sink: Callable[[RendezvousEvent], None],
    flow: Callable[[str], Awaitable[None]],
) -> RendezvousServer:
    return RendezvousServer(secret, admit, sink, flow=flow)


class Launcher:
    def __init__(
        self,
        spec: ClusterSpec,
        backend: Backend,
        *,
        output: BinaryIO | None = None,
        secret: bytes | None = None,
        chief_backend: Backend | None = None,
        restart: int = 0,
        colour: bool | None = None,
        notes_after_output: bool | None = None,
        rendezvous: RendezvousFactory = _real_rendezvous,
    ) -> None:
        self.spec = spec
        self.backend = backend
        self.restart = restart
        """Which run of the job this is (``--max-restarts``): 0 for the first."""
        # Where the backend runs its tasks elsewhere, replica mode runs the
        # chief beside the launcher (Backend.chief_beside_launcher): its exit
        # decides the job's.
        self.chief_backend = chief_backend
        stream = output if output is not None else binary_stream(sys.stdout)
        self._console = ConsoleWriter(stream)
        self._colour = use_colour(stream) if colour is None else colour
        """Whether the tasks' prefixes are coloured: on a terminal, unless
        NO_COLOR says not to (console.use_colour)."""
        self._shown = {
            t.name: position
            for position, t in enumerate(t for t in spec.tasks() if spec.forwards(t))
        }
        """Each task whose output is shown, with its place: its colour."""
        self._notes_after_output = (
            same_destination(stream, sys.stderr)
            if notes_after_output is None
            else notes_after_output
        )
        """Whether what the launcher says about a task's end waits until the
        output before it is written: where both go to one place (a terminal,
        ``2>&1``), so that they come out in order there. Elsewhere it is said
        at once, so that a stdout nobody reads cannot hold it back."""
        self._secret = secret or os.urandom(32)
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        self._held: collections.deque[Event] = collections.deque()
        """Events taken off the queue when the pump was cancelled (_next_event)."""
        self._tasks: dict[str, _Task] = {}
        self._current: dict[str, _Task] = {}
        self._rendezvous = rendezvous(
            self._secret, self._admit, self._on_rendezvous, self._output_flow
        )
        self._phase = Phase.STARTING
        self._started_backend = False
        self._chief_started = chief_backend is None
        """Whether the chief's backend has started: only once the cluster
        has placed a first task (see :meth:`start`)."""
        self._chief_waits: list[tuple[TaskSpec, int]] = []
        """The tasks beside the launcher that wait for that first placement."""
        self._stopped = False
        self._relaunch: list[tuple[TaskSpec, int]] = []
        self._relaunch_at: list[tuple[_Task, server_relaunch.RelaunchAt]] = []
        """Fine-grained mode: dead servers to start again at their address."""
        self._server_relaunches = 0
        self._dropped = 0
        """Bytes of shown output dropped while stopping, the terminal being full."""
        self._unkept_logs: list[str] = []
        """Tasks whose agent said its log could not be written (``log_failed``)."""
        self._output_abandoned = False
        self._tls_pem: str | None = None
        """The certificate tasks pin, read once when the rendezvous starts."""
        self.cluster_def: dict[str, list[str]] = {}
        self.run_id = os.urandom(16).hex()  # 32 hex digits, as uuid4().hex
        """The job's id, the same for every task (torch's ``TORCHELASTIC_RUN_ID``)."""

    # -- public ---------------------------------------------------------------

    @property
    def targets(self) -> dict[str, str]:
        return {
            f"/job:{job}/task:{index}": f"{self.spec.protocol}://{addr}"
            for job, addrs in self.cluster_def.items()
            for index, addr in enumerate(addrs)
        }

    def _tls_context(self) -> ssl.SSLContext | None:
        if self.spec.tls_cert is None:
            return None
        import ssl  # here: a job without TLS never imports it (tfmesos.lazyssl)

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.spec.tls_cert, self.spec.tls_key)
            with open(self.spec.tls_cert) as cert:
                self._tls_pem = cert.read()
        except (OSError, ssl.SSLError) as exc:
            raise SpecError(f"cannot use TLS certificate {self.spec.tls_cert}: {exc}") from None
        return context

    def _backend_for(self, task: TaskSpec) -> Backend:
        if self.chief_backend is not None and self.spec.is_chief(task):
            return self.chief_backend
        return self.backend

    def _backends(self) -> list[Backend]:
        return [self.backend] + ([self.chief_backend] if self.chief_backend else [])

    async def start(self) -> dict[str, list[str]]:
        """Launch every task and bring the cluster up; return its definition."""
        tasks = self.spec.tasks()
        for backend in self._backends():
            backend.check([t for t in tasks if self._backend_for(t) is backend])
        await self._rendezvous.start(self.backend.rendezvous_bind, tls=self._tls_context())
        self._started_backend = True
        await self.backend.start(self._on_backend)
        local = [(task, 1) for task in tasks if self._backend_for(task) is not self.backend]
        if local and len(local) < len(tasks):
            # The chief, beside the launcher, waits for the cluster's first
            # placement (a Mesos offer taken, a Slurm allocation running): a
            # wrong master or a job that never fits starts nothing here.
            remote = []
            for task in tasks:  # in the job's order, which messages keep
                if self._backend_for(task) is self.backend:
                    remote.append(self._prepare(task, 1))
                else:
                    self._prepare(task, 1, state=TaskState.PENDING)
            self._chief_waits = local
            await self.backend.launch_many(remote)
        else:
            await self._start_chief()
            await self._launch_all([(task, 1) for task in tasks])
        deadline = (
            None if self.spec.start_timeout is None else time.monotonic() + self.spec.start_timeout
        )
        await self._pump(self._all_registered, self.spec.start_timeout, self._start_timed_out)
        self._deliver_cluster()
        if not self.spec.replica:
            # Fine-grained mode hands out targets: they must answer when it does.
            left = None if deadline is None else max(0.1, deadline - time.monotonic())
            try:
                await self._pump(self._all_ready, left, self._start_timed_out)
            except JobFailedError as exc:
                # Not retried: every other server already holds the dead
                # one's address in its cluster definition.
                raise ClusterStartError(
                    f"{exc.failure.describe()}\nits TensorFlow server died before it accepted "
                    "connections",
                    exc.failure,
                ) from None
            logger.info("every TensorFlow server accepts connections")
        return self.cluster_def

    async def wait_for_workers(self) -> None:
        """Replica mode: return when every worker has exited 0; raise if any task failed."""
        await self._pump(self._workers_done, None, None)
        rest = any(not t.state.over for t in self._current.values())
        self._say_after_output(
            logging.INFO,
            "all workers finished" + ("; stopping the rest of the job" if rest else ""),
        )

    async def watch(self) -> None:
        """Fine-grained mode: run until cancelled; raise when a task fails."""
        await self._pump(lambda: False, None, None)

    async def stop(self, *, drop_stalled_output: bool = False) -> None:
        """Stop every task and release the backend. Safe to call more than once.

        Stopping never waits for the terminal: the tasks' output is taken in
        whether or not it can be shown, so that every agent hears "stop" and
        stops its command within its grace. With ``drop_stalled_output`` (a
        failure, a signal), output the terminal has not taken is dropped
        once it takes nothing for ``OUTPUT_STALL`` seconds; otherwise (the
        job's normal end, every task gone) it is all written first."""
        if self._stopped:
            return
        self._stopped = True
        self._phase = Phase.STOPPING
        self._console.release()
        live = [t for t in self._current.values() if not t.state.over]
        for task in live:
            if task.connection is not None:
                task.connection.send({"type": "stop", "reason": "the job is ending"})
        try:
            unregistered = [t for t in live if t.connection is None]
            await asyncio.gather(
                *(
                    self._backend_for(t.spec).kill(t.task_id)
                    for t in unregistered
                    if t.state is not TaskState.PENDING
                )
            )
            for task in unregistered:  # nothing of theirs is left to wait for
                task.state = TaskState.STOPPED
            if live:
                await self._pump(self._all_over, KILL_WAIT, lambda: None)
        finally:
            try:
                if self._started_backend:
                    for backend in self._backends():
                        if backend is not self.chief_backend or self._chief_started:
                            await backend.close()
            finally:
                # The tasks are gone; what they sent last may still be on
                # its way in.
                await self._rendezvous.close(linger=OUTPUT_LINGER)
                # Every task is gone: what they printed goes out before the
                # launcher says how the job ended.
                stall = OUTPUT_STALL if drop_stalled_output else None
                if not await self._console.aclose(stall=stall):
                    self.abandon_output(f"the terminal took no output for {OUTPUT_STALL:g}s")
        for task in self._current.values():
            if not task.state.over:
                task.state = TaskState.STOPPED

    def outcomes(self) -> dict[str, str]:
        """How each task ended, in words, by task name, in the job's order:
        ``exited 0``, ``stopped by tfrun``, or how it failed."""
        said = {}
        for name, task in self._current.items():
            if task.state is TaskState.FINISHED:
                said[name] = "exited 0"
            elif task.state is TaskState.STOPPED:
                said[name] = "stopped by tfrun"
            elif task.state is TaskState.FAILED:
                said[name] = "failed"
            else:
                said[name] = task.state.value
        return said

    def unkept_logs(self) -> list[str]:
        """The tasks whose output could not all be kept where
        :meth:`logs_location` says (each was said in a warning), by name."""
        names = [*self._unkept_logs, *(n for b in self._backends() for n in b.unkept_logs())]
        return list(dict.fromkeys(names))

    def logs_location(self) -> str:
        """Where the full output of every task is kept, for the user."""
        return "; ".join(dict.fromkeys(b.logs_location() for b in self._backends()))

    def abandon_output(self, reason: str) -> None:
        """Drop task output not yet written, so that :meth:`stop` need not
        wait for a terminal that does not read, and say so once, with where
        the full output is."""
        dropped = self._console.abandon() + self._dropped
        self._dropped = 0
        if self._output_abandoned:
            return
        self._output_abandoned = True
        where = self.logs_location()
        logger.warning(
            "%s: dropped %s of the tasks' output not yet written; the full output of each "
            "task is in %s",
            reason,
            _size(dropped),
            where,
        )

    # -- launching ----------------------------------------------------------

    async def _launch_all(self, specs: list[tuple[TaskSpec, int]]) -> None:
        """Launch tasks (each with its attempt number) that start together:
        each backend is handed its share at once (``Backend.launch_many``)."""
        shares: dict[int, tuple[Backend, list[Launch]]] = {}
        for spec, attempt in specs:
            backend = self._backend_for(spec)
            shares.setdefault(id(backend), (backend, []))[1].append(self._prepare(spec, attempt))
        for backend, launches in shares.values():
            await backend.launch_many(launches)

    async def _start_chief(self) -> None:
        """Start the backend of the tasks beside the launcher (the chief), and
        launch those that waited for the cluster's first placement."""
        if self.chief_backend is None or self._chief_started:
            return
        self._chief_started = True
        await self.chief_backend.start(self._on_backend)
        waiting, self._chief_waits = self._chief_waits, []
        launches = []
        for spec, _ in waiting:
            task = self._current[spec.name]
            if task.state is TaskState.PENDING:
                task.state = TaskState.LAUNCHED
                launches.append(self._launch_of(task))
        if launches:
            logger.debug("the cluster has its first task placed: starting the chief here")
            await self.chief_backend.launch_many(launches)

    def _prepare(
        self, spec: TaskSpec, attempt: int, state: TaskState = TaskState.LAUNCHED
    ) -> Launch:
        run = f"r{self.restart}." if self.restart else ""
        task_id = f"{spec.job_name}.{spec.index}.{run}{attempt}.{os.urandom(4).hex()}"
        task = _Task(
            spec=spec,
            task_id=task_id,
            attempt=attempt,
            prefix=self._prefix(spec.name),
            forward=self.spec.forwards(spec),
        )
        self._tasks[task_id] = task
        self._current[spec.name] = task
        task.state = state
        return self._launch_of(task)

    def _launch_of(self, task: _Task) -> Launch:
        env = dict(self.spec.env)
        env.update(
            {
                wire.ENV_LAUNCHER: f"{self.backend.rendezvous_host}:{self._rendezvous.port}",
                wire.ENV_TASK_ID: task.task_id,
                wire.ENV_SECRET: self._secret.hex(),
                taskenv.ENV_RESTART: str(self.restart),
            }
        )
        if self._tls_pem is not None:
            env[wire.ENV_TLS_CERT] = self._tls_pem
        return Launch(task.task_id, task.spec, env)

    def _prefix(self, name: str) -> bytes:
        text = f"[{name}]"
        if self._colour and name in self._shown:
            text = colour_prefix(text, self._shown[name])
        return f"{text} ".encode()

    def _say_after_output(self, level: int, message: str, *args: object) -> None:
        """Log ``message`` once the tasks' output printed so far is out: the
        output goes to stdout from the console's thread, logging writes to
        stderr at once, and on a terminal a task's "finished" must come after
        its last line, not before it."""
        if self._notes_after_output:
            self._console.after_written(lambda: logger.log(level, message, *args))
        else:
            logger.log(level, message, *args)

    def _admit(self, task_id: str) -> bool:
        task = self._tasks.get(task_id)
        if task is None:
            # Not a task: maybe the backend's own helper (Slurm's job script).
            return self._phase is not Phase.STOPPING and self.backend.admit(task_id)
        return (
            task is not None
            and task.state is TaskState.LAUNCHED
            and self._current.get(task.spec.name) is task
            and (
                self._phase is Phase.STARTING
                or (bool(task.keep_address) and self._phase is Phase.RUNNING)
            )
        )

    def _deliver_cluster(self) -> None:
        by_job: dict[str, list[tuple[int, str]]] = {}
        for task in self._current.values():
            by_job.setdefault(task.spec.job_name, []).append((task.spec.index, task.addr))
        self.cluster_def = {job: [a for _, a in sorted(pairs)] for job, pairs in by_job.items()}
        checked = False
        for task in self._current.values():
            assert task.connection is not None
            sealed = task.connection.seal(self._cluster_message(task))
            if not checked:
                # The spec's check allowed for the addresses; this is the
                # real message (the same size for every task, give or take).
                size = len(wire.encode_json(sealed)) - 5
                if size > wire.MAX_FRAME:
                    raise ClusterStartError(
                        f"the message each task receives would be {size} bytes, more than "
                        f"the rendezvous's 1 MiB ({wire.MAX_FRAME} bytes): shorten the command "
                        "or its environment"
                    )
                checked = True
            task.connection.send(sealed)
            task.state = TaskState.RUNNING
        self._phase = Phase.RUNNING
        for target, url in sorted(self.targets.items()):
            logger.debug("%s at %s", target, url)
        logger.info(
            "cluster up: %s",
            ", ".join(_tasks_of(j, len(a)) for j, a in self.cluster_def.items()),
        )

    def _cluster_message(self, task: _Task) -> dict[str, object]:
        """What ``task`` runs, with the cluster's definition."""
        return {
            "type": "cluster",
            "job_name": task.spec.job_name,
            "task_index": task.spec.index,
            "run_id": self.run_id,
            "restart": self.restart,
            "max_restarts": self.spec.max_restarts,
            "cluster_def": self.cluster_def,
            "cmd": task.spec.cmd,
            "cwd": self.spec.cwd,
            "env": dict(self.spec.env),
            "extra_config": {
                "initializer": self.spec.initializer,
                "finalizer": self.spec.finalizer,
            },
            "server": {
                "protocol": self.spec.protocol,
                "cpus": task.spec.cpus,
                "gpus": task.spec.gpus,
            },
        }

    # -- the loop -------------------------------------------------------------

    async def _pump(
        self,
        done: Callable[[], bool],
        timeout: float | None,
        on_timeout: Callable[[], None] | None,
    ) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        next_progress = time.monotonic() + PROGRESS_INTERVAL
        while not done():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                if on_timeout is not None:
                    on_timeout()
                return
            wait = next_progress - now if deadline is None else min(deadline, next_progress) - now
            event = await self._next_event(max(wait, 0.0))
            if event is None:
                if time.monotonic() >= next_progress:
                    self._report_progress()
                    next_progress = time.monotonic() + PROGRESS_INTERVAL
                continue
            self._handle(event)
            if not self._chief_started and not self._stopped and isinstance(event, TaskPlaced):
                await self._start_chief()
            if self._relaunch:
                relaunch, self._relaunch = self._relaunch, []
                await self._launch_all(relaunch)
            if self._relaunch_at:
                relaunch_at, self._relaunch_at = self._relaunch_at, []
                for earlier, decision in relaunch_at:
                    await self._launch_at(earlier, decision)

    async def _next_event(self, timeout: float) -> Event | None:
        """The next event, or None after ``timeout`` seconds. Not
        ``asyncio.wait_for``: on Python 3.10 and 3.11 it returns the event
        and drops the caller's cancellation when both come on one turn of the
        loop, and a Ctrl-C (run.py cancels the job) would be lost."""
        if self._held:
            return self._held.popleft()
        if not self._events.empty():
            return self._events.get_nowait()
        getter = asyncio.ensure_future(self._events.get())
        try:
            await asyncio.wait({getter}, timeout=timeout)
        except asyncio.CancelledError:
            if getter.done() and not getter.cancelled():
                # Taken off the queue as the caller was cancelled: the pump
                # that stops the job handles it first.
                self._held.append(getter.result())
            getter.cancel()
            raise
        if getter.done():
            return getter.result()
        getter.cancel()
        return None

    def _handle(self, event: Event) -> None:
        if isinstance(event, _Tick):
            self._check_grace(event.task_id)
            return
        if isinstance(event, BackendFailed):
            if on_backend_failure(self._phase) is Action.CARRY_ON:
                # The job's verdict is already made; teardown goes on.
                logger.warning(
                    "the %s backend failed while stopping: %s", self.backend.name, event.message
                )
                return
            error = TFMesosError(f"the {self.backend.name} backend failed: {event.message}")
            error.exit_status = event.exit_status
            raise error
        task = self._tasks.get(event.task_id)
        if task is None:
            return
        if isinstance(event, Message):
            if event.message.get("type") == "log_failed":  # its agent's log; it goes on
                where = f" on {task.host}" if task.host else ""
                logger.warning("task %s%s %s", task.spec.name, where, event.message.get("problem"))
                self._unkept_logs.append(task.spec.name)
            return
        if isinstance(event, Registered):
            task.connection = event.connection
            task.addr = event.addr
            # Where a task turned out to run, when its backend could not say.
            task.host = task.host or event.addr.rpartition(":")[0]
            task.state = TaskState.REGISTERED
            registered = sum(t.state is TaskState.REGISTERED for t in self._current.values())
            logger.info(
                "task %s registered at %s (%s)",
                task.spec.name,
                task.addr,
                "relaunched" if task.keep_address else f"{registered}/{len(self._current)}",
            )
            action = on_registered(self._view(task))
            if action is Action.REJOIN:
                self._rejoin(task)
            elif action is Action.STOP:
                event.connection.send({"type": "stop", "reason": "superseded"})
        elif isinstance(event, Ready):
            task.ready = True
            if task.keep_address:
                logger.info("task %s is back at %s", task.spec.name, task.addr)
        elif isinstance(event, Exited):
            self._over(task, event.code, _describe_exit(event))
        elif isinstance(event, Disconnected):
            task.disconnected = True
            task.disconnected_at = time.monotonic()
            if task.ended is not None:
                self._over(task, task.ended.exit_code, _describe_end(task.ended))
            else:
                # An agent exits when its connection drops, so the task is as
                # good as gone; wait a little for the backend's word on why.
                asyncio.get_running_loop().call_later(
                    LOST_CONNECTION_GRACE, self._events.put_nowait, _Tick(task.task_id)
                )
        elif isinstance(event, TaskPlaced):
            task.host = event.host
        elif isinstance(event, TaskEnded):
            task.ended = event
            task.ended_at = time.monotonic()
            task.host = task.host or event.host
            if task.connection is None or task.disconnected:
                self._over(task, event.exit_code, _describe_end(event))
            else:
                # The agent's last output and exit report may still be in
                # flight on its connection: give them a moment.
                asyncio.get_running_loop().call_later(
                    DISCONNECT_GRACE, self._events.put_nowait, _Tick(task.task_id)
                )

    def _check_grace(self, task_id: str) -> None:
        """One task's grace may be over: for its last output after its end, or
        for the backend's word after its connection dropped."""
        task = self._tasks.get(task_id)
        if task is None or task.state.over:
            return
        now = time.monotonic()
        if task.ended is not None:
            left = DISCONNECT_GRACE - (now - task.ended_at)
        elif task.disconnected:
            left = LOST_CONNECTION_GRACE - (now - task.disconnected_at)
        else:
            return
        if left > 0.001:  # woken early (not by the loop's own rounding): look again then
            asyncio.get_running_loop().call_later(left, self._events.put_nowait, _Tick(task_id))
        elif task.ended is not None:
            self._over(task, task.ended.exit_code, _describe_end(task.ended))
        else:
            self._over(task, None, "lost its connection to the launcher")

    def _on_rendezvous(self, event: RendezvousEvent) -> None:
        if isinstance(event, Output):
            # Handled at once, on the connection's own reader, in order. A slow
            # terminal fills the console's buffer, which makes the readers wait
            # (the rendezvous's flow), TCP slows the agent, and the pipe slows
            # the task: no unbounded queue anywhere, and the loop never blocks.
            task = self._tasks.get(event.task_id)
            if task is not None:
                self._backend_for(task.spec).task_output(task.task_id, event.data)
                self._print_output(task, event.data)
            return
        if event.task_id not in self._tasks:
            self.backend.on_peer(event)  # the backend's own helper
            return
        self._events.put_nowait(event)

    def _on_backend(self, event: BackendEvent) -> None:
        self._events.put_nowait(event)

    async def _output_flow(self, task_id: str) -> None:
        # Only a task whose output is shown waits for the terminal: the
        # others (by default every task but worker 0) never do, so a paused
        # terminal cannot hide their failures.
        task = self._tasks.get(task_id)
        if task is not None and task.forward:
            await self._console.writable()

    def _print_output(self, task: _Task, data: bytes) -> None:
        task.tail += data
        if len(task.tail) > TAIL_BYTES:
            del task.tail[: len(task.tail) - TAIL_BYTES]
        if not task.forward:
            return
        if self._phase is Phase.STOPPING and (task.cut or self._console.full):
            # Stopping: taken in so that the task hears "stop", not shown
            # once the terminal is behind.
            task.cut = True
            self._dropped += len(data)
            return
        body = data[:-1] if data.endswith(b"\n") else data
        self._console.write(task.prefix + body.replace(b"\n", b"\n" + task.prefix) + b"\n")

    # -- endings -----------------------------------------------------------

    def _view(self, task: _Task) -> TaskView:
        """What the rules (tfmesos.policy) know of ``task``."""
        return TaskView(
            phase=self._phase,
            current=self._current.get(task.spec.name) is task,
            attempt=task.attempt,
            replica=self.spec.replica,
            relaunched_at_address=bool(task.keep_address),
        )

    def _over(self, task: _Task, code: int | None, reason: str) -> None:
        if task.state.over:
            return
        task.exit_code = code
        if task.connection is not None:
            task.connection.close()
        action = on_task_end(self._view(task), code)
        if action is Action.STOP:
            task.state = TaskState.STOPPED
            return
        # The task's own log (the backend's tail) has all it printed; what
        # came over the connection may stop short of the end.
        tail = (task.ended.output_tail if task.ended else ()) or task.tail_lines()
        failure = TaskFailure(task.spec.name, reason, task.host, tail)
        if action in (Action.RELAUNCH, Action.GIVE_UP):
            task.state = TaskState.FAILED
            if action is Action.GIVE_UP:
                hint = ""
                if not failure.output_tail:
                    hint = (
                        "; it printed nothing the launcher could see: its own output is kept "
                        f"in {self._backend_for(task.spec).unseen_output_location()}"
                    )
                raise ClusterStartError(
                    f"{failure.describe()}\nthe task failed {task.attempt} times before the "
                    f"cluster was up; giving up{hint}",
                    failure,
                )
            logger.warning(
                "%s",
                failure.describe(
                    f" before the cluster was up; relaunching it "
                    f"(attempt {task.attempt + 1} of {MAX_ATTEMPTS})"
                ),
            )
            self._relaunch.append((task.spec, task.attempt + 1))
            return
        if action is Action.FINISH:
            task.state = TaskState.FINISHED
            # Its output came in before its exit report, on the same
            # connection, and is on its way to the terminal from the
            # console's thread: said after it.
            self._say_after_output(logging.INFO, "task %s finished (exit 0)", task.spec.name)
            return
        task.state = TaskState.FAILED
        if code == 0:
            failure = TaskFailure(
                task.spec.name,
                "exited while the cluster was running",
                task.host,
                failure.output_tail,
            )
        if not self.spec.replica:
            unrelaunched = self._relaunch_server(task, failure)
            if unrelaunched is None:
                return
            failure = unrelaunched
        raise JobFailedError(failure, exit_code=task_status(code))

    # -- fine-grained relaunches at the same address --------------------------

    def _relaunch_server(self, task: _Task, failure: TaskFailure) -> TaskFailure | None:
        """Fine-grained mode: queue the dead server ``task`` for a relaunch
        at its address and return None, where the policy allows
        (:func:`tfmesos.server_relaunch.decide`); else return the failure
        that ends the job, saying why it was not relaunched."""
        if task.keep_address and not task.ready:
            # The relaunch itself failed: trying again elsewhere is no use
            # (the program dials this address), and again here seldom is.
            return replace(
                failure, reason=f"could not be relaunched at {task.keep_address}: {failure.reason}"
            )
        backend = self._backend_for(task.spec)
        decision = server_relaunch.decide(
            task.spec,
            task.addr,
            done=self._server_relaunches,
            allowed=self.spec.max_restarts,
            backend=backend.name,
            backend_keeps_addresses=backend.keeps_addresses,
        )
        if isinstance(decision, server_relaunch.NotRelaunched):
            if not decision.why:
                return failure
            return replace(failure, reason=f"{failure.reason}; {decision.why}")
        self._server_relaunches = decision.number
        logger.warning(
            "%s",
            failure.describe(
                f"; relaunching it at {decision.address} "
                f"(relaunch {decision.number} of {decision.allowed})"
            ),
        )
        self._relaunch_at.append((task, decision))
        return None

    async def _launch_at(self, earlier: _Task, decision: server_relaunch.RelaunchAt) -> None:
        launch = self._prepare(earlier.spec, earlier.attempt + 1)
        self._tasks[launch.task_id].keep_address = decision.address
        port = int(decision.address.rpartition(":")[2])
        await self._backend_for(earlier.spec).launch_at(launch, earlier.task_id, port)

    def _rejoin(self, task: _Task) -> None:
        """A relaunched server registered: give it the cluster it left."""
        assert task.connection is not None
        if task.addr != task.keep_address:
            raise JobFailedError(
                TaskFailure(
                    task.spec.name,
                    f"could not be relaunched at {task.keep_address}: its relaunch registered "
                    f"at {task.addr}",
                    task.host,
                )
            )
        task.connection.send(task.connection.seal(self._cluster_message(task)))
        task.state = TaskState.RUNNING

    # -- conditions ---------------------------------------------------------

    def _all_registered(self) -> bool:
        return all(t.state is TaskState.REGISTERED for t in self._current.values())

    def _workers_done(self) -> bool:
        return all(
            t.state is TaskState.FINISHED
            for t in self._current.values()
            if t.spec.job_name == "worker"
        )

    def _all_ready(self) -> bool:
        return all(t.ready for t in self._current.values())

    def _all_over(self) -> bool:
        return all(t.state.over for t in self._current.values())

    def _waiting(self) -> list[str]:
        """The tasks the cluster waits for, in the job's order. A local task
        held until the backend places its first task is not among them: it
        waits for the others, and naming it would blame this machine."""
        held = {spec.name for spec, _ in self._chief_waits}
        return [
            t.spec.name
            for t in self._current.values()
            if t.state is not TaskState.REGISTERED and t.spec.name not in held
        ]

    def _start_timed_out(self) -> None:
        waiting = self._waiting()
        detail = self.backend.progress()
        raise ClusterStartError(
            f"the cluster was not up after {self.spec.start_timeout:g}s: "
            f"still waiting for {', '.join(waiting)}" + (f" ({detail})" if detail else "")
        )

    def _report_progress(self) -> None:
        if self._phase is not Phase.STARTING:
            return
        waiting = self._waiting()
        detail = self.backend.progress()
        logger.info(
            "waiting for %d of %d tasks to register: %s%s",
            len(waiting),
            len(self._current),
            ", ".join(waiting[:10]) + ("…" if len(waiting) > 10 else ""),
            f" ({detail})" if detail else "",
        )


KILL_WAIT = wire.STOP_GRACE + 3.0


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    if count < 1 << 20:
        return f"{count / 1024:.1f} KiB"
    return f"{count / (1 << 20):.1f} MiB"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _describe_exit(exited: Exited) -> str:
    """How a task ended, as its agent reported it: a command killed by a
    signal says which, not the shell's 128+N."""
    if exited.signal is not None:
        reason = f"killed by {_signal_name(exited.signal)}"
    else:
        reason = f"exited with status {exited.code}"
    if exited.agent_signal is not None:
        reason += f" (its agent was sent {_signal_name(exited.agent_signal)})"
    return reason


def _describe_end(ended: TaskEnded) -> str:
    if ended.state == NOT_PLACED:
        return ended.message
    if ended.state == "exited":
        return ended.message or f"exited with status {ended.exit_code}"
    return f"ended in state {ended.state}" + (f": {ended.message}" if ended.message else "")


def _tasks_of(job: str, count: int) -> str:
    """``1 ps``, ``2 workers``, ``1 worker``: a job's task count, in words."""
    plural = "" if count == 1 or job.endswith("s") else "s"
    return f"{count} {job}{plural}"
