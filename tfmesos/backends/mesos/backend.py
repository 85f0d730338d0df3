"""The Mesos backend: tasks placed on a Mesos cluster's offers.

It carries out what its parts decide: the offer hold (:mod:`.hold`: which
offers to keep, accept or decline, when to suppress and revive), the pinned
relaunches (:mod:`.pins`) and the ``TaskInfo`` of each task (:mod:`.taskinfo`);
it says each subscription of its framework through :mod:`.subscriptions`.
Talking to the master lives in :mod:`tfmesos.mesos.scheduler`, the calls in
:mod:`tfmesos.mesos.calls`, fitting tasks into offers in
:mod:`tfmesos.mesos.placement`.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import logging
import os
import traceback
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from tfmesos.backends.base import (
    NOT_PLACED,
    Backend,
    BackendAttached,
    BackendFailed,
    BackendOptions,
    EventSink,
    Launch,
    TaskEnded,
    TaskPlaced,
    advertised_host,
)
from tfmesos.backends.mesos import pins as pins_module
from tfmesos.backends.mesos.hold import (
    DECLINE_SECONDS,
    Accept,
    Decision,
    Decline,
    OfferHold,
    Revive,
    StartBackoff,
    StartHold,
    StopHold,
    Suppress,
)
from tfmesos.backends.mesos.options import MesosOptions, framework_credentials
from tfmesos.backends.mesos.pacing import LaunchPacer
from tfmesos.backends.mesos.pins import Pin, Pins
from tfmesos.backends.mesos.reconcile import Reconciliation
from tfmesos.backends.mesos.subscriptions import Subscriptions
from tfmesos.backends.mesos.taskinfo import framework_info, task_info
from tfmesos.backends.mesos.tasks import PlacedTasks
from tfmesos.common import rundirs
from tfmesos.common.advertise import is_loopback_name
from tfmesos.common.aio import reap
from tfmesos.common.backoff import Backoff
from tfmesos.common.pathtext import shown_path
from tfmesos.errors import EXIT_TFRUN_FAILED, ResourceError, SpecError, TFMesosError
from tfmesos.mesos import calls
from tfmesos.mesos.agents import (
    AGENTS_CALL,
    AgentTotal,
    agent_totals,
    all_draining,
    never_held,
    never_held_together,
)
from tfmesos.mesos.placement import OfferCapacity, describe_need
from tfmesos.mesos.scheduler import SchedulerClient, SchedulerError
from tfmesos.mesos.tasklogs import TaskLogs
from tfmesos.mesos.transport import TransportError
from tfmesos.spec import ClusterSpec, TaskSpec

__all__ = ["MesosBackend"]

logger = logging.getLogger("tfmesos")

REVIVE_RETRY_MAX = 15.0
"""The longest wait between tries of a REVIVE the master refused."""
REVIVE_BACKOFF = Backoff(1.0, cap=REVIVE_RETRY_MAX)
AGENTS_TIMEOUT = 10.0
"""How long the master's agent list may take to come."""
AGENTS_RECHECK = 5.0
"""How long to wait before asking for the agent list again, while no agent
has registered or the master did not answer."""
WAIT_NOTE_AFTER = 15.0
"""How long tasks wait for offers before tfrun says, once, how long they
have waited and that --timeout exists (when the job has none): with the
first progress line (every 15 s)."""


