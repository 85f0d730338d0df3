"""ACCEPT and its operations: offer and task validation, LAUNCH and LAUNCH_GROUP.

Models ``Master::accept`` (``src/master/master.cpp``), ``validation::offer``
and ``validation::task`` (``src/master/validation.cpp``: TASK_ERROR with
REASON_TASK_INVALID or REASON_TASK_GROUP_INVALID; invalid offers give
TASK_DROPPED or TASK_LOST with REASON_INVALID_OFFERS, ``docs/task-state-reasons.md``),
the ACCEPT call (``docs/scheduler-http-api.md``; scheduler.proto ``Call.Accept``;
mesos.proto ``Offer.Operation``, ``TaskInfo``, ``ExecutorInfo``) and the
agent's sandbox layout. Other operations (RESERVE, CREATE, ...) are ignored.
"""

from __future__ import annotations

import logging
import uuid

from tfmesos.testing.master.allocator import Allocator
from tfmesos.testing.master.executor import TaskRunner
from tfmesos.testing.master.faults import Faults
from tfmesos.testing.master.resources import Resources, parse_resources
from tfmesos.testing.master.schema import JSON, duration_seconds, validate_id
from tfmesos.testing.master.state import (
    DEFAULT_KILL_GRACE_SECONDS,
    Agent,
    Framework,
    MasterState,
    Task,
)
from tfmesos.testing.master.updates import StatusUpdates

logger = logging.getLogger(__name__)


