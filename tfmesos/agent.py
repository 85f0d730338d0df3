"""The in-task agent: ``python -m tfmesos.agent``.

It runs inside every task, wherever the backend put it, and needs nothing but
the standard library, so any image with a Python 3 can host it. It

1. dials the launcher's rendezvous, proves it knows the job's secret and checks
   that the launcher knows it too,
2. waits for the cluster definition,
3. runs the user's command (replica mode) or a TensorFlow server (fine-grained
   mode) as a child in its own process group,
4. streams the child's output back, whole lines at a time, and
5. reports the exit status.

It exits, and takes its child with it, when the launcher goes away: the
rendezvous connection closing is the signal, and it works on every backend.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shlex
import signal
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from tfmesos import procfs, taskenv, wire

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["AgentConfig", "main"]

ENV_LAUNCHER = "TFMESOS_LAUNCHER"
ENV_TASK_ID = "TFMESOS_TASK_ID"
ENV_SECRET = "TFMESOS_SECRET"
ENV_SECRET_FD = "TFMESOS_SECRET_FD"
"""A descriptor the agent inherits, open on a pipe that holds the secret in
hex: the local backend's way to hand it over outside the environment, which
any process of the same user can read in /proc/PID/environ. The agent reads it
and closes it before it runs any command."""
ENV_HOST = "TFMESOS_HOST"
ENV_PORT = "TFMESOS_PORT"
"""The port the task's server listens on; ``0``: the agent chooses one
(Slurm, which hands out no ports) and holds it until the task's command runs."""
ENV_PARENT_PID = "TFMESOS_PARENT_PID"
ENV_SERVER_DEF = "TFMESOS_SERVER_DEF"
ENV_LOG_FILE = "TFMESOS_LOG_FILE"
"""The file the agent's stdout and stderr go to (local backend): with
``ENV_LOG_MAX``, the agent rotates it so that it and its one rotated file
(``FILE.1``) hold at most that many bytes together."""
ENV_LOG_MAX = "TFMESOS_LOG_MAX"
ENV_TLS_CERT = "TFMESOS_TLS_CERT"
"""The launcher's TLS certificate (PEM): when set, the rendezvous is TLS and
this exact certificate is the only one trusted."""

CONNECT_TIMEOUT = 30.0
HANDSHAKE_TIMEOUT = 30.0
HELLO_TIMEOUT = 5.0
"""The launcher says hello as soon as it accepts: a connection that gets no
hello this long (lost in a flooded accept queue), or that is closed before it
(to make room in a flood), is dialled again, until ``CONNECT_TIMEOUT``."""
STOP_GRACE = 5.0
"""Seconds between SIGTERM and SIGKILL for the child's process group."""
LEFTOVER_GRACE = 2.0
"""When the agent is done, how long what its commands left running below it
gets between SIGTERM and SIGKILL."""
READ_SIZE = 1 << 16
SEND_BUFFER = 1 << 18
# A line longer than this is sent in pieces rather than held back.
MAX_PENDING_LINE = 1 << 16

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


class AgentError(Exception):
    """The agent cannot go on; the message says why."""


class _NoHello(AgentError):
    """The connection closed, or stayed silent, before the launcher's hello."""


