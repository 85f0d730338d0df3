"""The launcher's attempts at its tasks, and their states.

Every attempt moves through

    pending -> launched -> registered -> running -> finished | failed | stopped

and every change goes through :meth:`Attempt.move`, which refuses a move the
diagram does not allow (a task's end is final).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from tfmesos.backends.base import TaskEnded
from tfmesos.rendezvous.reports import Connection, Exited
from tfmesos.spec import TaskSpec

__all__ = ["TAIL_BYTES", "TAIL_LINES", "Attempt", "AttemptState", "Attempts", "IllegalMove"]

TAIL_BYTES = 4096
"""How much of each task's latest output is kept to explain a failure."""
TAIL_LINES = 15


class AttemptState(enum.Enum):
    """Where one attempt at one task is (not a Mesos ``TaskState``,
    :mod:`tfmesos.mesos.states`)."""

    PENDING = "pending"
    LAUNCHED = "launched"
    REGISTERED = "registered"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def over(self) -> bool:
        return self in _OVER


_OVER = frozenset({AttemptState.FINISHED, AttemptState.FAILED, AttemptState.STOPPED})

_NEXT: dict[AttemptState, frozenset[AttemptState]] = {
    AttemptState.PENDING: frozenset({AttemptState.LAUNCHED}) | _OVER,
    AttemptState.LAUNCHED: frozenset({AttemptState.REGISTERED}) | _OVER,
    AttemptState.REGISTERED: frozenset({AttemptState.RUNNING}) | _OVER,
    AttemptState.RUNNING: _OVER,
    AttemptState.FINISHED: frozenset(),
    AttemptState.FAILED: frozenset(),
    AttemptState.STOPPED: frozenset(),
}
"""The moves each state allows: forward along the diagram, or to an end."""


class IllegalMove(AssertionError):
    """A move the state diagram does not allow: a bug in the launcher."""


Observer = Callable[["Attempt", AttemptState, AttemptState], None]


@dataclass
class Attempt:
    """The launcher's mutable record of one attempt at one task."""

    spec: TaskSpec
    task_id: str
    attempt: int
    prefix: bytes
    forward: bool
    initial: AttemptState = AttemptState.PENDING
    addr: str = ""
    host: str = ""
    connection: Connection | None = None
    disconnected: bool = False
    ready: bool = False
    ended: TaskEnded | None = None
    ended_at: float = 0.0
    deadline: float | None = None
    """When the loop stops waiting for what this attempt still owes: its
    backend's word after a SIGKILL or a lost connection, or its last output
    after its end (``Loop._check_grace``)."""
    keep_address: str = ""
    """Where this attempt must serve: the address of the attempt it replaces,
    for a fine-grained relaunch (:mod:`tfmesos.launcher.relaunch`); else empty."""
    exit_code: int | None = None
    held_exit: Exited | None = None
    """Its exit, SIGKILLed, held a moment for its backend's word on why
    (``Backend.kill_reason_timeout``)."""
    received: int = 0
    """Bytes of its output that reached the launcher."""
    reported: int | None = None
    """Bytes of output its agent said, in its exit report, it had sent."""
    closed_by_task: bool = False
    """Its agent closed its connection: everything it sent came."""
    unheard: bool = False
    """Nothing comes from it (:class:`tfmesos.rendezvous.reports.Unheard`) and has
    not since: a stop sent now may never reach it."""
    left_unreached: bool = False
    """The job ended with it unheard and no word of its end: tfrun could not
    stop it (its agent stops it once it has not heard tfrun for the limit)."""
    tail: bytearray = field(default_factory=bytearray)
    observer: Observer | None = None
    """Told of every move (old state, new state), after it is made."""

    def __post_init__(self) -> None:
        self._state = self.initial
        self._tally: Attempts | None = None
        """The attempts it is counted in, told of each move."""

    @property
    def state(self) -> AttemptState:
        return self._state

    def move(self, state: AttemptState) -> None:
        """The one way an attempt's state changes. A move to the state it is
        in does nothing; one the diagram does not allow raises."""
        old = self._state
        if state is old:
            return
        if state not in _NEXT[old]:
            raise IllegalMove(
                f"task {self.spec.name} ({self.task_id}): {old.value} -> {state.value}"
            )
        self._state = state
        if self._tally is not None:
            self._tally.moved(self, old, state)
        if self.observer is not None:
            self.observer(self, old, state)

    def count_in(self, table: Attempts) -> None:
        """Tell ``table`` of every move from now on (:meth:`Attempts.add`)."""
        self._tally = table

    @property
    def output_complete(self) -> bool:
        """Whether all it printed reached the launcher, as far as it can tell:
        its agent said how much it sent, or closed the connection itself."""
        return self.closed_by_task or (self.reported is not None and self.received >= self.reported)

    def keep_output(self, data: bytes) -> None:
        self.tail += data
        if len(self.tail) > TAIL_BYTES:
            del self.tail[: len(self.tail) - TAIL_BYTES]

    def tail_lines(self) -> tuple[str, ...]:
        text = self.tail.decode("utf-8", "replace")
        return tuple(text.splitlines()[-TAIL_LINES:])


