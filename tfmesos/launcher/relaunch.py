"""Fine-grained mode: which dead TensorFlow servers are started again, and where.

TF2's ``ClusterCoordinator`` waits for a preempted worker's server to answer
again at the same address, so a worker can be relaunched only where it was. A
parameter server cannot be: the model's variables die with it. Pure policy
(:func:`decide`, :func:`relaunch_or_fail`); the launcher carries it out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tfmesos.errors import TaskFailure
from tfmesos.launcher.attempts import Attempt
from tfmesos.spec import TaskSpec

__all__ = ["RELAUNCHED_JOB", "NotRelaunched", "RelaunchAt", "decide", "relaunch_or_fail"]

RELAUNCHED_JOB = "worker"
"""The one job whose servers are relaunched: the job ``ClusterCoordinator``
schedules functions on and recovers."""


@dataclass(frozen=True)
class RelaunchAt:
    """Start the task again at ``address``: relaunch ``number`` of ``allowed``."""

    address: str
    number: int
    allowed: int


@dataclass(frozen=True)
class NotRelaunched:
    """The task's end ends the job; ``why`` (empty with ``max_restarts=0``) says
    why."""

    why: str


def decide(
    task: TaskSpec,
    address: str,
    *,
    done: int,
    allowed: int,
    backend: str,
    backend_keeps_addresses: bool,
) -> RelaunchAt | NotRelaunched:
    """What to do about ``task``, whose server at ``address`` died while the
    cluster was up. ``done``: relaunches the job has made so far, of the
    ``allowed`` in all (``cluster(..., max_restarts=N)``); ``backend`` and
    whether it can start a task at a given address."""
    if allowed == 0:
        return NotRelaunched("")
    if task.job_name == "ps":
        return NotRelaunched(
            "not relaunched: a ps holds the model's variables, which died with it, and "
            "ClusterCoordinator cannot recover them"
        )
    if task.job_name != RELAUNCHED_JOB:
        return NotRelaunched(
            f"not relaunched: only {RELAUNCHED_JOB} servers are (ClusterCoordinator recovers "
            f"workers only), and this is a {task.job_name!r} server"
        )
    if not backend_keeps_addresses:
        return NotRelaunched(
            f"not relaunched: the {backend} backend cannot start a task at a given address"
        )
    if done >= allowed:
        return NotRelaunched(
            f"not relaunched: the job has made the {allowed} "
            f"relaunch{'es' if allowed != 1 else ''} max_restarts={allowed} allows"
        )
    return RelaunchAt(address, done + 1, allowed)


def relaunch_or_fail(
    task: Attempt,
    failure: TaskFailure,
    *,
    done: int,
    allowed: int,
    backend: str,
    backend_keeps_addresses: bool,
) -> RelaunchAt | TaskFailure:
    """Fine-grained mode: the dead server ``task`` (whose end is ``failure``)
    is relaunched at its address where :func:`decide` allows; else the
    failure that ends the job, saying why it was not relaunched."""
    if task.keep_address and not task.ready:
        # The relaunch itself failed: trying again elsewhere is no use
        # (the program dials this address), and again here seldom is.
        return replace(
            failure, reason=f"could not be relaunched at {task.keep_address}: {failure.reason}"
        )
    decision = decide(
        task.spec,
        task.addr,
        done=done,
        allowed=allowed,
        backend=backend,
        backend_keeps_addresses=backend_keeps_addresses,
    )
    if isinstance(decision, RelaunchAt):
        return decision
    if not decision.why:
        return failure
    return replace(failure, reason=f"{failure.reason}; {decision.why}")