class AgentConfig:
    """The agent's settings, read once from its environment.

    A plain class rather than a dataclass: ``dataclasses`` pulls in
    ``inspect``, a sixth of the agent's start-up time.
    """

    __slots__ = ("host", "launcher", "parent_pid", "port", "secret", "task_id", "tls_cert")

    def __init__(
        self,
        launcher: tuple[str, int],
        task_id: str,
        secret: bytes,
        host: str,
        port: int,
        parent_pid: int | None,
        tls_cert: str | None = None,
    ) -> None:
        self.launcher = launcher
        self.task_id = task_id
        self.secret = secret
        self.host = host
        self.port = port
        self.parent_pid = parent_pid
        self.tls_cert = tls_cert

    @classmethod
    def from_environ(cls, environ: dict[str, str]) -> AgentConfig:
        """Read the agent's settings, removing the secret from ``environ`` so
        that the user's command never inherits it."""
        try:
            launcher = environ[ENV_LAUNCHER]
            task_id = environ[ENV_TASK_ID]
            secret = _read_secret(environ)
            port = int(environ[ENV_PORT])
        except KeyError as exc:
            raise AgentError(f"{exc.args[0]} is not set: start the agent through tfmesos") from None
        except ValueError:
            raise AgentError(f"{ENV_PORT} must be a port number") from None
        host, _, launcher_port = launcher.rpartition(":")
        if not host or not launcher_port.isdigit():
            raise AgentError(f"{ENV_LAUNCHER} must be host:port, not {launcher!r}")
        try:
            secret_bytes = bytes.fromhex(secret)
        except ValueError:
            raise AgentError(f"{ENV_SECRET} must be hexadecimal") from None
        parent = environ.get(ENV_PARENT_PID)
        return cls(
            launcher=(host.strip("[]"), int(launcher_port)),
            task_id=task_id,
            secret=secret_bytes,
            host=environ.get(ENV_HOST) or _own_host(),
            port=port,
            parent_pid=int(parent) if parent and parent.isdigit() else None,
            tls_cert=environ.get(ENV_TLS_CERT) or None,
        )

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def _own_host() -> str:
    """The name other tasks dial to reach this one, where the backend did not
    say (Slurm): this host's first name that is not a loopback one (as the
    launcher chooses its own: :mod:`tfmesos.advertise`), else its address on
    the default route. Not ``TFMESOS_ADVERTISE_HOST``: that is the launcher's,
    and a Slurm task inherits the launcher's environment."""
    from tfmesos.advertise import own_name

    return own_name() or socket.getfqdn()


def _read_secret(environ: dict[str, str]) -> str:
    """The job's secret, from the descriptor ``ENV_SECRET_FD`` names (read to
    its end and closed) or else from ``ENV_SECRET``; removed from ``environ``
    either way, so that the user's command never inherits it."""
    secret = environ.pop(ENV_SECRET, None)
    fd_text = environ.pop(ENV_SECRET_FD, None)
    if fd_text is not None:
        try:
            fd = int(fd_text)
        except ValueError:
            raise AgentError(f"{ENV_SECRET_FD} must be a descriptor number") from None
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
        raise KeyError(ENV_SECRET)
    return secret


def _become_subreaper() -> None:
    """Have the processes the commands orphan handed to this agent rather
    than to init, so that what a task leaves behind stays below its agent."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _exit_with_parent(parent_pid: int) -> None:
    """Ask Linux to send us SIGTERM when the launcher dies, even by SIGKILL.

    The closed rendezvous connection tells us the same on every platform; this
    covers the moment before we have connected.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:  # it died before prctl took effect
        raise AgentError("the launcher exited before the task started")


