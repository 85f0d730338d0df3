"""Mesos task states and what an update says about how a task ended.

The states are ``TaskState`` of ``include/mesos/v1/mesos.proto``; which of them
are terminal is ``protobuf::isTerminalState`` (``src/common/protobuf_utils.cpp``).
``TASK_UNREACHABLE`` and ``TASK_UNKNOWN`` are not terminal: a PARTITION_AWARE
framework hears the first when an agent loses contact with the master, the
second when reconciliation asks about a task the master does not know (an agent
that has not re-registered after a master failover); either task may come back.
For a job both mean the task is not running for it now, which is
:attr:`TaskState.out_of_reach`.

The exit status of the task's command is not a field of ``TaskStatus``: the
command executor puts it in the message, ``"Command " + WSTRINGIFY(status)``
(``src/launcher/executor.cpp``, ``src/common/status_utils.hpp``), which reads
``exited with status N`` or ``terminated with signal <strsignal>``. What *is*
structured is the ``reason``, which tells a memory limit or a lost agent apart.
"""

from __future__ import annotations

import re
import signal
from enum import Enum
from typing import Any

__all__ = ["TaskState", "describe_reason", "exit_status"]


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
    None when the update does not say."""
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
    "REASON_CONTAINER_LIMITATION_MEMORY": "it ran out of memory (the container's limit: raise -Mw/-Ms)",
    "REASON_CONTAINER_LIMITATION_DISK": "it used more disk than its container may",
    "REASON_AGENT_REMOVED": "its agent was removed from the cluster",
    "REASON_AGENT_DISCONNECTED": "its agent lost contact with the master",
    "REASON_AGENT_RESTARTED": "its agent restarted",
    "REASON_EXECUTOR_TERMINATED": "its executor ended",
    "REASON_CONTAINER_LAUNCH_FAILED": "its container could not be started",
    "REASON_TASK_INVALID": "the master found the task invalid",
    "REASON_TASK_UNAUTHORIZED": "the framework may not launch it (as this user or role)",
}


def describe_reason(reason: str | None) -> str:
    """A structured ``reason`` in words, or the reason itself."""
    if not reason:
        return ""
    return _REASONS.get(reason, reason)
