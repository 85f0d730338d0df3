"""The contract between the launcher and the in-task agent: the rendezvous frames,
the environment a backend starts the agent with (``ENV_*``), and the timings
both ends rely on. Standard library only (the agent imports it).

A frame is a 4-byte big-endian length (of what follows), a kind byte and the
payload:

``J``
    a UTF-8 JSON object: registration, cluster definition, stop, exit.
``O``
    raw bytes a task printed, whole lines; not JSON, as output is the hot path.
``H``
    a heartbeat, sent after ``BEAT_INTERVAL`` of sending nothing else, so a
    quiet peer can be told from one that cannot be heard.

Both sides authenticate with HMAC-SHA256 challenge and response on the job's
secret, which never crosses the wire.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = [
    "AGENT_ONLY",
    "BEAT",
    "BEAT_FRAME",
    "BEAT_INTERVAL",
    "CLUSTER",
    "CONNECT_TIMEOUT",
    "ENV_BASE",
    "ENV_COMMAND",
    "ENV_HOST",
    "ENV_LAUNCHER",
    "ENV_LOG_FILE",
    "ENV_LOG_MAX",
    "ENV_PARENT_PID",
    "ENV_PORT",
    "ENV_PORT_COUNT",
    "ENV_READY_FD",
    "ENV_RENDEZVOUS_PORT",
    "ENV_RENDEZVOUS_VIA",
    "ENV_SECRET",
    "ENV_SECRET_FD",
    "ENV_SERVER_DEF",
    "ENV_SILENCE_LIMIT",
    "ENV_TASK_ID",
    "ENV_TLS_CERT",
    "EXIT",
    "HANDSHAKE_TIMEOUT",
    "HELLO",
    "HELLO_TIMEOUT",
    "JSON",
    "LOG_FAILED",
    "MAX_FRAME",
    "MAX_HANDSHAKE_FRAME",
    "OUTPUT",
    "PROTOCOL_VERSION",
    "READY",
    "REGISTER",
    "REJECT",
    "SILENCE_LIMIT",
    "SOCKET_BUFFER",
    "STEP_ENDED",
    "STOP",
    "STOP_GRACE",
    "UNHEARD_AFTER",
    "UNRESOLVED_STATUS",
    "UNSENT_MAX",
    "FrameDecoder",
    "FrameError",
    "encode_frame",
    "encode_json",
    "parse_json",
    "proof",
    "proof_matches",
    "silence_limit",
]

JSON = b"J"
OUTPUT = b"O"
BEAT = b"H"
_KINDS = (JSON, OUTPUT, BEAT)
_HEADER = struct.Struct(">I")

MAX_FRAME = 1 << 20
"""Largest frame an authenticated peer may send (1 MiB)."""
MAX_HANDSHAKE_FRAME = 4096
"""Largest frame before the peer has proved it knows the secret."""

PROTOCOL_VERSION = 3
"""2: the cluster message's proof covers its content, the registration's its
address. 3: heartbeats (``H``), which an agent of 2 takes for a protocol
error; the exit report counts the output sent (``output_bytes``)."""


# -- The JSON messages: each object's "type", and who sends it. ----------------

HELLO = "hello"
"""Launcher, first: ``version``, ``nonce`` (the challenge the agent answers)."""
REGISTER = "register"
"""Agent: ``task_id``, ``addr`` (its server's, or the port it holds),
``proof`` (of the secret, over the nonce and what it announces), ``nonce``."""
REJECT = "reject"
"""Launcher, instead of admitting the agent: ``reason``."""
CLUSTER = "cluster"
"""Launcher: the cluster definition, the command and its environment, and
``proof`` (over the whole message, so that a task can trust it)."""
READY = "ready"
"""Agent (fine-grained mode): its TensorFlow server accepts connections."""
LOG_FAILED = "log_failed"
"""Agent: its task's log cannot be written (``problem``); the task goes on."""
EXIT = "exit"
"""Agent, last: ``code``, ``signal``, ``output_bytes`` and how it ended."""
STOP = "stop"
"""Launcher: end the task (``reason``)."""
STEP_ENDED = "step_ended"
"""The Slurm job script: a job step (``task_id``) ended with ``code``."""


# -- The agent's environment: what a backend sets, what the agent reads. --------

ENV_LAUNCHER = "TFMESOS_LAUNCHER"
"""``host:port`` of the launcher's rendezvous."""
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
ENV_PORT_COUNT = "TFMESOS_PORT_COUNT"
"""How many consecutive ports, from ``ENV_PORT`` on, the task takes (unset:
1): a worker's N processes with ``--nproc-per-task N`` are N TensorFlow
workers, each at its own (:func:`tfmesos.common.taskenv.process_cluster`)."""
ENV_PARENT_PID = "TFMESOS_PARENT_PID"
ENV_SERVER_DEF = "TFMESOS_SERVER_DEF"
"""Fine-grained mode: the TensorFlow server's settings, for ``tfmesos.agent.tfserver``."""
ENV_READY_FD = "TFMESOS_READY_FD"
"""Fine-grained mode: a descriptor ``tfmesos.agent.tfserver`` inherits from the agent
and writes one byte to once its server listens (the agent then tells the
launcher ``ready``)."""
ENV_LOG_FILE = "TFMESOS_AGENT_LOG_FILE"
"""The file the agent's stdout and stderr go to (local backend): with
``ENV_LOG_MAX``, the agent rotates it so that it and its one rotated file
(``FILE.1``) hold at most that many bytes together."""
ENV_LOG_MAX = "TFMESOS_AGENT_LOG_MAX_BYTES"
"""The agent's copy of the user's ``TFMESOS_TASK_LOG_MAX`` (a size such as
50M), in bytes, set by the backend: the one setting has one user-facing name,
and this name says that it is the agent's (a user who sets it is overridden)."""
ENV_TLS_CERT = "TFMESOS_TLS_CERT"
"""The launcher's TLS certificate (PEM): when set, the rendezvous is TLS and
this exact certificate is the only one trusted."""
ENV_BASE = "TFMESOS_ENV_BASE"
"""Where the agent's environment came from, which says what of it the task's
command keeps (:func:`tfmesos.common.exported.task_base`): ``here`` (the local
backend: tfrun's, on its host), ``elsewhere`` (Slurm: tfrun's, carried to
another host), ``image`` (Mesos with ``--image``: the image's); unset: the
task's host's (a Mesos agent's). What tfrun's environment carries to the task
comes in its cluster message (``exported``)."""

ENV_COMMAND = "TFMESOS_NPROC_COMMAND"
"""The command line each of a task's processes runs (placeholders filled),
in the environment of the agent's runner of several (``--nproc-per-task``,
:mod:`tfmesos.agent.nproc`): the launcher counts it in what one command may
take (:func:`tfmesos.launcher.message.check_environment`)."""

ENV_SILENCE_LIMIT = "TFMESOS_SILENCE_LIMIT"
"""Seconds, ``SILENCE_LIMIT`` where unset: set in tfrun's environment, it is
the launcher's and, handed on by it, every agent's (tests shorten it)."""

ENV_RENDEZVOUS_PORT = "TFMESOS_RENDEZVOUS_PORT"
"""tfrun's: the port its rendezvous listens on (unset: any free one)."""
ENV_RENDEZVOUS_VIA = "TFMESOS_RENDEZVOUS_VIA"
"""tfrun's: ``host:port`` the tasks dial instead of the rendezvous itself, a
forwarder to it (``ENV_RENDEZVOUS_PORT``). For tests, which put one between
tfrun and its tasks to cut the network between them."""

AGENT_ONLY = (
    ENV_LAUNCHER,
    ENV_SECRET,
    ENV_SECRET_FD,
    ENV_HOST,
    ENV_PORT,
    ENV_PORT_COUNT,
    ENV_PARENT_PID,
    ENV_TLS_CERT,
    ENV_LOG_FILE,
    ENV_LOG_MAX,
    ENV_BASE,
    ENV_SILENCE_LIMIT,
)
"""The agent's own settings, which are no business of the task's command; the
task id stays, so that a process can always be traced back to its task."""

# -- What the agent's exit status says before it has registered. -----------------

UNRESOLVED_STATUS = 68
"""The agent's exit status when the launcher's host name does not resolve on
its host (``EX_NOHOST`` of sysexits.h). A backend that hears only the status
(Mesos) has tfrun name the task's host and the name it could not resolve."""

# -- Timings and sizes the two ends rely on. --------------------------------------

CONNECT_TIMEOUT = 30.0
"""How long an agent keeps dialling a launcher that does not answer."""
HANDSHAKE_TIMEOUT = 30.0
"""How long the agent waits on the launcher during the handshake."""
HELLO_TIMEOUT = 5.0
"""The launcher says hello as soon as it accepts: a connection that gets no
hello this long (lost in a flooded accept queue), or that is closed before it
(to make room in a flood), is dialled again, until ``CONNECT_TIMEOUT``."""
STOP_GRACE = 5.0
"""Seconds the agent gives the command's process group between SIGTERM and
SIGKILL: the launcher and the backends wait at least this long for a stopped
task."""
BEAT_INTERVAL = 2.0
"""Each end of a rendezvous connection sends a heartbeat (``H``) when it has
sent nothing else for this long: silence is then news."""
UNHEARD_AFTER = 3 * BEAT_INTERVAL
"""The launcher says it cannot hear a task once nothing (output, a message,
a heartbeat) has come from it for this long, and says when it hears it again."""
SILENCE_LIMIT = 30.0
"""How long the launcher's host may acknowledge nothing of an agent's
connection (the socket's ``TCP_USER_TIMEOUT``; keepalive when idle) before
the kernel fails it and the agent takes the launcher for gone: it stops its
command as a stop from tfrun would (SIGTERM to its group, SIGKILL after
``STOP_GRACE``) and exits. Mere silence that long (a frozen launcher, whose
kernel still answers) gets a warning. The same bound ends an agent's delivery
of the rest of its output and its exit status once its command has ended,
and it is how long the launcher waits, after a backend says a task ended, for what
that task's agent has still to deliver. ``ENV_SILENCE_LIMIT`` changes it."""
SOCKET_BUFFER = 1 << 18
"""Each end's buffer of a rendezvous connection's socket (the agent's for
sending, the launcher's for receiving), set rather than left to Linux, which
grows it to several MiB: with ``UNSENT_MAX`` and a task's pipe, it bounds what
a task has in flight when the launcher reads slowly."""
UNSENT_MAX = 4 << 20
"""The most a task's agent holds of its output that the launcher has not
taken (it cannot hear, or reads slowly); past it the agent stops reading the
command's output, which then waits, as on a full pipe: nothing is dropped."""


def silence_limit(environ: Mapping[str, str]) -> float:
    """``ENV_SILENCE_LIMIT`` from ``environ`` if a positive number, else
    ``SILENCE_LIMIT``."""
    try:
        value = float(environ.get(ENV_SILENCE_LIMIT) or SILENCE_LIMIT)
    except ValueError:
        return SILENCE_LIMIT
    return value if value > 0 else SILENCE_LIMIT


class FrameError(ValueError):
    """The peer sent something that is not a valid frame."""


def encode_frame(kind: bytes, payload: bytes) -> bytes:
    if kind not in _KINDS:
        raise ValueError(f"unknown frame kind {kind!r}")
    return _HEADER.pack(len(payload) + 1) + kind + payload


BEAT_FRAME = _HEADER.pack(1) + BEAT
"""A heartbeat, encoded once."""


def encode_json(message: dict[str, Any]) -> bytes:
    return encode_frame(JSON, json.dumps(message, separators=(",", ":")).encode())


def parse_json(payload: bytes) -> dict[str, Any]:
    """Decode a ``J`` payload into a dict with a string ``type``."""
    try:
        message = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FrameError(f"malformed JSON message: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise FrameError("a message must be a JSON object with a string 'type'")
    return message


class FrameDecoder:
    """Turns a byte stream into frames, however the stream was cut into chunks.

    Refuses a frame longer than ``max_frame`` as soon as its header is seen, so
    a peer cannot make the launcher buffer more than that.
    """

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        self._buffer += data
        frames: list[tuple[bytes, bytes]] = []
        while len(self._buffer) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(self._buffer)
            if length < 1 or length > self.max_frame + 1:
                raise FrameError(f"frame length {length} out of bounds (max {self.max_frame})")
            end = _HEADER.size + length
            if len(self._buffer) < end:
                break
            kind = bytes(self._buffer[_HEADER.size : _HEADER.size + 1])
            if kind not in _KINDS:
                raise FrameError(f"unknown frame kind {kind!r}")
            frames.append((kind, bytes(self._buffer[_HEADER.size + 1 : end])))
            del self._buffer[:end]
        return frames

    @property
    def pending(self) -> int:
        """Bytes received that do not yet make a whole frame."""
        return len(self._buffer)


def proof(secret: bytes, purpose: str, *parts: str) -> str:
    """An HMAC of ``parts`` under ``secret``, bound to ``purpose`` so that a
    proof made for one step can never be replayed as another."""
    message = "\n".join((purpose, *parts)).encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def digest(message: dict[str, Any]) -> str:
    """A digest of a JSON message's content, less its ``proof``, for a proof
    to cover: both ends compute it over the same canonical encoding."""
    content = {k: v for k, v in message.items() if k != "proof"}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def proof_matches(expected: str, given: object) -> bool:
    """Whether ``given`` (from the network: any JSON) is ``expected``;
    compared as bytes, since ``compare_digest`` refuses a str that is not ASCII."""
    if not isinstance(given, str):
        return False
    return hmac.compare_digest(
        expected.encode("utf-8", "surrogatepass"), given.encode("utf-8", "surrogatepass")
    )