def _child_setup() -> None:
    # Own process group, so that stopping the command reaches its children too;
    # and die with the agent if the agent is killed outright.
    os.setpgid(0, 0)
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class Channel:
    """The agent's end of the rendezvous connection (blocking socket)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.decoder = wire.FrameDecoder(wire.MAX_FRAME)
        self.closed = False

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_json(self, message: dict[str, Any]) -> None:
        self.send(wire.encode_json(message))

    def receive_available(self) -> list[dict[str, Any]]:
        """Read what the socket has now; EOF marks the channel closed."""
        try:
            data = self.sock.recv(READ_SIZE)
        except (ConnectionError, TimeoutError):
            data = b""
        if not data:
            self.closed = True
            return []
        # A TLS socket may hold decrypted bytes that select() cannot see.
        pending = getattr(self.sock, "pending", None)
        while pending is not None and pending() > 0:
            data += self.sock.recv(pending())
        return [wire.parse_json(p) for k, p in self.decoder.feed(data) if k == wire.JSON]


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.selector = selectors.DefaultSelector()
        self._nonces: tuple[str, str] = ("", "")
        """The client's and the launcher's nonces, which the cluster proof covers."""
        self._backlog: list[dict[str, Any]] = []
        self._children: list[subprocess.Popen[bytes]] = []
        """Commands that have exited, not yet reaped (see finish())."""
        self.stop_requested = False
        """The launcher said stop, or went away."""
        """Messages that came in the same read as the cluster definition."""
        self.signal_received: int | None = None
        self.last_signal: int | None = None
        """The signal that killed the last command run, if one did."""
        self._wakeup_r, self._wakeup_w = os.pipe()
        os.set_blocking(self._wakeup_w, False)
        self.channel: Channel | None = None
        self.log = TaskLog.from_environ(os.environ)

    # -- signals -----------------------------------------------------------

    def install_signal_handlers(self) -> None:
        signal.set_wakeup_fd(self._wakeup_w)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        self.selector.register(self._wakeup_r, selectors.EVENT_READ, "signal")

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.signal_received is None:
            self.signal_received = signum

    # -- rendezvous ----------------------------------------------------------

    def connect(self, redial: bool = False) -> Channel:
        """Dial the launcher and register. ``redial``: a registered connection
        was dropped; a refusal now means the launcher is gone (it listens
        from before the first task starts to the end of the job)."""
        host, port = self.config.launcher
        deadline = time.monotonic() + CONNECT_TIMEOUT
        while True:
            if self.signal_received is not None:
                raise AgentError(
                    f"stopped by signal {self.signal_received} before the cluster was up"
                )
            try:
                sock = socket.create_connection((host, port), timeout=HELLO_TIMEOUT)
            except OSError as exc:
                if time.monotonic() > deadline or (
                    redial and isinstance(exc, ConnectionRefusedError)
                ):
                    raise AgentError(f"cannot reach the launcher at {host}:{port}: {exc}") from None
                time.sleep(0.5)
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # Caps what a task can have in flight when the launcher reads slowly
            # (Linux would otherwise grow the buffer to several MiB).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
            if self.config.tls_cert is not None:
                sock = self._wrap_tls(sock)
            channel = Channel(sock)
            try:
                hello = self._next_message(channel, "hello")
            except _NoHello:
                sock.close()
                if time.monotonic() > deadline:
                    raise AgentError(
                        f"the launcher at {host}:{port} accepted the connection but never "
                        "answered (is the port flooded?)"
                    ) from None
                continue
            break
        sock.settimeout(HANDSHAKE_TIMEOUT)
        if hello.get("version") != wire.PROTOCOL_VERSION:
            raise AgentError(
                f"the launcher speaks protocol version {hello.get('version')!r}, this agent "
                f"{wire.PROTOCOL_VERSION}: the task's tfmesos must be the same as tfrun's"
            )
        nonce = str(hello.get("nonce", ""))
        client_nonce = os.urandom(16).hex()
        channel.send_json(
            {
                "type": "register",
                "version": wire.PROTOCOL_VERSION,
                "task_id": self.config.task_id,
                "addr": self.config.address,
                "pid": os.getpid(),
                "nonce": client_nonce,
                "proof": wire.proof(
                    self.config.secret,
                    "register",
                    nonce,
                    self.config.task_id,
                    client_nonce,
                    self.config.address,
                ),
            }
        )
        self._nonces = (client_nonce, nonce)
        sock.settimeout(None)
        self.channel = channel
        self.selector.register(sock, selectors.EVENT_READ, "launcher")
        return channel

    def disconnect(self) -> None:
        """Drop the rendezvous connection (to dial again)."""
        if self.channel is not None:
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
                if expected == "hello":
                    raise _NoHello("the launcher closed the connection before its hello")
                raise AgentError("the launcher closed the connection during the handshake")
            if messages:
                message = messages[0]
                if message["type"] == "reject":
                    raise AgentError(f"the launcher refused this task: {message.get('reason')}")
                if message["type"] != expected:
                    raise AgentError(
                        f"expected {expected!r} from the launcher, got {message['type']!r}"
                    )
                return message

    def wait_for_cluster(self) -> dict[str, Any]:
        """Block until the launcher sends the cluster definition (or goes away)."""
        assert self.channel is not None
        heard = False
        while True:
            for key, _ in self.selector.select():
                if key.data == "signal":
                    self._drain_wakeup()
                    raise AgentError(
                        f"stopped by signal {self.signal_received} before the cluster was up"
                    )
                messages = self.channel.receive_available()
                heard = heard or bool(messages)
                for position, message in enumerate(messages):
                    if message["type"] == "cluster":
                        expected = wire.proof(
                            self.config.secret, "cluster", *self._nonces, wire.digest(message)
                        )
                        if not wire.proof_matches(expected, message.get("proof")):
                            raise AgentError(
                                "the cluster message failed its proof: not from this job's "
                                "launcher, or changed on the way"
                            )
                        # A stop right behind it must not be lost.
                        self._backlog = messages[position + 1 :]
                        return message
                    if message["type"] in ("stop", "reject"):
                        raise AgentError(
                            f"the launcher stopped this task: {message.get('reason', '')}"
                        )
                if self.channel.closed:
                    if not heard:
                        # Closed with not a word since the registration: a
                        # flood's eviction (or the launcher's end, which a
                        # new connection finds out).
                        raise _NoHello("the launcher went away before the cluster was up")
                    raise AgentError("the launcher went away before the cluster was up")

    def _drain_wakeup(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self._wakeup_r, 64)

    # -- running the child -----------------------------------------------------

    def run_child(
        self,
        argv: str | list[str],
        env: Mapping[str, str],
        cwd: str | None,
        ready_port: int | None = None,
    ) -> int:
        """Run one command to its end, streaming its output; return its status.

        With ``ready_port``, tell the launcher once something accepts
        connections on that port (the TF server is up).
        """
        proc = subprocess.Popen(
            argv,
            shell=isinstance(argv, str),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            preexec_fn=_child_setup,
        )
        assert proc.stdout is not None
        pipe = proc.stdout.fileno()
        os.set_blocking(pipe, False)
        self.selector.register(pipe, selectors.EVENT_READ, "child")
        pending = b""
        kill_at: float | None = None
        exited_at: float | None = None
        pipe_open = True
        # The child's exit wakes the loop through a pidfd, so that a command
        # that closed or redirected its output is still waited for as long as
        # it runs, without polling.
        exit_fd = _pidfd(proc.pid)
        if exit_fd is not None:
            self.selector.register(exit_fd, selectors.EVENT_READ, "exit")

        def stop_child() -> None:
            nonlocal kill_at
            if kill_at is None:
                _signal_group(proc.pid, signal.SIGTERM)
                kill_at = time.monotonic() + STOP_GRACE

        if any(m["type"] == "stop" for m in self._backlog):
            self.stop_requested = True
        self._backlog.clear()
        # A stop that came while an earlier command (the initializer) ran
        # holds for this one too.
        if (
            self.stop_requested
            or self.signal_received is not None
            or (self.channel is not None and self.channel.closed)
        ):
            stop_child()
        while True:
            now = time.monotonic()
            if kill_at is not None and now >= kill_at:
                _signal_group(proc.pid, signal.SIGKILL)
                kill_at = float("inf")
                if exited_at is None:
                    self.note(f"the command did not stop within {STOP_GRACE:g}s of SIGTERM: killed")
            if exited_at is None and _exit_status(proc.pid) is not None:
                exited_at = now
            # Done once the child has exited and its output is all read. A
            # grandchild that left the group may hold the pipe open forever:
            # once the child itself is gone, give the pipe a moment, then stop.
            if exited_at is not None and (not pipe_open or now - exited_at > 1.0):
                break
            if ready_port is not None and exited_at is None and _accepts(ready_port):
                self._send_json({"type": "ready"})
                ready_port = None
            busy = exited_at or kill_at or ready_port is not None or exit_fd is None
            for key, _ in self.selector.select(timeout=0.1 if busy else 1.0):
                if key.data == "child":
                    try:
                        data = os.read(pipe, READ_SIZE)
                    except BlockingIOError:
                        continue
                    if not data:  # the command closed its output; it may run on
                        pipe_open = False
                        self.selector.unregister(pipe)
                        continue
                    pending = self._forward(pending + data)
                elif key.data == "exit":
                    self.selector.unregister(key.fd)
                elif key.data == "signal":
                    self._drain_wakeup()
                    stop_child()
                elif key.data == "launcher" and self.channel is not None:
                    messages = self.channel.receive_available()
                    if self.channel.closed or any(m["type"] == "stop" for m in messages):
                        self.stop_requested = True
                        stop_child()
                    if self.channel.closed:
                        self.selector.unregister(self.channel.sock)
        if pending:
            self._emit(pending)
        if pipe_open:
            self.selector.unregister(pipe)
        if exit_fd is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(exit_fd)
            os.close(exit_fd)
        proc.stdout.close()
        returncode = _exit_status(proc.pid)
        assert returncode is not None
        # Not reaped yet: while the exited leader is a zombie, no other
        # process group can take its number, so finish() can signal what is
        # left in the group without hitting a stranger.
        self._children.append(proc)
        self.last_signal = -returncode if returncode < 0 else None
        return 128 - returncode if returncode < 0 else returncode

    def finish(self) -> None:
        """End whatever the commands left running below this agent (a
        background helper, say, even one that left their process group or
        session with ``setsid``: the agent is their subreaper), and reap the
        commands. An initializer's helpers thus live until the command and
        the finalizer are done."""
        if not _end_descendants():
            _end_groups([proc.pid for proc in self._children])
        for proc in self._children:
            proc.wait()
        self._children.clear()
        # Orphans of the commands were handed to us (subreaper): reap them.
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass

    def _forward(self, data: bytes) -> bytes:
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            if len(data) < MAX_PENDING_LINE:
                return data
            cut = len(data)
        self._emit(data[:cut])
        return data[cut:]

    def _emit(self, data: bytes) -> None:
        # The task's own stdout is its sandbox log: everything lands there even
        # when the launcher does not print it.
        self.log.write(data)
        if self.channel is not None and not self.channel.closed:
            try:
                self.channel.send(wire.encode_frame(wire.OUTPUT, data))
            except OSError:
                self.channel.closed = True

    def _send_json(self, message: dict[str, Any]) -> None:
        if self.channel is not None and not self.channel.closed:
            try:
                self.channel.send_json(message)
            except OSError:
                self.channel.closed = True

    def report_exit(self, code: int, killed_by: int | None = None) -> None:
        """Tell the launcher how the task ended: its status, the signal that
        killed its command if one did, and the signal this agent was sent if
        it was (someone stopped the task on its host)."""
        message: dict[str, Any] = {"type": "exit", "code": code}
        if killed_by is not None:
            message["signal"] = killed_by
        if self.signal_received is not None:
            message["agent_signal"] = self.signal_received
        self._send_json(message)
        if self.channel is not None and not self.channel.closed:
            with contextlib.suppress(OSError):
                self.channel.sock.shutdown(socket.SHUT_WR)

    def note(self, text: str) -> None:
        self._emit(f"[tfmesos agent] {text}\n".encode())


class TaskLog:
    """The agent's stdout, where everything the task prints is kept (its
    sandbox log on Mesos, its log file locally). Given a file and a cap, the
    file is rotated once it holds half the cap: the file and ``FILE.1``
    together never hold more than the cap, and the newest output is kept."""

    def __init__(self, path: str | None = None, cap: int = 0) -> None:
        self.path = path
        self.half = cap // 2 if path and cap > 1 else 0
        try:
            self.size = os.fstat(1).st_size
        except OSError:
            self.size = 0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> TaskLog:
        cap = environ.get(ENV_LOG_MAX, "")
        return cls(environ.get(ENV_LOG_FILE) or None, int(cap) if cap.isdigit() else 0)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            chunk = view
            if self.half:
                if self.size >= self.half:
                    self._rotate()
                chunk = view[: max(self.half - self.size, 1)]
            written = os.write(1, chunk)
            self.size += written
            view = view[written:]

    def _rotate(self) -> None:
        assert self.path is not None
        try:
            os.replace(self.path, self.path + ".1")
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        except OSError:
            self.half = 0  # cannot rotate (the directory is gone?): write on
            return
        for target in (1, 2):
            os.dup2(fd, target)
        os.close(fd)
        self.size = 0


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.05).close()
    except OSError:
        return False
    return True


PORT_SPAN = 8000
"""How many ports below the kernel's ephemeral range tasks' ports come from."""


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for ``bind(0)`` and outgoing connections."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            low, high = ports.read().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default; macOS uses 49152-65535


MESOS_AGENT_PORTS = (31000, 32000)
"""The ``ports`` a Mesos agent offers unless told otherwise
(``src/slave/constants.hpp``, ``DEFAULT_PORTS``)."""


def task_port_range() -> tuple[int, int]:
    """Where tasks' ports come from: below the ephemeral range, where no
    ``bind(0)`` and no outgoing connection ever takes one, and below the
    ports a Mesos agent on this machine would offer to other tasks (tfrun's
    chief may run on one)."""
    high = min(ephemeral_range()[0], MESOS_AGENT_PORTS[0]) - 1
    return max(1024, high - PORT_SPAN), high


def reserve_port() -> tuple[int, socket.socket]:
    """Choose a free port for this task and hold it: a socket bound to it
    without ``SO_REUSEADDR``, so that no other task's agent on this host can
    take it (their check binds with it, and fails) until this one lets it go,
    right before its command starts and binds it. Tried from a random place
    in :func:`task_port_range`, so that agents starting together on one host
    rarely try the same port."""
    low, high = task_port_range()
    span = high - low + 1
    start = int.from_bytes(os.urandom(4), "big") % span
    for step in range(span):
        port = low + (start + step) % span
        if not port_is_free(port):
            continue
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("", port))
        except OSError:
            sock.close()
            continue
        return port, sock
    raise AgentError(f"no free port in {low}-{high} on this host")


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # TensorFlow's gRPC server binds with SO_REUSEADDR, so a port in
        # TIME_WAIT is free for it; test the way it will bind.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group; say whether anyone was left in it."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _live_descendants() -> list[int]:
    """The processes below this agent that have not exited (zombies, such as
    the commands it has not reaped yet, do not count)."""
    return [p.pid for p in procfs.descendants(os.getpid()) if p.state not in ("Z", "X")]


def _signal_pid(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _end_descendants() -> bool:
    """End every process below this agent, whatever group or session it is
    in: SIGTERM (and SIGCONT, so that a stopped one sees it), one shared
    moment to exit, then SIGKILL until none is left. Say whether it could:
    where the kernel does not list children, nothing was done."""
    try:
        live = _live_descendants()
    except OSError:
        return False
    for pid in live:
        _signal_pid(pid, signal.SIGTERM)
        _signal_pid(pid, signal.SIGCONT)
    deadline = time.monotonic() + LEFTOVER_GRACE
    while live and time.monotonic() < deadline:
        time.sleep(0.02)
        live = _live_descendants()
    while live:  # what ignored SIGTERM, and anything forked meanwhile
        for pid in live:
            _signal_pid(pid, signal.SIGKILL)
        time.sleep(0.01)
        live = _live_descendants()
    return True


def _end_groups(pgids: list[int]) -> None:
    """Stop what the commands left behind in their process groups.

    A task's helpers (a TensorBoard, a data server started in the background)
    end with the task: SIGTERM, one shared moment to exit, then SIGKILL. On
    Mesos the containerizer would kill them anyway; locally nobody else would.
    """
    live = [pgid for pgid in pgids if _group_has_live_members(pgid)]
    for pgid in live:
        _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + LEFTOVER_GRACE
    while live and time.monotonic() < deadline:
        time.sleep(0.02)
        live = [pgid for pgid in live if _group_has_live_members(pgid)]
    for pgid in live:
        _signal_group(pgid, signal.SIGKILL)


def _group_has_live_members(pgid: int) -> bool:
    """Whether any process in the group is still running: zombies, such as
    the group's own unreaped leader, do not count."""
    try:
        # The agent is a subreaper: whatever its commands left behind is
        # below it, and only that small tree is read.
        return any(p.pgrp == pgid and p.state != "Z" for p in procfs.descendants(os.getpid()))
    except OSError:
        pass
    try:
        return any(p.pgrp == pgid and p.state != "Z" for p in procfs.processes())
    except OSError:  # no /proc: ask the kernel, zombies and all
        return _signal_group(pgid, 0)


