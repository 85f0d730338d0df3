"""The framework's connection to the master: subscribe, events, calls.

Policy (which master, when to reconnect, how long to keep trying) is kept here,
apart from what the framework does with offers and updates (the backend).

- ``SUBSCRIBE`` is one long POST whose ``200`` answer is a chunked RecordIO
  stream of events, with the ``Mesos-Stream-Id`` header that every other call
  must carry; other calls are short POSTs answered ``202``.
- A non-leading master answers ``307`` with a ``Location`` that may have no
  scheme (``//host:5050``, or ``host:5050`` in the docs' example).
- No event for five heartbeat intervals means the connection is dead: close it
  and re-subscribe, with the framework id, backing off up to 15 s between tries
  (``docs/scheduler-http-api.md``, "Disconnections"). A stream we cannot read
  (bad RecordIO, bad JSON, an event without a field it must have) is treated
  the same way.
- Every step of an attempt (reaching ZooKeeper, the answer to SUBSCRIBE) has a
  time limit, and none outlasts what is left of the reconnect budget, so the
  budget holds whatever the master or ZooKeeper do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Callable
from typing import Any

import aiohttp

from tfmesos.errors import TFMesosError
from tfmesos.mesos.masters import MasterAddress, ZooKeeperError, ZooKeeperLeader, parse_masters
from tfmesos.mesos.recordio import RecordIODecoder

__all__ = ["MasterLostError", "SchedulerClient", "SchedulerError"]

logger = logging.getLogger("tfmesos")

API_PATH = "/api/v1/scheduler"
MISSED_HEARTBEATS = 5
MAX_BACKOFF = 15.0
CALL_TIMEOUT = 75.0
MAX_REDIRECTS = 5
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
MIN_ATTEMPT = 1.0
"""The least time a step of an attempt is given, even when the reconnect budget
is all but spent, so that the last attempt is a real one."""

Event = dict[str, Any]


STALE_STREAM = "didn't match the stream ID currently associated"
"""The master's words (src/master/http.cpp) for a call on a replaced stream."""


class SchedulerError(TFMesosError):
    """The master refused a call in a way that retrying cannot fix."""


class MasterLostError(TFMesosError):
    """No master could be reached for longer than the reconnect budget."""


