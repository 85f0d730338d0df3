"""The framework's connection to the master: subscribe, events, calls.

Policy (which master, when to reconnect, how long to try, the order of calls)
lives here; what to do with offers and updates is the backend's, and HTTP is
:mod:`tfmesos.mesos.transport`'s (a seam the tests fill). SUBSCRIBE is one long
POST streaming RecordIO events; other calls are short POSTs carrying its
``Mesos-Stream-Id``. A call made while not subscribed waits for the
subscription (Mesos's library drops it). Five heartbeat intervals without an
event, or an unreadable stream, mean the connection is dead: re-subscribe with
backoff within the budget (:mod:`tfmesos.mesos.budget`). The first tries are
logged at debug, so a master started just after tfrun is found quietly.
Protocol details: docs/mesos-protocol.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import json
import logging
import random
from collections.abc import Callable
from typing import Any

from tfmesos.common.backoff import Backoff
from tfmesos.errors import TFMesosError
from tfmesos.mesos.budget import Budget
from tfmesos.mesos.calls import MASTER_ANSWERS, CallQueue, Queued, subscribe_refused
from tfmesos.mesos.masters import (
    MasterAddress,
    follow_redirect,
    parse_masters,
    redirect_failure,
)
from tfmesos.mesos.recordio import RecordIODecoder
from tfmesos.mesos.transport import AiohttpTransport, EventStream, Transport, TransportError
from tfmesos.mesos.zookeeper import ZooKeeperError, ZooKeeperLeader

__all__ = ["MasterLostError", "SchedulerClient", "SchedulerError"]

logger = logging.getLogger("tfmesos")

API_PATH = "/api/v1/scheduler"
OPERATOR_PATH = "/api/v1"
"""The master's operator API (``docs/operator-http-api.md``)."""
MISSED_HEARTBEATS = 5
DEFAULT_HEARTBEAT_SECONDS = 15.0
"""Mesos's heartbeat interval (``DEFAULT_HEARTBEAT_INTERVAL``, src/master/constants.hpp),
until SUBSCRIBED says another."""
INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 15.0
CALL_TIMEOUT = 75.0
TEARDOWN_TIMEOUT = 10.0
SUBSCRIBED_WAIT = 5.0
"""How long a client closed with a SUBSCRIBE on its way waits for SUBSCRIBED,
whose framework id TEARDOWN needs: the master registers the framework when
the call comes, and one left unnamed stays until its failover timeout."""
SUBSCRIBE_TIMEOUT = 10.0
"""How long to wait for the headers of SUBSCRIBE's answer. A master sends them
at once (the events follow on the stream, which the heartbeat watchdog guards);
one that accepts the connection and says nothing must not hold us forever."""
ZOOKEEPER_TIMEOUT = 5.0
"""How long one attempt waits for a ZooKeeper server to answer. A server that
is up answers in milliseconds; the attempts repeat within the reconnect budget."""
STABLE_SUBSCRIPTION = 15.0
"""A subscription whose stream turns unreadable sooner than this after
SUBSCRIBED does not count as the master regained."""
CONNECT_TIMEOUT = 10.0
"""The first-contact budget: how long to try before any master has answered."""
FIRST_CONTACT_MAX_BACKOFF = 1.0
"""The longest wait between tries before any master has answered: a master
that is starting is found within a second of listening."""
WEB_UI_TIMEOUT = 3.0
"""How long the question whether the master serves a web UI may take."""

Event = dict[str, Any]


STALE_STREAM = "didn't match the stream ID currently associated"
"""The master's words (src/master/http.cpp) for a call on a replaced stream."""


class SchedulerError(TFMesosError):
    """The master refused a call in a way that retrying cannot fix."""


class MasterLostError(TFMesosError):
    """No master could be reached for longer than the reconnect budget."""