def _exit_status(pid: int) -> int | None:
    """A child's exit status as ``Popen.returncode`` gives it, or None while it
    runs; without reaping it."""
    try:
        result = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped already (SIGCHLD ignored): as Popen does
        return 0
    if result is None:
        return None
    return result.si_status if result.si_code == os.CLD_EXITED else -result.si_status


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux >= 5.3, or a sandbox without it
        return None


def _task_command(
    message: dict[str, Any], environ: dict[str, str]
) -> tuple[str | list[str], dict[str, str]]:
    """The child to run and its environment, from the launcher's cluster message."""
    cluster = message["cluster_def"]
    job_name = str(message["job_name"])
    task_index = int(message["task_index"])
    env = dict(environ)
    for name in _AGENT_ONLY:
        env.pop(name, None)
    env.update({str(k): str(v) for k, v in (message.get("env") or {}).items()})
    env.update(
        taskenv.task_environment(
            cluster,
            job_name,
            task_index,
            run_id=str(message.get("run_id") or ""),
            restart=int(message.get("restart") or 0),
            max_restarts=int(message.get("max_restarts") or 0),
        )
    )
    server = message.get("server") or {}
    for name, value in taskenv.default_environment(float(server.get("cpus") or 1)).items():
        env.setdefault(name, value)
    command = message.get("cmd")
    if command is None:
        env[ENV_SERVER_DEF] = json.dumps(message.get("server") or {})
        return [sys.executable, "-m", "tfmesos.tfserver"], env
    values = taskenv.placeholder_values(cluster, job_name, task_index)
    return exec_if_simple(taskenv.fill_placeholders(str(command), values)), env


