"""Fault injection: failed launches, refused calls, lost or partitioned agents,
broken streams, rescinded offers, a master that is not the leader, and calls
held as by a loaded network so they arrive in any order. What each imitates,
and its source in Mesos, is in docs/test-master.md.
"""

from __future__ import annotations

import dataclasses
import random
import re
import signal

from tfmesos.testing.master.allocator import Allocator
from tfmesos.testing.master.executor import TaskRunner
from tfmesos.testing.master.fault_table import fault
from tfmesos.testing.master.resources import Resources
from tfmesos.testing.master.schema import JSON, ProtocolError
from tfmesos.testing.master.state import Agent, MasterState, Task, mesos_id, now
from tfmesos.testing.master.updates import StatusUpdates


@dataclasses.dataclass
class _LaunchFailure:
    pattern: re.Pattern[str]
    remaining: int
    message: str


@dataclasses.dataclass
class _CallFailure:
    call_type: str
    remaining: int
    status: int
    message: str


@dataclasses.dataclass
class _CallDelay:
    call_type: str
    seconds: float
    remaining: int | None


class Faults:
    """The faults a test can inject: each ``@fault`` method is also a method of
    the TestMaster and of the ThreadedTestMaster, and a route of ``/__test__/``
    (:mod:`~tfmesos.testing.master.fault_table`)."""

    def __init__(
        self,
        state: MasterState,
        allocator: Allocator,
        updates: StatusUpdates,
        runner: TaskRunner,
    ) -> None:
        self.master_state = state
        self.allocator = allocator
        self.updates = updates
        self.runner = runner
        self._launch_failures: list[_LaunchFailure] = []
        self._call_failures: list[_CallFailure] = []
        self._call_delays: list[_CallDelay] = []
        self._partition_on_start: list[tuple[re.Pattern[str], bool]] = []
        runner.started_hooks.append(self._task_started)
        delay = state.config.call_delay
        if delay is not None and not 0 <= delay[0] <= delay[1]:
            raise ValueError("call_delay must be (low, high) with 0 <= low <= high")
        self._random = random.Random(state.config.call_delay_seed)

    @fault()
    def fail_next_launch(
        self, pattern: str, *, count: int = 1, message: str = "injected failure"
    ) -> None:
        """The next ``count`` tasks whose name matches the regular expression ``pattern``
        (``re.search``) are not run: their agent reports TASK_FAILED with reason
        REASON_CONTAINER_LAUNCH_FAILED, as when a container fails to launch."""
        self._launch_failures.append(_LaunchFailure(re.compile(pattern), count, message))

    def take_launch_failure(self, name: str) -> str | None:
        """The message of the failure injected into the task called ``name``, if any."""
        message: str | None = None
        for rule in self._launch_failures:
            if rule.remaining > 0 and rule.pattern.search(name):
                rule.remaining -= 1
                message = rule.message
                break
        self._launch_failures = [r for r in self._launch_failures if r.remaining > 0]
        return message

    @fault(body_keys={"call_type": "type"})
    def fail_next_call(
        self,
        call_type: str,
        *,
        count: int = 1,
        status: int = 503,
        message: str = "Master has not finished recovery",
    ) -> None:
        """Answer the next ``count`` valid calls of ``call_type`` with ``status``
        and ``message`` and do nothing else with them, as the master does while
        it recovers (503) or on a replaced stream (400). An offer in a refused
        ACCEPT stays outstanding."""
        if not 400 <= status <= 599:
            raise ValueError("status must be an HTTP error status (400-599)")
        if count < 1:
            raise ValueError("count must be at least 1")
        self._call_failures.append(_CallFailure(call_type, count, status, message))

    def check_call(self, call_type: str) -> None:
        """Raise the injected refusal of a call of ``call_type``, if one is due."""
        for rule in self._call_failures:
            if rule.remaining > 0 and rule.call_type == call_type:
                rule.remaining -= 1
                self._call_failures = [r for r in self._call_failures if r.remaining > 0]
                raise ProtocolError(rule.status, rule.message)

    @fault(body_keys={"call_type": "type"})
    def delay_calls(self, call_type: str, seconds: float, *, count: int | None = None) -> None:
        """Hold the next ``count`` requests of ``call_type`` (every one if None; ``"*"``:
        any type) ``seconds`` before the master takes them, as a slow network path
        would. A matching rule replaces the random ``MasterConfig.call_delay`` for
        that request; the oldest matching rule counts first."""
        if seconds < 0:
            raise ValueError("seconds must not be negative")
        if count is not None and count < 1:
            raise ValueError("count must be at least 1 (or None: every call)")
        self._call_delays.append(_CallDelay(call_type, seconds, count))

    def call_delay(self, call_type: str | None) -> float:
        """How long to hold a request of ``call_type`` (None: not a readable call)
        before the master takes it: an injected delay, else the random one."""
        for rule in self._call_delays:
            if rule.call_type in ("*", call_type):
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining == 0:
                        self._call_delays.remove(rule)
                return rule.seconds
        bounds = self.master_state.config.call_delay
        if bounds is None:
            return 0.0
        return self._random.uniform(*bounds)

    @fault()
    def kill_agent(self, agent_id: str | None = None, *, mode: str = "unreachable") -> str:
        """Lose an agent (the first active one if ``agent_id`` is None); return
        its ID. Its tasks are killed and reported as the master reports them
        for ``mode`` (``unreachable`` or ``gone``, PARTITION_AWARE or not), its
        offers rescinded, and a FAILURE event sent. An unreachable agent may
        come back (:meth:`reregister_agent`) with no task left."""
        if mode not in ("unreachable", "gone"):
            raise ValueError("mode must be 'unreachable' or 'gone'")
        agent = self._active_agent(agent_id)
        self._remove_agent(agent, mode, kill=True)
        return agent.id

    @fault()
    def partition_agent(self, agent_id: str | None = None, *, freeze: bool = False) -> str:
        """The agent loses contact with the master (``Master::markUnreachable``);
        return its ID. Unlike :meth:`kill_agent`, its tasks keep running, and
        what it reports meanwhile waits until it reregisters. ``freeze=True``
        also SIGSTOPs its tasks, cutting them off from everyone."""
        agent = self._active_agent(agent_id)
        self._remove_agent(agent, "unreachable", kill=False)
        if freeze:
            for task in self._tasks_on(agent.id):
                if not task.finalized:
                    self.runner.freeze(task.pid)
        return agent.id

    @fault()
    def partition_next_launch(self, pattern: str, *, freeze: bool = False) -> None:
        """The agent of the next task whose name matches ``pattern`` (``re.search``)
        loses contact, as :meth:`partition_agent`, right after it has started the
        task's process (before its TASK_RUNNING can reach the framework)."""
        self._partition_on_start.append((re.compile(pattern), freeze))

    def _task_started(self, task: Task) -> None:
        for rule in self._partition_on_start:
            if rule[0].search(task.name):
                self._partition_on_start.remove(rule)
                agent = self.master_state.agents_by_id.get(task.agent_id)
                if agent is not None and agent.state == "active":
                    self.partition_agent(agent.id, freeze=rule[1])
                return

    @fault()
    def mark_agent_gone(self, agent_id: str) -> None:
        """The operator marks the agent gone (``Master::markGone``).

        An active agent is shut down with its tasks, as ``kill_agent(mode="gone")``.
        For an unreachable one, its unreachable tasks become TASK_GONE_BY_OPERATOR
        (PARTITION_AWARE; REASON_AGENT_REMOVED_BY_OPERATOR) or TASK_LOST
        (REASON_AGENT_REMOVED), "Agent has been marked gone"; its processes run on
        until it tries to reregister, which is refused (:meth:`reregister_agent`).
        """
        agent = self.master_state.agents_by_id[agent_id]
        if agent.state == "active":
            self._remove_agent(agent, "gone", kill=True)
            return
        if agent.state == "gone":
            raise ValueError(f"agent {agent_id} is already gone")
        agent.state = "gone"
        for framework in list(self.master_state.frameworks_by_id.values()):
            aware = framework.partition_aware
            for task in [t for t in framework.unreachable_tasks.values() if t.agent_id == agent_id]:
                state = "TASK_GONE_BY_OPERATOR" if aware else "TASK_LOST"
                reason = "REASON_AGENT_REMOVED_BY_OPERATOR" if aware else "REASON_AGENT_REMOVED"
                status = self.updates.master_update(
                    framework,
                    task.task_id,
                    agent_id,
                    state,
                    "Agent has been marked gone",
                    reason,
                    extra={"executor_id": mesos_id(task.executor_id)},
                )
                task.status_update_state = state
                task.statuses.append(status)
                framework.completed_tasks[task.task_id] = framework.unreachable_tasks.pop(
                    task.task_id
                )

    @fault()
    def reregister_agent(self, agent_id: str) -> bool:
        """An agent that lost contact reregisters with the tasks it still has
        (``Master::reregisterSlave``). One marked gone is refused and its tasks
        killed: returns False. Otherwise returns True; the master sends each
        surviving task's latest state, the agent resends its held updates, and
        tasks it no longer has are forgotten (reconciled as TASK_GONE)."""
        agent = self.master_state.agents_by_id[agent_id]
        if agent.state == "active":
            raise ValueError(f"agent {agent_id} is registered")
        if agent.state == "gone":
            for task in self._tasks_on(agent_id):
                if not task.finalized:
                    self.runner.shutdown_task(task, self.master_state.config.shutdown_grace_period)
            return False
        agent.state = "active"
        agent.unreachable_time = None
        resumed: list[Task] = []
        for framework in self.master_state.all_frameworks():
            removed = framework.id not in self.master_state.frameworks_by_id
            for task in self.master_state.framework_tasks(framework):
                if task.agent_id != agent_id:
                    continue
                if removed:
                    if not task.finalized:
                        self.runner.shutdown_task(
                            task, self.master_state.config.shutdown_grace_period
                        )
                    continue
                if task.task_id not in framework.unreachable_tasks:
                    continue
                del framework.unreachable_tasks[task.task_id]
                if task.finalized:
                    continue  # the agent no longer has it: the master forgets it
                framework.tasks[task.task_id] = task
                extra: JSON = {"executor_id": mesos_id(task.executor_id)}
                for previous in reversed(task.statuses):
                    if "container_status" in previous:
                        extra["container_status"] = previous["container_status"]
                        break
                status = self.updates.master_update(
                    framework,
                    task.task_id,
                    agent_id,
                    task.state,
                    "Unreachable agent re-reregistered",
                    "REASON_AGENT_REREGISTERED",
                    extra=extra,
                )
                task.status_update_state = task.state
                task.statuses.append(status)
                resumed.append(task)
        for task in resumed:
            if task.pending:
                task.retry_interval = self.master_state.config.update_retry_interval
                self.updates.forward_head(task)
        self.allocator.request_allocation()
        return True

    def _active_agent(self, agent_id: str | None) -> Agent:
        if agent_id is None:
            agent_id = next(
                (a.id for a in self.master_state.agents_by_id.values() if a.state == "active"), None
            )
            if agent_id is None:
                raise ValueError("no active agent left")
        agent = self.master_state.agents_by_id[agent_id]
        if agent.state != "active":
            raise ValueError(f"agent {agent_id} is already {agent.state}")
        return agent

    def _tasks_on(self, agent_id: str) -> list[Task]:
        return [
            task
            for framework in self.master_state.all_frameworks()
            for task in self.master_state.framework_tasks(framework)
            if task.agent_id == agent_id
        ]

    def _remove_agent(self, agent: Agent, mode: str, *, kill: bool) -> None:
        """``Master::__removeSlave``: each task's master update, offers, FAILURE."""
        agent_id = agent.id
        agent.state = mode
        agent.unreachable_time = now()
        for offer in [o for o in self.master_state.offers_by_id.values() if o.agent_id == agent_id]:
            self.allocator.rescind(offer)
        if kill:
            for key in [k for k in self.master_state.executors if k[1] == agent_id]:
                del self.master_state.executors[key]
        for framework in list(self.master_state.frameworks_by_id.values()):
            aware = framework.partition_aware
            for task in [t for t in framework.tasks.values() if t.agent_id == agent_id]:
                was_terminal = task.terminal
                if kill or was_terminal:
                    self.runner.finalize(task)
                if kill and task.pid is not None:
                    self.runner.signal_group(task.pid, signal.SIGKILL)
                if was_terminal:
                    framework.completed_tasks[task.task_id] = framework.tasks.pop(task.task_id)
                    continue
                extra: JSON = {"executor_id": mesos_id(task.executor_id)}
                if mode == "unreachable":
                    state = "TASK_UNREACHABLE" if aware else "TASK_LOST"
                    reason = "REASON_AGENT_REMOVED"
                    message = "health check timed out"
                    extra["unreachable_time"] = {"nanoseconds": int(agent.unreachable_time * 1e9)}
                else:
                    state = "TASK_GONE_BY_OPERATOR" if aware else "TASK_LOST"
                    reason = "REASON_AGENT_REMOVED_BY_OPERATOR" if aware else "REASON_AGENT_REMOVED"
                    message = "Agent has been marked gone"
                status = self.updates.master_update(
                    framework, task.task_id, agent_id, state, message, reason, extra=extra
                )
                task.status_update_state = state
                task.statuses.append(status)
                if kill:
                    # The agent is dead: the master's word is the last on the task.
                    task.state = state
                    task.ended_at = now()
                    task.released = True
                if mode == "unreachable":
                    framework.unreachable_tasks[task.task_id] = framework.tasks.pop(task.task_id)
                else:
                    framework.completed_tasks[task.task_id] = framework.tasks.pop(task.task_id)
            framework.send({"type": "FAILURE", "failure": {"agent_id": mesos_id(agent_id)}})
        if kill:
            agent.used = Resources()

    @fault()
    def drop_subscription(self, framework_id: str | None = None) -> list[str]:
        """Break the subscription connection(s) as a network failure would (all if None).

        The master then treats each framework as disconnected (failover timeout).
        Returns the framework IDs whose connection was dropped.
        """
        dropped: list[str] = []
        for framework in list(self.master_state.frameworks_by_id.values()):
            if framework_id is not None and framework.id != framework_id:
                continue
            if framework.subscription is not None:
                framework.subscription.close(abort=True)
                dropped.append(framework.id)
        return dropped

    @fault()
    def rescind_offer(self, offer_id: str | None = None) -> list[str]:
        """Rescind one outstanding offer (every one if None): RESCIND events. Returns the IDs."""
        offers = [
            o
            for o in list(self.master_state.offers_by_id.values())
            if offer_id is None or o.id == offer_id
        ]
        if offer_id is not None and not offers:
            raise KeyError(f"no outstanding offer {offer_id}")
        for offer in offers:
            self.allocator.rescind(offer)
        return [o.id for o in offers]

    @fault(path="/__test__/leader", http_defaults={"leader": True})
    def set_leader(
        self,
        leader: bool,
        *,
        leader_address: str | None = None,
        location: str | None = None,
    ) -> None:
        """Make this master the leader, or a non-leader answering 307.

        A non-leader answers ``/api/v1/scheduler`` (and ``/redirect``) with
        ``307 Temporary Redirect`` and ``Location: //LEADER_ADDRESS/api/v1/scheduler``
        (protocol-relative, as Mesos sends it), or exactly ``location`` if given;
        with neither it answers 503 "No leader elected". Subscriptions stay as they are.
        """
        self.master_state.config.leader = leader
        self.master_state.config.leader_address = leader_address
        self.master_state.config.redirect_location = location
        if leader:
            self.allocator.request_allocation()
