"""The job's state and its loop: the one owner of both.

:class:`Loop` holds everything a job's run changes (the attempts at its tasks
and their records, the job's phase, the tasks held for the chief, the
relaunches, the cluster definition) and is its only writer. It handles the
events that come in (:mod:`tfmesos.launcher.inbox`) and makes the job's
changes of phase as named methods that :class:`~tfmesos.launcher.job.Launcher`
calls; the launcher reads nothing of it but through named queries.

The supervision loop is written once, here; backends only start, kill and
report. Each attempt at a task moves through the states of
:mod:`tfmesos.launcher.attempts`, by its one method ``Attempt.move``. A task
that ends before the cluster is up is relaunched (``MAX_ATTEMPTS`` per task,
as the original allowed); once the cluster is up, a task that fails ends the
job, but in fine-grained mode, where a dead worker's server may come back at
its address (:mod:`tfmesos.launcher.relaunch`). Those rules are decided as
pure functions (:mod:`tfmesos.launcher.policy`, :mod:`tfmesos.launcher.grace`,
:mod:`tfmesos.launcher.endings`); this module carries them out. Every way out
of :meth:`Launcher.start`, :meth:`Launcher.wait_for_workers`,
:meth:`Launcher.watch` and :meth:`Launcher.stop` goes through teardown.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, BinaryIO

from tfmesos.backends.base import (
    Backend,
    BackendAttached,
    BackendEvent,
    BackendFailed,
    InProcessRendezvous,
    Launch,
    TaskEnded,
    TaskPlaced,
)
from tfmesos.common import taskenv
from tfmesos.common.tasklog import new_task_id
from tfmesos.errors import (
    EXIT_USAGE,
    JobFailedError,
    ResourceError,
    TaskFailure,
    TFMesosError,
)
from tfmesos.launcher import endings, grace, message, verdict
from tfmesos.launcher.attempts import Attempt, Attempts, AttemptState
from tfmesos.launcher.console import binary_stream
from tfmesos.launcher.events import NO_EVENTS, Events
from tfmesos.launcher.inbox import Event, Inbox, Tick
from tfmesos.launcher.output import OutputRouter, shown_output
from tfmesos.launcher.policy import (
    Action,
    Phase,
    TaskView,
    admits,
    admits_helper,
    on_backend_failure,
    on_registered,
)
from tfmesos.rendezvous import protocol
from tfmesos.rendezvous.reports import (
    Disconnected,
    Exited,
    Heard,
    Message,
    Output,
    Ready,
    Registered,
    RendezvousEvent,
    Unheard,
)
from tfmesos.rendezvous.server import RendezvousServer
from tfmesos.spec import EVALUATOR_JOB, ClusterSpec, TaskSpec

if TYPE_CHECKING:
    import ssl

    from tfmesos.launcher import relaunch

__all__ = ["Event", "Loop", "RendezvousFactory", "Tick", "real_rendezvous"]

logger = logging.getLogger("tfmesos")

OUTPUT_LINGER = 2.0
"""At teardown, how long the tasks' connections get to deliver their last output."""
KILL_WAIT = protocol.STOP_GRACE + 3.0


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


def real_rendezvous(
    secret: bytes,
    admit: Callable[[str], bool],
    sink: Callable[[RendezvousEvent], None],
    flow: Callable[[str], Awaitable[None]],
) -> RendezvousServer:
    return RendezvousServer(secret, admit, sink, flow=flow)