class SchedulerClient:
    def __init__(
        self,
        masters: str,
        framework_info: dict[str, Any],
        on_event: Callable[[Event], None],
        *,
        reconnect_timeout: float = 120.0,
        auth: tuple[str, str] | None = None,
        subscribe_timeout: float = SUBSCRIBE_TIMEOUT,
    ) -> None:
        self._source = parse_masters(masters)
        self._framework_info = dict(framework_info)
        self._on_event = on_event
        self._reconnect_timeout = reconnect_timeout
        self._subscribe_timeout = subscribe_timeout
        self._lost_since = 0.0
        """When the master was last lost (or the first attempt began): the
        reconnect budget runs from here."""
        self._subscribed_at = 0.0
        self._auth = aiohttp.BasicAuth(*auth) if auth else None
        self._session: aiohttp.ClientSession | None = None
        self._zookeeper: ZooKeeperLeader | None = None
        self._leader_changed = asyncio.Event()
        self.master: MasterAddress | None = None
        self.framework_id: str | None = None
        self.stream_id: str | None = None
        self.subscribed = asyncio.Event()
        self.heartbeat_interval = 15.0
        self._closing = False
        self._tearing_down = False
        self.last_error = ""
        """Why the last attempt to subscribe or stay subscribed failed."""
        self._response: aiohttp.ClientResponse | None = None

    # -- masters ---------------------------------------------------------

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
                await asyncio.to_thread(zookeeper.start, self._step_limit(ZOOKEEPER_TIMEOUT))
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
        if self._response is not None and leader != self.master:
            # A new leader: drop the stream to the old one and re-subscribe.
            self._response.close()

    # -- running ---------------------------------------------------------

    def _budget_left(self) -> float:
        loop = asyncio.get_running_loop()
        return self._lost_since + self._reconnect_timeout - loop.time()

    def _step_limit(self, limit: float) -> float:
        """``limit``, or what is left of the reconnect budget if that is less."""
        return max(MIN_ATTEMPT, min(limit, self._budget_left()))

    async def run(self) -> None:
        """Subscribe, and stay subscribed until :meth:`close`; raise
        :class:`MasterLostError` when no master answers for too long."""
        self._session = aiohttp.ClientSession(
            auth=self._auth, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)
        )
        backoff = 0.5
        self._lost_since = asyncio.get_running_loop().time()
        try:
            while not self._closing:
                malformed = False
                try:
                    await self._subscribe_and_read()
                    reason = "the event stream ended"
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                    reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                except _NoMaster as exc:
                    reason = str(exc)
                except _MalformedStream as exc:
                    reason = str(exc)
                    malformed = True
                if self._closing or self._tearing_down:
                    return  # the master ends the stream on TEARDOWN, as asked
                now = asyncio.get_running_loop().time()
                # A stream that turned unreadable right after SUBSCRIBED was no
                # working subscription: the budget keeps running, so that a
                # master whose every stream is unreadable cannot keep us
                # trying forever.
                quickly_unreadable = malformed and now - self._subscribed_at < STABLE_SUBSCRIPTION
                if self.subscribed.is_set() and not quickly_unreadable:
                    self._lost_since = now
                    backoff = 0.5
                self.subscribed.clear()
                self.stream_id = None
                self.last_error = reason
                left = self._budget_left()
                if left < 0:
                    raise MasterLostError(
                        f"lost the Mesos master ({reason}) and could not re-subscribe "
                        f"within {self._reconnect_timeout:g}s"
                    )
                # The last try comes when the budget ends, not a backoff after.
                delay = min(backoff, left)
                logger.warning("Mesos: %s; re-subscribing in %.1fs", reason, delay)
                self._leader_changed.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._leader_changed.wait(), delay)
                backoff = min(MAX_BACKOFF, backoff * 2) * random.uniform(0.8, 1.2)
        finally:
            await self._shutdown()

    async def _subscribe_and_read(self) -> None:
        assert self._session is not None
        candidates = await self._candidates()
        if not candidates:
            why = f" ({self._zookeeper.why_no_leader()})" if self._zookeeper else ""
            raise _NoMaster(f"no leading master known{why}")
        framework = dict(self._framework_info)
        call: dict[str, Any] = {"type": "SUBSCRIBE", "subscribe": {"framework_info": framework}}
        if self.framework_id:
            framework["id"] = {"value": self.framework_id}
            call["framework_id"] = {"value": self.framework_id}
        last_error = "no master answered"
        for master in candidates:
            for _ in range(MAX_REDIRECTS):
                limit = self._step_limit(self._subscribe_timeout)
                try:
                    # Bounds the wait for the answer's headers only: the body
                    # is the event stream, read below under the heartbeat
                    # watchdog.
                    response = await asyncio.wait_for(
                        self._session.post(
                            master.url + API_PATH,
                            data=json.dumps(call),
                            headers={
                                "Content-Type": "application/json",
                                "Accept": "application/json",
                            },
                            allow_redirects=False,
                        ),
                        limit,
                    )
                except asyncio.TimeoutError:
                    last_error = f"{master.url}: no answer to SUBSCRIBE"
                    last_error += f" within {round(limit, 1):g}s"
                    break
                except (aiohttp.ClientError, OSError) as exc:
                    last_error = f"{master.url}: {exc}"
                    break
                if response.status == 307 and "Location" in response.headers:
                    location = response.headers["Location"]
                    response.release()
                    master = MasterAddress.parse(location, master.scheme)
                    logger.info("Mesos: redirected to the leading master %s", master.url)
                    continue
                if response.status != 200:
                    text = (await response.text())[:500]
                    response.release()
                    if response.status in (400, 401, 403):
                        raise SchedulerError(
                            f"the Mesos master at {master.url} refused SUBSCRIBE: "
                            f"{response.status} {text.strip()}"
                        )
                    last_error = f"{master.url} answered {response.status} {text.strip()}"
                    break
                await self._read_stream(master, response)
                return
        raise _NoMaster(last_error)

    async def _read_stream(self, master: MasterAddress, response: aiohttp.ClientResponse) -> None:
        self.master = master
        self.stream_id = response.headers.get("Mesos-Stream-Id")
        self._response = response
        decoder = RecordIODecoder()
        try:
            while True:
                timeout = self.heartbeat_interval * MISSED_HEARTBEATS
                try:
                    chunk = await asyncio.wait_for(response.content.readany(), timeout)
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
            self.heartbeat_interval = float(subscribed.get("heartbeat_interval_seconds", 15.0))
            self._subscribed_at = asyncio.get_running_loop().time()
            self.subscribed.set()
        self._on_event(event)

    # -- calls -----------------------------------------------------------

    async def call(self, call: dict[str, Any]) -> str | None:
        """Send one call; wait for the subscription first if it is being renewed.

        Return why the master did not take the call (no answer, or an answer
        other than 202), or None if it did or the client is closing; raise
        :class:`SchedulerError` if it answered 400. The caller says what the
        failure means, so it is not logged here.
        """
        if self._closing or self._session is None:
            return None
        if self._tearing_down and call.get("type") != "TEARDOWN":
            return None
        await asyncio.wait_for(self.subscribed.wait(), self._reconnect_timeout)
        assert self.master is not None
        assert self.framework_id is not None
        body = dict(call)
        body["framework_id"] = {"value": self.framework_id}
        headers = {"Content-Type": "application/json", "Mesos-Stream-Id": self.stream_id or ""}
        try:
            async with self._session.post(
                self.master.url + API_PATH,
                data=json.dumps(body),
                headers=headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=CALL_TIMEOUT),
            ) as response:
                if response.status == 202:
                    return None
                text = (await response.text())[:500].strip()
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            # The stream's own failure handling re-subscribes; a lost call is
            # covered by reconciliation and by offers coming back.
            return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if response.status == 400 and STALE_STREAM not in text:
            raise SchedulerError(f"the master rejected {call.get('type')}: {text}")
        # A call made on a stream the master has since replaced is not wrong,
        # only late: what it would have done is redone after re-subscribing
        # (RECONCILE, offers coming back), so it is reported, not fatal.
        return f"{response.status} {text}".rstrip()

    async def close(self, teardown: bool) -> None:
        """Stop; with ``teardown``, first tell the master to kill every task."""
        if teardown and self.subscribed.is_set():
            # The master ends the stream on TEARDOWN: that end is expected.
            self._tearing_down = True
            with contextlib.suppress(TFMesosError, asyncio.TimeoutError):
                problem = await asyncio.wait_for(self.call({"type": "TEARDOWN"}), 10)
                if problem is not None:
                    logger.warning("Mesos: TEARDOWN call failed: %s", problem)
        self._closing = True
        if self._response is not None:
            self._response.close()

    async def _shutdown(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._zookeeper is not None:
            await asyncio.to_thread(self._zookeeper.stop)


class _NoMaster(Exception):
    pass


class _MalformedStream(Exception):
    pass
