"""SchedulerClient's policy against a scripted, in-memory transport.

No sockets and no master: the fake transport plays the master's part of the
HTTP conversation (``tfmesos.mesos.transport``), so redirects, backoff,
heartbeats, re-subscription, the order of calls and the reconnect budget are
each checked in milliseconds. Intervals are tiny; tests wait on conditions.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import random
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import pytest

from tests.conftest import until
from tfmesos.mesos.recordio import encode
from tfmesos.mesos.scheduler import MasterLostError, SchedulerClient, SchedulerError
from tfmesos.mesos.transport import (
    AiohttpTransport,
    AuthenticationError,
    EventStream,
    TLSError,
    TransportError,
    client_tls,
    describe,
)

T = TypeVar("T")

FRAMEWORK = {"user": "tester", "name": "t", "roles": ["*"]}
CONDITION_TIMEOUT = 5.0
"""How long a condition may take before the test fails: a guard against a
hang, not a bound on speed (each condition is met in milliseconds)."""


class FakeStream:
    """The answer to one SUBSCRIBE: the test writes events into it."""

    def __init__(
        self, status: int = 200, headers: Mapping[str, str] | None = None, text: str = ""
    ) -> None:
        self.status = status
        self.headers = dict(headers or {})
        self._text = text
        self._chunks: asyncio.Queue[bytes] = asyncio.Queue()
        self.closed = False

    def send(self, event: dict[str, Any]) -> None:
        self._chunks.put_nowait(encode(json.dumps(event).encode()))

    def subscribed(self, framework_id: str = "fw-1", heartbeat: float = 15.0) -> None:
        self.send(
            {
                "type": "SUBSCRIBED",
                "subscribed": {
                    "framework_id": {"value": framework_id},
                    "heartbeat_interval_seconds": heartbeat,
                },
            }
        )

    def end(self) -> None:
        self._chunks.put_nowait(b"")

    async def read_chunk(self) -> bytes:
        return await self._chunks.get()

    async def text(self) -> str:
        return self._text

    def close(self) -> None:
        self.closed = True
        self.end()


Answer = Callable[[dict[str, Any]], Awaitable[tuple[int, str]]]


async def accept(call: dict[str, Any]) -> tuple[int, str]:
    return 202, ""


@dataclass
class FakeTransport:
    """Answers each SUBSCRIBE with the next entry of ``script`` (a stream, or
    an error to raise); when the script runs out, the master refuses the
    connection. Each other call is answered by ``answer``; ``received`` is what
    the master got, in the order it got it (after ``answer``'s delay, which
    plays the network)."""

    script: list[FakeStream | Exception] = field(default_factory=list)
    answer: Answer = accept
    subscribes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    streams: list[FakeStream] = field(default_factory=list)
    received: list[tuple[str, dict[str, Any], dict[str, str]]] = field(default_factory=list)
    closed: bool = False
    _answering: set[asyncio.Future[tuple[int, str]]] = field(default_factory=set)

    async def open_stream(self, url: str, body: bytes, headers: Mapping[str, str]) -> EventStream:
        self.subscribes.append((url, json.loads(body)))
        step = self.script.pop(0) if self.script else TransportError("Cannot connect: refused")
        if isinstance(step, Exception):
            raise step
        self.streams.append(step)
        return step

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> tuple[int, str]:
        call = json.loads(body)
        answering = asyncio.ensure_future(self.answer(call))
        self._answering.add(answering)
        try:
            status, text = await answering
        except asyncio.CancelledError:
            if self.closed:
                # As aiohttp does when its session closes under a request.
                raise TransportError("ServerDisconnectedError: Server disconnected") from None
            raise
        finally:
            self._answering.discard(answering)
        self.received.append((url, call, dict(headers)))
        return status, text

    async def get(self, url: str, timeout: float) -> tuple[int, str]:
        return 404, "text/plain"  # no web UI

    async def aclose(self) -> None:
        """Closing drops the connections: a call not yet answered fails."""
        self.closed = True
        for answering in list(self._answering):
            answering.cancel()

    def types(self) -> list[str]:
        return [call["type"] for _, call, _ in self.received]


async def within(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, CONDITION_TIMEOUT)


@contextlib.asynccontextmanager
async def running(client: SchedulerClient) -> AsyncIterator[asyncio.Task[None]]:
    runner = asyncio.create_task(client.run())
    try:
        yield runner
    finally:
        await client.close(teardown=False)
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await runner


def make_client(
    transport: FakeTransport, masters: str = "10.0.0.1:5050", **kwargs: Any
) -> SchedulerClient:
    kwargs.setdefault("initial_backoff", 0.001)
    kwargs.setdefault("max_backoff", 0.004)
    return SchedulerClient(masters, FRAMEWORK, lambda event: None, transport=transport, **kwargs)


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def stream(stream_id: str = "stream-1") -> FakeStream:
    return FakeStream(headers={"Mesos-Stream-Id": stream_id})


# -- redirects ------------------------------------------------------------------


def test_a_redirect_keeps_only_scheme_host_and_port_of_its_location() -> None:
    async def scenario() -> None:
        leader = stream()
        transport = FakeTransport(
            [FakeStream(307, {"Location": "//10.0.0.2:5051/master/api/v1/scheduler"}), leader]
        )
        client = make_client(transport)
        async with running(client):
            leader.subscribed()
            await within(client.subscribed.wait())
            assert [url for url, _ in transport.subscribes] == [
                "http://10.0.0.1:5050/api/v1/scheduler",
                "http://10.0.0.2:5051/api/v1/scheduler",
            ]
            assert client.master is not None and client.master.url == "http://10.0.0.2:5051"
            assert await within(client.call({"type": "REVIVE"})) is None
            assert transport.received[0][0] == "http://10.0.0.2:5051/api/v1/scheduler"

    run(scenario())


# -- backoff ------------------------------------------------------------------------


def test_backoff_doubles_up_to_its_cap(caplog: pytest.LogCaptureFixture) -> None:
    initial, cap = 0.001, 0.008

    async def scenario() -> list[float]:
        transport = FakeTransport()  # every attempt refused
        client = make_client(transport, initial_backoff=initial, max_backoff=cap)
        async with running(client):
            await until(
                lambda: len(transport.subscribes) >= 12, "12 subscriptions", CONDITION_TIMEOUT
            )
        delays = []
        for record in caplog.records:
            # No master ever answered here: the tries are said at debug.
            if "trying again in" in str(record.msg):
                assert isinstance(record.args, tuple)
                delay = record.args[1]
                assert isinstance(delay, float)
                delays.append(delay)
        return delays

    with caplog.at_level(logging.DEBUG, logger="tfmesos"):
        delays = run(scenario())
    assert len(delays) >= 11
    assert delays[0] == initial
    assert all(delay <= cap for delay in delays)
    # Each at least 1.6 times the one before (doubled, jittered by 0.8 to 1.2)
    # until the cap; then at the cap (jitter never takes it over).
    for before, after in itertools.pairwise(delays):
        assert after >= min(cap, 1.6 * before) - 1e-9, delays
    assert delays[-1] == cap


# -- heartbeats -----------------------------------------------------------------------


def test_missed_heartbeats_resubscribe_with_the_framework_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        first, second = stream("stream-1"), stream("stream-2")
        transport = FakeTransport([first, second])
        client = make_client(transport)
        async with running(client):
            first.subscribed("fw-1", heartbeat=0.002)  # then silence
            await until(
                lambda: len(transport.subscribes) == 2, "a second subscription", CONDITION_TIMEOUT
            )
            assert first.closed
            _, resubscribe = transport.subscribes[1]
            assert resubscribe["framework_id"] == {"value": "fw-1"}
            assert resubscribe["subscribe"]["framework_info"]["id"] == {"value": "fw-1"}
            assert "framework_id" not in transport.subscribes[0][1]
            second.subscribed("fw-1")
            await within(client.subscribed.wait())
            assert client.stream_id == "stream-2"
            # Calls carry the new stream's id.
            assert await within(client.call({"type": "REVIVE"})) is None
            assert transport.received[-1][2]["Mesos-Stream-Id"] == "stream-2"
            assert transport.received[-1][1]["framework_id"] == {"value": "fw-1"}

    with caplog.at_level(logging.WARNING, logger="tfmesos"):
        run(scenario())
    assert "no heartbeat from http://10.0.0.1:5050 for 0.01s" in caplog.text


# -- the order of calls -------------------------------------------------------------


def task_call(kind: str, task_id: str) -> dict[str, Any]:
    """A call about one task: an ACCEPT launching it, a KILL, an ACKNOWLEDGE
    or a RECONCILE of it."""
    ref = {"task_id": {"value": task_id}}
    if kind == "ACCEPT":
        return {"type": kind, "accept": {"operations": [{"launch": {"task_infos": [ref]}}]}}
    if kind == "RECONCILE":
        return {"type": kind, "reconcile": {"tasks": [ref]}}
    return {"type": kind, kind.lower(): ref}


# Each depends on the one before: the offer and role state, then task t1.
DECIDED = ["DECLINE", "SUPPRESS", "REVIVE", "ACCEPT", "KILL", "RECONCILE"]


def random_delays(seed: int) -> Answer:
    rng = random.Random(seed)

    async def answer(call: dict[str, Any]) -> tuple[int, str]:
        await asyncio.sleep(rng.uniform(0, 0.005))  # this call's way to the master
        return 202, ""

    return answer


@pytest.mark.parametrize("seed", range(5))
def test_calls_reach_the_master_in_the_order_submitted(seed: int) -> None:
    async def scenario() -> None:
        subscription = stream()
        transport = FakeTransport([subscription], answer=random_delays(seed))
        client = make_client(transport)
        async with running(client):
            subscription.subscribed()
            await within(client.subscribed.wait())
            futures = [client.submit(task_call(kind, "t1")) for kind in DECIDED]
            assert await within(asyncio.gather(*futures)) == [None] * len(DECIDED)
            assert transport.types() == DECIDED

    run(scenario())


def test_calls_sent_as_independent_tasks_can_overtake_each_other() -> None:
    """What the test above guards against: the old way (one task per call, each
    sent at once) under the same fake, with delays that make it show. The
    same calls through submit() arrive in order."""

    async def answer(call: dict[str, Any]) -> tuple[int, str]:
        # A REVIVE that happens to take longer than the SUPPRESS after it.
        await asyncio.sleep(0.02 if call["type"] == "REVIVE" else 0)
        return 202, ""

    async def scenario() -> tuple[list[str], list[str]]:
        subscription = stream()
        transport = FakeTransport([subscription], answer=answer)
        client = make_client(transport)
        async with running(client):
            subscription.subscribed()
            await within(client.subscribed.wait())
            decided = ["SUPPRESS", "REVIVE", "SUPPRESS"]
            await within(asyncio.gather(*(client.submit({"type": kind}) for kind in decided)))
            in_order = transport.types()
            transport.received.clear()
            # The old path: each call its own task, straight to the transport.
            old = [
                asyncio.create_task(client._send({"type": kind})) for kind in ["REVIVE", "SUPPRESS"]
            ]
            await within(asyncio.gather(*old))
            return in_order, transport.types()

    in_order, overtaken = run(scenario())
    assert in_order == ["SUPPRESS", "REVIVE", "SUPPRESS"]
    assert overtaken == ["SUPPRESS", "REVIVE"]  # the role would stay suppressed


def test_each_call_waits_for_the_answer_to_the_one_before() -> None:
    async def scenario() -> None:
        release = asyncio.Event()
        started: list[str] = []

        async def answer(call: dict[str, Any]) -> tuple[int, str]:
            started.append(call["type"])
            if call["type"] == "DECLINE":
                await release.wait()
            return 202, ""

        subscription = stream()
        transport = FakeTransport([subscription], answer=answer)
        client = make_client(transport)
        async with running(client):
            subscription.subscribed()
            await within(client.subscribed.wait())
            decline = client.submit({"type": "DECLINE"})
            revive = client.submit({"type": "REVIVE"})
            await until(lambda: started == ["DECLINE"], "the DECLINE started", CONDITION_TIMEOUT)
            assert not revive.done()
            release.set()
            assert await within(revive) is None
            assert decline.result() is None
            assert started == ["DECLINE", "REVIVE"]

    run(scenario())


def test_calls_wait_for_the_subscription() -> None:
    async def scenario() -> None:
        subscription = stream()
        transport = FakeTransport([subscription])
        client = make_client(transport)
        futures = [client.submit({"type": "REVIVE"})]  # even before run()
        async with running(client):
            await until(
                lambda: len(transport.subscribes) == 1, "the subscription", CONDITION_TIMEOUT
            )
            futures.append(client.submit({"type": "SUPPRESS"}))
            for _ in range(50):  # give a wrongly eager sender its chances
                await asyncio.sleep(0)
            assert transport.received == []
            assert not any(future.done() for future in futures)
            subscription.subscribed("fw-7")
            assert await within(asyncio.gather(*futures)) == [None, None]
            assert transport.types() == ["REVIVE", "SUPPRESS"]
            assert all(
                call["framework_id"] == {"value": "fw-7"} for _, call, _ in transport.received
            )

    run(scenario())


def test_calls_queued_across_a_resubscription_go_out_on_the_new_stream_in_order() -> None:
    async def scenario() -> None:
        first, second = stream("stream-1"), stream("stream-2")
        transport = FakeTransport([first, second])
        client = make_client(transport)
        async with running(client):
            first.subscribed()
            await within(client.subscribed.wait())
            first.end()
            await until(
                lambda: not client.subscribed.is_set(), "the client unsubscribed", CONDITION_TIMEOUT
            )
            futures = [client.submit({"type": kind}) for kind in ["KILL", "ACKNOWLEDGE"]]
            await until(
                lambda: len(transport.subscribes) == 2, "a second subscription", CONDITION_TIMEOUT
            )
            second.subscribed()
            assert await within(asyncio.gather(*futures)) == [None, None]
            assert transport.types() == ["KILL", "ACKNOWLEDGE"]
            assert {headers["Mesos-Stream-Id"] for _, _, headers in transport.received} == {
                "stream-2"
            }

    run(scenario())


# -- the master's answers -----------------------------------------------------------


def test_a_400_is_a_scheduler_error_and_a_stale_stream_400_is_reported() -> None:
    stale = (
        "The stream ID 'old' included in this request didn't match the stream ID "
        "currently associated with framework ID fw-1"
    )

    async def answer(call: dict[str, Any]) -> tuple[int, str]:
        if call["type"] == "DECLINE":
            return 400, "Failed to validate scheduler::Call: Expecting 'decline' to be present"
        if call["type"] == "REVIVE":
            return 400, stale
        return 202, ""

    async def scenario() -> None:
        subscription = stream()
        transport = FakeTransport([subscription], answer=answer)
        client = make_client(transport)
        async with running(client):
            subscription.subscribed()
            await within(client.subscribed.wait())
            wrong = client.submit({"type": "DECLINE"})
            late = client.submit({"type": "REVIVE"})
            after = client.submit({"type": "SUPPRESS"})
            with pytest.raises(SchedulerError, match="the master rejected DECLINE: Failed"):
                await within(wrong)
            assert await within(late) == f"400 {stale}"
            # Neither stops the calls behind them.
            assert await within(after) is None
            assert transport.types() == ["DECLINE", "REVIVE", "SUPPRESS"]

    run(scenario())


def test_a_call_in_flight_when_the_stream_is_lost_is_reported() -> None:
    async def scenario() -> None:
        never = asyncio.Event()

        started: list[str] = []

        async def answer(call: dict[str, Any]) -> tuple[int, str]:
            started.append(call["type"])
            await never.wait()  # a master that went silent
            return 202, ""

        subscription = stream()
        transport = FakeTransport([subscription, stream("stream-2")], answer=answer)
        client = make_client(transport)
        async with running(client):
            subscription.subscribed()
            await within(client.subscribed.wait())
            future = client.submit({"type": "ACCEPT"})
            await until(lambda: started == ["ACCEPT"], "the ACCEPT started", CONDITION_TIMEOUT)
            subscription.end()
            assert await within(future) == (
                "the subscription to http://10.0.0.1:5050 was lost before the master answered"
            )

    run(scenario())


def test_teardown_jumps_the_queue_and_the_queued_calls_are_dropped() -> None:
    async def scenario() -> None:
        release = asyncio.Event()

        async def answer(call: dict[str, Any]) -> tuple[int, str]:
            if call["type"] == "DECLINE":
                await release.wait()  # a slow answer holds the queue
            return 202, ""

        subscription = stream()
        transport = FakeTransport([subscription], answer=answer)
        client = make_client(transport)
        runner = asyncio.create_task(client.run())
        subscription.subscribed()
        await within(client.subscribed.wait())
        slow = client.submit({"type": "DECLINE"})
        queued = client.submit({"type": "ACCEPT"})
        await asyncio.sleep(0)
        await within(client.close(teardown=True))
        assert transport.types() == ["TEARDOWN"]
        assert queued.result() is None
        assert slow.result() is None  # closing
        assert (await within(client.call({"type": "REVIVE"}))) is None
        release.set()
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner
        assert transport.closed

    run(scenario())


def test_teardown_answered_after_the_master_ends_the_stream_is_no_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A real master ends the framework's event stream while it handles
    TEARDOWN (``Master::removeFramework``), before its ``202`` is written:
    the client must not close its connections under the call, nor warn that
    TEARDOWN failed (seen against Mesos 1.12: "TEARDOWN call failed:
    ServerDisconnectedError")."""

    async def scenario() -> None:
        subscription = stream()
        written = asyncio.Event()

        async def answer(call: dict[str, Any]) -> tuple[int, str]:
            if call["type"] == "TEARDOWN":
                subscription.end()
                await written.wait()
            return 202, ""

        transport = FakeTransport([subscription], answer=answer)
        client = make_client(transport)
        runner = asyncio.create_task(client.run())
        subscription.subscribed()
        await within(client.subscribed.wait())
        closing = asyncio.create_task(client.close(teardown=True))
        # The stream's end reaches the client before the answer does.
        await until(
            lambda: subscription.closed and bool(transport._answering),
            "the subscription closed while a call is answered",
            CONDITION_TIMEOUT,
        )
        for _ in range(10):
            await asyncio.sleep(0)
        written.set()
        await within(closing)
        await within(runner)
        assert transport.types() == ["TEARDOWN"]
        assert transport.closed

    with caplog.at_level(logging.WARNING, logger="tfmesos"):
        run(scenario())
    assert [r.getMessage() for r in caplog.records] == []