class Attempts:
    """Every attempt by task id, and the latest of each task by name, in the job's
    order. Attempts are counted by state as they move, so the loop's questions
    after each event cost the same at 1000 tasks as at 4."""

    def __init__(self, ending_job: str = "worker") -> None:
        self.ending_job = ending_job
        """The job whose tasks' ends are the job's (replica mode): the
        workers, or the chief (``ClusterSpec.ending_job``)."""
        self.by_id: dict[str, Attempt] = {}
        self.current: dict[str, Attempt] = {}
        self._states: dict[AttemptState, int] = dict.fromkeys(AttemptState, 0)
        """How many current attempts are in each state."""
        self._workers = [0, 0]
        """Current attempts of the ending job: in all, and finished."""

    def add(self, attempt: Attempt) -> None:
        self.by_id[attempt.task_id] = attempt
        replaced = self.current.get(attempt.spec.name)
        if replaced is not None:
            self._count(replaced, replaced.state, -1)
        self.current[attempt.spec.name] = attempt
        attempt.count_in(self)
        self._count(attempt, attempt.state, 1)

    def moved(self, attempt: Attempt, old: AttemptState, new: AttemptState) -> None:
        """``attempt`` moved from ``old`` to ``new`` (:meth:`Attempt.move` says)."""
        if self.current.get(attempt.spec.name) is attempt:
            self._count(attempt, old, -1)
            self._count(attempt, new, 1)

    def _count(self, attempt: Attempt, state: AttemptState, step: int) -> None:
        self._states[state] += step
        if attempt.spec.job_name == self.ending_job:
            self._workers[0] += step
            if state is AttemptState.FINISHED:
                self._workers[1] += step

    def get(self, task_id: str) -> Attempt | None:
        return self.by_id.get(task_id)

    def is_current(self, attempt: Attempt) -> bool:
        return self.current.get(attempt.spec.name) is attempt

    def live(self) -> list[Attempt]:
        return [t for t in self.current.values() if not t.state.over]

    def count(self, state: AttemptState) -> int:
        return self._states[state]

    def all_registered(self) -> bool:
        return self._states[AttemptState.REGISTERED] == len(self.current)

    def workers_done(self) -> bool:
        return self._workers[1] == self._workers[0]

    def all_ready(self) -> bool:
        return all(t.ready for t in self.current.values())

    def all_over(self) -> bool:
        return sum(self._states[state] for state in _OVER) == len(self.current)

    def waiting(self, held: set[str]) -> list[str]:
        """The tasks the cluster waits for, in the job's order, but those in
        ``held`` (a local task held until the backend places its first task:
        it waits for the others, and naming it would blame this machine)."""
        return [
            t.spec.name
            for t in self.current.values()
            if t.state is not AttemptState.REGISTERED and t.spec.name not in held
        ]
