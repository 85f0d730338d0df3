"""The task's end of the rendezvous (:mod:`tfmesos.rendezvous.server` is the
launcher's): its settings, dialling the launcher, the handshake, waiting for
the cluster definition, and the connection afterwards.

The agent uses it for its task, and the Slurm job script for itself (it
registers as the job's own helper). Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import time
from typing import TYPE_CHECKING

from tfmesos.rendezvous import protocol

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = [
    "KEEPALIVE_COUNT",
    "KEEPALIVE_IDLE",
    "KEEPALIVE_INTERVAL",
    "AgentConfig",
    "AgentError",
    "Channel",
    "NoHello",
    "RendezvousClient",
    "keepalive",
]

READ_SIZE = 1 << 16
SEND_CHUNK = 1 << 16
"""The most one send hands the socket of what a queued channel holds."""
KEEPALIVE_IDLE = 10
KEEPALIVE_INTERVAL = 5
KEEPALIVE_COUNT = 3
DIAL_PAUSE = 0.5
"""Between two dials of a launcher that refused, or was not there yet."""


class AgentError(Exception):
    """The agent cannot go on; the message says why."""


class Unresolvable(AgentError):
    """The launcher's host name does not resolve on this host: no retry helps
    (the agent exits with :data:`tfmesos.rendezvous.protocol.UNRESOLVED_STATUS`)."""


_NO_SUCH_NAME = frozenset(
    getattr(socket, name) for name in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, name)
)
"""getaddrinfo's "this name has no address", as against a failing resolver
(``EAI_AGAIN``), which dialling again may get past."""


class NoHello(AgentError):
    """The connection closed, or stayed silent, before the launcher's hello."""


class AgentConfig:
    """The agent's settings, read once from its environment.

    A plain class rather than a dataclass: ``dataclasses`` pulls in
    ``inspect``, a sixth of the agent's start-up time.
    """

    __slots__ = (
        "host",
        "launcher",
        "parent_pid",
        "port",
        "port_count",
        "secret",
        "silence_limit",
        "task_id",
        "tls_cert",
    )

    def __init__(
        self,
        launcher: tuple[str, int],
        task_id: str,
        secret: bytes,
        host: str,
        port: int,
        parent_pid: int | None,
        tls_cert: str | None = None,
        silence_limit: float = protocol.SILENCE_LIMIT,
        port_count: int = 1,
    ) -> None:
        self.launcher = launcher
        self.task_id = task_id
        self.secret = secret
        self.host = host
        self.port = port
        self.parent_pid = parent_pid
        self.tls_cert = tls_cert
        self.silence_limit = silence_limit
        """How long the launcher's host may acknowledge nothing of this
        connection (``TCP_USER_TIMEOUT``) before it is taken for gone; mere
        silence that long (a frozen launcher) gets a warning."""
        self.port_count = port_count
        """Consecutive ports the task takes from ``port`` on (``--nproc-per-task``)."""

    @classmethod
    def from_environ(cls, environ: dict[str, str]) -> AgentConfig:
        """Read the agent's settings, removing the secret so the user's command
        never inherits it."""
        try:
            launcher = environ[protocol.ENV_LAUNCHER]
            task_id = environ[protocol.ENV_TASK_ID]
            secret = _read_secret(environ)
            port = int(environ[protocol.ENV_PORT])
            port_count = int(environ.get(protocol.ENV_PORT_COUNT) or 1)
        except KeyError as exc:
            raise AgentError(f"{exc.args[0]} is not set: start the agent through tfmesos") from None
        except ValueError:
            raise AgentError(
                f"{protocol.ENV_PORT} and {protocol.ENV_PORT_COUNT} must be whole numbers"
            ) from None
        host, _, launcher_port = launcher.rpartition(":")
        if not host or not launcher_port.isdigit():
            raise AgentError(f"{protocol.ENV_LAUNCHER} must be host:port, not {launcher!r}")
        try:
            secret_bytes = bytes.fromhex(secret)
        except ValueError:
            raise AgentError(f"{protocol.ENV_SECRET} must be hexadecimal") from None
        parent = environ.get(protocol.ENV_PARENT_PID)
        return cls(
            launcher=(host.strip("[]"), int(launcher_port)),
            task_id=task_id,
            secret=secret_bytes,
            host=environ.get(protocol.ENV_HOST) or _own_host(),
            port=port,
            parent_pid=int(parent) if parent and parent.isdigit() else None,
            tls_cert=environ.get(protocol.ENV_TLS_CERT) or None,
            silence_limit=protocol.silence_limit(environ),
            port_count=max(port_count, 1),
        )

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def keepalive(sock: socket.socket, user_timeout: float | None = None) -> None:
    """TCP keepalive on ``sock``: a peer whose machine vanished without closing
    the connection is noticed within ``KEEPALIVE_IDLE`` + ``KEEPALIVE_INTERVAL``
    x ``KEEPALIVE_COUNT`` seconds of quiet; ``user_timeout``: also give up on
    data the peer has not acknowledged for that many seconds
    (``TCP_USER_TIMEOUT``), which keepalive alone never does while data waits."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    options = [
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
        ("TCP_KEEPCNT", KEEPALIVE_COUNT),
    ]
    if user_timeout is not None:
        options.append(("TCP_USER_TIMEOUT", int(user_timeout * 1000)))
    for name, value in options:
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


def _would_block(exc: OSError) -> bool:
    """A non-blocking socket's "not now", plain or TLS (whose errors are
    named, not numbered, and whose module the agent imports only for TLS)."""
    return isinstance(exc, BlockingIOError) or type(exc).__name__ in (
        "SSLWantReadError",
        "SSLWantWriteError",
    )


def _own_host() -> str:
    """The name other tasks dial to reach this one, where the backend did not
    say (Slurm): this host's first name that is not a loopback one (as the
    launcher chooses its own: :mod:`tfmesos.common.advertise`), else its address on
    the default route. Not ``TFMESOS_ADVERTISE_HOST``: that is the launcher's,
    and a Slurm task inherits the launcher's environment."""
    from tfmesos.common.advertise import own_name

    return own_name() or socket.getfqdn()