class MesosBackend(Backend):
    name = "mesos"
    keeps_addresses = True
    output_through_launcher = True
    kill_reason_timeout = 20.0
    """Over its memory, the command is SIGKILLed; the TASK_FAILED naming the
    limit follows once the container is destroyed (over 2 s under load in CI;
    the agent waits, ``agent.OOM_LINGER``). Other SIGKILLs: as the agent exits."""
    options_type = MesosOptions

    def __init__(self, spec: ClusterSpec, options: MesosOptions | None = None) -> None:
        super().__init__(spec)
        options = options or MesosOptions()
        self.options = options
        """What the user chose (checked): the tasks' container, role and user."""
        options.check_spec(spec)
        master = options.master or os.environ.get("MESOS_MASTER")
        if not master:
            raise SpecError("the mesos backend needs a master: -m HOST:5050 or MESOS_MASTER")
        user = options.user
        if user is not None and (not user or any(c.isspace() for c in user)):
            raise SpecError(f"--user must be a user name, not {user!r}")
        self.user = user or getpass.getuser()
        """Who the tasks run as: agents switch to this user (their default
        --switch_user) and fail a task whose user they do not have."""
        self.host = advertised_host()
        # Flags, else $MESOS_PRINCIPAL and $MESOS_SECRET; the secret is kept
        # by the transport only, never on self or in a message.
        principal, secret = framework_credentials(options.principal, None, options.secret_file)
        self.framework_info = framework_info(spec, options, self.user, self.host, principal)
        # A detached job's launcher task takes over the framework the
        # submitting tfrun made (tfmesos.backends.mesos.detached, imported
        # here: it is also the launcher task's program, run with -m).
        from tfmesos.backends.mesos.detached import adopted_framework, job_labels

        self._adopted = adopted_framework()
        if self._adopted is not None:
            self.framework_info["labels"] = job_labels(self._adopted[1])
        self.roles = self.framework_info["roles"]
        self.client = SchedulerClient(
            master,
            self.framework_info,
            self._on_event,
            reconnect_timeout=options.reconnect_timeout,
            connect_timeout=options.connect_timeout,
            auth=(principal, secret) if principal and secret else None,
            ssl_ca=options.ssl_ca,
        )
        if self._adopted is not None:
            self.client.framework_id = self._adopted[0]
        self.log_dir: Path = Path(options.log_dir) if options.log_dir else rundirs.new_run_dir()
        """Where every task's output is kept on this machine, as it reaches
        the launcher (the chief's log too: run.py puts it here)."""
        self._own_run = not options.log_dir
        """The run directory is this backend's own, let go when it closes."""
        self._logs = TaskLogs(self.log_dir, rundirs.task_log_max())
        self._sink: EventSink | None = None
        self._subscriptions = Subscriptions(self.client, self._attached, lambda: self._closing)
        self.tasks = PlacedTasks()
        """The tasks launched, and what Mesos says of them."""
        self.hold = OfferHold(placement=options.placement, load=self.tasks.per_agent)
        """The tasks waiting for offers and the offers held for them."""
        self.pins = Pins()
        """The relaunches waiting for their own agent and port."""
        self.pacer = LaunchPacer(self.tasks.in_flight)
        """The placed tasks waiting for a free launch slot on their agent."""
        self._largest_offer: OfferCapacity | None = None
        self._shapes: dict[tuple[float, float, int], TaskSpec] = {}
        """A task of each shape (cpus, mem, gpus) handed to the backend."""
        self._shape_added = asyncio.Event()
        self._agents_unknown: str | None = None
        """Why whether an agent could ever hold the tasks is not known, if it is not."""
        self._agents_held = False
        self._agents: list[AgentTotal] = []
        """The master's last agent list, while tasks wait (their drains)."""
        self._gang: list[TaskSpec] | None = None
        """The tasks of the first round, which gang placement holds at once."""
        self._never_said: set[str] = set()
        """Why the agents could never hold the job, said once each
        (``--wait-for-agents``: said, not ended on)."""
        """An agent registered with the master could hold each task handed so far."""
        self._waiting_since: float | None = None
        self._wait_noted = False
        self._agents_watch: asyncio.Task[None] | None = None
        self._runner: asyncio.Task[None] | None = None
        self._calls: set[asyncio.Task[None]] = set()
        self._resubscribed = self._adopted is not None
        """Subscribed before: the framework's tasks may be known to the
        master (a taken-over framework's too), and offers filtered."""
        self._reviving: asyncio.Task[None] | None = None
        self._reconciliation = Reconciliation(
            self._call, self._task_name, lambda: self._closing or self._failed
        )
        self._closing = False
        self._failed = False
        """The backend reported it can no longer run the job (_fail)."""
        self._accept_failure: tuple[int, str] | None = None
        """How many tasks the last failed ACCEPT sent back to waiting, and why
        it failed; cleared when an ACCEPT succeeds."""
        self._hold_expiry: asyncio.TimerHandle | None = None
        self._backoff: asyncio.TimerHandle | None = None

    @classmethod
    def from_options(cls, spec: ClusterSpec, options: BackendOptions) -> MesosBackend:
        assert isinstance(options, MesosOptions), options
        return cls(spec, options)

    # -- Backend ---------------------------------------------------------

    @property
    def rendezvous_host(self) -> str:
        # Looked up once: the launcher asks for it at every launch.
        return self.host

    def lost_logs(self) -> list[str]:
        return list(self._logs.lost)

    def logs_location(self) -> str:
        return shown_path(self.log_dir)

    def unseen_output_location(self, host: str = "") -> str:
        web_ui = self._subscriptions.web_ui
        where = f", in the Mesos web UI at {web_ui}" if web_ui else ""
        return f"its sandbox on {host or 'its host'} (stdout and stderr{where})"

    def _task_name(self, task_id: str) -> str | None:
        placed = self.tasks.placed.get(task_id)
        return placed.launch.task.name if placed else None

    def task_output(self, task_id: str, data: bytes) -> None:
        placed = self.tasks.placed.get(task_id)
        self._logs.write(task_id, data, name=placed.launch.task.name if placed else task_id)

    async def start(self, sink: EventSink) -> None:
        self._sink = sink
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            where = shown_path(self.log_dir)
            raise SpecError(f"cannot use {where} for the tasks' logs: {exc.strerror}") from None
        self._runner = asyncio.create_task(self._run())
        self._agents_watch = asyncio.create_task(self._watch_agents())

    async def _run(self) -> None:
        try:
            await self.client.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(exc)

    def check(self, tasks: Sequence[TaskSpec]) -> None:
        # What fits is only known from offers; the diagnosis comes with progress().
        return None

    async def launch(self, launch: Launch) -> None:
        logger.debug("Mesos: %s waits for offers", launch.task.name)
        task = launch.task
        shape = (task.cpus, task.mem, task.gpus)
        if shape not in self._shapes:
            self._shapes[shape] = task
            self._shape_added.set()
        if self._waiting_since is None:
            self._waiting_since = asyncio.get_running_loop().time()
        self._apply(self.hold.add(launch))

    async def launch_many(self, launches: Sequence[Launch]) -> None:
        if self._gang is None:  # the first round: every task the job places at once
            self._gang = [launch.task for launch in launches]
            self._shape_added.set()
        for launch in launches:
            await self.launch(launch)
        self._apply(self.hold.handed(self._for_agents()))

    async def launch_at(self, launch: Launch, earlier: str, port: int) -> None:
        placed = self.tasks.placed.get(earlier)
        if placed is None:
            assert self._sink is not None
            self._sink(
                TaskEnded(launch.task_id, NOT_PLACED, None, "its earlier attempt was never placed")
            )
            return
        logger.debug("Mesos: %s waits for port %d on %s", launch.task.name, port, placed.host)
        self._pin(Pin(launch, placed.agent_id, placed.host, port))

    def _pin(self, pin: Pin) -> None:
        pin.expiry = asyncio.get_running_loop().call_later(
            pins_module.PINNED_OFFER_WAIT, self._pin_expired, pin.launch.task_id
        )
        self.pins.add(pin)
        # Also lifts the filters of offers declined while every task ran.
        self._apply(self.hold.revive())

    def _pin_expired(self, task_id: str) -> None:
        pin = self.pins.waiting.get(task_id)
        if pin is None or self._closing:
            return
        self._not_placed(
            pin,
            f"no offer from its agent ({pin.agent_id}) held port {pin.port} within "
            f"{pins_module.PINNED_OFFER_WAIT:g}s",
        )

    def _not_placed(self, pin: Pin, why: str) -> None:
        """The relaunch ``pin`` waits for will not be placed: it ends, saying ``why``."""
        self.pins.remove(pin.launch.task_id)
        assert self._sink is not None
        self._sink(TaskEnded(pin.launch.task_id, NOT_PLACED, None, why, pin.host))

    async def kill(self, task_id: str) -> None:
        self.pins.remove(task_id)
        self.hold.forget(task_id)
        self._apply(self.pacer.forget(task_id))
        placed = self.tasks.placed.get(task_id)
        if placed is not None and not placed.ended:
            placed.killed = True
            self._call(calls.kill(task_id, placed.agent_id))

    async def close(self) -> None:
        self._closing = True
        self.pins.clear()
        self.pacer.clear()
        self._apply(self.hold.stop())
        if self._hold_expiry is not None:
            self._hold_expiry.cancel()
            self._hold_expiry = None
        if self._backoff is not None:
            self._backoff.cancel()
            self._backoff = None
        if self._reviving is not None:
            self._reviving.cancel()
        self._reconciliation.cancel()
        if self._calls:
            # One bound for them all: a call may wait on those before it.
            await asyncio.wait(set(self._calls), timeout=5)
        self._subscriptions.close()
        # A taken-over framework is left standing: its launcher task tears
        # it down once the job's last run is over.
        await self.client.close(teardown=self._adopted is None)
        if self._agents_watch is not None:
            self._agents_watch.cancel()
            await reap(self._agents_watch)
        if self._runner is not None:
            self._runner.cancel()
            await reap(self._runner)
        self._logs.close()
        if self._own_run:
            rundirs.release(self.log_dir)

    def progress(self) -> str:
        if not self.client.subscribed.is_set():
            problem = self.client.last_error or "connecting"
            return f"not subscribed to a Mesos master yet: {problem}"
        pending = self.hold.pending
        if not pending and self._accept_failure is None:
            return ""
        text = f"{len(self.tasks.placed)} placed, {len(pending)} waiting for offers"
        if self._accept_failure is not None:
            # Reported until an ACCEPT goes through: between refusals the
            # tasks are placed again, and would look as if all were well.
            count, problem = self._accept_failure
            text += f" ({count} sent back after their ACCEPT failed: {problem})"
        if not pending:
            return text
        if self.hold.held:
            text += f"; {self.hold.fit_held().shortfall()}"
        elif self.hold.shortfall:
            text += f"; {self.hold.shortfall}"
        if self.hold.backing_off:
            text += "; the offers held were given back, for another job to use, and are asked for again soon"
        waiting = pending[0].task
        text += f"; {waiting.name} needs {describe_need(waiting)}"
        self._note_wait(waiting)
        draining = all_draining(waiting, self._agents)
        if draining is not None:
            return text + f"; {draining}"
        if self._largest_offer is None:
            return text + "; no offer received yet"
        offer = self._largest_offer
        return (
            text
            + f"; the largest offer seen was {offer.summary()} on {offer.offer.get('hostname')}"
        )

    def _note_wait(self, waiting: TaskSpec) -> None:
        """Say once, when tasks have waited long and the job has no
        --timeout, how long, what is known of whether they ever can be held,
        and that --timeout exists: the periodic progress line alone would
        repeat forever."""
        if self._wait_noted or self._waiting_since is None or self.spec.start_timeout is not None:
            return
        waited = asyncio.get_running_loop().time() - self._waiting_since
        if waited < WAIT_NOTE_AFTER:
            return
        self._wait_noted = True
        if self._agents_held:
            known = "an agent registered with the master could hold it, once it has room"
        else:
            why = self._agents_unknown or "the master's agent list has not come"
            known = f"whether any agent could ever hold it is not known ({why})"
        logger.warning(
            "Mesos: %s has waited %.0fs for an offer that holds it; %s. tfrun waits for as "
            "long as it takes: give --timeout SECONDS to give up instead",
            waiting.name,
            waited,
            known,
        )

    # -- the agents --------------------------------------------------------

    async def _watch_agents(self) -> None:
        """End the job, as a request that can never be met, when no agent
        registered with the master could ever hold one of its tasks
        (:mod:`tfmesos.mesos.agents`); checked once subscribed, for each
        shape of task handed to the backend. While no agent has registered,
        or the master gives no list, it asks again every AGENTS_RECHECK
        seconds (an agent may register any moment); a list refused (an
        authenticating master that does not let the framework's principal
        see it) is not asked for again: the job waits, as before, and says so."""
        checked: set[tuple[float, float, int]] = set()
        while not (self._closing or self._failed):
            await self.client.subscribed.wait()
            self._shape_added.clear()
            unchecked = {k: v for k, v in self._shapes.items() if k not in checked}
            if not unchecked and not self.hold.pending and not self._gang:
                self._agents = []
                await self._shape_added.wait()
                continue
            status, text = await self._agent_list()
            if self._closing or self._failed:
                return
            if status is None:
                self._agents_unknown = text
                await asyncio.sleep(AGENTS_RECHECK)
                continue
            if status != 200:
                self._agents_unknown = f"the master refused its agent list: {status} {text}"
                logger.debug("Mesos: %s", self._agents_unknown)
                return
            try:
                agents = agent_totals(json.loads(text), self.roles)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                self._agents_unknown = f"the master's agent list could not be read: {exc}"
                return
            if not agents:
                self._agents_unknown = "no agent has registered with the master yet"
                await asyncio.sleep(AGENTS_RECHECK)
                continue
            self._agents_unknown = None
            self._agents = agents
            if self._never_held(agents, unchecked, checked):
                return
            # While tasks wait, look again soon: for drains, and for the
            # agents --wait-for-agents waits for.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._shape_added.wait(), AGENTS_RECHECK)

    def _never_held(
        self,
        agents: list[AgentTotal],
        unchecked: dict[tuple[float, float, int], TaskSpec],
        checked: set[tuple[float, float, int]],
    ) -> bool:
        """Whether the job ends because ``agents`` could never hold one of its
        tasks, or all of its first round at once; with ``--wait-for-agents``
        it waits instead, saying why once, and looks again (not ``checked``)."""
        reasons = []
        for shape, task in unchecked.items():
            why = never_held(task, agents, self.roles)
            if why is None:
                checked.add(shape)
            else:
                reasons.append(why)
        gang = self._gang or []
        together = never_held_together(gang, agents) if not reasons else None
        if together is not None:
            reasons.append(together)
        elif gang and not reasons:
            self._gang = []  # it might fit: not looked at again
        if not reasons:
            self._agents_held = True
            return False
        if not self.options.wait_for_agents:
            self._fail(ResourceError(f"{reasons[0]} (--wait-for-agents waits for more agents)"))
            return True
        for why in reasons:
            if why not in self._never_said:
                self._never_said.add(why)
                logger.warning("Mesos: %s: waiting for more agents (--wait-for-agents)", why)
        return False

    async def _agent_list(self) -> tuple[int | None, str]:
        """The master's answer to GET_AGENTS (status, text), or (None, why not)."""
        try:
            status, text = await self.client.operator_call(AGENTS_CALL, AGENTS_TIMEOUT)
        except (TransportError, OSError, asyncio.TimeoutError) as exc:
            return None, f"the master's agent list did not come: {str(exc) or type(exc).__name__}"
        return status, text if status == 200 else " ".join(text[:200].split())

    # -- decisions -----------------------------------------------------------

    def _for_agents(self) -> bool:
        """Whether tasks wait for their own agent's offer (a relaunch for its
        port, tasks for a launch slot), which keeps offers coming."""
        return bool(self.pins) or bool(self.pacer)

    def _apply(self, decisions: list[Decision]) -> None:
        """Carry out what the hold or the pacer decided, in its order."""
        loop = asyncio.get_running_loop() if decisions else None
        for decision in decisions:
            if isinstance(decision, Accept):
                # At most the agent's free launch slots now (.pacing).
                placed, refuse = self.pacer.admit(decision.offer, decision.placed)
                if placed:
                    self._launch_on(decision.offer, placed, min(refuse, decision.refuse_seconds))
                else:
                    self._call(calls.decline(decision.offer["id"], refuse))
            elif isinstance(decision, Decline):
                self._call(calls.decline(decision.offer_id, decision.refuse_seconds))
            elif isinstance(decision, Suppress):
                self._call(calls.suppress(self.roles))
            elif isinstance(decision, Revive):
                self._revive()
            elif isinstance(decision, StartHold):
                assert loop is not None
                self._hold_expiry = loop.call_later(decision.seconds, self._hold_expired)
            elif isinstance(decision, StopHold):
                if self._hold_expiry is not None:
                    self._hold_expiry.cancel()
                    self._hold_expiry = None
            elif isinstance(decision, StartBackoff):
                assert loop is not None
                self._backoff = loop.call_later(decision.seconds, self._backoff_over)

    def _hold_expired(self) -> None:
        self._hold_expiry = None
        if self._closing:
            self.hold.holding = False
            return
        self._apply(self.hold.hold_expired(self._for_agents()))

    def _backoff_over(self) -> None:
        self._backoff = None
        if not self._closing:
            self._apply(self.hold.backoff_over())

    # -- calls ---------------------------------------------------------------

    # Every call is handed to the client the moment it is decided, in order
    # (client.submit; the order they go out in: tfmesos.mesos.calls).

    def _revive(self) -> None:
        """Ask for offers again, until the master takes the call: tasks wait
        on it, and nothing else would ever ask again."""
        self.hold.suppressed = False
        if self._reviving is not None:
            self._reviving.cancel()  # this REVIVE supersedes its retries
        self._send_revive(REVIVE_BACKOFF.first)

    def _send_revive(self, delay: float) -> None:
        future = self._submit(calls.revive(self.roles))
        if future is not None:
            self._reviving = self._track(self._revive_outcome(future, delay))

    async def _revive_outcome(self, future: asyncio.Future[str | None], delay: float) -> None:
        problem = await self._outcome(future)
        if problem is None or self._closing or self.hold.suppressed or self._failed:
            return
        logger.warning("Mesos: REVIVE call failed: %s; again in %.0fs", problem, delay)
        await asyncio.sleep(delay)
        if not self._closing and not self.hold.suppressed:
            self._send_revive(REVIVE_BACKOFF.following(delay))

    def _submit(self, call: dict[str, Any]) -> asyncio.Future[str | None] | None:
        if self._closing and call.get("type") != "KILL":
            return None
        return self.client.submit(call)

    def _track(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coroutine)
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        return task

    def _call(self, call: dict[str, Any]) -> None:
        future = self._submit(call)
        if future is not None:
            self._track(self._report(call, future))

    async def _report(self, call: dict[str, Any], future: asyncio.Future[str | None]) -> None:
        problem = await self._outcome(future)
        if problem is not None and not self._failed:
            # What depends on the call recovers by itself: the stream's own
            # failure handling re-subscribes and reconciles; offers come back.
            logger.warning("Mesos: %s call failed: %s", call.get("type"), problem)

    async def _outcome(self, future: asyncio.Future[str | None]) -> str | None:
        """Why the master did not take a call, or None. A call it calls
        malformed (a bug of ours) fails the backend."""
        try:
            # Shielded: a watcher cancelled (a REVIVE superseded, the backend
            # closing) leaves the call itself in the client's queue.
            return await asyncio.shield(future)
        except Exception as exc:
            # Not None, which says the master took the call.
            return self._fail(exc)

    def _fail(self, exc: Exception) -> str:
        """Report that the backend can no longer run the job because of
        ``exc``; return what is said. A failure tfmesos foresaw (a
        TFMesosError: the master lost, a call refused) is said in its words,
        its traceback at debug (-v); anything else is a bug, and its
        traceback is part of what the user sees, to report it."""
        logger.debug("the Mesos backend failed", exc_info=exc)
        if isinstance(exc, TFMesosError):
            message = str(exc)
        else:
            trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            message = f"{type(exc).__name__}: {exc} (a bug in tfmesos)\n{trace.rstrip()}"
        self._failed = True
        assert self._sink is not None
        status = exc.exit_status if isinstance(exc, TFMesosError) else EXIT_TFRUN_FAILED
        self._sink(BackendFailed(message, status))
        return message

    # -- events ------------------------------------------------------------

    def _on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "SUBSCRIBED":
            self._on_subscribed(event["subscribed"])
        elif kind == "OFFERS":
            self._on_offers(event.get("offers", {}).get("offers", []))
        elif kind == "UPDATE":
            self._on_update(event["update"]["status"])
        elif kind == "FAILURE":
            self._on_failure(event.get("failure", {}))
        elif kind == "ERROR":
            assert self._sink is not None
            message = event.get("error", {}).get("message", "no message")
            self._sink(BackendFailed(f"the Mesos master sent an ERROR: {message}"))
        elif kind == "RESCIND":
            # An offer rescinded after an ACCEPT makes its tasks
            # TASK_DROPPED/LOST, which the relaunch path handles.
            offer_id = event.get("rescind", {}).get("offer_id", {}).get("value")
            logger.debug("Mesos: offer %s rescinded", offer_id)
            self.hold.rescinded(str(offer_id))
            self.pacer.rescinded(str(offer_id))

    def _on_subscribed(self, subscribed: dict[str, Any]) -> None:
        framework_id = subscribed.get("framework_id", {}).get("value")
        report = self._subscriptions.subscribed(str(framework_id))
        if report is not None:
            self._track(report)
        if self._resubscribed:
            # We may have missed updates while away: ask for the current state.
            # Tasks written off as unreachable are asked about too: one that
            # turns out to be running is then killed (PlacedTasks.update).
            self._reconciliation.start(self.tasks.unsettled())
            # A SUBSCRIBE replaces the framework's suppressed roles with its
            # own (none here: Master::_subscribe, updateFramework): the roles
            # are offered again, and declined for an hour each, unless
            # suppressed anew below.
            self.hold.suppressed = False
        first = not self._resubscribed
        self._resubscribed = True
        self._apply(self.hold.resubscribed())
        self.pacer.resubscribed()
        if self.hold.pending or self._for_agents():
            # A new framework is offered everything already: nothing is
            # suppressed or filtered yet, so only a re-subscription asks.
            if not first:
                self._apply(self.hold.revive())
        else:
            self._apply(self.hold.suppress_if_idle(self._for_agents()))

    def _attached(self, event: BackendAttached) -> None:
        assert self._sink is not None
        self._sink(event)

    def _on_offers(self, offers: list[dict[str, Any]]) -> None:
        for offer in offers:
            capacity = OfferCapacity.of(offer)
            if self._largest_offer is None or capacity.total("cpus") > self._largest_offer.total(
                "cpus"
            ):
                self._largest_offer = OfferCapacity.of(offer)
            if self._unreachable_from(offer):
                continue
            if self.pins:
                pinned = self.pins.place(offer, capacity)
                if pinned:
                    self._launch_on(offer, pinned)  # the rest of the offer is declined
                    continue
            paced = self.pacer.offered(offer)
            if paced is not None:
                self._paced(*paced)
                continue
            self._apply(self.hold.offered(offer, capacity, self._for_agents()))
        self._paced(*self.pacer.overdue())
        self._apply(self.hold.place())
        self._apply(self.hold.suppress_if_idle(self._for_agents()))

    def _launch_on(
        self,
        offer: dict[str, Any],
        placed: list[tuple[Launch, list[dict[str, Any]], int]],
        refuse_seconds: float = DECLINE_SECONDS,
    ) -> None:
        """Accept ``offer`` with one LAUNCH of the tasks placed on it: each
        task with the resources and the port it takes of the offer; the rest
        of the offer filtered for ``refuse_seconds``."""
        task_infos = []
        for launch, resources, port in placed:
            task_infos.append(
                task_info(launch, self.spec, self.options, offer, resources, port, self.user)
            )
            self.tasks.add(launch, offer["agent_id"]["value"], offer.get("hostname", ""))
            assert self._sink is not None
            self._sink(TaskPlaced(launch.task_id, offer.get("hostname", "")))
        future = self._submit(calls.accept(offer["id"], task_infos, refuse_seconds))
        if future is not None:
            self._track(self._accept(future, offer["id"], [launch for launch, _, _ in placed]))

    def _paced(self, decisions: list[Decision], back: list[Launch]) -> None:
        """Carry out the pacer's decisions; tasks it let go wait for any offer."""
        self._apply(decisions)
        if back:
            logger.debug(
                "Mesos: %d tasks waiting for their agent now wait for any offer", len(back)
            )
            self.hold.requeue(back)
            self._apply(self.hold.revive())

    def _unreachable_from(self, offer: dict[str, Any]) -> bool:
        """A task on another host could not dial a loopback name: fail the job
        rather than hand one out."""
        agent_host = str(offer.get("hostname", ""))
        if not is_loopback_name(self.host) or is_loopback_name(agent_host):
            return False
        assert self._sink is not None
        self._sink(
            BackendFailed(
                f"the tasks would dial this machine as {self.host!r}, a loopback name that "
                f"agent {agent_host} cannot reach: set TFMESOS_ADVERTISE_HOST to this "
                "machine's name or address on the cluster's network"
            )
        )
        return True

    async def _accept(
        self, future: asyncio.Future[str | None], offer_id: dict[str, Any], launches: list[Launch]
    ) -> None:
        try:
            problem = await asyncio.shield(future)
        except SchedulerError as exc:
            # A 400 here is not our call being wrong for good: a master also
            # answers 400 to a call made on a stream it has just replaced.
            problem = str(exc)
        except Exception as exc:
            self._fail(exc)
            return
        if problem is None:
            self._accept_failure = None
            return
        if self._closing:
            return
        # The master did not launch them (or, when no answer came, may not
        # have): they wait for another offer. Should the master have launched
        # them after all, their second launch is refused as a duplicate ID,
        # which ends as any failed launch does. A task killed meanwhile stays
        # placed: the answer to its KILL ends it.
        back = []
        for launch in launches:
            placed = self.tasks.placed.get(launch.task_id)
            if placed is None or placed.ended or placed.killed:
                continue
            del self.tasks.placed[launch.task_id]
            pin = self.pins.not_launched(launch.task_id)
            if pin is not None:
                self._pin(pin)  # back to waiting for its agent and port
                continue
            back.append(launch)
        if not back:
            return
        # Said once per cause: a master that keeps refusing would otherwise
        # fill the log at its allocation rate; progress() keeps reporting it.
        repeated = self._accept_failure is not None and self._accept_failure[1] == problem
        self._accept_failure = (len(back), problem)
        logger.log(
            logging.DEBUG if repeated else logging.WARNING,
            "Mesos: the ACCEPT that launches %s failed (%s); they wait for another offer",
            ", ".join(launch.task.name for launch in back),
            problem,
        )
        self.hold.requeue(back)
        # Give the offer back, unfiltered, in case the master still holds it
        # for us: on a one-agent cluster no other offer could come.
        self._call(calls.decline(offer_id, 0))
        self._apply(self.hold.revive())

    def _on_update(self, status: dict[str, Any]) -> None:
        if "uuid" in status:
            self._call(calls.acknowledge(status))
        self._reconciliation.answered(status.get("task_id", {}).get("value"))
        ended, kill = self.tasks.update(status)
        if kill is not None:
            self._call(kill)
        placed = self.tasks.placed.get(status.get("task_id", {}).get("value"))
        if placed is not None and self.pacer and status.get("state") != "TASK_STAGING":
            self._paced(*self.pacer.progressed(placed.agent_id))
        if ended is not None:
            assert self._sink is not None
            self._sink(ended)

    def _on_failure(self, failure: dict[str, Any]) -> None:
        agent_id = failure.get("agent_id", {}).get("value")
        if "executor_id" in failure or agent_id is None:
            return
        logger.warning("Mesos: agent %s was lost", agent_id)
        self._paced([], self.pacer.agent_lost(agent_id))
        for ended in self.tasks.agent_lost(agent_id):
            assert self._sink is not None
            self._sink(ended)
        # A relaunch waiting for this agent's offer of its port would wait out
        # PINNED_OFFER_WAIT for an agent the master has just given up on: it
        # ends now, naming the loss, rather than a minute later naming a
        # missing offer.
        for pin in self.pins.on_agent(agent_id):
            self._not_placed(pin, f"its agent ({agent_id}) was lost, and port {pin.port} with it")
