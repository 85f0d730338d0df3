"""The words of a job's end: how a task ended, how each task's end is named
in the verdict, and the verdict's own form (its colour, its time)."""

from __future__ import annotations

import signal
from collections.abc import Iterable

from tfmesos.backends.base import NOT_PLACED, TaskEnded
from tfmesos.launcher.attempts import Attempt, AttemptState
from tfmesos.rendezvous.protocol import SILENCE_LIMIT
from tfmesos.rendezvous.reports import Exited

__all__ = [
    "describe_end",
    "describe_exit",
    "duration",
    "ends",
    "names",
    "outcomes",
    "paint",
    "signal_name",
]


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def describe_exit(exited: Exited) -> str:
    """How a task ended, naming a killing signal rather than the shell's 128+N."""
    if exited.signal is not None:
        reason = f"killed by {signal_name(exited.signal)}"
        if exited.out_of_memory:
            reason += " by the kernel's OOM killer, over its memory cgroup's limit"
    else:
        reason = f"exited with status {exited.code}"
    if exited.local_rank is not None:
        reason += f" (its process of local rank {exited.local_rank})"
    if exited.agent_signal is not None:
        reason += f" (its agent was sent {signal_name(exited.agent_signal)})"
    if exited.error is not None:
        reason += f": {exited.error}"
    return reason


def describe_end(ended: TaskEnded) -> str:
    """How a task ended, as its backend reported it."""
    if ended.state == NOT_PLACED:
        return ended.message
    if ended.state == "exited":
        return ended.message or f"exited with status {ended.exit_code}"
    return f"ended in state {ended.state}" + (f": {ended.message}" if ended.message else "")


def outcomes(current: Iterable[Attempt], silence_limit: float = SILENCE_LIMIT) -> dict[str, str]:
    """How each task ended, in words, by task name, in the job's order:
    ``exited 0``, ``stopped by tfrun``, ``cut off from tfrun`` (it could not
    be stopped: tfrun could not hear it, nor learn of its end), or how it
    failed."""
    by_task = {}
    for task in current:
        if task.state is AttemptState.FINISHED:
            by_task[task.spec.name] = "exited 0"
        elif task.state is AttemptState.STOPPED and task.left_unreached:
            by_task[task.spec.name] = (
                f"cut off from tfrun, not stopped by it (it stops itself once it has not "
                f"heard tfrun for {silence_limit:g}s)"
            )
        elif task.state is AttemptState.STOPPED:
            by_task[task.spec.name] = "stopped by tfrun"
        elif task.state is AttemptState.FAILED:
            by_task[task.spec.name] = "failed"
        else:
            by_task[task.spec.name] = task.state.value
    return by_task


def paint(text: str, colour: int, enabled: bool) -> str:
    """A verdict with its head (up to the first colon) in bold ``colour``."""
    head, colon, rest = text.partition(":")
    if not enabled or not colon:
        return text
    return f"\x1b[1;{colour}m{head}\x1b[0m{colon}{rest}"


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s"


def ends(outcomes: dict[str, str]) -> str:
    """``worker:0 and worker:1 exited 0; ps:0 stopped by tfrun``: each
    task's end, the chief first, then the workers, grouped by job and end,
    runs of many indices as ranges (``worker:0-99``)."""
    groups: dict[tuple[str, str], list[int]] = {}
    for name, end in outcomes.items():
        job, _, index = name.rpartition(":")
        groups.setdefault((job, end), []).append(int(index))
    first = {"chief": 0, "worker": 1}
    order = sorted(groups, key=lambda key: first.get(key[0], 2))  # stable: the job's own order
    return "; ".join(f"{names(job, groups[job, end])} {end}" for job, end in order)


def names(job: str, indices: list[int]) -> str:
    """``worker:0, worker:1 and worker:2``, or ``worker:0-99,101``."""
    indices = sorted(indices)
    if len(indices) <= 3:
        each = [f"{job}:{i}" for i in indices]
        return each[0] if len(each) == 1 else ", ".join(each[:-1]) + " and " + each[-1]
    runs: list[list[int]] = []
    for index in indices:
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    spans = [f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs]
    return f"{job}:{','.join(spans)}"
