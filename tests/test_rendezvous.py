"""The rendezvous against real sockets: who gets in, and what cannot break it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from tests.conftest import until
from tfmesos.rendezvous import protocol
from tfmesos.rendezvous.reports import Exited, Output, Registered, RendezvousEvent
from tfmesos.rendezvous.server import RendezvousServer

SECRET = bytes(range(32))
T = TypeVar("T")


class Client:
    """A task's side of the rendezvous; closes its socket as a context manager."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.decoder = protocol.FrameDecoder()
        try:
            self.nonce = self.receive()["nonce"]
        except BaseException:
            self.sock.close()
            raise

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def receive(self) -> dict[str, object]:
        while True:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            frames = self.decoder.feed(data)
            if frames:
                return protocol.parse_json(frames[0][1])

    def register(
        self,
        task_id: str,
        secret: bytes = SECRET,
        *,
        addr: str = "h:1",
        proven_addr: str | None = None,
        version: int = protocol.PROTOCOL_VERSION,
    ) -> None:
        proven = addr if proven_addr is None else proven_addr
        self.sock.sendall(
            protocol.encode_json(
                {
                    "type": "register",
                    "version": version,
                    "task_id": task_id,
                    "addr": addr,
                    "nonce": "cn",
                    "proof": protocol.proof(
                        secret, "register", str(self.nonce), task_id, "cn", proven
                    ),
                }
            )
        )

    def closed_by_server(self) -> bool:
        try:
            while self.sock.recv(65536):
                pass
        except OSError:
            pass
        return True


async def serve(admit: set[str]) -> tuple[RendezvousServer, list[RendezvousEvent]]:
    events: list[RendezvousEvent] = []

    def admit_once(task_id: str) -> bool:
        if task_id in admit:
            admit.discard(task_id)
            return True
        return False

    server = RendezvousServer(SECRET, admit_once, events.append, handshake_timeout=1.0)
    await server.start("127.0.0.1")
    return server, events


async def in_thread(func: Callable[..., T], *args: object) -> T:
    return await asyncio.get_running_loop().run_in_executor(None, func, *args)


def test_a_task_with_the_secret_registers_and_streams() -> None:
    async def scenario() -> None:
        server, events = await serve({"t1"})

        def client() -> None:
            c = Client(server.port)
            c.register("t1")
            c.sock.sendall(protocol.encode_frame(protocol.OUTPUT, b"hello\n"))
            c.sock.sendall(protocol.encode_json({"type": "exit", "code": 7}))
            c.sock.close()

        await in_thread(client)
        await until(lambda: len(events) >= 3, "three events (registered, output, exited)")
        await server.close()
        assert isinstance(events[0], Registered)
        assert events[0].task_id == "t1"
        assert events[0].addr == "h:1"
        assert events[1] == Output("t1", b"hello\n")
        assert events[2] == Exited("t1", 7)

    asyncio.run(scenario())


def test_a_client_without_the_secret_is_refused() -> None:
    async def scenario() -> None:
        server, events = await serve({"t1"})

        def client() -> dict[str, object]:
            with Client(server.port) as c:
                c.register("t1", secret=b"guess" * 8)
                return c.receive()

        answer = await in_thread(client)
        await server.close()
        assert answer == {"type": "reject", "reason": "authentication failed"}
        assert events == []

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("register", "reason"),
    [
        # An address changed on the way: the proof covers it.
        ({"addr": "attacker:1", "proven_addr": "h:1"}, "authentication failed"),
        # An agent from another tfmesos release: said plainly, not "bad proof".
        ({"version": 2}, "protocol version 3 expected: use tfrun's tfmesos"),
    ],
)
def test_a_registration_must_match_its_proof_and_version(
    register: dict[str, Any], reason: str
) -> None:
    async def scenario() -> None:
        server, events = await serve({"t1"})

        def client() -> dict[str, object]:
            with Client(server.port) as c:
                c.register("t1", **register)
                return c.receive()

        answer = await in_thread(client)
        await server.close()
        assert answer == {"type": "reject", "reason": reason}
        assert events == []

    asyncio.run(scenario())


