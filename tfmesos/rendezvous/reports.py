"""What the rendezvous server reports to the launcher: one event for each
thing that happens on a task's connection (:data:`RendezvousEvent`), and,
with a task's registration, the :class:`Connection` the launcher sends to it
through. The launcher, the backends that run a task's agent part themselves
and the test doubles name these; only :mod:`tfmesos.rendezvous.server` makes
them from the network.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tfmesos.rendezvous import protocol

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "Connection",
    "Disconnected",
    "Exited",
    "Heard",
    "Message",
    "Output",
    "Ready",
    "Registered",
    "RendezvousEvent",
    "Unheard",
]


class Connection:
    """One registered task's connection."""

    last_heard = 0.0
    """When anything (output, a message, a heartbeat) last came from the
    task (``time.monotonic()``); 0: never (a stand-in without a socket)."""

    def __init__(
        self, writer: asyncio.StreamWriter, secret: bytes, client_nonce: str, nonce: str
    ) -> None:
        self._writer = writer
        self._secret = secret
        self._nonces = (client_nonce, nonce)
        self.closed = False
        now = time.monotonic()
        self.last_heard = now
        self.last_sent = now
        self.unheard = False
        """Said to be unheard (:class:`Unheard`), and not heard since."""
        self.waiting = False
        """Its reader waits for the console (the output's flow), not for
        the task: silence now says nothing of the task."""

    def seal(self, message: dict[str, Any]) -> dict[str, Any]:
        """The message with a proof of the secret that also covers its
        content, so that nobody on the path can change what a task runs."""
        proof = protocol.proof(
            self._secret, protocol.CLUSTER, *self._nonces, protocol.digest(message)
        )
        return {**message, "proof": proof}

    def send(self, message: dict[str, Any]) -> None:
        if self.closed or self._writer.is_closing():
            return
        self.last_sent = time.monotonic()
        self._writer.write(protocol.encode_json(message))

    def beat(self, now: float) -> None:
        """A heartbeat, if nothing else has gone to the task for ``BEAT_INTERVAL``."""
        if now - self.last_sent >= protocol.BEAT_INTERVAL and not (
            self.closed or self._writer.is_closing()
        ):
            self.last_sent = now
            self._writer.write(protocol.BEAT_FRAME)

    def close(self) -> None:
        self.closed = True
        self._writer.close()


@dataclass(frozen=True, slots=True)
class Registered:
    task_id: str
    addr: str
    connection: Connection


@dataclass(frozen=True, slots=True)
class Output:
    task_id: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Exited:
    task_id: str
    code: int
    signal: int | None = None
    """The signal that killed the task's command, if one did."""
    agent_signal: int | None = None
    """The signal the task's agent was sent, if it was."""
    out_of_memory: bool = False
    """The kernel's OOM killer killed the command (its memory cgroup's count rose)."""
    local_rank: int | None = None
    """Which of the task's processes failed first, where it ran several
    (``tfrun --nproc-per-task``)."""
    error: str | None = None
    """The exception that ended it, as torch's ``@record`` wrote it
    (``TORCHELASTIC_ERROR_FILE``): ``ValueError: ...``."""
    output_bytes: int | None = None
    """Bytes of output its agent sent in all: the launcher has them all
    when it has received as many."""


@dataclass(frozen=True, slots=True)
class Ready:
    """A task's TensorFlow server accepts connections."""

    task_id: str


@dataclass(frozen=True, slots=True)
class Disconnected:
    task_id: str
    by_peer: bool = False
    """The task closed its end, after all it sent: nothing was cut short."""


@dataclass(frozen=True, slots=True)
class Unheard:
    """Nothing has come from a registered task for ``silent`` seconds
    (``protocol.UNHEARD_AFTER`` at least): not its output, nor its heartbeat."""

    task_id: str
    silent: float


@dataclass(frozen=True, slots=True)
class Heard:
    """A task said :class:`Unheard` is heard again, after ``silent`` seconds."""

    task_id: str
    silent: float


@dataclass(frozen=True, slots=True)
class Message:
    """Any other message a registered peer sent: what a backend's own helper
    (Slurm's job script) tells its backend."""

    task_id: str
    message: dict[str, Any]


RendezvousEvent = Registered | Output | Exited | Ready | Disconnected | Message | Unheard | Heard