class SchedulerClient:
    """Subscribes to the leading master, hands each event to ``on_event``, and
    sends calls in order.

    ``transport`` moves the bytes (default: :class:`AiohttpTransport` with
    ``auth``); everything else is decided here. The client closes its
    transport when :meth:`run` ends. ``initial_backoff`` and ``max_backoff``
    bound the wait between attempts to subscribe.
    """

    def __init__(
        self,
        masters: str,
        framework_info: dict[str, Any],
        on_event: Callable[[Event], None],
        *,
        reconnect_timeout: float = 120.0,
        connect_timeout: float = CONNECT_TIMEOUT,
        auth: tuple[str, str] | None = None,
        ssl_ca: str | None = None,
        subscribe_timeout: float = SUBSCRIBE_TIMEOUT,
        transport: Transport | None = None,
        initial_backoff: float = INITIAL_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
    ) -> None:
        self._source = parse_masters(masters)
        self._framework_info = dict(framework_info)
        self._on_event = on_event
        self._budget = Budget(
            reconnect_timeout, connect_timeout, lambda: asyncio.get_running_loop().time()
        )
        self._subscribe_timeout = subscribe_timeout
        self._backoff = Backoff(initial_backoff, cap=max_backoff, jitter=0.2)
        self._transport: Transport = (
            transport if transport is not None else AiohttpTransport(auth, ssl_ca=ssl_ca)
        )
        self._subscribed_at = 0.0
        self._zookeeper: ZooKeeperLeader | None = None
        self._leader_changed = asyncio.Event()
        self._new_leader = False
        """ZooKeeper named a new leader since the last failed attempt: the
        backoff starts again."""
        self.master: MasterAddress | None = None
        self.framework_id: str | None = None
        self.stream_id: str | None = None
        self.subscribed = asyncio.Event()
        self._subscribing = False
        """A SUBSCRIBE was sent and neither SUBSCRIBED nor a failure came back."""
        self._unsubscribed = asyncio.Event()
        """Set whenever :attr:`subscribed` is not: a call in flight when the
        subscription is lost is given up (see :meth:`_send`)."""
        self._unsubscribed.set()
        self.heartbeat_interval = DEFAULT_HEARTBEAT_SECONDS
        self._stopped: str | None = None
        """Why :meth:`run` ended other than by :meth:`close`, once it has."""
        self._closing = False
        self._removed = False
        """The master sent ERROR: the framework is gone for good."""
        self._tearing_down = False
        self._teardown_answered = asyncio.Event()
        """Set once TEARDOWN's answer is in (or given up on): the connections
        stay open until then."""
        self.last_error = ""
        """Why the last attempt to subscribe or stay subscribed failed."""
        self._response: EventStream | None = None
        self._queue = CallQueue()
        self._queued = asyncio.Event()
        self._in_flight: dict[Queued, asyncio.Task[None]] = {}
        """The calls sent and not yet answered, each with the task sending it."""
        self._sender: asyncio.Task[None] | None = None

    # -- masters ---------------------------------------------------------

    def _where(self) -> str:
        """The masters as given, for a message (ZooKeeper's credentials left out)."""
        if isinstance(self._source, list):
            return ", ".join(master.url for master in self._source)
        return f"zk://{self._source.hosts}{self._source.path}"

    async def _candidates(self) -> list[MasterAddress]:
        if isinstance(self._source, list):
            return list(self._source)
        if self._zookeeper is None:
            loop = asyncio.get_running_loop()

            def changed(leader: MasterAddress | None) -> None:
                loop.call_soon_threadsafe(self._on_leader_change, leader)

            zookeeper = ZooKeeperLeader(self._source, changed)
            # Kept before it starts, so that shutting down mid-start stops it.
            self._zookeeper = zookeeper
            if not self.last_error:
                self.last_error = f"connecting to ZooKeeper at {self._source.hosts}"
            try:
                await asyncio.to_thread(zookeeper.start, self._budget.step_limit(ZOOKEEPER_TIMEOUT))
            except ZooKeeperError as exc:
                # A failed attempt like any other: the next one starts afresh.
                self._zookeeper = None
                await asyncio.to_thread(zookeeper.stop)
                raise _NoMaster(str(exc)) from None
        leader = self._zookeeper.leader
        return [leader] if leader else []

    def _on_leader_change(self, leader: MasterAddress | None) -> None:
        logger.info("ZooKeeper: leading master is now %s", leader.url if leader else "none")
        self._leader_changed.set()
        if leader is not None:
            self._new_leader = True
        if self._response is not None and leader != self.master:
            # A new leader: drop the stream to the old one and re-subscribe.
            self._response.close()

    # -- running ---------------------------------------------------------

    async def run(self) -> None:
        """Subscribe, and stay subscribed until :meth:`close`; raise
        :class:`MasterLostError` when no master answers for too long, on the
        first connection as on any later one."""
        self._sender = asyncio.create_task(self._send_calls())
        backoff = self._backoff.first
        self._budget.restart()
        stopped = "the scheduler client stopped"
        try:
            while not self._closing:
                malformed = False
                try:
                    await self._subscribe_and_read()
                    reason = "the event stream ended"
                except TransportError as exc:
                    reason = str(exc)
                except (asyncio.TimeoutError, OSError) as exc:
                    reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                except _NoMaster as exc:
                    reason = str(exc)
                except _MalformedStream as exc:
                    reason = str(exc)
                    malformed = True
                if self._tearing_down and not self._closing:
                    # The master ends the stream while it handles TEARDOWN,
                    # before it answers (Master::removeFramework closes the
                    # framework's connection): closing ours now would cut
                    # that answer off.
                    await self._teardown_answered.wait()
                if self._closing or self._tearing_down or self._removed:
                    # The master ends the stream on TEARDOWN, as asked, and
                    # after an ERROR, which the backend has been told of.
                    return
                now = asyncio.get_running_loop().time()
                # A stream that turned unreadable right after SUBSCRIBED was no
                # working subscription: the budget keeps running, so that a
                # master whose every stream is unreadable cannot keep us
                # trying forever.
                quickly_unreadable = malformed and now - self._subscribed_at < STABLE_SUBSCRIPTION
                if self.subscribed.is_set() and not quickly_unreadable:
                    self._budget.lost_since = now
                    backoff = self._backoff.first
                self._lose_subscription()
                self.last_error = reason
                left = self._budget.left()
                if left < 0:
                    error = MasterLostError(self._budget.gave_up(reason, self._where()))
                    stopped = str(error)
                    raise error
                if self._new_leader:
                    # A new leader is a new master to try: the backoff starts
                    # again, as the scheduler driver's does when it detects
                    # one (src/sched/sched.cpp, detected() calls
                    # doReliableRegistration(registration_backoff_factor)).
                    # A newly elected master answers 503 "Master has not
                    # finished recovery" for a few seconds; a backoff grown
                    # on the dead one (13 s) outlasted that by far.
                    self._new_leader = False
                    backoff = self._backoff.first
                # The last try comes when the budget ends, not a backoff after.
                delay = min(backoff, left)
                if self._budget.ever_answered:
                    logger.warning("Mesos: %s; re-subscribing in %.1fs", reason, delay)
                else:
                    # No master has answered yet: said once the budget is
                    # spent, in one line; a master starting meanwhile is found
                    # without a word.
                    delay = min(delay, FIRST_CONTACT_MAX_BACKOFF)
                    logger.debug("Mesos: %s; trying again in %.1fs", reason, delay)
                self._leader_changed.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._leader_changed.wait(), delay)
                # Jittered, so that many frameworks do not come back at once,
                # and capped after the jitter: never more than max_backoff.
                backoff = self._backoff.following(backoff, random.random())
        except SchedulerError as exc:
            stopped = str(exc)
            raise
        finally:
            await self._shutdown(stopped)

    def _lose_subscription(self) -> None:
        self._subscribing = False
        self.subscribed.clear()
        self._unsubscribed.set()
        self.stream_id = None

    async def _subscribe_and_read(self) -> None:
        candidates = await self._candidates()
        if not candidates:
            why = f" ({self._zookeeper.why_no_leader()})" if self._zookeeper else ""
            raise _NoMaster(f"no leading master known{why}")
        framework = dict(self._framework_info)
        call: dict[str, Any] = {"type": "SUBSCRIBE", "subscribe": {"framework_info": framework}}
        if self.framework_id:
            framework["id"] = {"value": self.framework_id}
            call["framework_id"] = {"value": self.framework_id}
        body = json.dumps(call).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        last_error = "no master answered"
        not_masters: list[str] = []
        """What each candidate answered that only a server other than a
        Mesos master answers (:func:`not_a_master`)."""
        for master in candidates:
            chain = [master]  # it, then where each redirect led
            while True:  # follow_redirect ends the redirects
                limit = self._budget.step_limit(self._subscribe_timeout)
                self._subscribing = True
                try:
                    # Bounds the wait for the answer's headers only: the body
                    # is the event stream, read below under the heartbeat
                    # watchdog.
                    response = await asyncio.wait_for(
                        self._transport.open_stream(master.url + API_PATH, body, headers), limit
                    )
                except asyncio.TimeoutError:
                    last_error = redirect_failure(
                        chain, f"no answer to SUBSCRIBE within {round(limit, 1):g}s"
                    )
                    break
                except (TransportError, OSError) as exc:
                    last_error = redirect_failure(chain, str(exc))
                    break
                # A master answered: from now on one lost is a master lost,
                # given the reconnect budget. Only a master answers so (a
                # 404 or 501 is some other web server at a wrong -m). A 307 is
                # no subscription: a standby pointing at a dead leader (or at
                # itself) would otherwise hold a wrong -m for the long budget.
                if response.status in MASTER_ANSWERS and response.status != 307:
                    self._budget.ever_answered = True
                if response.status == 307 and "Location" in response.headers:
                    response.close()
                    where = response.headers["Location"]
                    target = follow_redirect(chain, where, self._zookeeper is not None)
                    if isinstance(target, str):
                        last_error = target
                        break
                    master = target
                    logger.debug("Mesos: %s redirects to %s", chain[-2].url, master.url)
                    continue
                if response.status != 200:
                    try:
                        text = (await response.text())[:500].strip()
                    except TransportError as exc:
                        text = f"(the answer could not be read: {exc})"
                    finally:
                        response.close()
                    fatal, last_error = subscribe_refused(master.url, response.status, text)
                    if fatal:
                        raise SchedulerError(last_error)
                    not_master = not_a_master(master.url, response.status, text)
                    if not_master is not None and len(chain) == 1:
                        not_masters.append(not_master)
                    break
                if len(chain) > 1:  # said once it took SUBSCRIBE: a failure is one line
                    logger.info("Mesos: redirected to the leading master %s", master.url)
                await self._read_stream(master, response)
                return
        if (
            isinstance(self._source, list)
            and len(not_masters) == len(candidates)
            and not self._budget.ever_answered
        ):
            # Every master given answered as no master does, and none ever
            # answered as one: trying again cannot help. Not with ZooKeeper,
            # where the leader it names is a master that registered itself.
            raise SchedulerError("; ".join(not_masters))
        raise _NoMaster(last_error)

    async def _read_stream(self, master: MasterAddress, response: EventStream) -> None:
        self.master = master
        self.stream_id = response.headers.get("Mesos-Stream-Id")
        self._response = response
        decoder = RecordIODecoder()
        try:
            while True:
                timeout = self.heartbeat_interval * MISSED_HEARTBEATS
                try:
                    chunk = await asyncio.wait_for(response.read_chunk(), timeout)
                except asyncio.TimeoutError:
                    raise asyncio.TimeoutError(
                        f"no heartbeat from {master.url} for {timeout:g}s"
                    ) from None
                if not chunk:
                    return
                try:
                    for record in decoder.feed(chunk):
                        self._dispatch(json.loads(record))
                # ValueError covers RecordIOError and json's errors; the others
                # come from an event that lacks a field, or has one of the
                # wrong type, where it is handled. Either way what the master
                # sent cannot be followed: drop the stream as if it broke.
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    logger.debug("Mesos: unreadable event stream", exc_info=True)
                    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                    raise _MalformedStream(
                        f"{master.url} sent an event stream that cannot be read ({detail})"
                    ) from None
        finally:
            self._response = None
            response.close()

    def _dispatch(self, event: Event) -> None:
        kind = event.get("type")
        if kind == "SUBSCRIBED":
            subscribed = event.get("subscribed", {})
            self.framework_id = subscribed.get("framework_id", {}).get("value", self.framework_id)
            self.heartbeat_interval = float(
                subscribed.get("heartbeat_interval_seconds", DEFAULT_HEARTBEAT_SECONDS)
            )
            self._subscribed_at = asyncio.get_running_loop().time()
            self._budget.ever_subscribed = True
            self._unsubscribed.clear()
            self._subscribing = False
            self.subscribed.set()
        elif kind == "ERROR":
            # The master has removed the framework (or refused it: root
            # without --root_submissions, src/master/master.cpp); it ends the
            # stream after this event, and re-subscribing cannot help.
            self._removed = True
        self._on_event(event)

    async def web_ui(self) -> str | None:
        """The subscribed master's address if it serves a web UI (an HTML
        page at ``/``, as real Mesos does), else None; asked once, briefly."""
        master = self.master
        if master is None:
            return None
        try:
            status, content_type = await asyncio.wait_for(
                self._transport.get(master.url + "/", WEB_UI_TIMEOUT), WEB_UI_TIMEOUT + 1
            )
        except (TransportError, OSError, asyncio.TimeoutError):
            return None
        return master.url if status == 200 and "html" in content_type else None

    async def operator_call(self, call: dict[str, Any], timeout: float) -> tuple[int, str]:
        """POST ``call`` to the master's operator API; its status and text, or
        :class:`TransportError`."""
        master = self.master
        if master is None:
            raise TransportError("not subscribed to a master")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        return await asyncio.wait_for(
            self._transport.post(
                master.url + OPERATOR_PATH, json.dumps(call).encode(), headers, timeout
            ),
            timeout + 1,
        )

    # -- calls -----------------------------------------------------------

    def submit(self, call: dict[str, Any]) -> asyncio.Future[str | None]:
        """Queue one call behind every call submitted before it; call it from the
        event loop's thread. The future's result is why the master did not take
        the call, or None if it did or the client is closing; it raises
        :class:`SchedulerError` on a ``400``. The caller decides what a failure
        means, so nothing is logged here.

        Queued calls survive a re-subscription and go out first on the new
        stream: a KILL or ACKNOWLEDGE dropped would leave a task running or an
        update re-sent. A call in flight when the stream is lost is given up
        and reported, not raised."""
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        if self._closing or (self._tearing_down and call.get("type") != "TEARDOWN"):
            future.set_result(None)
        elif self._stopped is not None:
            future.set_result(f"not sent: {self._stopped}")
        else:
            self._queue.add(call, future)
            self._queued.set()
        return future

    async def call(self, call: dict[str, Any]) -> str | None:
        """:meth:`submit`, and wait for its answer."""
        return await self.submit(call)

    async def _send_calls(self) -> None:
        """The dispatcher: sends each queued call once no call before it on
        the same subject (:func:`tfmesos.mesos.calls.call_subjects`) is waiting or unanswered.
        Woken by a call queued and by a call answered."""
        while True:
            await self.subscribed.wait()
            self._queued.clear()
            self._send_ready()
            await self._queued.wait()

    def _send_ready(self) -> None:
        for item in self._queue.ready(list(self._in_flight)):
            self._in_flight[item] = asyncio.create_task(self._send_one(item))

    async def _send_one(self, item: Queued) -> None:
        try:
            result = await self._send(item.call)
        except SchedulerError as exc:
            if not item.future.done():
                item.future.set_exception(exc)
        else:
            if not item.future.done():
                item.future.set_result(result)
        finally:
            self._in_flight.pop(item, None)
            self._queued.set()

    async def _send(self, call: dict[str, Any]) -> str | None:
        """Send one call and wait for its answer; give up if the subscription is
        lost."""
        assert self.master is not None
        assert self.framework_id is not None
        master = self.master
        body = dict(call)
        body["framework_id"] = {"value": self.framework_id}
        headers = {"Content-Type": "application/json", "Mesos-Stream-Id": self.stream_id or ""}
        post = asyncio.ensure_future(
            self._transport.post(
                master.url + API_PATH, json.dumps(body).encode(), headers, CALL_TIMEOUT
            )
        )
        lost = asyncio.ensure_future(self._unsubscribed.wait())
        try:
            await asyncio.wait({post, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
            if not post.done():
                post.cancel()
                # Let it clean up; our own cancellation still propagates.
                await asyncio.wait({post})
        if post.cancelled():
            # The stream's own failure handling re-subscribes; a lost call is
            # covered by reconciliation and by offers coming back.
            return f"the subscription to {master.url} was lost before the master answered"
        try:
            status, text = post.result()
        except TransportError as exc:
            return str(exc)
        except (asyncio.TimeoutError, OSError) as exc:
            return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if status == 202:
            return None
        text = text[:500].strip()
        if status == 400 and STALE_STREAM not in text:
            raise SchedulerError(f"the master rejected {call.get('type')}: {text}")
        # A call made on a stream the master has since replaced is not wrong,
        # only late: what it would have done is redone after re-subscribing
        # (RECONCILE, offers coming back), so it is reported, not fatal.
        return f"{status} {text}".rstrip()

    async def close(self, teardown: bool) -> None:
        """Stop; with ``teardown``, first tell the master to kill every task.
        TEARDOWN jumps the queue: it makes queued calls moot (their futures get
        None), and waiting behind a stalled call would leave tasks running
        until the failover timeout."""
        if teardown and self._subscribing and not self.subscribed.is_set():
            # Stopped between SUBSCRIBE and SUBSCRIBED: the master may have
            # registered the framework; its id comes with SUBSCRIBED.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.subscribed.wait(), SUBSCRIBED_WAIT)
        if teardown and self.subscribed.is_set():
            # The master ends the stream on TEARDOWN: that end is expected.
            self._tearing_down = True
            self._queue.drop(None)
            try:
                with contextlib.suppress(TFMesosError, asyncio.TimeoutError):
                    problem = await asyncio.wait_for(
                        self._send({"type": "TEARDOWN"}), TEARDOWN_TIMEOUT
                    )
                    if problem is not None:
                        logger.warning("Mesos: TEARDOWN call failed: %s", problem)
            finally:
                self._teardown_answered.set()
        self._closing = True
        self._queue.drop(None)
        for item in self._in_flight:
            if not item.future.done():
                item.future.set_result(None)
        self._unsubscribed.set()  # gives up the calls in flight, if any
        if self._response is not None:
            self._response.close()

    async def _shutdown(self, stopped: str) -> None:
        if not self._closing:
            self._stopped = stopped
        result = None if self._closing else f"not sent: {stopped}"
        in_flight, self._in_flight = self._in_flight, {}
        senders = [*in_flight.values(), *([self._sender] if self._sender else [])]
        for task in senders:
            task.cancel()
        try:
            if senders:
                await asyncio.wait(senders)
        finally:
            # Even when cancelled while it waits: the connections must close.
            for item in in_flight:
                if not item.future.done():
                    item.future.set_result(result)
            self._queue.drop(result)
            await self._transport.aclose()
            if self._zookeeper is not None:
                await asyncio.to_thread(self._zookeeper.stop)


def not_a_master(url: str, status: int, text: str) -> str | None:
    """One line saying ``url`` is not a Mesos master if its answer to SUBSCRIBE
    shows so, else None. A bare 404 is not enough: a master that has not yet
    started serving its routes answers that too."""
    if status in MASTER_ANSWERS or (status == 404 and not text.strip()):
        return None
    try:
        phrase = f" {http.HTTPStatus(status).phrase}"
    except ValueError:
        phrase = ""
    text = " ".join(text.split())
    shown = " (a web page)" if text.startswith("<") else f" ({text[:80]})" if text else ""
    return (
        f"{url} answered {status}{phrase}{shown} to SUBSCRIBE: it is not a Mesos master "
        "(one answers 200, 307, 400, 401, 403 or 503); is -m right?"
    )


class _NoMaster(Exception):
    pass


class _MalformedStream(Exception):
    pass