def test_a_task_registers_only_once() -> None:
    async def scenario() -> None:
        server, events = await serve({"t1"})

        def clients() -> tuple[dict[str, object], Client]:
            first = Client(server.port)
            first.register("t1")
            with Client(server.port) as second:
                second.register("t1")
                # The first stays connected until the end: its closing would
                # be an event of its own.
                return second.receive(), first

        answer, first = await in_thread(clients)
        events_before_close = list(events)
        await server.close()
        first.sock.close()
        assert answer["type"] == "reject"
        assert [type(e) for e in events_before_close] == [Registered]

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "garbage",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        struct.pack(">I", 1 << 31),
        struct.pack(">I", 100) + b"J" + b"x" * 99,
        b"\x00" * 10000,
        protocol.encode_frame(protocol.OUTPUT, b"output before registering\n"),
    ],
)
def test_garbage_costs_one_connection_and_the_server_goes_on(garbage: bytes) -> None:
    async def scenario() -> None:
        server, events = await serve({"t1"})

        def attack_then_register() -> None:
            with Client(server.port) as bad:
                with contextlib.suppress(OSError):
                    bad.sock.sendall(garbage)
                assert bad.closed_by_server()
            with Client(server.port) as good:
                good.register("t1")

        await in_thread(attack_then_register)
        await until(
            lambda: any(isinstance(e, Registered) for e in events), "the good client's registration"
        )
        await server.close()
        assert [type(e) for e in events][:1] == [Registered]

    asyncio.run(scenario())


def test_a_silent_client_is_dropped_after_the_handshake_deadline() -> None:
    async def scenario() -> None:
        server, _ = await serve(set())

        def silent() -> bytes:
            with Client(server.port) as c:
                c.sock.settimeout(60)  # a hang guard: a timeout raises
                return c.sock.recv(65536)

        assert await in_thread(silent) == b""  # the server closed it
        await server.close()

    asyncio.run(scenario())


def test_a_flood_of_silent_connections_is_capped_and_real_tasks_still_get_in() -> None:
    async def scenario() -> None:
        events: list[RendezvousEvent] = []
        server = RendezvousServer(
            SECRET, lambda task_id: True, events.append, handshake_timeout=30, max_unproven=5
        )
        await server.start("127.0.0.1")

        def flood() -> list[socket.socket]:
            return [socket.create_connection(("127.0.0.1", server.port)) for _ in range(20)]

        def closed_by_server(socks: list[socket.socket]) -> int:
            closed = 0
            for sock in socks:
                sock.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    while sock.recv(4096):  # past the hello, if any
                        pass
                    closed += 1
            return closed

        socks = await in_thread(flood)
        try:
            await until(
                lambda: server.in_handshake + server.evicted == len(socks),
                "the server to accept all 20 connections",
            )
            closed = await in_thread(closed_by_server, socks)
        finally:
            for sock in socks:  # the flood ends: its handlers go away
                sock.close()
        assert (closed, len(socks) - closed) == (15, 5)  # the cap held
        await until(lambda: server.in_handshake == 0, "the flood's connections to go away")

        c = await in_thread(Client, server.port)
        try:
            await in_thread(c.register, "t1")
            await in_thread(c.sock.sendall, protocol.encode_json({"type": "exit", "code": 0}))
            await until(lambda: len(events) >= 2, "the real task's registration and exit")
        finally:
            c.sock.close()
        await server.close()
        assert [type(e) for e in events][:2] == [Registered, Exited]

    asyncio.run(scenario())


def test_past_the_cap_the_oldest_silent_connection_makes_room_for_a_real_task() -> None:
    # A flood holds every handshake place with connections that never say a
    # word: a real task must still get in at once (not after the flood's
    # handshakes time out), and the one closed for it is the oldest.
    async def scenario() -> None:
        events: list[RendezvousEvent] = []
        server = RendezvousServer(
            SECRET, lambda task_id: True, events.append, handshake_timeout=30, max_unproven=8
        )
        await server.start("127.0.0.1")

        def flood() -> list[socket.socket]:
            socks = []
            for _ in range(8):
                sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
                assert sock.recv(4096)  # its hello: the server holds it
                socks.append(sock)
            return socks

        silent = await in_thread(flood)

        def real_task() -> None:
            c = Client(server.port)
            c.register("t1")
            c.sock.sendall(protocol.encode_json({"type": "exit", "code": 0}))
            assert silent[0].recv(4096) == b""  # the oldest, closed to make room
            for sock in silent[1:]:  # the others are still held
                sock.setblocking(False)
                with pytest.raises(BlockingIOError):
                    sock.recv(4096)
            c.sock.close()

        await in_thread(real_task)
        await until(lambda: len(events) >= 2, "the real task's registration and exit")
        assert [type(e) for e in events][:2] == [Registered, Exited]
        assert server.evicted == 1
        for sock in silent:
            sock.close()
        await server.close()

    asyncio.run(scenario())