# Shell operators that make a command line more than one simple command.
_OPERATORS = ";&|()"
# Shell reserved words: a line that starts with one is not one plain command.
_KEYWORDS = frozenset(
    [
        "if",
        "for",
        "while",
        "until",
        "case",
        "{",
        "!",
        "[[",
        "exec",
        "function",
        "time",
        "coproc",
        "select",
    ]
)
# Shell builtins, which cannot be exec'ed (`exec exit 3` is "exit: not found").
_BUILTINS = frozenset(
    [
        ":",
        ".",
        "source",
        "alias",
        "bg",
        "bind",
        "break",
        "builtin",
        "caller",
        "cd",
        "command",
        "compgen",
        "complete",
        "compopt",
        "continue",
        "declare",
        "dirs",
        "disown",
        "enable",
        "eval",
        "exit",
        "export",
        "fg",
        "getopts",
        "hash",
        "help",
        "history",
        "jobs",
        "let",
        "local",
        "logout",
        "mapfile",
        "popd",
        "pushd",
        "read",
        "readarray",
        "readonly",
        "return",
        "set",
        "shift",
        "shopt",
        "suspend",
        "times",
        "trap",
        "type",
        "typeset",
        "ulimit",
        "umask",
        "unalias",
        "unset",
        "wait",
    ]
)