def _dialled(host: str) -> str | bytes:
    """``host`` as bytes where it is ASCII, which ``getaddrinfo`` takes as is: a
    str would import the idna codec, a start-up cost every agent would pay."""
    return host.encode("ascii") if host.isascii() else host


def _read_secret(environ: dict[str, str]) -> str:
    """The job's secret, from the descriptor ``ENV_SECRET_FD`` names (read to
    its end and closed) or else from ``ENV_SECRET``; removed from ``environ``
    either way, so that the user's command never inherits it."""
    secret = environ.pop(protocol.ENV_SECRET, None)
    fd_text = environ.pop(protocol.ENV_SECRET_FD, None)
    if fd_text is not None:
        try:
            fd = int(fd_text)
        except ValueError:
            raise AgentError(f"{protocol.ENV_SECRET_FD} must be a descriptor number") from None
        chunks = []
        try:
            while True:
                chunk = os.read(fd, 256)
                if not chunk:
                    break
                chunks.append(chunk)
        except OSError as exc:
            raise AgentError(f"cannot read the job's secret from descriptor {fd}: {exc}") from None
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
        secret = b"".join(chunks).decode("ascii", "replace").strip()
    if secret is None:
        raise KeyError(protocol.ENV_SECRET)
    return secret


class Channel:
    """The task's end of one rendezvous connection.

    Blocking, but for a queued channel (:meth:`queue`): its socket is
    non-blocking, and what it does not take at once waits in ``unsent``,
    sent as the socket has room (:meth:`flush`), so that a launcher the task
    cannot reach never blocks the agent."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.decoder = protocol.FrameDecoder(protocol.MAX_FRAME)
        self.closed = False
        self.queued = False
        self.unsent = bytearray()
        now = time.monotonic()
        self.last_heard = now
        """When anything last came from the launcher (``time.monotonic()``)."""
        self.last_sent = now
        self.failure: OSError | None = None
        """Why the connection failed, where it did not simply close: a reset,
        or ``ETIMEDOUT`` once the launcher's host has acknowledged nothing for
        the ``TCP_USER_TIMEOUT`` (or the keepalive probes went unanswered)."""

    def queue(self) -> None:
        """From now on, sends wait in ``unsent`` rather than block."""
        self.queued = True
        self.sock.setblocking(False)

    def send(self, data: bytes) -> None:
        self.last_sent = time.monotonic()
        if not self.queued:
            self.sock.sendall(data)
            return
        self.unsent += data
        self.flush()

    def flush(self) -> None:
        """Send what the socket takes now of ``unsent``."""
        while self.unsent:
            try:
                sent = self.sock.send(self.unsent[:SEND_CHUNK])
            except OSError as exc:
                if _would_block(exc):
                    return
                raise
            del self.unsent[:sent]

    def send_json(self, message: dict[str, Any]) -> None:
        self.send(protocol.encode_json(message))

    def receive_available(self) -> list[dict[str, Any]]:
        """Read what the socket has now; EOF closes the channel. Heartbeats are
        not returned."""
        try:
            data = self.sock.recv(READ_SIZE)
        except OSError as exc:
            if _would_block(exc):
                return []
            data = b""  # reset, or TCP_USER_TIMEOUT's ETIMEDOUT
            self.failure = exc
        if not data:
            self.closed = True
            return []
        self.last_heard = time.monotonic()
        # A TLS socket may hold decrypted bytes that select() cannot see.
        pending = getattr(self.sock, "pending", None)
        while pending is not None and pending() > 0:
            data += self.sock.recv(pending())
        return [protocol.parse_json(p) for k, p in self.decoder.feed(data) if k == protocol.JSON]


class RendezvousClient:
    """Registers one task (or the Slurm job script) with the launcher and
    keeps its connection.

    ``selector``: the caller's, where the connection is registered (data
    ``"launcher"``) once it is up, and which :meth:`wait_for_cluster` waits
    on; a key with data ``"signal"`` there means the caller was signalled,
    and ``interrupted`` says by which signal (None: not).
    """

    def __init__(
        self,
        config: AgentConfig,
        selector: selectors.BaseSelector | None = None,
        interrupted: Callable[[], int | None] = lambda: None,
        queued: bool = False,
    ) -> None:
        self.config = config
        self.selector = selector
        self.interrupted = interrupted
        self.queued = queued
        """The agent's way: sends never block (:meth:`Channel.queue`), the
        connection beats, and has keepalive and ``TCP_USER_TIMEOUT``."""
        self.output_bytes = 0
        """Bytes of output handed to :meth:`send_output`, in all: the exit
        report says it, so that the launcher knows whether it has them all."""
        self.channel: Channel | None = None
        self.backlog: list[dict[str, Any]] = []
        """Messages that came in the same read as the cluster definition."""
        self._nonces: tuple[str, str] = ("", "")
        """The client's and the launcher's nonces, which the cluster proof covers."""

    @property
    def closed(self) -> bool:
        return self.channel is not None and self.channel.closed

    def connect(self, redial: bool = False) -> Channel:
        """Dial the launcher and register. ``redial``: a registered connection
        was dropped; a refusal now means the launcher is gone (it listens
        from before the first task starts to the end of the job)."""
        host, port = self.config.launcher
        deadline = time.monotonic() + protocol.CONNECT_TIMEOUT
        while True:
            signum = self.interrupted()
            if signum is not None:
                raise AgentError(f"stopped by signal {signum} before the cluster was up")
            try:
                # typeshed says str; getaddrinfo, which it hands the host to, takes bytes.
                address = (_dialled(host), port)
                sock = socket.create_connection(address, timeout=protocol.HELLO_TIMEOUT)  # type: ignore[arg-type]
            except socket.gaierror as exc:
                # Unknown: at once; a failing resolver: once dialling is over.
                if exc.errno in _NO_SUCH_NAME or time.monotonic() > deadline:
                    raise Unresolvable(
                        f"cannot resolve the launcher's host name {host} on "
                        f"{socket.gethostname()}: {exc.strerror}"
                    ) from None
                time.sleep(DIAL_PAUSE)
                continue
            except OSError as exc:
                if time.monotonic() > deadline or (
                    redial and isinstance(exc, ConnectionRefusedError)
                ):
                    raise AgentError(f"cannot reach the launcher at {host}:{port}: {exc}") from None
                time.sleep(DIAL_PAUSE)
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # Caps what a task can have in flight when the launcher reads slowly
            # (Linux would otherwise grow the buffer to several MiB).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, protocol.SOCKET_BUFFER)
            if self.config.tls_cert is not None:
                sock = self._wrap_tls(sock)
            channel = Channel(sock)
            try:
                hello = self._next_message(channel, protocol.HELLO)
            except NoHello:
                sock.close()
                if time.monotonic() > deadline:
                    raise AgentError(
                        f"the launcher at {host}:{port} accepted the connection but never "
                        "answered (is the port flooded?)"
                    ) from None
                continue
            break
        sock.settimeout(protocol.HANDSHAKE_TIMEOUT)
        if hello.get("version") != protocol.PROTOCOL_VERSION:
            raise AgentError(
                f"the launcher speaks protocol version {hello.get('version')!r}, this agent "
                f"{protocol.PROTOCOL_VERSION}: the task's tfmesos must be the same as tfrun's"
            )
        nonce = str(hello.get("nonce", ""))
        client_nonce = os.urandom(16).hex()
        channel.send_json(
            {
                "type": protocol.REGISTER,
                "version": protocol.PROTOCOL_VERSION,
                "task_id": self.config.task_id,
                "addr": self.config.address,
                "pid": os.getpid(),
                "nonce": client_nonce,
                "proof": protocol.proof(
                    self.config.secret,
                    protocol.REGISTER,
                    nonce,
                    self.config.task_id,
                    client_nonce,
                    self.config.address,
                ),
            }
        )
        self._nonces = (client_nonce, nonce)
        sock.settimeout(None)
        if self.queued:
            keepalive(sock, self.config.silence_limit)
            channel.queue()
        self.channel = channel
        if self.selector is not None:
            self.selector.register(sock, selectors.EVENT_READ, "launcher")
        return channel

    def disconnect(self) -> None:
        """Drop the rendezvous connection (to dial again)."""
        if self.channel is not None:
            if self.selector is not None:
                self.selector.unregister(self.channel.sock)
            self.channel.sock.close()
            self.channel = None

    def _wrap_tls(self, sock: socket.socket) -> socket.socket:
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # The launcher's own certificate is the only trust anchor: a pin. The
        # name it was issued to does not matter, the key does.
        context.check_hostname = False
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=self.config.tls_cert)
        try:
            return context.wrap_socket(sock)
        except (ssl.SSLError, OSError) as exc:
            raise AgentError(f"TLS with the launcher failed: {exc}") from None

    def _next_message(self, channel: Channel, expected: str) -> dict[str, Any]:
        while True:
            messages = channel.receive_available()
            if channel.closed:
                if expected == protocol.HELLO:
                    raise NoHello("the launcher closed the connection before its hello")
                raise AgentError("the launcher closed the connection during the handshake")
            if messages:
                message = messages[0]
                if message["type"] == protocol.REJECT:
                    raise AgentError(f"the launcher refused this task: {message.get('reason')}")
                if message["type"] != expected:
                    raise AgentError(
                        f"expected {expected!r} from the launcher, got {message['type']!r}"
                    )
                return message

    def wait_for_cluster(self) -> dict[str, Any]:
        """Block until the launcher sends the cluster definition (or goes away)."""
        assert self.channel is not None
        assert self.selector is not None
        heard = False
        while True:
            self.beat()
            for key, mask in self.selector.select(self.beat_due()):
                if key.data == "signal":
                    raise AgentError(
                        f"stopped by signal {self.interrupted()} before the cluster was up"
                    )
                if mask & selectors.EVENT_WRITE:
                    self.flush()
                if not mask & selectors.EVENT_READ:
                    continue
                messages = self.channel.receive_available()
                heard = heard or bool(messages)
                for position, message in enumerate(messages):
                    if message["type"] == protocol.CLUSTER:
                        expected = protocol.proof(
                            self.config.secret,
                            protocol.CLUSTER,
                            *self._nonces,
                            protocol.digest(message),
                        )
                        if not protocol.proof_matches(expected, message.get("proof")):
                            raise AgentError(
                                "the cluster message failed its proof: not from this job's "
                                "launcher, or changed on the way"
                            )
                        # A stop right behind it must not be lost.
                        self.backlog = messages[position + 1 :]
                        return message
                    if message["type"] in (protocol.STOP, protocol.REJECT):
                        raise AgentError(
                            f"the launcher stopped this task: {message.get('reason', '')}"
                        )
                if self.channel.closed:
                    failure = self.channel.failure
                    if failure is not None and failure.errno == errno.ETIMEDOUT:
                        raise AgentError(
                            f"lost the launcher before the cluster was up: {self.lost_because()}"
                        )
                    if not heard:
                        # Closed with not a word since the registration: a
                        # flood's eviction (or the launcher's end, which a
                        # new connection finds out).
                        raise NoHello("the launcher went away before the cluster was up")
                    raise AgentError("the launcher went away before the cluster was up")

    def receive(self) -> list[dict[str, Any]]:
        """What the launcher sent since; a closed connection leaves the selector."""
        assert self.channel is not None
        messages = self.channel.receive_available()
        if self.channel.closed and self.selector is not None:
            self.selector.unregister(self.channel.sock)
        return messages

    def send_json(self, message: dict[str, Any]) -> None:
        """Send if the connection is up; a failed send marks it closed."""
        self._send(protocol.encode_json(message))

    def send_output(self, data: bytes) -> None:
        self.output_bytes += len(data)
        self._send(protocol.encode_frame(protocol.OUTPUT, data))

    def _send(self, frame: bytes) -> None:
        if self.channel is not None and not self.channel.closed:
            try:
                self.channel.send(frame)
            except OSError as exc:
                self.channel.closed = True
                self.channel.failure = exc
            self._watch_writes()

    def flush(self) -> None:
        """Send what the socket takes now of what waits (a queued channel)."""
        if self.channel is not None and not self.channel.closed:
            try:
                self.channel.flush()
            except OSError as exc:
                self.channel.closed = True
                self.channel.failure = exc
            self._watch_writes()

    @property
    def unsent(self) -> int:
        """Bytes waiting for room in the socket (a queued channel)."""
        return len(self.channel.unsent) if self.channel is not None else 0

    def _watch_writes(self) -> None:
        """Have the selector say when the socket has room, while bytes wait."""
        channel = self.channel
        if self.selector is None or channel is None or not channel.queued:
            return
        try:
            key = self.selector.get_key(channel.sock)
        except (KeyError, ValueError):
            return  # closed, and out of the selector
        events = selectors.EVENT_READ
        if channel.unsent and not channel.closed:
            events |= selectors.EVENT_WRITE
        if key.events != events:
            self.selector.modify(channel.sock, events, key.data)

    def beat(self) -> None:
        """A heartbeat, if nothing else has gone out for ``BEAT_INTERVAL``."""
        channel = self.channel
        if (
            channel is not None
            and channel.queued
            and not channel.closed
            and time.monotonic() - channel.last_sent >= protocol.BEAT_INTERVAL
        ):
            self._send(protocol.BEAT_FRAME)

    def beat_due(self) -> float:
        """Seconds until :meth:`beat` has something to do."""
        if self.channel is None:
            return protocol.BEAT_INTERVAL
        return max(0.0, self.channel.last_sent + protocol.BEAT_INTERVAL - time.monotonic())

    def lost_because(self) -> str:
        """Why the connection failed, in words: the kernel's, as it is the
        kernel that decides (a peer whose process is frozen still answers)."""
        failure = self.channel.failure if self.channel is not None else None
        if failure is None:
            return "tfrun closed the connection"
        if failure.errno == errno.ETIMEDOUT:
            return (
                f"its host acknowledged nothing for {self.config.silence_limit:g}s "
                "(the connection timed out: the host is gone or cut off)"
            )
        return f"the connection failed: {failure.strerror or failure}"

    def silent_for(self) -> float:
        """Seconds since anything came from the launcher."""
        if self.channel is None:
            return 0.0
        return time.monotonic() - self.channel.last_heard

    def shutdown(self) -> None:
        """Say that nothing more comes from this end (after the exit report)."""
        if self.channel is not None and not self.channel.closed:
            with contextlib.suppress(OSError):
                self.channel.sock.shutdown(socket.SHUT_WR)