def test_a_connection_that_sends_nothing_is_dropped_at_the_first_byte_deadline() -> None:
    # Well before the whole handshake's deadline; one that has begun to speak
    # is not.
    async def scenario() -> None:
        server = RendezvousServer(
            SECRET,
            lambda task_id: True,
            lambda e: None,
            handshake_timeout=30,
            first_byte_timeout=0.2,
        )
        await server.start("127.0.0.1")

        def clients() -> None:
            mute = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            talker = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            talker.sendall(b"\0")  # the start of a frame
            assert mute.recv(4096) and talker.recv(4096)  # their hellos
            assert mute.recv(4096) == b""  # closed at the first-byte deadline
            talker.setblocking(False)
            with pytest.raises(BlockingIOError):
                talker.recv(4096)
            mute.close()
            talker.close()

        await in_thread(clients)
        await server.close()

    asyncio.run(scenario())


def test_a_flood_of_bad_proofs_is_said_once_with_a_count(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import re

    from tfmesos.rendezvous import server as rendezvous_server

    # Said at most every REFUSAL_LOG_INTERVAL; short here, so that the count
    # comes soon.
    monkeypatch.setattr(rendezvous_server, "REFUSAL_LOG_INTERVAL", 0.3, raising=False)
    caplog.set_level("WARNING", logger="tfmesos.rendezvous.server")

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if "bad proof" in r.getMessage()]

    def refusals_said() -> int:
        counts = (re.search(r"refused (\d+) more", m) for m in said())
        return sum(int(c.group(1)) if c else 1 for c in counts)

    async def scenario() -> None:
        server, events = await serve(set())

        def flood() -> None:
            for _ in range(200):
                c = Client(server.port)
                c.register("t1", secret=b"guess" * 8)
                assert c.receive()["type"] == "reject"
                c.sock.close()

        await in_thread(flood)
        deadline = time.monotonic() + 30
        while refusals_said() < 200 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await server.close()
        assert events == []

    asyncio.run(scenario())
    assert refusals_said() == 200, said()
    assert len(said()) <= 10, said()


FLOOD = 1500
"""As many silent connections as the issue's adversarial run held: more than
the 1,024 handshakes the launcher once allowed."""
REAL_TASKS = 20


def test_real_tasks_register_while_a_flood_of_silent_connections_is_held() -> None:
    # A silent connection must cost the launcher a descriptor and no more:
    # neither a task of its own (the CPU that real tasks starting on the same
    # cores need) nor, below the descriptor budget, the eviction churn that
    # a flooder reconnecting as fast as it is closed turns into a busy loop.
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = 2 * FLOOD + 8 * REAL_TASKS + 256  # both ends live in this process
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the hard descriptor limit {hard} is below the {needed} this test holds")
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))

    async def scenario() -> None:
        events: list[RendezvousEvent] = []
        server = RendezvousServer(SECRET, lambda task_id: True, events.append, handshake_timeout=60)
        await server.start("127.0.0.1")
        loop = asyncio.get_running_loop()
        flood: list[socket.socket] = []

        def open_flood() -> None:
            for _ in range(FLOOD):
                sock = socket.socket()
                sock.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    sock.connect(("127.0.0.1", server.port))
                flood.append(sock)

        try:
            await in_thread(open_flood)
            await until(
                lambda: server.in_handshake + server.evicted >= FLOOD,
                f"the server to accept all {FLOOD} connections of the flood",
                timeout=60,
            )
            tasks_while_flooded = len(asyncio.all_tasks(loop))

            def real_task(index: int) -> None:
                c = Client(server.port)
                c.register(f"t{index}")
                c.sock.sendall(protocol.encode_json({"type": "exit", "code": 0}))
                c.sock.close()

            await asyncio.gather(*(in_thread(real_task, i) for i in range(REAL_TASKS)))
            expected = {f"t{i}" for i in range(REAL_TASKS)}
            await until(
                lambda: {e.task_id for e in events if isinstance(e, Exited)} == expected,
                f"the exits of the {REAL_TASKS} real tasks",
                timeout=60,
            )
            registered = [e.task_id for e in events if isinstance(e, Registered)]
            assert sorted(registered) == sorted(expected)
            assert server.evicted == 0
            assert server.in_handshake == FLOOD  # the flood is still held, every one
            assert tasks_while_flooded < 10, tasks_while_flooded
        finally:
            for sock in flood:
                sock.close()
            await server.close()

    asyncio.run(scenario())