def exec_if_simple(command: str) -> str:
    """``exec`` a simple command, so that the shell becomes the command.

    The command is then the agent's own child, which the kernel kills when the
    agent dies however it dies (``PR_SET_PDEATHSIG``); behind a shell that
    stays, only the shell would be, and the command would outlive both.
    Anything that is not plainly one command (lists, pipelines, subshells,
    keywords, leading variable assignments, command substitution) is left as
    it is.
    """
    stripped = command.strip()
    if not stripped or "`" in stripped or "\n" in stripped or "$(" in stripped:
        return command
    lexer = shlex.shlex(stripped, posix=True, punctuation_chars=_OPERATORS)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: let the shell say so
        return command
    if not tokens or any(t and set(t) <= set(_OPERATORS) for t in tokens):
        return command
    if tokens[0] in _KEYWORDS or tokens[0] in _BUILTINS or "=" in tokens[0]:
        return command
    return f"exec {stripped}"


# The agent's own settings are no business of the command; the task id stays,
# so that a process can always be traced back to its task.
_AGENT_ONLY = (
    ENV_LAUNCHER,
    ENV_SECRET,
    ENV_SECRET_FD,
    ENV_HOST,
    ENV_PORT,
    ENV_PARENT_PID,
    ENV_TLS_CERT,
    ENV_LOG_FILE,
    ENV_LOG_MAX,
)


