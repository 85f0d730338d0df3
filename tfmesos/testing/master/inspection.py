"""Snapshots of the master's state, for tests and for ``/state``.

The ``/__test__/`` snapshots are this double's own. :meth:`Inspector.mesos_state`
is a small subset of the JSON of the master's ``/state`` endpoint
(``src/master/http.cpp``).
"""

from __future__ import annotations

from tfmesos.mesos.reader import TEST_MASTER_FLAG
from tfmesos.testing.master.allocator import Allocator
from tfmesos.testing.master.resources import Resources
from tfmesos.testing.master.schema import JSON
from tfmesos.testing.master.state import MESOS_VERSION, Framework, MasterState, Task, resolve


class Inspector:
    """Read-only views of the master's frameworks, tasks, calls, offers, agents and events."""

    def __init__(self, state: MasterState, allocator: Allocator) -> None:
        self.state = state
        self.allocator = allocator

    def frameworks(self, *, include_completed: bool = False) -> list[JSON]:
        found = list(self.state.frameworks_by_id.values())
        if include_completed:
            found += list(self.state.completed_frameworks.values())
        return [f.snapshot() for f in found]

    def framework(self, framework_id: str) -> JSON:
        framework = self.state.frameworks_by_id.get(
            framework_id
        ) or self.state.completed_frameworks.get(framework_id)
        if framework is None:
            raise KeyError(framework_id)
        snapshot = framework.snapshot()
        snapshot["removed"] = framework_id in self.state.completed_frameworks
        return snapshot

    def tasks(self, framework_id: str | None = None) -> list[JSON]:
        """Every task this master launched (known, unreachable and completed)."""
        return [
            task.snapshot()
            for framework in self.state.all_frameworks()
            if framework_id is None or framework.id == framework_id
            for task in self.state.framework_tasks(framework)
        ]

    def task(self, task_id: str, framework_id: str | None = None) -> JSON:
        task = self.state.find_task(task_id, framework_id)
        if task is None:
            raise KeyError(task_id)
        return task.snapshot()

    def calls(self, call_type: str | None = None) -> list[JSON]:
        """Requests to /api/v1/scheduler in arrival order: type, body, status, stream ID."""
        return [c for c in self.state.received_calls if call_type is None or c["type"] == call_type]

    def offers(self) -> list[JSON]:
        """The outstanding offers, as they were sent."""
        return [self.allocator.offer_json(o) for o in self.state.offers_by_id.values()]

    def operator_agents(self) -> JSON:
        """``Response.GetAgents`` (``include/mesos/v1/master/master.proto``) as
        Mesos 1.12 writes it: the registered agents (not those unreachable or
        gone), each with its ``agent_info`` (resources with no role) and its
        ``total_resources`` (each with ``"role": "*"``); none recovered."""
        agents: list[JSON] = []
        for agent in self.state.agents_by_id.values():
            if agent.state != "active":
                continue
            total = agent.total.to_json(None)
            agents.append(
                {
                    "agent_info": {
                        "hostname": agent.hostname,
                        "port": agent.port,
                        "resources": [{k: v for k, v in r.items() if k != "role"} for r in total],
                        "attributes": agent.attributes,
                        "id": {"value": agent.id},
                        "checkpoint": True,
                    },
                    "active": True,
                    "deactivated": False,
                    "version": MESOS_VERSION,
                    "pid": f"slave(1)@{resolve(agent.hostname, self.state.config.ip)}:{agent.port}",
                    "total_resources": total,
                }
            )
        return {"agents": agents, "recovered_agents": []}

    def agents(self) -> list[JSON]:
        out: list[JSON] = []
        for agent in self.state.agents_by_id.values():
            offered = Resources()
            for offer in self.state.offers_by_id.values():
                if offer.agent_id == agent.id:
                    offered = offered + offer.resources
            out.append(
                {
                    "id": agent.id,
                    "hostname": agent.hostname,
                    "port": agent.port,
                    "state": agent.state,
                    "resources": agent.total.summary(),
                    "used_resources": agent.used.summary(),
                    "offered_resources": offered.summary(),
                    "attributes": agent.attributes,
                }
            )
        return out

    def events(self, framework_id: str | None = None) -> list[JSON]:
        """Events sent to frameworks (HEARTBEATs left out), oldest first."""
        return [
            event
            for framework in self.state.all_frameworks()
            if framework_id is None or framework.id == framework_id
            for event in framework.events
        ]

    def snapshot(self) -> JSON:
        """All of the above in one object (``GET /__test__/state``)."""
        return {
            "master_id": self.state.master_id,
            "url": self.state.url,
            "leader": self.state.config.leader,
            "frameworks": self.frameworks(include_completed=True),
            "tasks": self.tasks(),
            "offers": self.offers(),
            "agents": self.agents(),
        }

    def mesos_state(self) -> JSON:
        """A small subset of the master's ``/state`` JSON."""
        info = self.state.master_info

        def task_json(task: Task) -> JSON:
            data: JSON = {
                "id": task.task_id,
                "name": task.name,
                "framework_id": task.framework_id,
                "executor_id": "" if task.group_executor is None else task.executor_id,
                "slave_id": task.agent_id,
                "state": task.state,
                "role": task.role,
                "resources": task.resources.summary(),
                "statuses": [
                    {k: v for k, v in s.items() if k in ("state", "timestamp", "container_status")}
                    for s in task.statuses
                ],
            }
            if "container" in task.info:
                data["container"] = task.info["container"]
            return data

        def framework_json(framework: Framework) -> JSON:
            used = Resources()
            for task in framework.tasks.values():
                if not task.released:
                    used = used + task.resources
            offered = Resources()
            for offer in self.state.offers_of(framework):
                offered = offered + offer.resources
            data: JSON = {
                "id": framework.id,
                "name": framework.info.get("name"),
                "user": framework.info.get("user"),
                "roles": framework.roles,
                "active": framework.connected,
                "connected": framework.connected,
                "recovered": False,
                "failover_timeout": framework.failover_timeout,
                "checkpoint": bool(framework.info.get("checkpoint", False)),
                "capabilities": sorted(framework.capabilities),
                "hostname": framework.info.get("hostname", ""),
                "webui_url": framework.info.get("webui_url", ""),
                "registered_time": framework.registered_time,
                "used_resources": used.summary(),
                "offered_resources": offered.summary(),
                "tasks": [task_json(t) for t in framework.tasks.values()],
                "unreachable_tasks": [task_json(t) for t in framework.unreachable_tasks.values()],
                "completed_tasks": [task_json(t) for t in framework.completed_tasks.values()],
                "offers": [self.allocator.offer_json(o) for o in self.state.offers_of(framework)],
            }
            if not framework.multi_role:
                data["role"] = framework.info.get("role", "*")
            if framework.unregistered_time is not None:
                data["unregistered_time"] = framework.unregistered_time
            return data

        state: JSON = {
            "version": MESOS_VERSION,
            # Told apart from a real master (a detached job needs one).
            "flags": {TEST_MASTER_FLAG: "true"},
            "id": self.state.master_id,
            "pid": info.get("pid"),
            "hostname": info.get("hostname"),
            "start_time": self.state.started_at,
            "activated_slaves": sum(a.state == "active" for a in self.state.agents_by_id.values()),
            "slaves": [
                {
                    "id": agent["id"],
                    "hostname": agent["hostname"],
                    "port": agent["port"],
                    "pid": f"slave(1)@{resolve(agent['hostname'], self.state.config.ip)}:{agent['port']}",
                    "active": agent["state"] == "active",
                    "resources": agent["resources"],
                    "used_resources": agent["used_resources"],
                    "offered_resources": agent["offered_resources"],
                    "attributes": {
                        a["name"]: a.get("text", {}).get("value", a.get("scalar", {}).get("value"))
                        for a in agent["attributes"]
                    },
                }
                for agent in self.agents()
            ],
            "frameworks": [framework_json(f) for f in self.state.frameworks_by_id.values()],
            "completed_frameworks": [
                framework_json(f) for f in self.state.completed_frameworks.values()
            ],
            "unregistered_frameworks": [],
        }
        if self.state.config.leader:
            state["leader"] = info.get("pid")
            state["leader_info"] = info
            state["elected_time"] = self.state.started_at
        elif self.state.config.leader_address:
            state["leader"] = f"master@{self.state.config.leader_address}"
        return state
