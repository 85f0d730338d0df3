"""Fault injection: failed launches, refused calls, lost agents, broken streams.

What each fault imitates, and where from: a container that fails to launch
(TASK_FAILED, REASON_CONTAINER_LAUNCH_FAILED, ``docs/task-state-reasons.md``);
a call refused while a newly elected master recovers (``Master::Http::scheduler``:
503 "Master has not finished recovery") or on a replaced stream (400); an agent
marked unreachable or gone (``Master::markUnreachable``, ``Master::__removeSlave``;
``docs/high-availability-framework-guide.md``); a subscription connection broken
as by a network failure (``docs/scheduler-http-api.md`` "Disconnections"); a
rescinded offer (API "RESCIND"); and a master that is not (or no longer) the
leader (``Master::Http::redirect``).
"""

from __future__ import annotations

import dataclasses
import re
import signal

from tfmesos.testing.master.allocator import Allocator
from tfmesos.testing.master.executor import TaskRunner
from tfmesos.testing.master.resources import Resources
from tfmesos.testing.master.schema import JSON, ProtocolError
from tfmesos.testing.master.state import MasterState, mesos_id, now
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


class Faults:
    """The faults a test can inject; each one is also a method of the TestMaster."""

    def __init__(
        self,
        state: MasterState,
        allocator: Allocator,
        updates: StatusUpdates,
        runner: TaskRunner,
    ) -> None:
        self.state = state
        self.allocator = allocator
        self.updates = updates
        self.runner = runner
        self._launch_failures: list[_LaunchFailure] = []
        self._call_failures: list[_CallFailure] = []

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

    def fail_next_call(
        self,
        call_type: str,
        *,
        count: int = 1,
        status: int = 503,
        message: str = "Master has not finished recovery",
    ) -> None:
        """Answer the next ``count`` otherwise valid calls of ``call_type`` with
        ``status`` and ``message``, and do nothing else with them.

        The master refuses calls it would otherwise take in this way: 503
        "Master has not finished recovery" while a newly elected master recovers
        its state (``Master::Http::scheduler``), 400 when a call carries a
        ``Mesos-Stream-Id`` that has just been replaced, 403 "Framework is not
        subscribed" after the connection broke. An offer named in a refused
        ACCEPT stays outstanding, as the master never saw the call.
        """
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

    def kill_agent(self, agent_id: str | None = None, *, mode: str = "unreachable") -> str:
        """Lose an agent (the first active one if ``agent_id`` is None); returns its ID.

        Its tasks' process groups are killed and their frameworks get, from the
        master, without ``uuid``: ``mode="unreachable"`` (failed health checks)
        TASK_UNREACHABLE for PARTITION_AWARE frameworks, else TASK_LOST, with
        REASON_AGENT_REMOVED; ``mode="gone"`` (marked gone by the operator)
        TASK_GONE_BY_OPERATOR with REASON_AGENT_REMOVED_BY_OPERATOR for
        PARTITION_AWARE frameworks, else TASK_LOST with REASON_AGENT_REMOVED.
        Its offers are rescinded and every subscribed framework gets a FAILURE
        event with the ``agent_id``.
        """
        if mode not in ("unreachable", "gone"):
            raise ValueError("mode must be 'unreachable' or 'gone'")
        if agent_id is None:
            agent_id = next(
                (a.id for a in self.state.agents_by_id.values() if a.state == "active"), None
            )
            if agent_id is None:
                raise ValueError("no active agent left")
        agent = self.state.agents_by_id[agent_id]
        if agent.state != "active":
            raise ValueError(f"agent {agent_id} is already {agent.state}")
        agent.state = mode
        agent.unreachable_time = now()
        for offer in [o for o in self.state.offers_by_id.values() if o.agent_id == agent_id]:
            self.allocator.rescind(offer)
        for key in [k for k in self.state.executors if k[1] == agent_id]:
            del self.state.executors[key]
        for framework in list(self.state.frameworks_by_id.values()):
            aware = framework.partition_aware
            for task in [t for t in framework.tasks.values() if t.agent_id == agent_id]:
                was_terminal = task.terminal
                self.runner.finalize(task)
                if task.pid is not None:
                    self.runner.signal_group(task.pid, signal.SIGKILL)
                if was_terminal:
                    framework.completed_tasks[task.task_id] = framework.tasks.pop(task.task_id)
                    continue
                extra: JSON = {"executor_id": mesos_id(task.executor_id)}
                if mode == "unreachable":
                    state = "TASK_UNREACHABLE" if aware else "TASK_LOST"
                    reason = "REASON_AGENT_REMOVED"
                    message = f"Agent {agent.hostname} is unreachable: health check timed out"
                    extra["unreachable_time"] = {"nanoseconds": int(agent.unreachable_time * 1e9)}
                else:
                    state = "TASK_GONE_BY_OPERATOR" if aware else "TASK_LOST"
                    reason = "REASON_AGENT_REMOVED_BY_OPERATOR" if aware else "REASON_AGENT_REMOVED"
                    message = f"Agent {agent.hostname} has been marked gone"
                status = self.updates.master_update(
                    framework, task.task_id, agent_id, state, message, reason, extra=extra
                )
                task.state = state
                task.status_update_state = state
                task.statuses.append(status)
                task.ended_at = now()
                task.released = True
                if mode == "unreachable":
                    framework.unreachable_tasks[task.task_id] = framework.tasks.pop(task.task_id)
                else:
                    framework.completed_tasks[task.task_id] = framework.tasks.pop(task.task_id)
            framework.send({"type": "FAILURE", "failure": {"agent_id": mesos_id(agent_id)}})
        agent.used = Resources()
        return agent_id

    def drop_subscription(self, framework_id: str | None = None) -> list[str]:
        """Break the subscription connection(s) as a network failure would (all if None).

        The master then treats each framework as disconnected (failover timeout).
        Returns the framework IDs whose connection was dropped.
        """
        dropped: list[str] = []
        for framework in list(self.state.frameworks_by_id.values()):
            if framework_id is not None and framework.id != framework_id:
                continue
            if framework.subscription is not None:
                framework.subscription.close(abort=True)
                dropped.append(framework.id)
        return dropped

    def rescind_offer(self, offer_id: str | None = None) -> list[str]:
        """Rescind one outstanding offer (every one if None): RESCIND events. Returns the IDs."""
        offers = [
            o
            for o in list(self.state.offers_by_id.values())
            if offer_id is None or o.id == offer_id
        ]
        if offer_id is not None and not offers:
            raise KeyError(f"no outstanding offer {offer_id}")
        for offer in offers:
            self.allocator.rescind(offer)
        return [o.id for o in offers]

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
        self.state.config.leader = leader
        self.state.config.leader_address = leader_address
        self.state.config.redirect_location = location
        if leader:
            self.allocator.request_allocation()
