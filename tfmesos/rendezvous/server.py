"""The launcher's end of the rendezvous: where tasks dial in.

A task connects, answers the challenge with a proof of the job's secret, and is
then held until the launcher sends it the cluster definition. The connection
stays open for the task's life: it carries the task's output and, at the end,
its exit status; its closing tells each side that the other is gone.

Nothing a peer sends can crash or bloat the launcher: frames are capped (small
before authentication), the handshake has a deadline, and any protocol error
closes only that one connection. What it tells the launcher is
:mod:`tfmesos.rendezvous.reports`.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tfmesos.common.aio import reap
from tfmesos.rendezvous import protocol
from tfmesos.rendezvous.reports import (
    Connection,
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

if TYPE_CHECKING:
    # Only for --tls-cert.
    import ssl

__all__ = ["RendezvousServer"]

logger = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 10.0
FIRST_BYTE_TIMEOUT = 5.0
"""A task answers the hello at once: a connection that has sent nothing this
long after it is dropped, long before the whole handshake's deadline."""
READ_SIZE = 1 << 16
MAX_UNPROVEN = 4096
"""Connections allowed in their handshake at once, at most a quarter of the
launcher's descriptor limit (see ``unproven_cap``): room for every task of a
large job dialling in together. Past it, the oldest connection that has sent
nothing is closed to make room for the new one (a real task answers the hello
within milliseconds; a flood of silent connections only ever evicts itself).
A silent connection costs a descriptor and no more (no task, no timer of its
own): holding one is cheaper than closing it and accepting its flooder's next,
so the cap is as high as the descriptors allow."""
ACCEPT_BATCH = 64
"""Connections accepted in one turn of the event loop: between turns, the
handshakes of the tasks already accepted go on, however fast a flood dials."""
LISTEN_BACKLOG = 4096
"""Connections the kernel holds for the launcher to accept (capped by
``net.core.somaxconn``). asyncio's default of 100 is full all the time under a
flood that reconnects as fast as it is closed: a task's connection then waits
in the kernel's SYN-ACK retries for half a minute."""
REFUSAL_LOG_INTERVAL = 5.0
"""Refusals of one kind are said at most once in this many seconds: the first
at once, the rest as one count. Anyone who reaches the port can cause them,
and must not be able to flood the user's terminal."""