class Operations:
    """Validates ACCEPT calls and launches their tasks and task groups."""

    def __init__(
        self,
        state: MasterState,
        allocator: Allocator,
        updates: StatusUpdates,
        runner: TaskRunner,
        faults: Faults,
    ) -> None:
        self.state = state
        self.allocator = allocator
        self.updates = updates
        self.runner = runner
        self.faults = faults

    def _validate_offers(self, framework: Framework, offer_ids: list[str]) -> str | None:
        """``validation::offer::validate``."""
        if not offer_ids:
            return "No offers specified"
        seen: set[str] = set()
        agent_id: str | None = None
        role: str | None = None
        for offer_id in offer_ids:
            if offer_id in seen:
                return f"Duplicate offer {offer_id} in offer list"
            seen.add(offer_id)
            offer = self.state.offers_by_id.get(offer_id)
            if offer is None or offer.framework_id != framework.id:
                return f"Offer {offer_id} is no longer valid"
            if agent_id is not None and offer.agent_id != agent_id:
                return (
                    "Aggregated offers must belong to one single agent. Offer "
                    f"{offer_id} uses agent {offer.agent_id} and offer {offer_ids[0]} "
                    f"uses agent {agent_id}"
                )
            if role is not None and offer.role != role:
                return (
                    "Aggregated offers must be allocated to the same role. Offer "
                    f"{offer_id} uses role {offer.role} and offer {offer_ids[0]} uses role {role}"
                )
            agent_id, role = offer.agent_id, offer.role
        return None

    def accept(self, framework: Framework, accept: JSON) -> None:
        offer_ids = [o["value"] for o in accept.get("offer_ids", [])]
        operations: list[JSON] = accept.get("operations", [])
        error = self._validate_offers(framework, offer_ids)
        if error is not None:
            # The valid ones among them go back to the allocator unfiltered.
            for offer_id in offer_ids:
                offer = self.state.offers_by_id.get(offer_id)
                if offer is not None and offer.framework_id == framework.id:
                    self.allocator.remove_offer(offer)
            state = "TASK_DROPPED" if framework.partition_aware else "TASK_LOST"
            for operation in operations:
                for info in self._operation_tasks(operation):
                    self.updates.master_update(
                        framework,
                        info["task_id"]["value"],
                        info["agent_id"]["value"],
                        state,
                        f"Task launched with invalid offers: {error}",
                        "REASON_INVALID_OFFERS",
                    )
            return
        offers = [self.state.offers_by_id[offer_id] for offer_id in offer_ids]
        for offer in offers:
            self.allocator.remove_offer(offer)
        agent = self.state.agents_by_id[offers[0].agent_id]
        role = offers[0].role
        remaining = Resources()
        for offer in offers:
            remaining = remaining + offer.resources
        for operation in operations:
            kind = operation.get("type")
            if kind == "LAUNCH":
                for info in operation.get("launch", {}).get("task_infos", []):
                    remaining = self._launch_task(framework, agent, role, info, remaining)
            elif kind == "LAUNCH_GROUP" and "launch_group" in operation:
                remaining = self._launch_group(
                    framework, agent, role, operation["launch_group"], remaining
                )
            else:
                logger.warning("ignoring unsupported operation %s", kind)
        self.allocator.add_filter(framework, offers[0], remaining, accept.get("filters"))

    @staticmethod
    def _operation_tasks(operation: JSON) -> list[JSON]:
        if operation.get("type") == "LAUNCH":
            return list(operation.get("launch", {}).get("task_infos", []))
        if operation.get("type") == "LAUNCH_GROUP":
            return list(operation.get("launch_group", {}).get("task_group", {}).get("tasks", []))
        return []

    def _task_error(
        self, framework: Framework, info: JSON, agent: Agent, role: str, remaining: Resources
    ) -> tuple[str | None, Resources]:
        """``validation::task::validate``: an error message, and what the task needs."""
        task_id = info["task_id"]["value"]
        problem = validate_id(task_id)
        if problem is not None:
            return f"Task has an invalid TaskID: {problem}", Resources()
        if task_id in framework.tasks:
            return f"Task has duplicate ID: {task_id}", Resources()
        if task_id in framework.unreachable_tasks:
            return f"Task reuses the ID of an unreachable task: {task_id}", Resources()
        if info["agent_id"]["value"] != agent.id:
            return (
                f"Task uses invalid agent {info['agent_id']['value']} while agent "
                f"{agent.id} is expected",
                Resources(),
            )
        grace = duration_seconds(info.get("kill_policy", {}).get("grace_period"))
        if grace is not None and grace < 0:
            return "Task's 'kill_policy.grace_period' must be non-negative", Resources()
        completion = duration_seconds(info.get("max_completion_time"))
        if completion is not None and completion < 0:
            return "Task's `max_completion_time` must be non-negative", Resources()
        if not info.get("resources"):
            return "Task uses no resources", Resources()
        parsed = parse_resources(info["resources"], role)
        if parsed.error is not None:
            return parsed.error, Resources()
        for variable in info.get("command", {}).get("environment", {}).get("variables", []):
            kind = variable.get("type", "VALUE")
            if kind == "VALUE" and "value" not in variable:
                return (
                    "Task's `CommandInfo` is invalid: Environment variable "
                    f"'{variable['name']}' of type 'VALUE' must have a value set",
                    Resources(),
                )
            if kind == "SECRET" and "secret" not in variable:
                return (
                    "Task's `CommandInfo` is invalid: Environment variable "
                    f"'{variable['name']}' of type 'SECRET' must have a secret set",
                    Resources(),
                )
        if ("executor" in info) == ("command" in info):
            return (
                "Task should have at least one (but not both) of CommandInfo or "
                "ExecutorInfo present",
                Resources(),
            )
        total = parsed.resources
        foreign = list(parsed.foreign)
        if "executor" in info:
            executor = info["executor"]
            if executor.get("type", "CUSTOM") != "CUSTOM":
                return "'ExecutorInfo.type' must be 'CUSTOM'", Resources()
            if "command" not in executor:
                return "'ExecutorInfo.command' must be set", Resources()
            key = (framework.id, agent.id, executor["executor_id"]["value"])
            if key not in self.state.executors:
                executor_resources = parse_resources(executor.get("resources", []), role)
                if executor_resources.error is not None:
                    return (
                        f"Executor uses invalid resources: {executor_resources.error}",
                        Resources(),
                    )
                total = total + executor_resources.resources
                foreign += executor_resources.foreign
        if foreign or not remaining.contains(total):
            # As the task (then its executor) lists them: Mesos sums them in that order.
            listed = [r["name"] for r in info["resources"]]
            listed += [r["name"] for r in info.get("executor", {}).get("resources", [])]
            needed = total.describe(role, listed)
            if foreign:
                needed += "; " + "; ".join(foreign)
            return (
                f"Total resources {needed} required by task and its executor is more than "
                f"available {remaining.describe(role)}",
                Resources(),
            )
        return None, total

    def _launch_task(
        self, framework: Framework, agent: Agent, role: str, info: JSON, remaining: Resources
    ) -> Resources:
        error, total = self._task_error(framework, info, agent, role, remaining)
        if error is not None:
            self.updates.master_update(
                framework,
                info["task_id"]["value"],
                info["agent_id"]["value"],
                "TASK_ERROR",
                error,
                "REASON_TASK_INVALID",
            )
            return remaining
        executor_id = info["task_id"]["value"]
        if "executor" in info:
            executor_id = info["executor"]["executor_id"]["value"]
        self._add_task(framework, agent, role, info, total, executor_id, None)
        return remaining - total

    def _launch_group(
        self, framework: Framework, agent: Agent, role: str, launch: JSON, remaining: Resources
    ) -> Resources:
        executor: JSON = launch["executor"]
        infos: list[JSON] = launch["task_group"].get("tasks", [])
        executor_id = executor["executor_id"]["value"]
        key = (framework.id, agent.id, executor_id)
        error: str | None = None
        if executor.get("type") != "DEFAULT":
            error = "'ExecutorInfo.type' must be 'DEFAULT'"
        elif not infos:
            error = "Task group has no tasks"
        available = remaining
        executor_resources = Resources()
        if error is None and key not in self.state.executors:
            parsed = parse_resources(executor.get("resources", []), role)
            if parsed.error is not None or parsed.foreign:
                error = f"Executor uses invalid resources: {parsed.error or parsed.foreign}"
            elif not available.contains(parsed.resources):
                listed = [r["name"] for r in executor.get("resources", [])]
                error = (
                    f"Total resources {parsed.resources.describe(role, listed)} required by "
                    f"task group and its executor are more than available "
                    f"{available.describe(role)}"
                )
            else:
                executor_resources = parsed.resources
                available = available - parsed.resources
        needs: list[Resources] = []
        ids = [info["task_id"]["value"] for info in infos]
        if error is None and len(set(ids)) != len(ids):
            error = "The task group has duplicate task IDs"
        for info in infos if error is None else []:
            if "executor" in info and info["executor"] != executor:
                error = f"Task '{info['task_id']['value']}' is invalid: 'TaskInfo.executor' must match the executor of the task group"
                break
            if "command" not in info:
                error = (
                    f"Task '{info['task_id']['value']}' is invalid: 'TaskInfo.command' must be set"
                )
                break
            probe = dict(info)
            probe.pop("executor", None)
            problem, total = self._task_error(framework, probe, agent, role, available)
            if problem is not None:
                error = f"Task '{info['task_id']['value']}' is invalid: {problem}"
                break
            available = available - total
            needs.append(total)
        if error is not None:
            for info in infos:
                self.updates.master_update(
                    framework,
                    info["task_id"]["value"],
                    info["agent_id"]["value"],
                    "TASK_ERROR",
                    error,
                    "REASON_TASK_GROUP_INVALID",
                )
            return remaining
        if key not in self.state.executors:
            self.state.executors[key] = executor_resources
            agent.used = agent.used + executor_resources
        for info, total in zip(infos, needs, strict=True):
            self._add_task(framework, agent, role, info, total, executor_id, executor)
        return available

    def _add_task(
        self,
        framework: Framework,
        agent: Agent,
        role: str,
        info: JSON,
        resources: Resources,
        executor_id: str,
        group_executor: JSON | None,
    ) -> Task:
        container_id = str(uuid.uuid4())
        sandbox = (
            self.state.work_dir
            / "slaves"
            / agent.id
            / "frameworks"
            / framework.id
            / "executors"
            / executor_id
            / "runs"
            / container_id
        )
        grace = duration_seconds(info.get("kill_policy", {}).get("grace_period"))
        task = Task(
            task_id=info["task_id"]["value"],
            name=info["name"],
            framework_id=framework.id,
            agent_id=agent.id,
            executor_id=executor_id,
            info=info,
            resources=resources,
            role=role,
            container_id=container_id,
            sandbox=sandbox,
            group_executor=group_executor,
            kill_grace=DEFAULT_KILL_GRACE_SECONDS if grace is None else grace,
        )
        task.inject_failure = self.faults.take_launch_failure(task.name)
        framework.tasks[task.task_id] = task
        agent.used = agent.used + resources
        task.runner = self.state.spawn(self.runner.run_task(task))
        return task