# -- giving up --------------------------------------------------------------------


def test_an_unreachable_first_master_gives_up_within_the_budget_and_says_so() -> None:
    async def scenario() -> tuple[MasterLostError, FakeTransport, asyncio.Future[str | None]]:
        transport = FakeTransport()  # nothing listening
        refused = TransportError("Cannot connect: Connection refused")
        transport.script = [refused] * 1000
        client = make_client(transport, "127.0.0.1:1", reconnect_timeout=0.05)
        waiting = client.submit({"type": "REVIVE"})
        with pytest.raises(MasterLostError) as lost:
            await within(client.run())
        return lost.value, transport, waiting

    error, transport, waiting = run(scenario())
    assert str(error) == (
        "could not reach the Mesos master at http://127.0.0.1:1 "
        "(Cannot connect: Connection refused) within 0.05s"
    )
    assert len(transport.subscribes) > 1  # it tried again before giving up
    assert transport.closed
    # A call still waiting for a subscription is told why it never went out.
    assert waiting.result() == f"not sent: {error}"


def test_a_master_lost_after_subscribing_is_named_lost() -> None:
    async def scenario() -> MasterLostError:
        subscription = stream()
        transport = FakeTransport([subscription])  # then refused
        client = make_client(transport, reconnect_timeout=0.05)
        runner = asyncio.create_task(client.run())
        subscription.subscribed()
        await within(client.subscribed.wait())
        subscription.end()
        with pytest.raises(MasterLostError) as lost:
            await within(runner)
        return lost.value

    assert str(run(scenario())) == (
        "lost the Mesos master (http://10.0.0.1:5050: Cannot connect: refused) "
        "and could not re-subscribe within 0.05s"
    )


