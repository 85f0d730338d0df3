"""How long the launcher waits for what an ending task still owes it (its
backend's word on why, its last output and exit report), and what its end
was once the wait is over: pure functions of what the launcher has heard of
the attempt and the time, as :mod:`tfmesos.launcher.policy`'s rules are.
The loop (:mod:`tfmesos.launcher.loop`) records what it heard on the
attempt, asks here, and carries the answer out."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from tfmesos.backends.base import TaskEnded
from tfmesos.launcher import verdict
from tfmesos.launcher.attempts import Attempt
from tfmesos.rendezvous import protocol
from tfmesos.rendezvous.reports import Exited

__all__ = [
    "BEAT_OVERDUE",
    "DISCONNECT_GRACE",
    "LOST_CONNECTION_GRACE",
    "Over",
    "WaitUntil",
    "after_backend_end",
    "after_disconnect",
    "after_exit",
    "at_deadline",
]

LOST_CONNECTION_GRACE = 10.0
"""After a task's connection drops, how long to wait for its backend to say why."""
DISCONNECT_GRACE = 2.0
"""After a backend says a task ended, how long to wait for its last output."""
BEAT_OVERDUE = 1.5 * protocol.BEAT_INTERVAL
"""Silence after which a task's heartbeat is overdue: the launcher cannot hear it."""


@dataclass(frozen=True, slots=True)
class Over:
    """The attempt is over: how it ended."""

    code: int | None
    reason: str
    signal: int | None = None


@dataclass(frozen=True, slots=True)
class WaitUntil:
    """Wait until ``deadline`` (``time.monotonic()``), then look again."""

    deadline: float


def _own_report(report: Exited) -> Over:
    return Over(report.code, verdict.describe_exit(report), report.signal)


def after_exit(
    task: Attempt, report: Exited, kill_reason_timeout: float, now: float
) -> Over | WaitUntil:
    """``task``'s agent reported its command's exit (``report``): over, or, for a
    SIGKILL or a signal to the agent, held until its backend's word
    (``kill_reason_timeout``) comes."""
    killed = report.signal == signal.SIGKILL or report.agent_signal is not None
    if killed and task.ended is None and kill_reason_timeout:
        # SIGKILL is also how a memory limit ends a command, and a signal to
        # the agent how an operator's drain ends a task: its backend's word,
        # which names the limit or the drain, may be behind.
        return WaitUntil(now + kill_reason_timeout)
    return _own_report(report)


def after_disconnect(task: Attempt, now: float) -> Over | WaitUntil | None:
    """``task``'s connection dropped (``task.disconnected``): over where its
    backend's word came, else a wait for it; None where nothing is to wait
    for (its exit came first, or is held)."""
    if task.state.over:
        return None
    if task.ended is not None:
        return Over(task.ended.exit_code, verdict.describe_end(task.ended))
    if task.held_exit is None:
        # An agent exits when its connection drops, so the task is as
        # good as gone; wait a little for the backend's word on why.
        return WaitUntil(now + LOST_CONNECTION_GRACE)
    return None


def after_backend_end(task: Attempt, ended: TaskEnded) -> Over | WaitUntil:
    """``task``'s backend said it ended (``task.ended``, at ``task.ended_at``)."""
    held = task.held_exit
    if held is not None and not (ended.limited or ended.drained):
        # Nothing said beyond the signal: the task's own report.
        return _own_report(held)
    if task.connection is None or task.disconnected or held is not None:
        return Over(ended.exit_code, verdict.describe_end(ended))
    # The agent's last output and exit report may still be in
    # flight on its connection: give them a moment.
    return WaitUntil(task.ended_at + DISCONNECT_GRACE)


def at_deadline(task: Attempt, now: float, silence_limit: float) -> Over | WaitUntil | None:
    """``task``'s deadline may be past: for its backend's word after a
    SIGKILL or a lost connection, or for its last output after its end.
    ``silence_limit``: how long its agent goes on without hearing tfrun."""
    if task.state.over or task.deadline is None:
        return None
    if task.deadline - now > 0.001:  # woken early (a deadline moved): look again then
        return WaitUntil(task.deadline)
    held = task.held_exit
    if held is not None and task.ended is None:  # no word came: the task's own report it is
        return _own_report(held)
    if task.ended is None:
        return Over(None, "lost its connection to the launcher")
    connection = task.connection
    if connection is not None and not task.disconnected and connection.last_heard < task.ended_at:
        # Not heard since its end: its agent may be delivering its
        # last output and exit report through a network that fails,
        # for as long as it heard the launcher within the limit, and
        # the launcher waits as long. One heard since (an agent alive
        # and beating, its task lost by its backend) has nothing
        # stuck on the way: the backend's word stands.
        if now - connection.last_heard >= BEAT_OVERDUE:
            later = connection.last_heard + silence_limit
        else:  # a beat may yet come: look again once it is overdue
            later = connection.last_heard + BEAT_OVERDUE
        if later - now > 0.001:
            return WaitUntil(later)
    reason = verdict.describe_end(task.ended)
    if connection is not None and not task.disconnected and task.unheard:
        # Its agent may have stopped it for want of tfrun: say so.
        reason += (
            f" (tfrun had not heard it for {now - connection.last_heard:.0f}s; an agent "
            f"that does not hear tfrun for {silence_limit:g}s stops its task)"
        )
    return Over(task.ended.exit_code, reason)