class RendezvousServer:
    """Accepts tasks that prove the secret and that the launcher expects.

    ``admit(task_id)`` is asked once the proof checks out; it says whether this
    task may register now (a known task, not yet registered). Events go to
    ``sink`` in the order they happened on each connection. ``flow(task_id)``,
    when given, is awaited after each read from a task: the consumer's way to
    make that task's reader wait (and so, through TCP, the task) while it
    catches up.
    """

    def __init__(
        self,
        secret: bytes,
        admit: Callable[[str], bool],
        sink: Callable[[RendezvousEvent], None],
        *,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        flow: Callable[[str], Awaitable[None]] | None = None,
        max_unproven: int | None = None,
        first_byte_timeout: float = FIRST_BYTE_TIMEOUT,
    ) -> None:
        self._secret = secret
        self._admit = admit
        self._sink = sink
        self._flow = flow
        self._max_unproven = max_unproven if max_unproven is not None else unproven_cap()
        self._silent: dict[socket.socket, _Silent] = {}
        """Connections that have sent nothing yet, oldest first: no handler
        runs for them until their first bytes come."""
        self._sweep: asyncio.TimerHandle | None = None
        """When the oldest silent connection's first-byte deadline is up."""
        self._listener: socket.socket | None = None
        self._tls: ssl.SSLContext | None = None
        self._speaking: dict[asyncio.Task[Any], str] = {}
        """Handlers of connections that have sent something but not yet
        proven the secret, oldest first, with their peers."""
        self.evicted = 0
        """Connections closed to make room for newer ones, in all."""
        self._handshake_timeout = handshake_timeout
        self._first_byte_timeout = min(first_byte_timeout, handshake_timeout)
        self._handlers: set[asyncio.Task[None]] = set()
        self._logged_at: dict[str, float] = {}
        """When each kind of refusal was last said."""
        self._held_refusals: dict[str, tuple[int, str]] = {}
        """Refusals of each kind not said yet: how many, and the latest peer."""
        self._summaries: dict[str, asyncio.TimerHandle] = {}
        self._stopping = False
        """The job is stopping (:meth:`stopping`)."""
        self._registered: dict[Connection, str] = {}
        """Every registered connection, with its task's id."""
        self._watch: asyncio.TimerHandle | None = None
        self.port = 0

    @property
    def in_handshake(self) -> int:
        """Connections accepted that have not proven the secret yet."""
        return len(self._silent) + len(self._speaking)

    def stopping(self) -> None:
        """The job is stopping: a task that registers from now on is refused,
        and that is expected (one launched a moment before, its agent
        dialling in while the launcher kills it), not news to the user. Such
        a refusal is said at debug level only; during a live job, a refused
        task id is still a warning."""
        self._stopping = True

    async def start(self, host: str, port: int = 0, tls: ssl.SSLContext | None = None) -> int:
        # The accept loop is this server's own rather than asyncio's
        # start_server: a connection gets a stream and a task only once it
        # speaks, so that a flood of silent ones costs next to nothing.
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.create_server((host, port), family=family, backlog=LISTEN_BACKLOG)
        listener.setblocking(False)
        self._tls = tls
        self._listener = listener
        loop = asyncio.get_running_loop()
        loop.add_reader(listener.fileno(), self._accept, listener)
        self._watch = loop.call_later(protocol.BEAT_INTERVAL / 2, self._keep_in_touch)
        self.port = listener.getsockname()[1]
        return self.port

    def _keep_in_touch(self) -> None:
        """Beat to every registered task, and say each that has been silent
        ``UNHEARD_AFTER`` (once, until it is heard again)."""
        now = time.monotonic()
        for connection, task_id in list(self._registered.items()):
            connection.beat(now)
            silent = now - connection.last_heard
            if (
                not connection.unheard
                and not connection.waiting
                and silent >= protocol.UNHEARD_AFTER
            ):
                connection.unheard = True
                self._sink(Unheard(task_id, silent))
        self._watch = asyncio.get_running_loop().call_later(
            protocol.BEAT_INTERVAL / 2, self._keep_in_touch
        )

    async def close(self, linger: float = 0.0) -> None:
        """Stop accepting; give the open connections up to ``linger`` seconds
        to end by themselves (their last output still coming in), then drop
        them."""
        if self._listener is not None:
            asyncio.get_running_loop().remove_reader(self._listener.fileno())
            self._listener.close()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        for sock in list(self._silent):
            self._drop_silent(sock)
        for kind in list(self._summaries):
            self._summaries.pop(kind).cancel()
            self._log_held_refusals(kind)
        if linger > 0 and self._handlers:
            await asyncio.wait(list(self._handlers), timeout=linger)
        for handler in list(self._handlers):
            handler.cancel()
        for handler in list(self._handlers):
            await reap(handler)

    def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(ACCEPT_BATCH):
            try:
                sock, address = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE) and self._silent:
                    # Out of descriptors: a flood's oldest goes, not the door.
                    self._evict_oldest()
                    continue
                logger.debug("rendezvous: accept failed: %s", exc)
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Nothing to close at once: the listener stays readable,
                    # so wait a moment rather than spin on it.
                    loop.remove_reader(listener.fileno())
                    loop.call_later(1.0, self._resume_accepting, listener)
                return
            sock.setblocking(False)
            peer = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
            if self.in_handshake >= self._max_unproven:
                # A flood of connections that never prove anything must not
                # eat the launcher's descriptors, nor keep real tasks out:
                # past the cap, the oldest silent one (else the oldest) makes
                # room.
                self._evict_oldest()
            nonce = None
            if self._tls is None:
                # The hello at once, as the task waits for it; under TLS it
                # follows the TLS handshake, which the task begins.
                nonce = os.urandom(16).hex()
                hello = {
                    "type": protocol.HELLO,
                    "version": protocol.PROTOCOL_VERSION,
                    "nonce": nonce,
                }
                try:
                    sock.send(protocol.encode_json(hello))  # a few bytes: the buffer takes them
                except OSError:
                    sock.close()
                    continue
            self._silent[sock] = _Silent(nonce, time.monotonic(), peer)
            loop.add_reader(sock.fileno(), self._spoke, sock)
            if self._sweep is None:
                self._sweep = loop.call_later(self._first_byte_timeout, self._sweep_silent)

    def _resume_accepting(self, listener: socket.socket) -> None:
        if self._listener is listener and listener.fileno() >= 0:
            asyncio.get_running_loop().add_reader(listener.fileno(), self._accept, listener)

    def _spoke(self, sock: socket.socket) -> None:
        """``sock`` has sent its first bytes (or closed): give it a handler."""
        silent = self._silent.pop(sock, None)
        if silent is None:
            return
        loop = asyncio.get_running_loop()
        loop.remove_reader(sock.fileno())
        handler = loop.create_task(self._handle(sock, silent))
        self._handlers.add(handler)
        self._speaking[handler] = silent.peer

    def _drop_silent(self, sock: socket.socket) -> None:
        self._silent.pop(sock, None)
        asyncio.get_running_loop().remove_reader(sock.fileno())
        sock.close()

    def _sweep_silent(self) -> None:
        """Close the connections that sent nothing by the first-byte
        deadline: one timer for them all, as they are kept in the order of
        their deadlines."""
        self._sweep = None
        now = time.monotonic()
        while self._silent:
            sock, silent = next(iter(self._silent.items()))
            due = silent.since + self._first_byte_timeout
            if due > now:
                self._sweep = asyncio.get_running_loop().call_later(due - now, self._sweep_silent)
                return
            if _has_data(sock):
                self._spoke(sock)
            else:
                logger.debug("rendezvous: dropped %s: nothing sent", silent.peer)
                self._drop_silent(sock)

    async def _handle(self, sock: socket.socket, silent: _Silent) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = silent.peer
        writer: asyncio.StreamWriter | None = None
        served = _Served()
        try:
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader(limit=READ_SIZE)
            stream = asyncio.StreamReaderProtocol(reader)
            left = self._handshake_timeout - (time.monotonic() - silent.since)
            transport, _ = await loop.connect_accepted_socket(
                lambda: stream,
                sock,
                ssl=self._tls,
                ssl_handshake_timeout=max(left, 0.001) if self._tls is not None else None,
            )
            writer = asyncio.StreamWriter(transport, stream, reader, loop)
            await self._serve(reader, writer, silent, served)
            served.returned = True
        except asyncio.CancelledError:
            pass
        except (
            protocol.FrameError,
            asyncio.TimeoutError,
            ConnectionError,
            OSError,  # ssl.SSLError among them
        ) as exc:
            logger.debug("rendezvous: dropped %s: %s", peer, exc)
        except Exception:  # a bug must cost one connection, never the launcher
            logger.exception("rendezvous: unexpected error with %s", peer)
        finally:
            self._speaking.pop(task, None)
            self._handlers.discard(task)
            if writer is not None:
                writer.close()
            else:
                sock.close()
            if served.connection is not None:
                self._registered.pop(served.connection, None)
            if served.task_id is not None and served.returned:
                self._sink(Disconnected(served.task_id, served.by_peer))

    async def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        silent: _Silent,
        served: _Served,
    ) -> None:
        nonce = silent.nonce
        if nonce is None:
            nonce = os.urandom(16).hex()
            writer.write(
                protocol.encode_json(
                    {"type": protocol.HELLO, "version": protocol.PROTOCOL_VERSION, "nonce": nonce}
                )
            )
        decoder = protocol.FrameDecoder(protocol.MAX_HANDSHAKE_FRAME)
        left = self._handshake_timeout - (time.monotonic() - silent.since)
        register, early = await asyncio.wait_for(
            self._first_message(reader, decoder), max(left, 0.001)
        )
        task_id = register.get("task_id")
        client_nonce = register.get("nonce")
        addr = register.get("addr")
        if not (
            isinstance(task_id, str) and isinstance(client_nonce, str) and isinstance(addr, str)
        ):
            raise protocol.FrameError("registration lacks task_id, nonce or addr")
        if register.get("version") != protocol.PROTOCOL_VERSION:
            self._refused(
                "speaking another protocol version (the task's tfmesos differs from tfrun's)",
                f"rendezvous: refused a client at {peer_name(writer)}: it speaks protocol "
                f"version {register.get('version')!r}, this launcher {protocol.PROTOCOL_VERSION} "
                "(the task's tfmesos differs from tfrun's)",
                peer_name(writer),
            )
            reason = f"protocol version {protocol.PROTOCOL_VERSION} expected: use tfrun's tfmesos"
            writer.write(protocol.encode_json({"type": protocol.REJECT, "reason": reason}))
            await writer.drain()
            return
        expected = protocol.proof(
            self._secret, protocol.REGISTER, nonce, task_id, client_nonce, addr
        )
        if register.get("type") != protocol.REGISTER or not protocol.proof_matches(
            expected, register.get("proof")
        ):
            self._refused(
                "with a bad proof of the job secret",
                f"rendezvous: refused a client at {peer_name(writer)}: bad proof of the job secret",
                peer_name(writer),
            )
            writer.write(
                protocol.encode_json({"type": protocol.REJECT, "reason": "authentication failed"})
            )
            await writer.drain()
            return
        if not self._admit(task_id):
            refusal = (
                f"rendezvous: refused task id {task_id!r} from {peer_name(writer)}: "
                "not expected now"
            )
            if self._stopping:
                logger.debug("%s (the job is stopping)", refusal)
            else:
                self._refused("for a task not expected now", refusal, peer_name(writer))
            writer.write(
                protocol.encode_json({"type": protocol.REJECT, "reason": "task not expected"})
            )
            await writer.drain()
            return
        decoder.max_frame = protocol.MAX_FRAME
        sock = writer.get_extra_info("socket")
        if sock is not None:
            # With the agent's send buffer, bounds a task's output in flight.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, protocol.SOCKET_BUFFER)
        connection = Connection(writer, self._secret, client_nonce, nonce)
        handler = asyncio.current_task()
        if handler is not None:  # proven: no longer counted
            self._speaking.pop(handler, None)
        served.task_id, served.connection = task_id, connection
        self._registered[connection] = task_id
        self._sink(Registered(task_id, addr, connection))
        for kind, payload in early + decoder.feed(b""):
            self._dispatch(task_id, kind, payload)
        while True:
            data = await reader.read(READ_SIZE)
            if not data:
                served.by_peer = True
                return
            self._heard(connection, task_id)
            for kind, payload in decoder.feed(data):
                self._dispatch(task_id, kind, payload)
            if self._flow is not None:
                connection.waiting = True
                try:
                    await self._flow(task_id)
                finally:
                    connection.waiting = False
                    # Not read while it waited: its silence is not news.
                    connection.last_heard = max(connection.last_heard, time.monotonic())

    def _heard(self, connection: Connection, task_id: str) -> None:
        now = time.monotonic()
        if connection.unheard:
            connection.unheard = False
            self._sink(Heard(task_id, now - connection.last_heard))
        connection.last_heard = now

    def _evict_oldest(self) -> None:
        peer = ""
        while self._silent:
            oldest, silent = next(iter(self._silent.items()))
            if _has_data(oldest):
                # It has spoken; the loop has not run its callback since.
                # Under a flood the loop accepts faster than it reads: a real
                # task's registration waiting here must not cost it its place.
                self._spoke(oldest)
                continue
            peer = silent.peer
            self._drop_silent(oldest)
            break
        else:
            if not self._speaking:
                return
            victim = next(iter(self._speaking))
            peer = self._speaking.pop(victim)
            victim.cancel()  # its handler closes the connection
        self.evicted += 1
        self._refused(
            "that sent nothing in their handshake, closed to make room for new ones",
            f"rendezvous: {self._max_unproven} connections are in their handshake; closing the "
            f"oldest that have sent nothing to make room for new ones (first {peer})",
            peer,
        )

    def _refused(self, kind: str, message: str, peer: str) -> None:
        """Say a refusal: at once if none of its kind was said lately, else
        counted, and the count said once ``REFUSAL_LOG_INTERVAL`` is up."""
        now = time.monotonic()
        logged_at = self._logged_at.get(kind)
        if kind not in self._held_refusals and (
            logged_at is None or now - logged_at >= REFUSAL_LOG_INTERVAL
        ):
            logger.warning("%s", message)
            self._logged_at[kind] = now
            return
        count, _ = self._held_refusals.get(kind, (0, peer))
        self._held_refusals[kind] = (count + 1, peer)
        if kind not in self._summaries:
            delay = max(0.0, (logged_at or now) + REFUSAL_LOG_INTERVAL - now)
            self._summaries[kind] = asyncio.get_running_loop().call_later(
                delay, self._summary_due, kind
            )

    def _summary_due(self, kind: str) -> None:
        self._summaries.pop(kind, None)
        self._log_held_refusals(kind)

    def _log_held_refusals(self, kind: str) -> None:
        count, peer = self._held_refusals.pop(kind, (0, ""))
        if count:
            logger.warning(
                "rendezvous: refused %d more %s %s in the last %gs (the latest from %s)",
                count,
                "client" if count == 1 else "clients",
                kind,
                REFUSAL_LOG_INTERVAL,
                peer,
            )
            self._logged_at[kind] = time.monotonic()

    async def _first_message(
        self, reader: asyncio.StreamReader, decoder: protocol.FrameDecoder
    ) -> tuple[dict[str, Any], list[tuple[bytes, bytes]]]:
        """The registration, and any frames that came right behind it."""
        data = await reader.read(protocol.MAX_HANDSHAKE_FRAME)
        while True:
            if not data:
                raise ConnectionError("closed during the handshake")
            frames = decoder.feed(data)
            if frames:
                kind, payload = frames[0]
                if kind != protocol.JSON:
                    raise protocol.FrameError("the first frame must be a registration")
                return protocol.parse_json(payload), frames[1:]
            data = await reader.read(protocol.MAX_HANDSHAKE_FRAME)

    def _dispatch(self, task_id: str, kind: bytes, payload: bytes) -> None:
        if kind == protocol.OUTPUT:
            self._sink(Output(task_id, payload))
            return
        if kind == protocol.BEAT:
            return  # heard: that is all it says
        message = protocol.parse_json(payload)
        if message["type"] == protocol.EXIT and isinstance(message.get("code"), int):
            killed_by, agent_signal = message.get("signal"), message.get("agent_signal")
            self._sink(
                Exited(
                    task_id,
                    message["code"],
                    killed_by if isinstance(killed_by, int) else None,
                    agent_signal if isinstance(agent_signal, int) else None,
                    message.get("out_of_memory") is True,
                    local_rank
                    if isinstance(local_rank := message.get("local_rank"), int)
                    else None,
                    error if isinstance(error := message.get("error"), str) else None,
                    sent if isinstance(sent := message.get("output_bytes"), int) else None,
                )
            )
        elif message["type"] == protocol.READY:
            self._sink(Ready(task_id))
        else:
            self._sink(Message(task_id, message))


@dataclass(slots=True)
class _Served:
    """What one connection's handler has learnt: the task it registered,
    and whether the task closed it."""

    task_id: str | None = None
    connection: Connection | None = None
    by_peer: bool = False
    returned: bool = False


@dataclass(frozen=True, slots=True)
class _Silent:
    """A connection accepted that has sent nothing yet."""

    nonce: str | None
    """The nonce of the hello it was sent; ``None`` under TLS, where the
    hello waits for the TLS handshake."""
    since: float
    """When it was accepted (``time.monotonic()``): its deadlines count from here."""
    peer: str


def unproven_cap() -> int:
    """``MAX_UNPROVEN``, or a quarter of this process's descriptor limit if
    that is less: the rest are for the tasks' connections and the backend."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_UNPROVEN
    return max(16, min(MAX_UNPROVEN, soft // 4))


def _has_data(sock: socket.socket) -> bool:
    """Whether bytes (or the peer's end) have arrived that the loop has not
    read yet: under a flood it accepts faster than it reads."""
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))  # b"": the peer has gone
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:  # reset: nothing worth keeping
        return False


def peer_name(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