class Loop:
    """The job's state, and its only writer: what comes in (the rendezvous's
    and the backends' events), what each means for the task it is about
    (:mod:`tfmesos.launcher.policy` decides), and the moves of each attempt.
    A :class:`tfmesos.launcher.job.Launcher` owns one and drives the job's
    sequence through its named methods; every field is private."""

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
        rendezvous: RendezvousFactory = real_rendezvous,
        events: Events = NO_EVENTS,
        after_event: Callable[[Event], Awaitable[None]],
    ) -> None:
        self._spec = spec
        self._after_event = after_event
        """What the job does once an event is handled: start the chief, launch
        what is to be relaunched (:class:`tfmesos.launcher.job.Launcher`)."""
        self._backend = backend
        self._events = events
        """Where what the launcher decides and sees goes (``tfrun --events``)."""
        self._restart = restart
        """Which run of the job this is (``--max-restarts``): 0 for the first."""
        # Where the backend runs its tasks elsewhere, replica mode runs the
        # chief beside the launcher (Backend.chief_beside_launcher): its exit
        # decides the job's.
        self._chief_backend = chief_backend
        stream = output if output is not None else binary_stream(sys.stdout)
        self._output = OutputRouter(
            stream,
            [t.name for t in spec.tasks() if spec.forwards(t)],
            colour=colour,
            notes_after_output=notes_after_output,
            processes=spec.nproc > 1,
        )
        self._secret = secret or os.urandom(32)
        self._silence_limit = protocol.silence_limit(os.environ)
        """How long a task's agent goes on without hearing the launcher, and
        so how long its last output may take to come (``protocol.SILENCE_LIMIT``)."""
        self._inbox = Inbox()
        self._attempts = Attempts(spec.ending_job)
        self._rendezvous = rendezvous(
            self._secret, self._admit, self._on_rendezvous, self._output_flow
        )
        in_process = InProcessRendezvous(
            self._admit, self._on_rendezvous, self._output_flow, self._output_held
        )
        for each in self.backends():
            each.attach_rendezvous(in_process)
        self._phase = Phase.STARTING
        self._relaunches: list[tuple[TaskSpec, int]] = []
        self._relaunches_at: list[tuple[Attempt, relaunch.RelaunchAt]] = []
        """Fine-grained mode: dead servers to start again at their address."""
        self._server_relaunches = 0
        self._lost_logs: list[str] = []
        """Tasks whose agent said its log could not be written (``log_failed``)."""
        self._tls_pem: str | None = None
        """The certificate tasks pin, read once when the rendezvous starts."""
        self._cluster_def: dict[str, list[str]] = {}
        self._outside: dict[str, list[str]] = {}
        """Jobs in the cluster definition whose tasks the launcher does not
        run, first in it: fine-grained mode's chief, the program itself."""
        self._run_id = os.urandom(16).hex()  # 32 hex digits, as uuid4().hex
        """The job's id, the same for every task (torch's ``TORCHELASTIC_RUN_ID``)."""

    # -- what the launcher asks ---------------------------------------------------

    @property
    def cluster_def(self) -> dict[str, list[str]]:
        """Each job's task addresses, once the cluster is up (a copy)."""
        return {job: list(addrs) for job, addrs in self._cluster_def.items()}

    @property
    def run_id(self) -> str:
        """The job's id, the same for every task (torch's ``TORCHELASTIC_RUN_ID``)."""
        return self._run_id

    def all_registered(self) -> bool:
        return self._attempts.all_registered()

    def all_ready(self) -> bool:
        return self._attempts.all_ready()

    def workers_done(self) -> bool:
        return self._attempts.workers_done()

    def all_over(self) -> bool:
        return self._attempts.all_over()

    def any_live(self) -> bool:
        """Whether a task is not over yet."""
        return bool(self._attempts.live())

    def lost_logs(self) -> list[str]:
        """The tasks whose output could not all be kept in their logs (each
        was said in a warning), by name."""
        names = [*self._lost_logs, *(n for b in self.backends() for n in b.lost_logs())]
        return list(dict.fromkeys(names))

    def incomplete_output(self) -> dict[str, str]:
        """The tasks whose copy in their logs lacks some of what they printed
        (tfrun could not hear it all before their end), by name, each with
        where its full output is."""
        missing = {}
        for task in self._attempts.current.values():
            backend = self.backend_for(task.spec)
            if (
                backend.output_through_launcher
                and task.connection is not None
                and not task.output_complete
            ):
                missing[task.spec.name] = backend.unseen_output_location(task.host)
        return missing

    def report_after_output(self, level: int, message: str, *args: object) -> None:
        """Log ``message`` once the tasks' output printed so far is out
        (:meth:`OutputRouter.report_after_output`)."""
        self._output.report_after_output(level, message, *args)

    def abandon_output(self, reason: str, where: str) -> None:
        """Drop the tasks' output not yet written, saying once where
        (``where``) the full output is."""
        self._output.abandon(reason, where)

    @property
    def stopping(self) -> bool:
        """Whether the job's end is decided and its teardown under way."""
        return self._phase is Phase.STOPPING

    async def open_rendezvous(
        self, bind: str, port: int, tls: tuple[ssl.SSLContext, str] | None
    ) -> None:
        """Listen for the tasks at ``bind``, on ``port`` (0: any), over TLS
        where ``tls`` gives the context and the certificate the tasks pin."""
        context = None
        if tls is not None:
            context, self._tls_pem = tls
        await self._rendezvous.start(bind, port, context)

    def new_attempt(
        self, spec: TaskSpec, attempt: int, *, held: bool = False, keep_address: str = ""
    ) -> Launch:
        """Attempt number ``attempt`` at task ``spec``, launched, or ``held``
        (pending) until the cluster's first placement; ``keep_address``: where
        a fine-grained relaunch must serve. Return what its backend launches."""
        task = Attempt(
            spec=spec,
            task_id=new_task_id(spec.job_name, spec.index, self._restart, attempt),
            attempt=attempt,
            prefix=self._output.prefix(spec.name),
            forward=self._spec.forwards(spec),
            initial=AttemptState.PENDING if held else AttemptState.LAUNCHED,
            keep_address=keep_address,
        )
        self._attempts.add(task)
        if not held:
            self._emit_launched(task)
        return self._launch_of(task)

    def launch_held(self) -> list[Launch]:
        """The cluster has placed a task: launch those held for it (the
        chief's backend has started). Return what to launch."""
        launches = []
        for task in self._held():
            task.move(AttemptState.LAUNCHED)
            launches.append(self._launch_of(task))
            self._emit_launched(task)
        return launches

    def _held(self) -> list[Attempt]:
        """The tasks held (pending) for the cluster's first placement: only
        the chief's, beside the launcher, ever are (:meth:`new_attempt`)."""
        return [t for t in self._attempts.current.values() if t.state is AttemptState.PENDING]

    def _emit_launched(self, task: Attempt) -> None:
        backend = self.backend_for(task.spec).name
        self.emit(
            "task_launched", task, task_id=task.task_id, backend=backend, restart=self._restart
        )

    def _launch_of(self, task: Attempt) -> Launch:
        env = message.launch_env(
            self._spec,
            task.task_id,
            rendezvous=f"{self._backend.rendezvous_host}:{self._rendezvous.port}",
            secret=self._secret,
            restart=self._restart,
            tls_pem=self._tls_pem,
            silence_limit=self._silence_limit,
        )
        return Launch(task.task_id, task.spec, env)

    def take_relaunches(
        self,
    ) -> tuple[list[tuple[TaskSpec, int]], list[tuple[Attempt, relaunch.RelaunchAt]]]:
        """What the events handled since the last call decided to launch
        again: tasks (each with its attempt number) that failed before the
        cluster was up, and fine-grained mode's servers to start again at
        their address. Each is handed out once."""
        again, self._relaunches = self._relaunches, []
        at_address, self._relaunches_at = self._relaunches_at, []
        return again, at_address

    def set_outside(self, jobs: dict[str, list[str]]) -> None:
        """Put ``jobs``, whose tasks the launcher does not run, first in the
        cluster definition (fine-grained mode's chief: the program itself)."""
        self._outside = jobs

    def targets(self) -> dict[str, str]:
        """Each task's target (``/job:worker/task:0``) and its URL."""
        return message.targets(self._spec.protocol, self._cluster_def)

    def deliver_cluster(self) -> None:
        """Every task has registered: send each the cluster's definition, and
        the cluster runs."""
        self._cluster_def = {
            **self._outside,
            **message.cluster_def_of(self._attempts.current.values()),
        }
        # Every address is known, and no command has started: one too many
        # for a task's environment is refused now.
        message.check_environment(self._spec, self._cluster_def)
        checked = False
        for task in self._attempts.current.values():
            assert task.connection is not None
            sealed = task.connection.seal(self._cluster_message(task))
            if not checked:
                message.check_size(sealed)
                checked = True
            task.connection.send(sealed)
            task.move(AttemptState.RUNNING)
        self._phase = Phase.RUNNING
        for target, url in sorted(self.targets().items()):
            logger.debug("%s at %s", target, url)
        # An evaluator is in no cluster list, but is up too.
        aside = ", 1 evaluator" if self._spec.has_job(EVALUATOR_JOB) else ""
        logger.info("cluster up: %s%s", message.summary(self._cluster_def), aside)
        if self._spec.replica and self._restart == 0:  # where the output starts to come
            logger.info("%s", shown_output(self._spec.tasks(), self._spec.forward_logs))
        # As TF_CONFIG has it: with --nproc-per-task, every worker process's address.
        cluster = taskenv.process_cluster(self._cluster_def, self._spec.nproc)
        self.emit("cluster_up", cluster=cluster, restart=self._restart)

    def begin_stop(self) -> list[tuple[Backend, str]]:
        """The job's end is decided: refuse whoever dials in from now on, let
        the output go on whether or not the terminal keeps up, and tell every
        task that has registered to stop. Return those to kill: each task
        launched that never registered, by its backend and id."""
        # A job refused before its first launch says only its verdict.
        if self._attempts.by_id:
            self.emit("job_stopping", restart=self._restart)
        self._phase = Phase.STOPPING
        # A task that dials in from now on is refused, as expected: not news.
        self._rendezvous.stopping()
        self._output.stop()
        kills = []
        for task in self._attempts.live():
            if task.connection is not None:
                task.connection.send({"type": protocol.STOP, "reason": "the job is ending"})
            elif task.state is not AttemptState.PENDING:
                kills.append((self.backend_for(task.spec), task.task_id))
        return kills

    async def wait_for_stop(self) -> None:
        """The tasks that never registered are killed (or never launched):
        nothing of theirs is left to wait for. Wait up to ``KILL_WAIT`` for
        the rest to end."""
        for task in self._attempts.live():
            if task.connection is None:
                task.move(AttemptState.STOPPED)
        await self.pump(self.all_over, KILL_WAIT, lambda: None)

    async def close(self, *, drop_stalled_output: bool, where: str) -> None:
        """The tasks are gone: close the rendezvous once what they sent last
        is in, and write their output (``where`` its full copy is kept)."""
        await self._rendezvous.close(linger=OUTPUT_LINGER)
        # Every task is gone: what they printed goes out before the
        # launcher says how the job ended.
        await self._output.close(drop_stalled=drop_stalled_output, where=where)

    def end_stop(self) -> None:
        """Teardown is over: a task not over yet is stopped (left unreached
        where it could not be heard), and the job's end said."""
        for task in self._attempts.current.values():
            if not task.state.over:
                task.left_unreached = task.unheard
                task.move(AttemptState.STOPPED)
        if self._attempts.by_id:
            self.emit("job_stopped", restart=self._restart, outcomes=self.outcomes())

    def outcomes(self) -> dict[str, str]:
        """How each task ended, in words, by task name, in the job's order:
        ``exited 0``, ``stopped by tfrun``, or how it failed."""
        return verdict.outcomes(self._attempts.current.values(), self._silence_limit)

    def backend_for(self, task: TaskSpec) -> Backend:
        if self._chief_backend is not None and self._spec.is_chief(task):
            return self._chief_backend
        return self._backend

    def backends(self) -> list[Backend]:
        return [self._backend] + ([self._chief_backend] if self._chief_backend else [])

    async def pump(
        self,
        done: Callable[[], bool],
        timeout: float | None,
        on_timeout: Callable[[], None] | None,
    ) -> None:
        """Handle what comes in until ``done()``; after ``timeout`` seconds
        (None: none), call ``on_timeout`` and return."""
        await self._inbox.pump(
            done, timeout, on_timeout, handle=self._handle_event, progress=self._report_progress
        )

    async def _handle_event(self, event: Event) -> None:
        self._handle(event)
        await self._after_event(event)

    def _handle(self, event: Event) -> None:
        if isinstance(event, Tick):
            self._check_grace(event.task_id)
            return
        if isinstance(event, BackendFailed):
            self._backend_failed(event)
            return
        task = self._attempts.get(event.task_id)
        if task is None:
            return
        if isinstance(event, Message):
            self._on_message(task, event)
        elif isinstance(event, Unheard | Heard):
            self._hearing(task, event)
        elif isinstance(event, Registered):
            self._on_registered(task, event)
        elif isinstance(event, Ready):
            self._on_ready(task)
        elif isinstance(event, Exited):
            self._on_exited(task, event)
        elif isinstance(event, Disconnected):
            self._on_disconnected(task, event)
        elif isinstance(event, TaskPlaced):
            task.host = event.host
            backend = self.backend_for(task.spec).name
            self.emit("task_placed", task, backend=backend, host=event.host)
        elif isinstance(event, TaskEnded):
            self._on_task_ended(task, event)

    def _backend_failed(self, event: BackendFailed) -> None:
        if on_backend_failure(self._phase) is Action.CARRY_ON:
            # The job's verdict is already made; teardown goes on.
            logger.warning(
                "the %s backend failed while stopping: %s", self._backend.name, event.message
            )
            return
        message = f"the {self._backend.name} backend failed: {event.message}"
        if event.exit_status == EXIT_USAGE:
            # A job the backend found it can never run (no Mesos agent
            # could hold a task): refused, as a local job too big is.
            raise ResourceError(message)
        error = TFMesosError(message)
        error.exit_status = event.exit_status
        raise error

    def _on_message(self, task: Attempt, event: Message) -> None:
        if event.message.get("type") == protocol.LOG_FAILED:  # its agent's log; it goes on
            where = f" on {task.host}" if task.host else ""
            logger.warning("task %s%s %s", task.spec.name, where, event.message.get("problem"))
            self._lost_logs.append(task.spec.name)

    def _on_registered(self, task: Attempt, event: Registered) -> None:
        task.connection = event.connection
        task.addr = event.addr
        # Where a task turned out to run, when its backend could not say.
        task.host = task.host or event.addr.rpartition(":")[0]
        task.move(AttemptState.REGISTERED)
        self.emit("task_registered", task, addr=task.addr, host=task.host)
        registered = self._attempts.count(AttemptState.REGISTERED)
        logger.info(
            "task %s registered at %s (%s)",
            task.spec.name,
            task.addr,
            "relaunched" if task.keep_address else f"{registered}/{len(self._attempts.current)}",
        )
        action = on_registered(self._view(task))
        if action is Action.REJOIN:
            self._rejoin(task)
        elif action is Action.STOP:
            event.connection.send({"type": protocol.STOP, "reason": "superseded"})

    def _on_ready(self, task: Attempt) -> None:
        task.ready = True
        self.emit("task_ready", task, addr=task.addr, relaunched=bool(task.keep_address))
        if task.keep_address:
            logger.info("task %s is back at %s", task.spec.name, task.addr)

    def _on_exited(self, task: Attempt, event: Exited) -> None:
        task.reported = event.output_bytes
        wait = self.backend_for(task.spec).kill_reason_timeout
        decision = grace.after_exit(task, event, wait, time.monotonic())
        if isinstance(decision, grace.WaitUntil):
            task.held_exit = event
        self._carry_out(task, decision)

    def _on_disconnected(self, task: Attempt, event: Disconnected) -> None:
        task.closed_by_task = task.closed_by_task or event.by_peer
        task.disconnected = True
        self._carry_out(task, grace.after_disconnect(task, time.monotonic()))

    def _on_task_ended(self, task: Attempt, event: TaskEnded) -> None:
        task.ended = event
        task.ended_at = time.monotonic()
        task.host = task.host or event.host
        if event.drained:
            self.emit("task_drained", task, host=task.host, action="DRAIN_AGENT")
            logger.warning(
                "task %s%s: the operator is draining its agent (Mesos DRAIN_AGENT), which "
                "stops its tasks",
                task.spec.name,
                f" on {task.host}" if task.host else "",
            )
        self._carry_out(task, grace.after_backend_end(task, event))

    def _check_grace(self, task_id: str) -> None:
        task = self._attempts.get(task_id)
        if task is not None:
            self._carry_out(task, grace.at_deadline(task, time.monotonic(), self._silence_limit))

    def _carry_out(self, task: Attempt, decision: grace.Over | grace.WaitUntil | None) -> None:
        """End ``task`` as ``decision`` says, or look at it again at its
        deadline (:mod:`tfmesos.launcher.grace`)."""
        if isinstance(decision, grace.WaitUntil):
            task.deadline = decision.deadline
            self._inbox.put_later(decision.deadline - time.monotonic(), Tick(task.task_id))
        elif decision is not None:
            self._over(task, decision.code, decision.reason, signal=decision.signal)

    def _hearing(self, task: Attempt, event: Unheard | Heard) -> None:
        """Say that ``task`` cannot be heard, or is heard again."""
        if task.state.over or task.state is AttemptState.LAUNCHED:
            return
        where = task.host or "its host"
        task.unheard = isinstance(event, Unheard)
        if isinstance(event, Unheard):
            logger.warning(
                "cannot hear task %s (%s) for %.0fs: nothing from it, not even its heartbeat; "
                "what it prints meanwhile waits on its host, and it stops itself if it does "
                "not hear tfrun for %gs",
                task.spec.name,
                where,
                event.silent,
                self._silence_limit,
            )
            self.emit("task_unheard", task, host=task.host, silent=round(event.silent, 1))
        else:
            logger.info("hear task %s again after %.0fs", task.spec.name, event.silent)
            self.emit("task_heard", task, host=task.host, silent=round(event.silent, 1))

    def _on_rendezvous(self, event: RendezvousEvent) -> None:
        if isinstance(event, Output):
            # Handled at once, on the connection's own reader, in order. A slow
            # terminal fills the console's buffer, which makes the readers wait
            # (the rendezvous's flow), TCP slows the agent, and the pipe slows
            # the task: no unbounded queue anywhere, and the loop never blocks.
            task = self._attempts.get(event.task_id)
            if task is not None:
                task.received += len(event.data)
                self.backend_for(task.spec).task_output(task.task_id, event.data)
                self._output.write(task, event.data)
            return
        if self._attempts.get(event.task_id) is None:
            if not isinstance(event, Unheard | Heard):  # a helper's silence is its backend's
                self._backend.on_peer(event)  # the backend's own helper
            return
        self._inbox.put(event)

    def on_backend(self, event: BackendEvent) -> None:
        if isinstance(event, BackendAttached):
            # Nothing to decide: said at once, not queued, so that the ID of
            # a Slurm job is out even when the launch that submitted it
            # fails before the loop runs again.
            fields = {"backend": event.backend, "restart": self._restart, **event.details}
            self.emit("backend_attached", None, **fields)
            return
        self._inbox.put(event)

    async def _output_flow(self, task_id: str) -> None:
        task = self._attempts.get(task_id)
        if task is not None:
            await self._output.flow(task)

    def _output_held(self, task_id: str) -> bool:
        """Whether :meth:`_output_flow` would make ``task_id`` wait."""
        task = self._attempts.get(task_id)
        return task is not None and self._output.must_wait(task)

    def _admit(self, task_id: str) -> bool:
        task = self._attempts.get(task_id)
        if task is None:
            # Not a task: maybe the backend's own helper (Slurm's job script).
            return admits_helper(self._phase) and self._backend.admit(task_id)
        return admits(self._view(task), launched=task.state is AttemptState.LAUNCHED)

    def _view(self, task: Attempt) -> TaskView:
        """What the rules (tfmesos.launcher.policy) know of ``task``."""
        return TaskView(
            phase=self._phase,
            current=self._attempts.is_current(task),
            attempt=task.attempt,
            replica=self._spec.replica,
            relaunched_at_address=bool(task.keep_address),
            side=task.spec.job_name == EVALUATOR_JOB,
        )

    def emit(self, event: str, task: Attempt | None = None, **fields: Any) -> None:
        """The one seam through which the launcher's events go out."""
        if task is not None:
            fields = {"task": task.spec.name, "attempt": task.attempt, **fields}
        self._events.emit(event, **fields)

    def _over(
        self, task: Attempt, code: int | None, reason: str, *, signal: int | None = None
    ) -> None:
        """``task`` is over: carry out what that means for the job
        (:func:`tfmesos.launcher.endings.end_of` decides)."""
        if task.state.over:
            return
        task.exit_code = code
        if task.connection is not None:
            task.connection.close()
        end = endings.end_of(
            task,
            self._view(task),
            code,
            reason,
            backend=self.backend_for(task.spec),
            server_relaunches=self._server_relaunches,
            max_restarts=self._spec.max_restarts,
        )
        self.emit(
            "task_exited",
            task,
            host=task.host,
            exit_code=code,
            signal=None if signal is None else verdict.signal_name(signal),
            reason=end.reason,
            action=end.action.value,
        )
        task.move(end.state)
        if end.note is not None:
            level, line = end.note
            if end.after_output:
                self._output.report_after_output(level, "%s", line)
            else:
                logger.log(level, "%s", line)
        if end.relaunch or end.relaunch_at is not None:
            if end.relaunch_at is None:
                self._relaunches.append((task.spec, task.attempt + 1))
            else:
                self._server_relaunches = end.relaunch_at.number
                self._relaunches_at.append((task, end.relaunch_at))
            self._events.emit(
                "task_relaunched",
                task=task.spec.name,
                attempt=task.attempt + 1,
                reason=end.relaunch_reason,
                address=None if end.relaunch_at is None else end.relaunch_at.address,
            )
        if end.error is not None:
            raise end.error

    def _rejoin(self, task: Attempt) -> None:
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
        task.move(AttemptState.RUNNING)

    def _cluster_message(self, task: Attempt) -> dict[str, object]:
        """What ``task`` runs, with the cluster's definition."""
        return message.cluster_message(
            self._spec,
            task,
            run_id=self._run_id,
            restart=self._restart,
            cluster_def=self._cluster_def,
        )

    def waiting(self) -> list[str]:
        return self._attempts.waiting({task.spec.name for task in self._held()})

    def _report_progress(self) -> None:
        if self._phase is not Phase.STARTING:
            return
        waiting = self.waiting()
        detail = self._backend.progress()
        logger.info(
            "waiting for %d of %d tasks to register: %s%s",
            len(waiting),
            len(self._attempts.current),
            ", ".join(waiting[:10]) + ("…" if len(waiting) > 10 else ""),
            f" ({detail})" if detail else "",
        )
