"""The tasks the Mesos backend has launched, and what Mesos's word of each
(status updates, an agent lost) means for the job: the end to report to the
launcher, or a KILL for a task written off that runs again.

Pure: :class:`PlacedTasks` returns what to report and what to send; the
backend does both.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from tfmesos.backends.base import Launch, TaskEnded
from tfmesos.mesos import calls
from tfmesos.mesos.states import DRAIN_REASONS, TaskState, describe_update, exit_status

__all__ = ["Placed", "PlacedTasks"]

logger = logging.getLogger("tfmesos")

STRAY_KILLS = 3
"""KILLs sent at most for a task that came back after it was written off: the
master has them; it answers with the task's end."""


@dataclass
class Placed:
    launch: Launch
    agent_id: str
    host: str
    ended: bool = False
    """The job has written the task off (its end reported to the launcher)."""
    settled: bool = False
    """Mesos has said the task is over for good (a terminal state); until
    then a task written off as unreachable may come back."""
    killed: bool = False
    started: bool = False
    """Mesos has said the task is starting or running: its agent is past
    starting its executor."""
    strays_killed: int = 0
    """KILLs sent for this task after it was reported gone and came back."""


class PlacedTasks:
    def __init__(self) -> None:
        self.placed: dict[str, Placed] = {}
        """Every task launched (an ACCEPT sent), by task ID."""

    def add(self, launch: Launch, agent_id: str, host: str) -> None:
        self.placed[launch.task_id] = Placed(launch, agent_id, host)

    def per_agent(self) -> dict[str, int]:
        """How many of the tasks launched are not yet written off, by agent ID."""
        counts: dict[str, int] = {}
        for placed in self.placed.values():
            if not placed.ended:
                counts[placed.agent_id] = counts.get(placed.agent_id, 0) + 1
        return counts

    def in_flight(self) -> dict[str, int]:
        """How many of the tasks launched are neither started nor over, by agent ID."""
        counts: dict[str, int] = {}
        for placed in self.placed.values():
            if not (placed.started or placed.ended):
                counts[placed.agent_id] = counts.get(placed.agent_id, 0) + 1
        return counts

    def unsettled(self) -> dict[str, str]:
        """The tasks Mesos has not said are over for good, each with its
        agent: those written off as unreachable too, which may come back."""
        return {tid: p.agent_id for tid, p in self.placed.items() if not p.settled}

    def update(self, status: dict[str, Any]) -> tuple[TaskEnded | None, dict[str, Any] | None]:
        """A status update: the task's end to report, if it ends now, and a
        KILL to send, if a task written off runs again."""
        task_id = status.get("task_id", {}).get("value")
        state = TaskState.of(status)
        placed = self.placed.get(task_id)
        if placed is None or state is None:
            return None, None
        if state.terminal:
            placed.settled = True
        if state is not TaskState.STAGING:
            placed.started = True  # starting, running, or past them
        if placed.ended:
            return None, self._kill_stray(placed, status) if state.alive else None
        if not (state.terminal or state.out_of_reach):
            return None, None
        placed.ended = True
        message = status.get("message", "")
        task = placed.launch.task
        detail = describe_update(status, task.job_name, task.mem)
        reason = str(status.get("reason", ""))
        ended = TaskEnded(
            task_id,
            state.value,
            exit_status(state, message),
            detail,
            placed.host,
            limited=reason.startswith("REASON_CONTAINER_LIMITATION"),
            drained=reason in DRAIN_REASONS,
        )
        return ended, None

    def _kill_stray(self, placed: Placed, status: dict[str, Any]) -> dict[str, Any] | None:
        """A task the job has written off (unreachable, unknown, its agent
        lost) is running after all: its replacement may already be, so it
        holds resources for nothing. Kill it, as the HA guide advises."""
        if placed.strays_killed >= STRAY_KILLS:
            return None
        placed.strays_killed += 1
        agent_id = status.get("agent_id", {}).get("value") or placed.agent_id
        logger.warning(
            "Mesos: task %s, reported gone, is running again on %s: killing it",
            placed.launch.task.name,
            placed.host or agent_id,
        )
        return calls.kill(placed.launch.task_id, agent_id)

    def agent_lost(self, agent_id: str) -> list[TaskEnded]:
        """The ends of the tasks on an agent the master has given up on."""
        ends = []
        for task_id, placed in self.placed.items():
            if placed.agent_id == agent_id and not placed.ended:
                placed.ended = True
                ends.append(
                    TaskEnded(
                        task_id, "AGENT_LOST", None, f"agent {agent_id} was lost", placed.host
                    )
                )
        return ends