def test_out_of_descriptors_with_nothing_to_evict_pauses_accepting_instead_of_spinning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With every descriptor taken and no silent connection to close, accept()
    # keeps failing while the listener stays readable: the loop must step back
    # from it for a moment rather than call accept() on every turn, and take
    # the task in once descriptors are free again.
    import resource

    accepts = 0
    real_accept = RendezvousServer._accept

    def counted(self: RendezvousServer, listener: socket.socket) -> None:
        nonlocal accepts
        accepts += 1
        real_accept(self, listener)

    monkeypatch.setattr(RendezvousServer, "_accept", counted)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

    async def scenario() -> None:
        events: list[RendezvousEvent] = []
        server = RendezvousServer(SECRET, lambda task_id: True, events.append)
        await server.start("127.0.0.1")
        await in_thread(int)  # the executor, whose module is a file to open, ready beforehand
        client = socket.socket()  # its descriptor, before there are none left
        filler: list[int] = []
        try:
            with contextlib.suppress(OSError):  # EMFILE: every descriptor is taken
                while True:
                    filler.append(os.open(os.devnull, os.O_RDONLY))
            await in_thread(client.connect, ("127.0.0.1", server.port))
            await until(lambda: accepts > 0, "the first accept, which fails")
            # The scenario: a window (0.3 s) in which a spinning loop would
            # call it thousands of times.
            await asyncio.sleep(0.3)
            calls_while_out = accepts
        finally:
            for fd in filler:
                os.close(fd)
        client.settimeout(10)
        hello = protocol.FrameDecoder().feed(await in_thread(client.recv, 65536))
        assert protocol.parse_json(hello[0][1])["type"] == "hello"
        client.close()
        await server.close()
        assert calls_while_out <= 2, calls_while_out

    # A low limit, so that filling it is quick.
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        asyncio.run(scenario())
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# -- a task refused at the rendezvous while the job stops ---------------------------


def refused_at_the_rendezvous(stopping: bool) -> list[logging.LogRecord]:
    """What the rendezvous logs of a task id it does not admit, during a
    live job or once the job is stopping."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    async def scenario() -> None:
        server, _ = await serve(set())  # admits no one
        if stopping:
            server.stopping()

        def late_task() -> dict[str, object]:
            with Client(server.port) as client:
                client.register("worker:1.0")
                return client.receive()

        answer = await in_thread(late_task)
        await server.close()
        assert answer == {"type": "reject", "reason": "task not expected"}

    logger = logging.getLogger("tfmesos")
    handler, level = Keep(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        asyncio.run(scenario())
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return [r for r in records if "refused task id 'worker:1.0'" in r.getMessage()]


@pytest.mark.unit
def test_a_task_refused_while_the_job_stops_is_not_news_but_during_a_live_job_it_warns() -> None:
    (live,) = refused_at_the_rendezvous(stopping=False)
    assert live.levelno == logging.WARNING
    assert live.getMessage().endswith(": not expected now")
    (late,) = refused_at_the_rendezvous(stopping=True)
    assert late.levelno == logging.DEBUG, late.getMessage()
    assert late.getMessage().endswith(": not expected now (the job is stopping)")


@pytest.mark.unit
def test_the_launcher_tells_its_rendezvous_that_the_job_is_stopping_before_it_kills(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C while tasks register: the launcher kills those not registered
    yet, and their agents may dial in meanwhile; the rendezvous must know
    from the first moment of the stop."""
    from tfmesos.rendezvous.server import RendezvousServer
    from tfmesos.spec import ClusterSpec, Job
    from tfmesos.testing.fake import FakeBackend, Hangs

    told: list[object] = []  # whether the rendezvous was still open when told
    monkeypatch.setattr(
        RendezvousServer, "stopping", lambda self: told.append(getattr(self, "open", None))
    )
    job = ClusterSpec((Job("worker", 2, cmd="true"),), replica=True)
    backend = FakeBackend(job, {"worker:1": Hangs()})

    async def scenario() -> None:
        launcher = backend.launcher()
        starting = asyncio.create_task(launcher.start())
        await until(lambda: "worker:1" in backend.launched, "worker:1 launched")
        starting.cancel()  # as SIGINT does, while worker:1 has not registered
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        await launcher.stop(drop_stalled_output=True)

    asyncio.run(scenario())
    assert told == [True]
