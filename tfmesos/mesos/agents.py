"""Whether any agent registered with the master could ever hold a task: pure
functions over the master's agent list (``GET_AGENTS`` of the v1 operator API).

An agent can ever offer its unreserved resources and those reserved for the
framework's roles or a role above one (``eng``'s reservation is offered to
``eng/web``). What is not counted (GPU agents held back, draining agents,
resources in use) keeps the check conservative: nothing is refused that might
fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfmesos.common.resources import format_mib
from tfmesos.mesos.placement import describe_need
from tfmesos.spec import TaskSpec

__all__ = [
    "AGENTS_CALL",
    "AgentTotal",
    "agent_totals",
    "all_draining",
    "never_held",
    "never_held_together",
]

AGENTS_CALL: dict[str, Any] = {"type": "GET_AGENTS"}
_EPSILON = 1e-6


@dataclass(frozen=True)
class AgentTotal:
    """What one agent could ever offer the framework's roles."""

    hostname: str
    cpus: float = 0.0
    mem: float = 0.0
    gpus: float = 0.0
    ports: int = 0
    draining: str = ""
    """``DRAINING`` or ``DRAINED`` while the operator drains it (``DRAIN_AGENT``):
    the master offers nothing of it."""

    def holds(self, task: TaskSpec) -> bool:
        return (
            self.ports >= 1
            and self.cpus + _EPSILON >= task.cpus
            and self.mem + _EPSILON >= task.mem
            and self.gpus + _EPSILON >= task.gpus
        )

    def closeness(self, task: TaskSpec) -> float:
        """How near the agent comes to holding ``task``: the least share of
        any resource the task needs that the agent has (1 or more: it fits)."""
        shares = [min(self.ports, 1) * 1.0]
        for have, need in ((self.cpus, task.cpus), (self.mem, task.mem), (self.gpus, task.gpus)):
            if need > _EPSILON:
                shares.append(have / need)
        return min(shares)

    def summary(self) -> str:
        text = f"cpus {self.cpus:g}, mem {format_mib(self.mem)}"
        text += f", gpus {self.gpus:g}" if self.gpus else ""
        return text + f", {self.ports} ports"


def reserved_for(resource: dict[str, Any]) -> str:
    """The role ``resource`` is reserved for (its last, refined reservation), or
    ``"*"``."""
    reservations = resource.get("reservations") or []
    if reservations:
        return str(reservations[-1].get("role", "*"))
    return str(resource.get("role", "*"))


def usable_by(reserved: str, roles: Sequence[str]) -> bool:
    """Whether a resource reserved for ``reserved`` can be offered to one of ``roles``."""
    if reserved == "*":
        return True
    return any(role == reserved or role.startswith(reserved + "/") for role in roles)


def agent_totals(answer: dict[str, Any], roles: Sequence[str]) -> list[AgentTotal]:
    """What each agent of a ``GET_AGENTS`` answer could ever offer ``roles``."""
    totals = []
    for agent in answer.get("get_agents", {}).get("agents", []):
        info = agent.get("agent_info", {})
        resources = agent.get("total_resources") or info.get("resources") or []
        amounts: dict[str, float] = {}
        ports = 0
        for resource in resources:
            if not usable_by(reserved_for(resource), roles):
                continue
            name = resource.get("name")
            if resource.get("type") == "SCALAR" and name in ("cpus", "mem", "gpus"):
                amounts[name] = amounts.get(name, 0.0) + float(
                    resource.get("scalar", {}).get("value", 0.0)
                )
            elif resource.get("type") == "RANGES" and name == "ports":
                for r in resource.get("ranges", {}).get("range", []):
                    ports += int(r["end"]) - int(r["begin"]) + 1
        totals.append(
            AgentTotal(
                str(info.get("hostname", "?")),
                amounts.get("cpus", 0.0),
                amounts.get("mem", 0.0),
                amounts.get("gpus", 0.0),
                ports,
                str((agent.get("drain_info") or {}).get("state", "")),
            )
        )
    return totals


def never_held_together(tasks: Sequence[TaskSpec], agents: Sequence[AgentTotal]) -> str | None:
    """Why ``agents`` (not empty) could never hold all of ``tasks`` at once,
    as gang placement needs, though each could hold any one; None if they
    might. Only what every placement must satisfy is checked, so a job that
    might fit is never refused: for each shape of task, the agents' room for
    that many (each agent's whole count of them, by its scarcest resource),
    and the job's total of each resource against the agents'."""
    shapes: dict[tuple[float, float, int], list[TaskSpec]] = {}
    for task in tasks:
        shapes.setdefault((task.cpus, task.mem, task.gpus), []).append(task)
    for alike in shapes.values():
        room = sum(_room_for(alike[0], agent) for agent in agents)
        if room < len(alike):
            return (
                f"the job's {len(alike)} tasks of {describe_need(alike[0])} ({alike[0].name}, ...) "
                f"never fit at once: the {len(agents)} agents registered with the Mesos master "
                f"hold at most {room} of them"
            )
    for resource in ("cpus", "mem", "gpus"):
        needed = sum(getattr(task, resource) for task in tasks)
        have = sum(getattr(agent, resource) for agent in agents)
        if needed > have + _EPSILON:
            shown = format_mib if resource == "mem" else (lambda value: f"{value:g}")
            return (
                f"the job's {len(tasks)} tasks need {resource} {shown(needed)} at once, more than "
                f"the {len(agents)} agents registered with the Mesos master have in all "
                f"({shown(have)})"
            )
    return None


def _room_for(task: TaskSpec, agent: AgentTotal) -> int:
    """How many tasks like ``task`` ``agent`` could hold at once."""
    counts = [agent.ports // max(task.ports, 1)]
    for have, need in ((agent.cpus, task.cpus), (agent.mem, task.mem), (agent.gpus, task.gpus)):
        if need > _EPSILON:
            counts.append(int((have + _EPSILON) // need))
    return min(counts)


def all_draining(task: TaskSpec, agents: Sequence[AgentTotal]) -> str | None:
    """Why ``task`` waits, where every agent that could hold it is being
    drained by the operator: the agents and their drain states, in words;
    None where one that could is not draining (or none could)."""
    able = [agent for agent in agents if agent.holds(task)]
    if not able or any(not agent.draining for agent in able):
        return None
    named = ", ".join(f"{agent.hostname} {agent.draining}" for agent in able[:5])
    more = f" and {len(able) - 5} more" if len(able) > 5 else ""
    return (
        f"every agent that could hold it is being drained by the operator ({named}{more}): "
        "tfrun waits for one that is not"
    )


def never_held(task: TaskSpec, agents: Sequence[AgentTotal], roles: Sequence[str]) -> str | None:
    """Why no agent of ``agents`` (not empty) could ever hold ``task``, in one
    line naming the task, what it needs and the agent that comes nearest;
    None if one could."""
    if any(agent.holds(task) for agent in agents):
        return None
    # Among agents that come as near (none has a GPU, for a task that needs
    # one), the largest: not the first listed, which may be one whose every
    # resource is reserved for another role (cpus 0).
    nearest = max(
        agents,
        key=lambda agent: (agent.closeness(task), agent.cpus, agent.mem, agent.gpus, agent.ports),
    )
    count = "the one agent" if len(agents) == 1 else f"any of the {len(agents)} agents"
    given = "role " + ", ".join(repr(role) for role in roles)
    return (
        f"{task.name} needs {describe_need(task)}, more than {count} registered with the "
        f"Mesos master could ever offer ({given}): the largest, on {nearest.hostname}, has "
        f"{nearest.summary()}; ask for less, or use a cluster with larger agents"
    )