def test_a_refused_subscribe_is_a_scheduler_error() -> None:
    async def scenario() -> None:
        transport = FakeTransport([FakeStream(403, text="Framework principal not allowed")])
        client = make_client(transport)
        with pytest.raises(SchedulerError, match="refused SUBSCRIBE: 403 Framework principal"):
            await within(client.run())

    run(scenario())


def test_an_error_event_ends_the_client_without_resubscribing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # src/master/master.cpp: a framework the master refuses (root without
    # --root_submissions, a removed framework) gets one ERROR and the stream
    # ends; the scheduler library tells the framework, which must not retry.
    async def scenario() -> None:
        refused = stream()
        transport = FakeTransport([refused, stream("stream-2")])
        client = make_client(transport)
        runner = asyncio.create_task(client.run())
        refused.send({"type": "ERROR", "error": {"message": "User 'root' is not allowed"}})
        refused.end()
        await within(runner)
        assert len(transport.subscribes) == 1
        await client.close(teardown=True)

    with caplog.at_level(logging.INFO, logger="tfmesos"):
        run(scenario())
    assert not [r for r in caplog.records if "re-subscribing" in r.getMessage()]


# -- the real transport: TLS and authentication ---------------------------------
#
# AiohttpTransport against real sockets on 127.0.0.1: a TLS server made with
# Python's ssl (configured as libprocess configures a master's) and an HTTP
# server that answers 401, as a master that authenticates frameworks does.