def run(config: AgentConfig, environ: dict[str, str]) -> int:
    agent = Agent(config)
    agent.install_signal_handlers()
    reserved: socket.socket | None = None
    if config.port == 0:
        # No port was handed out (Slurm): take one here and say which.
        config.port, reserved = reserve_port()
    elif not port_is_free(config.port):
        # Fail before registering, so that the launcher retries us elsewhere.
        raise AgentError(f"port {config.port} on {config.host} is already in use")
    deadline = time.monotonic() + CONNECT_TIMEOUT
    redial = False
    while True:
        agent.connect(redial)
        try:
            message = agent.wait_for_cluster()
            break
        except _NoHello:
            # Dropped before a word came back (a flood makes room by closing
            # the oldest handshakes): dial again, as for a lost hello.
            if time.monotonic() > deadline:
                raise
            agent.disconnect()
            redial = True
    argv, env = _task_command(message, environ)
    if reserved is not None:
        # Let go of the port right before the commands that bind it run.
        reserved.close()
    cwd = message.get("cwd")
    if cwd is not None and not os.path.isdir(cwd):
        agent.note(f"working directory {cwd} does not exist here; running in {os.getcwd()}")
        cwd = None
    extra = message.get("extra_config") or {}
    code = 0
    killed_by: int | None = None
    try:
        initializer = extra.get("initializer")
        if initializer:
            code = agent.run_child(str(initializer), env, cwd)
            killed_by = agent.last_signal
            if code != 0:
                agent.note(f"initializer exited with status {code}; the command was not run")
        if code == 0:
            server_mode = message.get("cmd") is None
            code = agent.run_child(argv, env, cwd, ready_port=config.port if server_mode else None)
            killed_by = agent.last_signal
        finalizer = extra.get("finalizer")
        if finalizer:
            final_code = agent.run_child(str(finalizer), env, cwd)
            if final_code != 0:
                agent.note(f"finalizer exited with status {final_code}")
    finally:
        agent.finish()
    agent.report_exit(code, killed_by)
    return code


def main() -> int:
    # An ignored SIGCHLD (inherited through exec) would have the kernel reap
    # the commands before their status could be read.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    environ = dict(os.environ)
    try:
        config = AgentConfig.from_environ(environ)
        if config.parent_pid is not None:
            _exit_with_parent(config.parent_pid)
        _become_subreaper()
        return run(config, environ)
    except AgentError as exc:
        print(f"[tfmesos agent] {exc}", file=sys.stderr, flush=True)
        return 1
    except wire.FrameError as exc:
        print(
            f"[tfmesos agent] protocol error from the launcher: {exc}", file=sys.stderr, flush=True
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
