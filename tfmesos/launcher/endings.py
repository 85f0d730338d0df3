"""What an attempt's end means for the job: where the attempt moves, what is
said of it, whether it is launched again, and the error that fails the start
or the job. Pure, as :mod:`tfmesos.launcher.policy`'s rules are:
:func:`end_of` decides from the attempt, the rules' action and its backend's
words; the loop (:mod:`tfmesos.launcher.loop`) carries it out."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tfmesos.errors import (
    ClusterStartError,
    JobFailedError,
    TaskFailure,
    TFMesosError,
    task_status,
)
from tfmesos.launcher.attempts import Attempt, AttemptState
from tfmesos.launcher.policy import MAX_ATTEMPTS, Action, TaskView, on_task_end
from tfmesos.rendezvous.protocol import UNRESOLVED_STATUS

if TYPE_CHECKING:
    from tfmesos.backends.base import Backend
    from tfmesos.launcher.relaunch import RelaunchAt

__all__ = ["Ending", "end_of"]


@dataclass(frozen=True, slots=True)
class Ending:
    """What the loop does about an attempt that is over."""

    action: Action
    """What is done about it, as the ``task_exited`` event says."""
    state: AttemptState
    """Where the attempt moves."""
    reason: str
    """How it ended, in words (the event's ``reason``)."""
    note: tuple[int, str] | None = None
    """What is said of it: a logging level and a line."""
    after_output: bool = False
    """The note waits until the task's output before it is written."""
    relaunch: bool = False
    """Before the cluster is up: its task is launched again."""
    relaunch_at: RelaunchAt | None = None
    """Fine-grained mode: its server is started again at its address."""
    relaunch_reason: str = ""
    """Why it is launched again (the ``task_relaunched`` event's ``reason``)."""
    error: TFMesosError | None = None
    """Raised once it is carried out: the start or the job fails."""


def end_of(
    task: Attempt,
    view: TaskView,
    code: int | None,
    reason: str,
    *,
    backend: Backend,
    server_relaunches: int,
    max_restarts: int,
) -> Ending:
    """``task``, run by ``backend``, ended with ``code`` (None: unknown)
    for ``reason``; ``view`` is what the rules know of it. In fine-grained
    mode, ``server_relaunches`` of ``max_restarts`` servers were relaunched."""
    if code == UNRESOLVED_STATUS and not task.addr:
        # Its in-task agent could not resolve the name it dials, and its
        # backend heard only the status: name the name.
        reason = (
            f"cannot resolve tfrun's host name {backend.rendezvous_host}: "
            f"its in-task agent exited with status {code} before registering"
        )
    action = on_task_end(view, code)
    name = task.spec.name
    if action is Action.STOP:
        return Ending(action, AttemptState.STOPPED, reason)
    if action is Action.CARRY_ON:
        # The evaluator, outside the cluster: said, and the job goes on.
        where = f" on {task.host}" if task.host else ""
        note = (
            f"task {name}{where} {reason}: the job goes on without it "
            "(an evaluator is outside the cluster)"
        )
        return Ending(
            action, AttemptState.FAILED, reason, (logging.WARNING, note), after_output=True
        )
    if action is Action.FINISH:
        # Its output came in before its exit report, on the same
        # connection, and is on its way to the terminal from the
        # console's thread: said after it.
        note = f"task {name} finished (exit 0)"
        return Ending(
            action, AttemptState.FINISHED, reason, (logging.INFO, note), after_output=True
        )
    # The task's own log (the backend's tail) has all it printed; what
    # came over the connection may stop short of the end.
    tail = (task.ended.output_tail if task.ended else ()) or task.tail_lines()
    drained = task.ended is not None and task.ended.drained
    failure = TaskFailure(name, reason, task.host, tail, drained)
    if action is Action.GIVE_UP:
        hint = ""
        if not failure.output_tail:
            hint = (
                "; it printed nothing the launcher could see: its own output is kept "
                f"in {backend.unseen_output_location()}"
            )
        gave_up = ClusterStartError(
            f"{failure.describe()}\nthe task failed {task.attempt} times before the "
            f"cluster was up; giving up{hint}",
            failure,
        )
        return Ending(action, AttemptState.FAILED, reason, error=gave_up)
    if action is Action.RELAUNCH:
        note = failure.describe(
            f" before the cluster was up; relaunching it "
            f"(attempt {task.attempt + 1} of {MAX_ATTEMPTS})"
        )
        return Ending(
            action,
            AttemptState.FAILED,
            reason,
            (logging.WARNING, note),
            relaunch=True,
            relaunch_reason=reason,
        )
    if code == 0:
        failure = TaskFailure(
            name, "exited while the cluster was running", task.host, failure.output_tail
        )
    if view.replica:
        error = JobFailedError(failure, exit_code=task_status(code))
        return Ending(action, AttemptState.FAILED, reason, error=error)
    # A dead server may come back at its address: the event says what is
    # done about it once that is decided.
    return _server_end(task, code, reason, failure, backend, server_relaunches, max_restarts)


def _server_end(
    task: Attempt,
    code: int | None,
    reason: str,
    failure: TaskFailure,
    backend: Backend,
    done: int,
    allowed: int,
) -> Ending:
    """Fine-grained mode: the dead server ``task`` is started again at its
    address where the policy allows
    (:func:`tfmesos.launcher.relaunch.relaunch_or_fail`); else its end ends
    the job, saying why it was not relaunched."""
    # Here: only fine-grained mode relaunches a server (its dataclasses
    # cost every tfrun ~1 ms to make; docs/benchmarks.md, section 15).
    from tfmesos.launcher import relaunch

    decision = relaunch.relaunch_or_fail(
        task,
        failure,
        done=done,
        allowed=allowed,
        backend=backend.name,
        backend_keeps_addresses=backend.keeps_addresses,
    )
    if isinstance(decision, TaskFailure):
        error = JobFailedError(decision, exit_code=task_status(code))
        return Ending(Action.FAIL_JOB, AttemptState.FAILED, reason, error=error)
    note = failure.describe(
        f"; relaunching it at {decision.address} (relaunch {decision.number} of {decision.allowed})"
    )
    return Ending(
        Action.RELAUNCH,
        AttemptState.FAILED,
        reason,
        (logging.WARNING, note),
        relaunch_at=decision,
        relaunch_reason=failure.reason,
    )
