"""Mesos task states (``TaskState`` in ``mesos.proto``) and what an update says
about how a task ended.

``TASK_UNREACHABLE`` and ``TASK_UNKNOWN`` are not terminal (the task may come
back), but for a job both mean the task is not running now
(:attr:`TaskState.out_of_reach`). The exit status is not a field: it is parsed
from the command executor's message. How a memory limit and an exit status are
reported is in docs/mesos-protocol.md.
"""

from __future__ import annotations

import re
import signal
from enum import Enum
from typing import Any

__all__ = [
    "EXECUTOR_MEM",
    "MEM_FLAGS",
    "TaskState",
    "describe_reason",
    "describe_update",
    "exit_status",
]


class TaskState(str, Enum):
    STAGING = "TASK_STAGING"
    STARTING = "TASK_STARTING"
    RUNNING = "TASK_RUNNING"
    KILLING = "TASK_KILLING"
    FINISHED = "TASK_FINISHED"
    FAILED = "TASK_FAILED"
    KILLED = "TASK_KILLED"
    ERROR = "TASK_ERROR"
    LOST = "TASK_LOST"
    DROPPED = "TASK_DROPPED"
    UNREACHABLE = "TASK_UNREACHABLE"
    GONE = "TASK_GONE"
    GONE_BY_OPERATOR = "TASK_GONE_BY_OPERATOR"
    UNKNOWN = "TASK_UNKNOWN"

    @classmethod
    def of(cls, status: dict[str, Any]) -> TaskState | None:
        """The state of a ``TaskStatus``; None for one this client does not know."""
        try:
            return cls(status.get("state", ""))
        except ValueError:
            return None

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def out_of_reach(self) -> bool:
        """Not running for the job now, though it may come back."""
        return self in (TaskState.UNREACHABLE, TaskState.UNKNOWN)

    @property
    def alive(self) -> bool:
        """The task is (or is about to be) running on its agent."""
        return self in (TaskState.STAGING, TaskState.STARTING, TaskState.RUNNING)


_TERMINAL = frozenset(
    {
        TaskState.FINISHED,
        TaskState.FAILED,
        TaskState.KILLED,
        TaskState.ERROR,
        TaskState.LOST,
        TaskState.DROPPED,
        TaskState.GONE,
        TaskState.GONE_BY_OPERATOR,
    }
)

_EXITED = re.compile(r"exited with status (\d+)")
_SIGNALLED = re.compile(r"terminated with signal (.+?)(?:$|[;.\n])")


def _signal_numbers() -> dict[str, int]:
    numbers: dict[str, int] = {}
    for sig in signal.Signals:
        text = signal.strsignal(sig)
        if text:
            numbers.setdefault(text.lower(), int(sig))
        numbers.setdefault(sig.name.lower(), int(sig))
    return numbers


_SIGNAL_NUMBERS = _signal_numbers()


def exit_status(state: TaskState, message: str) -> int | None:
    """The command's exit status as a shell gives it (128+N for signal N), or
    None."""
    if state is TaskState.FINISHED:
        return 0
    match = _EXITED.search(message)
    if match:
        return int(match.group(1))
    match = _SIGNALLED.search(message)
    if match:
        number = _SIGNAL_NUMBERS.get(match.group(1).strip().lower())
        return 128 + number if number is not None else None
    return None


_REASONS = {
    "REASON_CONTAINER_LIMITATION_MEMORY": "killed for exceeding its memory (raise -Mw/--worker-mem or -Ms/--server-mem)",
    "REASON_CONTAINER_LIMITATION_DISK": "it used more disk than its container may",
    "REASON_AGENT_REMOVED": "its agent was removed from the cluster",
    "REASON_AGENT_DISCONNECTED": "its agent lost contact with the master",
    "REASON_AGENT_RESTARTED": "its agent restarted",
    "REASON_EXECUTOR_TERMINATED": "its executor ended",
    "REASON_CONTAINER_LAUNCH_FAILED": "its container could not be started",
    "REASON_TASK_INVALID": "the master found the task invalid",
    "REASON_TASK_UNAUTHORIZED": "the framework may not launch it (as this user or role)",
    "REASON_AGENT_DRAINING": "its agent is being drained by the operator (DRAIN_AGENT)",
    "REASON_SLAVE_DRAINING": "its agent is being drained by the operator (DRAIN_AGENT)",
}

DRAIN_REASONS = frozenset({"REASON_AGENT_DRAINING", "REASON_SLAVE_DRAINING"})
"""The reasons an agent gives the tasks it kills while the operator drains it
(``Slave::statusUpdate``: ``TASK_KILLED``, or ``TASK_GONE_BY_OPERATOR`` where
the drain marks the agent gone); the v1 API names it ``AGENT``, v0 ``SLAVE``."""


def describe_reason(reason: str | None) -> str:
    """A structured ``reason`` in words, or the reason itself."""
    if not reason:
        return ""
    return _REASONS.get(reason, reason)


EXECUTOR_MEM = 32.0
"""MiB an agent adds to a command task's container for its executor
(``DEFAULT_EXECUTOR_MEM``, src/slave/constants.hpp; ``Slave::getExecutorInfo``)."""

MEM_FLAGS = {
    "worker": "-Mw/--worker-mem",
    "ps": "-Ms/--server-mem",
    "chief": "-Mc/--chief-mem",
    "evaluator": "-Mw/--worker-mem",
}
"""tfrun's flag that sets each job's memory per task."""


def describe_update(status: dict[str, Any], job: str = "", mem: float | None = None) -> str:
    """How the update ``status`` says a task of job ``job``, given ``mem`` MiB,
    ended: its message, then its reason in words. A memory limitation says
    the limit and the flag that raises it, and keeps only the first line of
    Mesos's message (the rest is the cgroup's ``memory.stat``)."""
    message = str(status.get("message", ""))
    reason = status.get("reason")
    if reason != "REASON_CONTAINER_LIMITATION_MEMORY":
        return "; ".join(part for part in (message, describe_reason(reason)) if part)
    flag = MEM_FLAGS.get(job)
    if flag:
        raise_it = f"raise it with {flag}"
    else:
        raise_it = f"raise the {job} job's mem" if job else "raise its mem"
    limit = f" of {mem:g} MiB" if mem is not None else ""
    text = f"killed for exceeding its memory limit{limit} ({raise_it})"
    first = message.strip().split("\n", 1)[0].strip()
    if first:
        text += f"; the agent said: {first}"
        if mem is not None:
            text += f" (the task's {mem:g} MiB and {EXECUTOR_MEM:g} MiB for its executor)"
    return text