@contextlib.contextmanager
def tls_server(pki: Any, cert: str = "master") -> Iterator[int]:
    """A TLS server on 127.0.0.1 (its port) that handshakes and closes."""
    from tests.test_real_mesos_security import libprocess_server_context, tls_proxy

    context = libprocess_server_context(*pki.cert(cert))
    with tls_proxy(1, context) as proxy:  # handshakes only: nothing is forwarded
        yield proxy.port


async def handshake_error(port: int, context: ssl.SSLContext | None = None) -> BaseException:
    """What aiohttp raises for a POST to https://127.0.0.1:PORT."""
    async with aiohttp.ClientSession() as session:
        try:
            await session.post(f"https://127.0.0.1:{port}/", ssl=context or True)
        except aiohttp.ClientError as exc:
            return exc
    raise AssertionError("the handshake succeeded")


@pytest.mark.e2e
def test_describe_says_the_ssl_reason_not_the_ssl_error_number_as_an_errno(pki: Any) -> None:
    # The SSL error's number is 1 (SSL_ERROR_SSL), which describe() read as
    # an errno: "Cannot connect: Operation not permitted".
    # Python's default ciphers are none of libprocess's: AES128-SHA is.
    system = ssl.create_default_context()
    system.set_ciphers("AES128-SHA")
    trusted = ssl.create_default_context(cafile=str(pki.ca))
    trusted.set_ciphers("AES128-SHA")
    with tls_server(pki) as port:
        untrusted = run(handshake_error(port, system))
    with tls_server(pki, "master-by-name") as port:
        misnamed = run(handshake_error(port, trusted))
    assert describe(untrusted) == (
        "TLS handshake failed: certificate verify failed: unable to get local issuer certificate"
    )
    assert describe(misnamed) == (
        "TLS handshake failed: certificate verify failed: "
        "IP address mismatch, certificate is not valid for '127.0.0.1'"
    )


