"""The launcher's rules, as pure functions of what it knows and what happened: no
I/O and no clock, so each rule is tested alone (tests/test_policy.py) and
:class:`tfmesos.launcher.Launcher` only carries the verdict out.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "MAX_ATTEMPTS",
    "Action",
    "Phase",
    "TaskView",
    "admits",
    "admits_helper",
    "on_backend_failure",
    "on_registered",
    "on_task_end",
]

MAX_ATTEMPTS = 3
"""Attempts at each task before the cluster is up (as the original allowed)."""


class Phase(enum.Enum):
    """Where the job is: the launcher's rules differ in each."""

    STARTING = "starting"
    """Tasks are launched and register; the cluster is not up yet."""
    RUNNING = "running"
    """Every task has its cluster definition."""
    STOPPING = "stopping"
    """The job's end is decided; teardown is under way."""


class Action(enum.Enum):
    """What the launcher does about an event."""

    STOP = "stop"
    """The task is stopped and nothing more is made of it: it was superseded
    by a later attempt, or the job is ending anyway."""
    RELAUNCH = "relaunch"
    """The cluster is not up yet: launch the task again."""
    GIVE_UP = "give up"
    """The cluster is not up and the task has had its attempts: the start fails."""
    FINISH = "finish"
    """A replica-mode task exited 0 once the cluster was up: its part is done."""
    FAIL_JOB = "fail job"
    """After the cluster is up: one failure ends the job (every other task
    holds the failed one's address)."""
    CARRY_ON = "carry on"
    """Nothing changes (a backend failing once the job is stopping: the
    verdict is already made and teardown goes on; a side-car, the
    evaluator, failing once the cluster is up: it is said, and the job goes
    on without it)."""
    RUN = "run"
    """A task that registered is the one the job waits for: it joins."""
    REJOIN = "rejoin"
    """Fine-grained mode: a server relaunched at its old address registered
    while the cluster runs: it gets the cluster definition it had."""


@dataclass(frozen=True, slots=True)
class TaskView:
    """What the rules need to know about one attempt at one task."""

    phase: Phase
    current: bool
    """It is the latest attempt at its task (not one a relaunch superseded)."""
    attempt: int
    """1 for the first attempt."""
    replica: bool
    """Replica mode: tasks run the user's command, and may end with 0."""
    relaunched_at_address: bool = False
    """Fine-grained mode: a server relaunched where a dead one was
    (:mod:`tfmesos.launcher.relaunch`)."""
    side: bool = False
    """A side-car outside the cluster (TF's evaluator, ``tfrun --evaluator``):
    nothing in the job waits for it or talks to it."""


def on_task_end(task: TaskView, exit_code: int | None) -> Action:
    """An attempt ended (it exited, was killed, was lost) with ``exit_code``
    (None when unknown): retried before the cluster is up, fatal after it,
    except a replica's exit 0, which is its work done, and a side-car's
    failure, which the job carries on without."""
    if task.phase is Phase.STOPPING or not task.current:
        return Action.STOP
    if task.phase is Phase.STARTING:
        return Action.GIVE_UP if task.attempt >= MAX_ATTEMPTS else Action.RELAUNCH
    if exit_code == 0 and task.replica:
        return Action.FINISH
    if task.side:
        # No task holds its address and the training does not wait for it:
        # failing the job, or restarting it, would throw the training away
        # for what only watched it.
        return Action.CARRY_ON
    return Action.FAIL_JOB


def on_registered(task: TaskView) -> Action:
    """An attempt dialled in: it joins only while the cluster is being built,
    and only as its task's latest attempt, or, once the cluster runs, as a
    server relaunched at its old address; otherwise it is told to stop."""
    if task.current and task.phase is Phase.STARTING:
        return Action.RUN
    if task.current and task.relaunched_at_address and task.phase is Phase.RUNNING:
        return Action.REJOIN
    return Action.STOP


def on_backend_failure(phase: Phase) -> Action:
    """The backend can no longer run the job: it fails, unless already stopping."""
    return Action.CARRY_ON if phase is Phase.STOPPING else Action.FAIL_JOB


def admits(task: TaskView, *, launched: bool) -> bool:
    """Whether an attempt that dials in with its task id is let in: only one
    ``launched`` (not yet registered) that is its task's latest attempt,
    while the cluster is being built, or, once it runs, a server relaunched
    at its old address."""
    return (
        launched
        and task.current
        and (
            task.phase is Phase.STARTING
            or (task.relaunched_at_address and task.phase is Phase.RUNNING)
        )
    )


def admits_helper(phase: Phase) -> bool:
    """Whether a peer that is no task of the job (the backend's own helper,
    such as Slurm's job script) may be let in, if its backend admits it: not
    once the job is stopping."""
    return phase is not Phase.STOPPING
