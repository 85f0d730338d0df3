"""The Mesos backend: tasks placed on a Mesos cluster's offers.

What the framework does with events lives here; talking to the master lives in
:mod:`tfmesos.mesos.scheduler`; fitting tasks into offers in
:mod:`tfmesos.mesos.placement`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import getpass
import logging
import os
import random
import sys
import time
import traceback
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfmesos import runs, wire
from tfmesos.advertise import is_loopback_name
from tfmesos.aio import reap
from tfmesos.backends.base import (
    NOT_PLACED,
    Backend,
    BackendFailed,
    BackendOptions,
    EventSink,
    Launch,
    TaskEnded,
    TaskPlaced,
    advertised_host,
)
from tfmesos.backends.mesos_options import MesosOptions, framework_credentials
from tfmesos.errors import EXIT_TFRUN_FAILED, SpecError, TFMesosError
from tfmesos.mesos.placement import GangFit, OfferCapacity, describe_need
from tfmesos.mesos.scheduler import (
    DEFAULT_HEARTBEAT_SECONDS,
    MISSED_HEARTBEATS,
    SchedulerClient,
    SchedulerError,
)
from tfmesos.mesos.states import TaskState, describe_update, exit_status
from tfmesos.mesos.tasklogs import TaskLogs
from tfmesos.spec import ClusterSpec, TaskSpec, Volume

__all__ = ["MesosBackend", "MesosOptions", "framework_capabilities", "task_info"]

logger = logging.getLogger("tfmesos")

DECLINE_SECONDS = 5.0
"""Refuse filter on offers we cannot use while tasks are still pending."""
DECLINE_IDLE_SECONDS = 3600.0
"""...and once every task is placed (SUPPRESS is sent too)."""
FAILOVER_TIMEOUT = 60.0
"""The least time the master keeps our tasks if the launcher vanishes without
TEARDOWN (see failover_timeout_for)."""


def failover_timeout_for(reconnect_timeout: float) -> float:
    """The framework's ``failover_timeout``: longer than the launcher may go on
    trying to regain the master. The master's clock starts when it loses the
    framework's connection (``Master::disconnect``, then ``failoverFramework``
    removes the framework and kills its tasks once it runs out); the
    launcher may notice only five missed heartbeats later, and then keeps
    re-subscribing for ``reconnect_timeout``. A shorter failover timeout
    would have the tasks killed while tfrun still says it is re-subscribing."""
    noticing = MISSED_HEARTBEATS * DEFAULT_HEARTBEAT_SECONDS
    return max(FAILOVER_TIMEOUT, noticing + reconnect_timeout + DEFAULT_HEARTBEAT_SECONDS)


REVIVE_RETRY_MAX = 15.0
"""The longest wait between tries of a REVIVE the master refused."""
RECONCILE_FIRST_WAIT = 2.0
"""How long the answers to a RECONCILE are waited for before the tasks not
yet answered are asked about again, the wait doubling each time
(docs/reconciliation.md in Mesos: "retry with exponential backoff until all
tasks are answered")."""
RECONCILE_MAX_WAIT = 60.0
GANG_HOLD_SECONDS = 5.0
"""How long offers that fit part of the job are held, waiting for the rest
(stretched at random by up to half again, so that two jobs holding halves of
a cluster do not give them back in step)."""
GANG_BACKOFF_SECONDS = 1.0
GANG_BACKOFF_MAX = 30.0
"""After giving held offers back, the job asks for offers again after this,
doubling each time the job still does not fit, up to the max, at random
between half and one and a half times that."""
PINNED_OFFER_WAIT = 60.0
"""How long a task relaunched at its address (``launch_at``: fine-grained mode
keeps a dead worker's address) waits for an offer from its agent that holds
its port. The master offers a task's resources again once the task is over
(``Master::updateTask`` recovers them when it turns terminal,
``src/master/master.cpp``); another framework may take the port first, or the
agent may be gone."""
GPU_AGENT_GRACE = 10.0
"""How long a task that needs no GPU waits for an agent without GPUs before it
takes room on one that has them (``docs/gpu-support.md``: GPU agents are to be
kept for the tasks that need them)."""


@dataclass
class _Placed:
    launch: Launch
    agent_id: str
    host: str
    ended: bool = False
    """The job has written the task off (its end reported to the launcher)."""
    settled: bool = False
    """Mesos has said the task is over for good (a terminal state); until
    then a task written off as unreachable may come back."""
    killed: bool = False
    strays_killed: int = 0
    """KILLs sent for this task after it was reported gone and came back."""


@dataclass
class _Pin:
    """A task that must run on one agent at one port: a relaunch at its address."""

    launch: Launch
    agent_id: str
    host: str
    port: int
    expiry: asyncio.TimerHandle | None = None


def framework_capabilities(spec: ClusterSpec) -> list[dict[str, str]]:
    """MULTI_ROLE always; PARTITION_AWARE, so that an agent that loses contact
    makes its tasks TASK_UNREACHABLE (and a returning task is seen, not silently
    revived: ``docs/high-availability-framework-guide.md``); GPU_RESOURCES only
    when a task asks for GPUs, since a framework that claims it is offered GPU
    agents, which ``docs/gpu-support.md`` keeps for GPU work."""
    capabilities = [{"type": "MULTI_ROLE"}, {"type": "PARTITION_AWARE"}]
    if any(job.gpus for job in spec.jobs):
        capabilities.append({"type": "GPU_RESOURCES"})
    return capabilities


def _volumes(options: MesosOptions) -> list[dict[str, Any]]:
    return [
        {
            "host_path": v.host_path,
            "container_path": v.container_path,
            "mode": "RO" if v.read_only else "RW",
        }
        for v in options.volumes
    ]


def task_info(
    launch: Launch,
    spec: ClusterSpec,
    options: MesosOptions,
    offer: dict[str, Any],
    resources: list[dict[str, Any]],
    port: int,
    user: str | None,
) -> dict[str, Any]:
    """The ``TaskInfo`` (Mesos JSON) that runs ``launch``'s agent on ``offer``,
    in ``options``' container (image, volumes) if any."""
    env = dict(launch.env)
    env[wire.ENV_HOST] = offer["hostname"]
    env[wire.ENV_PORT] = str(port)
    python = "python3" if options.image else sys.executable
    info: dict[str, Any] = {
        "name": f"{spec.name[:60]} {launch.task.target}",
        "task_id": {"value": launch.task_id},
        "agent_id": {"value": offer["agent_id"]["value"]},
        "resources": resources,
        "command": {
            "shell": True,
            "value": f"exec {python} -m tfmesos.agent",
            "environment": {"variables": [{"name": k, "value": v} for k, v in sorted(env.items())]},
        },
    }
    if user is not None:
        info["command"]["user"] = user
    if not options.image and options.volumes:
        # The Mesos containerizer mounts host paths without an image too
        # (filesystem/linux for absolute container paths, filesystem/posix
        # for ones relative to the sandbox): docs/container-volumes.md.
        info["container"] = {"type": "MESOS", "volumes": _volumes(options)}
    if options.image:
        volumes = [
            {"host_path": path, "container_path": path, "mode": "RO"}
            for path in ("/etc/passwd", "/etc/group")
        ] + _volumes(options)
        if options.containerizer == "DOCKER":
            info["container"] = {
                "type": "DOCKER",
                "docker": {
                    "image": options.image,
                    "network": "HOST",
                    "force_pull_image": options.force_pull_image,
                },
                "volumes": volumes,
            }
        else:
            info["container"] = {
                "type": "MESOS",
                "mesos": {
                    "image": {
                        "type": "DOCKER",
                        "docker": {"name": options.image},
                        # "cached" is the opposite of "force pull".
                        "cached": not options.force_pull_image,
                    }
                },
                "volumes": volumes,
            }
    return info


class MesosBackend(Backend):
    name = "mesos"
    keeps_addresses = True
    options_type = MesosOptions

    def __init__(
        self,
        spec: ClusterSpec,
        *,
        master: str | None = None,
        failover_timeout: float | None = None,
        reconnect_timeout: float = 120.0,
        connect_timeout: float = 10.0,
        principal: str | None = None,
        secret: str | None = None,
        checkpoint: bool = True,
        user: str | None = None,
        role: str | None = None,
        volumes: Sequence[Volume] = (),
        containerizer: str | None = None,
        image: str | None = None,
        force_pull_image: bool = False,
        secret_file: str | None = None,
        ssl_ca: str | None = None,
        log_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(spec)
        self.options = MesosOptions(
            master=master,
            reconnect_timeout=reconnect_timeout,
            connect_timeout=connect_timeout,
            checkpoint=checkpoint,
            user=user,
            role=role,
            volumes=tuple(volumes),
            containerizer=containerizer,
            image=image,
            force_pull_image=force_pull_image,
            principal=principal,
            secret_file=secret_file,
            ssl_ca=ssl_ca,
        )
        """What the user chose (checked): the tasks' container, role and user."""
        self.options.check_spec(spec)
        master = master or os.environ.get("MESOS_MASTER")
        if not master:
            raise SpecError("the mesos backend needs a master: -m HOST:5050 or MESOS_MASTER")
        if user is not None and (not user or any(c.isspace() for c in user)):
            raise SpecError(f"--user must be a user name, not {user!r}")
        self.user = user or getpass.getuser()
        """Who the tasks run as: agents switch to this user (their default
        --switch_user) and fail a task whose user they do not have."""
        self.host = advertised_host()
        roles = [role or "*"]
        framework: dict[str, Any] = {
            "user": self.user,
            "name": spec.name,
            "hostname": self.host,
            "roles": roles,
            "failover_timeout": (
                failover_timeout_for(reconnect_timeout)
                if failover_timeout is None
                else failover_timeout
            ),
            # Agents keep checkpointed tasks running across their own restarts.
            "checkpoint": checkpoint,
            "capabilities": framework_capabilities(spec),
        }
        # Flags, else $MESOS_PRINCIPAL and $MESOS_SECRET; the secret is kept
        # by the transport only, never on self or in a message.
        principal, secret = framework_credentials(principal, secret, secret_file)
        if principal:
            framework["principal"] = principal
        self.roles = roles
        self.framework_info = framework
        self.client = SchedulerClient(
            master,
            framework,
            self._on_event,
            reconnect_timeout=reconnect_timeout,
            connect_timeout=connect_timeout,
            auth=(principal, secret) if principal and secret else None,
            ssl_ca=ssl_ca,
        )
        self.log_dir = Path(log_dir) if log_dir else runs.new_run_dir()
        """Where every task's output is kept on this machine, as it reaches
        the launcher (the chief's log too: run.py puts it here)."""
        self._own_run = not log_dir
        """The run directory is this backend's own, let go when it closes."""
        self._logs = TaskLogs(self.log_dir, runs.task_log_max())
        self._web_ui: str | None = None
        """The master's web UI, once the master has shown it serves one."""
        self._sink: EventSink | None = None
        self._pending: list[Launch] = []
        self._handed_tasks = False
        """Whether the launcher has handed this backend a task yet. Offers that
        come before are held for the tasks about to come: the subscription can
        beat the launcher's first launches (the chief's local backend starts
        between the two, waiting for its fork server), and offers declined then
        would be filtered for an hour, the role suppressed, and offers asked
        for again once the tasks came."""
        self._waiting_since: dict[str, float] = {}
        """When each pending task began to wait (for GPU_AGENT_GRACE)."""
        self._placed: dict[str, _Placed] = {}
        self._suppressed = False
        self._largest_offer: OfferCapacity | None = None
        self._runner: asyncio.Task[None] | None = None
        self._calls: set[asyncio.Task[None]] = set()
        self._resubscribed = False
        self._reviving: asyncio.Task[None] | None = None
        self._unanswered: set[str] = set()
        """The tasks asked about in a RECONCILE whose state has not come since."""
        self._reconciling: asyncio.Task[None] | None = None
        self._closing = False
        self._failed = False
        """The backend reported it can no longer run the job (_fail)."""
        self._accept_failure: tuple[int, str] | None = None
        """How many tasks the last failed ACCEPT sent back to waiting, and why
        it failed; cleared when an ACCEPT succeeds."""
        self._held: dict[str, dict[str, Any]] = {}
        """Offers held for the gang, by offer ID: each fits some task that is
        waiting, but all of them together do not yet fit every such task."""
        self._fit: GangFit | None = None
        """The waiting tasks' fit over the held offers, as last brought up to
        date (_fit_held)."""
        self._hold_expiry: asyncio.TimerHandle | None = None
        self._backoff: asyncio.TimerHandle | None = None
        self._give_backs = 0
        """Times in a row the held offers were given back without the job fitting."""
        self._gang_shortfall = ""
        """What the offers last given back lacked, said by progress() while
        no offer is held."""
        self._random = random.Random()
        self._pins: dict[str, _Pin] = {}
        """Tasks waiting for an offer from their agent that holds their port."""
        self._pins_placed: dict[str, _Pin] = {}
        """Pinned tasks launched: pinned again should their ACCEPT fail."""

    @classmethod
    def from_options(cls, spec: ClusterSpec, options: BackendOptions) -> MesosBackend:
        assert isinstance(options, MesosOptions), options
        fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
        return cls(spec, **fields)

    # -- Backend ---------------------------------------------------------

    @property
    def rendezvous_host(self) -> str:
        # Looked up once: the launcher asks for it at every launch.
        return self.host

    def unkept_logs(self) -> list[str]:
        return list(self._logs.unkept)

    def logs_location(self) -> str:
        return str(self.log_dir)

    def unseen_output_location(self) -> str:
        where = f", in the Mesos web UI at {self._web_ui}" if self._web_ui else ""
        return f"its sandbox on its host (stdout and stderr{where})"

    def task_output(self, task_id: str, data: bytes) -> None:
        placed = self._placed.get(task_id)
        self._logs.write(task_id, data, name=placed.launch.task.name if placed else task_id)

    async def start(self, sink: EventSink) -> None:
        self._sink = sink
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpecError(
                f"cannot use {self.log_dir} for the tasks' logs: {exc.strerror}"
            ) from None
        self._runner = asyncio.create_task(self._run())

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
        self._handed_tasks = True
        self._pending.append(launch)
        self._waiting_since[launch.task_id] = time.monotonic()
        if self._suppressed and self._backoff is None:
            self._revive()

    async def launch_many(self, launches: Sequence[Launch]) -> None:
        for launch in launches:
            await self.launch(launch)
        if self._held and self._pending:
            # Offers held before the launcher handed over these tasks: those
            # that fit none of them go back, the rest may fit the whole gang.
            self._decline_unfit()
            self._place_gang()
            self._suppress_if_idle()

    async def launch_at(self, launch: Launch, earlier: str, port: int) -> None:
        placed = self._placed.get(earlier)
        if placed is None:
            assert self._sink is not None
            self._sink(
                TaskEnded(launch.task_id, NOT_PLACED, None, "its earlier attempt was never placed")
            )
            return
        logger.debug("Mesos: %s waits for port %d on %s", launch.task.name, port, placed.host)
        self._pin(_Pin(launch, placed.agent_id, placed.host, port))

    def _pin(self, pin: _Pin) -> None:
        pin.expiry = asyncio.get_running_loop().call_later(
            PINNED_OFFER_WAIT, self._pin_expired, pin.launch.task_id
        )
        self._pins[pin.launch.task_id] = pin
        # Also lifts the filters of offers declined while every task ran.
        self._revive()

    def _pin_expired(self, task_id: str) -> None:
        pin = self._pins.get(task_id)
        if pin is None or self._closing:
            return
        self._not_placed(
            pin,
            f"no offer from its agent ({pin.agent_id}) held port {pin.port} within "
            f"{PINNED_OFFER_WAIT:g}s",
        )

    def _not_placed(self, pin: _Pin, why: str) -> None:
        """The relaunch ``pin`` waits for will not be placed: it ends, saying ``why``."""
        self._unpin(pin.launch.task_id)
        assert self._sink is not None
        self._sink(TaskEnded(pin.launch.task_id, NOT_PLACED, None, why, pin.host))

    def _unpin(self, task_id: str) -> None:
        pin = self._pins.pop(task_id, None)
        if pin is not None and pin.expiry is not None:
            pin.expiry.cancel()

    async def kill(self, task_id: str) -> None:
        self._unpin(task_id)
        self._pending = [p for p in self._pending if p.task_id != task_id]
        placed = self._placed.get(task_id)
        if placed is not None and not placed.ended:
            placed.killed = True
            self._call(
                {
                    "type": "KILL",
                    "kill": {"task_id": {"value": task_id}, "agent_id": {"value": placed.agent_id}},
                }
            )

    async def close(self) -> None:
        self._closing = True
        self._pending.clear()
        for task_id in list(self._pins):
            self._unpin(task_id)
        self._cancel_hold()
        if self._backoff is not None:
            self._backoff.cancel()
            self._backoff = None
        if self._reviving is not None:
            self._reviving.cancel()
        if self._reconciling is not None:
            self._reconciling.cancel()
        if self._calls:
            # One bound for them all: a call may wait on those before it.
            await asyncio.wait(set(self._calls), timeout=5)
        await self.client.close(teardown=True)
        if self._runner is not None:
            self._runner.cancel()
            await reap(self._runner)
        self._logs.close()
        if self._own_run:
            runs.release(self.log_dir)

    def progress(self) -> str:
        if not self.client.subscribed.is_set():
            problem = self.client.last_error or "connecting"
            return f"not subscribed to a Mesos master yet: {problem}"
        if not self._pending and self._accept_failure is None:
            return ""
        text = f"{len(self._placed)} placed, {len(self._pending)} waiting for offers"
        if self._accept_failure is not None:
            # Reported until an ACCEPT goes through: between refusals the
            # tasks are placed again, and would look as if all were well.
            count, problem = self._accept_failure
            text += f" ({count} sent back after their ACCEPT failed: {problem})"
        if not self._pending:
            return text
        if self._held:
            text += f"; {self._fit_held().shortfall()}"
        elif self._gang_shortfall:
            text += f"; {self._gang_shortfall}"
        if self._backoff is not None:
            text += "; the offers held were given back, for another job to use, and are asked for again soon"
        waiting = self._pending[0].task
        text += f"; {waiting.name} needs {describe_need(waiting)}"
        if self._largest_offer is None:
            return text + "; no offer received yet"
        offer = self._largest_offer
        return (
            text
            + f"; the largest offer seen was {offer.summary()} on {offer.offer.get('hostname')}"
        )

    # -- events ------------------------------------------------------------

    # Every call is handed to the client the moment it is decided
    # (client.submit, synchronous), and the client sends them one at a time
    # in that order, as Mesos's own scheduler library does: the master applies
    # calls in arrival order, so a REVIVE overtaken by a SUPPRESS would leave
    # the role suppressed, and a late DECLINE filter an agent for an hour.

    def _revive(self) -> None:
        """Ask for offers again, until the master takes the call: tasks wait
        on it, and nothing else would ever ask again."""
        self._suppressed = False
        if self._reviving is not None:
            self._reviving.cancel()  # this REVIVE supersedes its retries
        self._send_revive(1.0)

    def _send_revive(self, delay: float) -> None:
        future = self._submit({"type": "REVIVE", "revive": {"roles": self.roles}})
        if future is not None:
            self._reviving = self._track(self._revive_outcome(future, delay))

    async def _revive_outcome(self, future: asyncio.Future[str | None], delay: float) -> None:
        problem = await self._outcome(future)
        if problem is None or self._closing or self._suppressed or self._failed:
            return
        logger.warning("Mesos: REVIVE call failed: %s; again in %.0fs", problem, delay)
        await asyncio.sleep(delay)
        if not self._closing and not self._suppressed:
            self._send_revive(min(delay * 2, REVIVE_RETRY_MAX))

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
            # A held offer is let go (the gang's fit is cut back to the offers
            # held before it when next wanted: _fit_held); an offer rescinded
            # after an ACCEPT makes its tasks TASK_DROPPED/LOST, which the
            # relaunch path handles.
            offer_id = event.get("rescind", {}).get("offer_id", {}).get("value")
            logger.debug("Mesos: offer %s rescinded", offer_id)
            self._held.pop(str(offer_id), None)

    def _on_subscribed(self, subscribed: dict[str, Any]) -> None:
        master = self.client.master
        framework_id = subscribed.get("framework_id", {}).get("value")
        if master is not None:
            logger.info("Mesos: subscribed as framework %s at %s", framework_id, master.url)
            if not self._resubscribed:
                self._track(self._show_web_ui(str(framework_id)))
        if self._resubscribed:
            # We may have missed updates while away: ask for the current state.
            # Tasks written off as unreachable are asked about too: one that
            # turns out to be running is then killed (_kill_stray).
            self._reconcile({tid: p.agent_id for tid, p in self._placed.items() if not p.settled})
            # A SUBSCRIBE replaces the framework's suppressed roles with its
            # own (none here: Master::_subscribe, updateFramework): the roles
            # are offered again, and declined for an hour each, unless
            # suppressed anew below.
            self._suppressed = False
        first = not self._resubscribed
        self._resubscribed = True
        # Offers do not outlive a subscription (the master rescinds them when a
        # framework fails over or re-subscribes: Master::_subscribe).
        self._held.clear()
        self._cancel_hold()
        if self._pending or self._pins:
            # A new framework is offered everything already: nothing is
            # suppressed or filtered yet, so only a re-subscription asks.
            if not first:
                self._revive()
        else:
            self._suppress_if_idle()

    async def _show_web_ui(self, framework_id: str) -> None:
        """Name the framework's page in the master's web UI, where the tasks'
        sandboxes are, if the master serves one (real Mesos does, at ``/``;
        the test master does not): never a link that leads nowhere."""
        self._web_ui = await self.client.web_ui()
        if self._web_ui is not None and not self._closing:
            logger.info(
                "Mesos: each task's sandbox is in the master's web UI: %s/#/frameworks/%s",
                self._web_ui,
                framework_id,
            )

    def _reconcile(self, agents: dict[str, str]) -> None:
        """Ask the master for the state of these tasks (``agents``: each
        task's agent), and again for those it has not answered, backing off,
        until it has answered them all or the subscription is renewed."""
        if self._reconciling is not None:
            self._reconciling.cancel()
            self._reconciling = None
        self._unanswered = set(agents)
        # No tasks: an implicit reconciliation, asked once.
        self._ask_state(list(agents), agents)
        if agents:
            self._reconciling = asyncio.create_task(self._reconcile_until_answered(agents))

    def _ask_state(self, asked: list[str], agents: dict[str, str]) -> None:
        tasks = [{"task_id": {"value": t}, "agent_id": {"value": agents[t]}} for t in asked]
        self._call({"type": "RECONCILE", "reconcile": {"tasks": tasks}})

    async def _reconcile_until_answered(self, agents: dict[str, str]) -> None:
        wait = RECONCILE_FIRST_WAIT
        asked = list(agents)
        while True:
            await asyncio.sleep(wait)
            asked = [t for t in asked if t in self._unanswered]
            if not asked or self._closing or self._failed:
                return
            logger.info(
                "Mesos: no answer yet to the reconciliation of %s; asking again",
                ", ".join(sorted(p.launch.task.name for t in asked if (p := self._placed.get(t)))),
            )
            self._ask_state(asked, agents)
            wait = min(wait * 2, RECONCILE_MAX_WAIT)

    # Gang placement: a job's tasks are launched together or not at all. A
    # job that took each offer as it came could hold half a cluster while
    # another job held the other half, both waiting for ever (the allocator
    # hands agents out in turn, by dominant share: hierarchical.cpp). Offers
    # that fit part of the job are held until the whole of what is waiting
    # fits; a hold that lasts GANG_HOLD_SECONDS gives them all back and asks
    # again later, at random, so that another job can run meanwhile.

    def _decline(self, offer_id: dict[str, Any], refuse_seconds: float) -> None:
        self._call(
            {
                "type": "DECLINE",
                "decline": {
                    "offer_ids": [offer_id],
                    "filters": {"refuse_seconds": refuse_seconds},
                },
            }
        )

    def _on_offers(self, offers: list[dict[str, Any]]) -> None:
        for offer in offers:
            capacity = OfferCapacity.of(offer)
            if self._largest_offer is None or capacity.total("cpus") > self._largest_offer.total(
                "cpus"
            ):
                self._largest_offer = OfferCapacity.of(offer)
            if self._unreachable_from(offer):
                continue
            if self._pins and self._place_pinned(offer, capacity):
                continue
            if self._backoff is None and (
                not self._handed_tasks
                or any(capacity.fits(self._pending[i].task) for i in self._candidates_for(capacity))
            ):
                self._held[offer["id"]["value"]] = offer
            else:
                self._decline(
                    offer["id"],
                    DECLINE_SECONDS if self._pending or self._pins else DECLINE_IDLE_SECONDS,
                )
        self._place_gang()
        self._suppress_if_idle()

    def _suppress_if_idle(self) -> None:
        """Every task handed over is placed: no more offers, until REVIVE."""
        if self._handed_tasks and not self._pending and not self._pins and not self._suppressed:
            self._suppress()

    def _suppress(self) -> None:
        self._suppressed = True
        self._call({"type": "SUPPRESS", "suppress": {"roles": self.roles}})

    def _decline_unfit(self) -> None:
        """Decline the held offers that fit no task waiting."""
        for offer_id, offer in list(self._held.items()):
            capacity = OfferCapacity.of(offer)
            if not any(
                capacity.fits(self._pending[i].task) for i in self._candidates_for(capacity)
            ):
                del self._held[offer_id]
                self._decline(offer["id"], DECLINE_SECONDS)

    def _place_pinned(self, offer: dict[str, Any], capacity: OfferCapacity) -> bool:
        """Launch the pinned tasks this offer holds the agent and port of;
        say whether it launched any (the rest of the offer is declined)."""
        agent_id = offer["agent_id"]["value"]
        launched: list[tuple[_Pin, list[dict[str, Any]]]] = []
        for pin in list(self._pins.values()):
            if pin.agent_id != agent_id or not capacity.holds_port(pin.port):
                continue
            if not capacity.fits(pin.launch.task):
                continue
            resources, _ = capacity.take(pin.launch.task, pin.port)
            self._unpin(pin.launch.task_id)
            self._pins_placed[pin.launch.task_id] = pin
            launched.append((pin, resources))
        if not launched:
            return False
        self._launch_on(offer, [(pin.launch, resources, pin.port) for pin, resources in launched])
        return True

    def _place_gang(self) -> None:
        """Launch every waiting task on the held offers if they all fit there."""
        if not self._held:
            return
        if not self._pending:
            if self._handed_tasks:
                self._give_back(DECLINE_IDLE_SECONDS)
            else:
                self._hold_for_the_rest()  # the tasks are yet to come
            return
        fit = self._fit_held()
        if not fit.complete:
            self._hold_for_the_rest()
            return
        self._cancel_hold()
        self._gang_shortfall = ""
        self._give_backs = 0
        by_offer: dict[str, list[tuple[Launch, list[dict[str, Any]], int]]] = {}
        self._fit = None
        for position, (offer, resources, port) in sorted(fit.placed.items()):
            by_offer.setdefault(offer["id"]["value"], []).append(
                (self._pending[position], resources, port)
            )
        self._pending = []
        held, self._held = self._held, {}
        for offer_id, offer in held.items():
            if offer_id not in by_offer:
                self._decline(offer["id"], DECLINE_IDLE_SECONDS)
                continue
            self._launch_on(offer, by_offer[offer_id])

    def _launch_on(
        self, offer: dict[str, Any], placed: list[tuple[Launch, list[dict[str, Any]], int]]
    ) -> None:
        """Accept ``offer`` with one LAUNCH of the tasks placed on it: each
        task with the resources and the port it takes of the offer."""
        task_infos = []
        for launch, resources, port in placed:
            task_infos.append(
                task_info(launch, self.spec, self.options, offer, resources, port, self.user)
            )
            self._placed[launch.task_id] = _Placed(
                launch, offer["agent_id"]["value"], offer.get("hostname", "")
            )
            self._waiting_since.pop(launch.task_id, None)
            assert self._sink is not None
            self._sink(TaskPlaced(launch.task_id, offer.get("hostname", "")))
        accept = {
            "type": "ACCEPT",
            "accept": {
                "offer_ids": [offer["id"]],
                "operations": [{"type": "LAUNCH", "launch": {"task_infos": task_infos}}],
                "filters": {"refuse_seconds": DECLINE_SECONDS},
            },
        }
        future = self._submit(accept)
        if future is not None:
            self._track(self._accept(future, offer["id"], [launch for launch, _, _ in placed]))

    def _fit_held(self) -> GangFit:
        """The fit of the waiting tasks over the held offers, brought up to
        date: made anew when other tasks wait or a GPU offer's candidates
        changed, cut back to the first offer no longer held, then extended by
        the offers held since. It equals a fit of every held offer from scratch
        (tests/test_mesos_backend.py checks it does)."""
        key = [launch.task_id for launch in self._pending]
        fit = self._fit
        if (
            fit is None
            or fit.key != key
            or (fit.gpu_candidates is not None and fit.gpu_candidates != self._gpu_candidates())
        ):
            fit = self._fit = GangFit([launch.task for launch in self._pending], key)
        held = list(self._held)
        kept = len(fit.offer_ids)
        if held[:kept] != fit.offer_ids:
            # Offers are only ever added at the end: one is gone (rescinded).
            kept = 0
            while kept < len(held) and held[kept] == fit.offer_ids[kept]:
                kept += 1
            fit.drop_from(kept)
        for offer_id in held[kept:]:
            capacity = OfferCapacity.of(self._held[offer_id])
            candidates = None
            if capacity.total("gpus") > 0:
                if fit.gpu_candidates is None:
                    fit.gpu_candidates = self._gpu_candidates()
                candidates = fit.gpu_candidates
            fit.add(capacity, candidates)
        return fit

    def _hold_for_the_rest(self) -> None:
        """Bound the hold of the offers held: given back if they still do not
        fit the job in GANG_HOLD_SECONDS (stretched at random)."""
        if self._hold_expiry is None:
            hold = GANG_HOLD_SECONDS * self._random.uniform(1.0, 1.5)
            self._hold_expiry = asyncio.get_running_loop().call_later(hold, self._hold_expired)

    def _cancel_hold(self) -> None:
        if self._hold_expiry is not None:
            self._hold_expiry.cancel()
            self._hold_expiry = None

    def _hold_expired(self) -> None:
        self._hold_expiry = None
        if self._closing or not self._held:
            return
        if not self._pending:
            # Held for tasks that never came (or were killed meanwhile): idle
            # until some come (launch revives), unless relaunches wait.
            self._give_back(DECLINE_SECONDS if self._pins else DECLINE_IDLE_SECONDS)
            if not self._pins and not self._suppressed:
                self._suppress()
            return
        delay = min(GANG_BACKOFF_SECONDS * 2**self._give_backs, GANG_BACKOFF_MAX)
        delay *= self._random.uniform(0.5, 1.5)
        self._give_backs += 1
        self._gang_shortfall = self._fit_held().shortfall()
        logger.info(
            "Mesos: %s; giving them back, asking again in %.1fs", self._gang_shortfall, delay
        )
        self._give_back(delay)
        # Suppressed meanwhile: the offers given back go to other frameworks
        # rather than straight back to this one.
        self._suppress()
        self._backoff = asyncio.get_running_loop().call_later(delay, self._backoff_over)

    def _backoff_over(self) -> None:
        self._backoff = None
        if not self._closing and self._pending:
            self._revive()

    def _give_back(self, refuse_seconds: float) -> None:
        self._cancel_hold()
        held, self._held = self._held, {}
        for offer in held.values():
            self._decline(offer["id"], refuse_seconds)

    def _candidates_for(self, capacity: OfferCapacity) -> list[int]:
        """Positions in ``_pending`` of the tasks that may use this offer, those
        that need GPUs first. An agent with GPUs is kept for GPU tasks: one that
        needs none takes room there only after GPU_AGENT_GRACE without a better
        offer (``docs/gpu-support.md``)."""
        if capacity.total("gpus") <= 0:
            return list(range(len(self._pending)))
        return self._gpu_candidates()

    def _gpu_candidates(self) -> list[int]:
        """_candidates_for an offer with GPUs."""
        now = time.monotonic()
        gpu_tasks = [i for i, p in enumerate(self._pending) if p.task.gpus]
        patient = [
            i
            for i, p in enumerate(self._pending)
            if not p.task.gpus and now - self._waiting_since.get(p.task_id, now) >= GPU_AGENT_GRACE
        ]
        return gpu_tasks + patient

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
            placed = self._placed.get(launch.task_id)
            if placed is None or placed.ended or placed.killed:
                continue
            del self._placed[launch.task_id]
            pin = self._pins_placed.pop(launch.task_id, None)
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
        self._pending = back + self._pending
        # Give the offer back, unfiltered, in case the master still holds it
        # for us: on a one-agent cluster no other offer could come.
        self._call(
            {
                "type": "DECLINE",
                "decline": {"offer_ids": [offer_id], "filters": {"refuse_seconds": 0}},
            }
        )
        self._revive()

    def _on_update(self, status: dict[str, Any]) -> None:
        if "uuid" in status:
            self._call(
                {
                    "type": "ACKNOWLEDGE",
                    "acknowledge": {
                        "agent_id": status.get("agent_id", {}),
                        "task_id": status["task_id"],
                        "uuid": status["uuid"],
                    },
                }
            )
        task_id = status.get("task_id", {}).get("value")
        self._unanswered.discard(task_id)
        state = TaskState.of(status)
        placed = self._placed.get(task_id)
        if placed is None or state is None:
            return
        if state.terminal:
            placed.settled = True
        if placed.ended:
            if state.alive:
                self._kill_stray(placed, status)
            return
        if not (state.terminal or state.out_of_reach):
            return
        placed.ended = True
        message = status.get("message", "")
        task = placed.launch.task
        detail = describe_update(status, task.job_name, task.mem)
        assert self._sink is not None
        self._sink(
            TaskEnded(task_id, state.value, exit_status(state, message), detail, placed.host)
        )

    def _kill_stray(self, placed: _Placed, status: dict[str, Any]) -> None:
        """A task the job has written off (unreachable, unknown, its agent
        lost) is running after all: its replacement may already be, so it
        holds resources for nothing. Kill it, as the HA guide advises."""
        if placed.strays_killed >= 3:
            return  # the master has the KILLs; it answers with the task's end
        placed.strays_killed += 1
        agent_id = status.get("agent_id", {}).get("value") or placed.agent_id
        logger.warning(
            "Mesos: task %s, reported gone, is running again on %s: killing it",
            placed.launch.task.name,
            placed.host or agent_id,
        )
        self._call(
            {
                "type": "KILL",
                "kill": {
                    "task_id": {"value": placed.launch.task_id},
                    "agent_id": {"value": agent_id},
                },
            }
        )

    def _on_failure(self, failure: dict[str, Any]) -> None:
        agent_id = failure.get("agent_id", {}).get("value")
        if "executor_id" in failure or agent_id is None:
            return
        logger.warning("Mesos: agent %s was lost", agent_id)
        for task_id, placed in self._placed.items():
            if placed.agent_id == agent_id and not placed.ended:
                placed.ended = True
                assert self._sink is not None
                self._sink(
                    TaskEnded(
                        task_id, "AGENT_LOST", None, f"agent {agent_id} was lost", placed.host
                    )
                )
        # A relaunch waiting for this agent's offer of its port would wait out
        # PINNED_OFFER_WAIT for an agent the master has just given up on: it
        # ends now, naming the loss, rather than a minute later naming a
        # missing offer.
        for pin in list(self._pins.values()):
            if pin.agent_id == agent_id:
                self._not_placed(
                    pin, f"its agent ({agent_id}) was lost, and port {pin.port} with it"
                )