@pytest.mark.e2e
def test_a_handshake_cut_short_is_retried_and_one_refused_ends_the_client(pki: Any) -> None:
    """A TLS handshake that fails on its merits (an untrusted certificate) is
    a TLSError, which ends the client at once; one the server cuts short is a
    TransportError, retried as any lost connection."""

    async def cut_short(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)  # the ClientHello has come: hang up
        writer.close()

    async def scenario(port: int) -> tuple[str, str]:
        transport = AiohttpTransport()
        with pytest.raises(TLSError) as refused:
            await transport.open_stream(f"https://127.0.0.1:{port}{API}", b"{}", {})
        server = await asyncio.start_server(cut_short, "127.0.0.1", 0)
        cut_port = server.sockets[0].getsockname()[1]
        with pytest.raises(TransportError) as cut:
            await transport.open_stream(f"https://127.0.0.1:{cut_port}{API}", b"{}", {})
        server.close()
        await transport.aclose()
        return str(refused.value), str(cut.value)

    with tls_server(pki) as port:
        refused, cut = run(scenario(port))
    assert refused.startswith(
        f"TLS handshake with https://127.0.0.1:{port} failed: certificate verify failed: "
        "unable to get local issuer certificate; tfmesos trusted the system's CAs"
    )
    assert "Operation not permitted" not in cut, cut


API = "/api/v1/scheduler"


@contextlib.asynccontextmanager
async def unauthorized_master() -> AsyncIterator[tuple[int, list[bytes]]]:
    """An HTTP server that answers every request as a master that
    authenticates frameworks answers bad or no credentials; its port, and
    the requests' heads it received."""
    heads: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        heads.append(head)
        length = next(
            (
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        await reader.readexactly(length)
        body = b"401 Unauthorized."
        writer.write(
            b"HTTP/1.1 401 Unauthorized\r\n"
            b'WWW-Authenticate: Basic realm="mesos-master-scheduler"\r\n'
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], heads
    finally:
        server.close()


def test_a_401_to_subscribe_ends_the_client_at_once_naming_the_principal_only() -> None:
    async def scenario(auth: tuple[str, str] | None) -> tuple[AuthenticationError, int]:
        async with unauthorized_master() as (port, heads):
            client = SchedulerClient(
                f"127.0.0.1:{port}", FRAMEWORK, lambda event: None, auth=auth,
                initial_backoff=0.001, max_backoff=0.004,
            )  # fmt: skip
            with pytest.raises(AuthenticationError) as refused:
                await within(client.run())
            return refused.value, len(heads)

    wrong, tries = run(scenario(("tf-team", "not-the-secret")))
    assert tries == 1  # no re-subscription
    assert wrong.exit_status == 77
    assert str(wrong) == (
        "the Mesos master at http://127.0.0.1:"
        + str(wrong).split(":")[2].split(" ")[0]
        + " refused the credentials of principal 'tf-team' (401 Unauthorized): check the "
        "principal and its secret (--principal and --secret-file, or $MESOS_PRINCIPAL and "
        "$MESOS_SECRET)"
    )
    assert "not-the-secret" not in str(wrong)
    none, tries = run(scenario(None))
    assert tries == 1
    assert "demands authentication (401 Unauthorized) and no credentials were given" in str(none)


@pytest.mark.e2e
def test_client_tls_reads_libprocess_s_variables(
    pki: Any, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ca = str(pki.ca)
    assert client_tls(environ={}).trusted == "the system's CAs"
    assert client_tls(environ={"LIBPROCESS_SSL_CA_FILE": ca}).trusted == (
        f"the CAs in {ca} ($LIBPROCESS_SSL_CA_FILE)"
    )
    both = {"LIBPROCESS_SSL_CA_FILE": ca, "LIBPROCESS_SSL_CA_DIR": str(pki.ca_dir)}
    assert client_tls(environ=both).trusted == (
        f"the CAs in {ca} ($LIBPROCESS_SSL_CA_FILE) and {pki.ca_dir} ($LIBPROCESS_SSL_CA_DIR)"
    )
    # The flag wins over the variables.
    assert client_tls(str(pki.ca_dir), both).trusted == f"the CAs in {pki.ca_dir} (--ssl-ca)"
    with pytest.raises(
        TLSError,
        match=r"cannot load the CAs in /nowhere/ca.pem \(\$LIBPROCESS_SSL_CA_FILE\): No such file",
    ):
        client_tls(environ={"LIBPROCESS_SSL_CA_FILE": "/nowhere/ca.pem"})
    cert, key = pki.cert("client")
    with pytest.raises(TLSError, match=r"LIBPROCESS_SSL_KEY_FILE is set but not"):
        client_tls(environ={"LIBPROCESS_SSL_KEY_FILE": str(key)})
    with pytest.raises(
        TLSError, match=r"cannot load the client certificate .*: key values mismatch"
    ):
        client_tls(
            environ={
                "LIBPROCESS_SSL_CERT_FILE": str(cert),
                "LIBPROCESS_SSL_KEY_FILE": str(pki.folder / "ca.key"),
            }
        )
    encrypted = tmp_path / "encrypted.key"
    subprocess.run(
        [
            "openssl",
            "rsa",
            "-in",
            str(key),
            "-aes256",
            "-passout",
            "pass:x",
            "-out",
            str(encrypted),
        ],
        check=True,
        capture_output=True,
    )
    with pytest.raises(TLSError, match=r"cannot load the client certificate .*: it is encrypted"):
        client_tls(
            environ={
                "LIBPROCESS_SSL_CERT_FILE": str(cert),
                "LIBPROCESS_SSL_KEY_FILE": str(encrypted),
            }
        )
    assert client_tls(environ={"LIBPROCESS_SSL_VERIFY_SERVER_CERT": "true"}).verifying
    with pytest.raises(TLSError, match="expected true, false, 1 or 0"):
        client_tls(environ={"LIBPROCESS_SSL_VERIFY_SERVER_CERT": "yes"})
    # Verification off only when asked for, explicitly, and said.
    with caplog.at_level(logging.WARNING, logger="tfmesos"):
        off = client_tls(environ={"LIBPROCESS_SSL_VERIFY_CERT": "false"})
    assert not off.verifying and off.context.verify_mode == ssl.CERT_NONE
    assert "not verified (LIBPROCESS_SSL_VERIFY_CERT=false)" in caplog.text


@pytest.mark.e2e
def test_client_tls_reaches_a_master_on_libprocess_s_default_ciphers(pki: Any) -> None:
    """A master left at libprocess's TLS defaults (TLS 1.2, AES128-SHA and
    AES256-SHA usable) shares no cipher with Python's default context."""

    def handshake(context: ssl.SSLContext, port: int) -> str:
        with (
            socket.create_connection(("127.0.0.1", port)) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            cipher = tls.cipher()
            assert cipher is not None
            return cipher[0]

    with tls_server(pki) as port:
        with pytest.raises(ssl.SSLError, match="HANDSHAKE_FAILURE"):
            handshake(ssl.create_default_context(cafile=str(pki.ca)), port)
        ours = client_tls(str(pki.ca), environ={}).context
        assert handshake(ours, port) in ("AES128-SHA", "AES256-SHA")
