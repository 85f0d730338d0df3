"""Frameworks: subscription, heartbeats, disconnection, failover and removal.

Models ``Master::subscribe``, ``Master::failoverFramework``,
``Master::removeFramework`` and ``Master::updateFramework``
(``src/master/master.cpp``), ``validation::framework::validate``
(``src/master/validation.cpp``), the heartbeater (``src/common/heartbeater.hpp``:
the first HEARTBEAT at once), and the SUBSCRIBE, TEARDOWN and UPDATE_FRAMEWORK
calls with their "Disconnections" rules (``docs/scheduler-http-api.md``,
``docs/high-availability-framework-guide.md``; scheduler.proto
``Event.Subscribed``; mesos.proto ``FrameworkInfo.failover_timeout``).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Collection

from tfmesos.testing.master.allocator import Allocator
from tfmesos.testing.master.executor import TaskRunner
from tfmesos.testing.master.roles import role_error
from tfmesos.testing.master.schema import JSON, ProtocolError, validate_id
from tfmesos.testing.master.state import Framework, MasterState, Subscription, mesos_id, now
from tfmesos.testing.master.updates import StatusUpdates

logger = logging.getLogger(__name__)


def validate_framework_info(
    info: JSON, removed: Collection[str], *, root_submissions: bool = True
) -> str | None:
    """``validation::framework::validate`` and ``Master::validateFramework``
    (``src/master/master.cpp``), in their order: roles (``roles::validate``,
    ``src/common/roles.cpp``), the framework ID, the failover timeout, then
    ``root`` without ``--root_submissions``, then a removed framework."""
    capabilities = {c.get("type") for c in info.get("capabilities", [])}
    multi_role = "MULTI_ROLE" in capabilities
    if multi_role and "role" in info:
        return "'FrameworkInfo.role' must not be set when the framework is MULTI_ROLE capable"
    if not multi_role and info.get("roles"):
        return "'FrameworkInfo.roles' must not be set when the framework is not MULTI_ROLE capable"
    roles: list[str] = info.get("roles", []) if multi_role else [info.get("role", "*")]
    duplicates = sorted({r for r in roles if roles.count(r) > 1})
    if duplicates:
        return f"'FrameworkInfo.roles' contains duplicate items: {duplicates}"
    for role in roles:
        problem = role_error(role)
        if problem is not None:
            which = (
                "'FrameworkInfo.roles' contains invalid role"
                if multi_role
                else ("'FrameworkInfo.role' is not a valid role")
            )
            return f"{which}: {problem}"
    framework_id = info.get("id", {}).get("value")
    if framework_id:
        problem = validate_id(framework_id)
        if problem is not None:
            return problem
    timeout = info.get("failover_timeout", 0.0)
    if not math.isfinite(timeout) or abs(timeout) * 1e9 >= 2**63:
        return f"The framework failover_timeout ({timeout}) is invalid"
    if info.get("user") == "root" and not root_submissions:
        return "User 'root' is not allowed to run frameworks without --root_submissions set"
    if framework_id and framework_id in removed:
        return "Framework has been removed"
    return None


class Subscriptions:
    """Admits subscriptions and follows each framework through failover to removal."""

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

    def admit(self, subscription: Subscription, subscribe: JSON) -> str | None:
        info: JSON = dict(subscribe["framework_info"])
        error = validate_framework_info(
            info,
            self.state.completed_frameworks,
            root_submissions=self.state.config.root_submissions,
        )
        if error is not None:
            return error
        multi_role = "MULTI_ROLE" in {c.get("type") for c in info.get("capabilities", [])}
        roles = info.get("roles", []) if multi_role else [info.get("role", "*")]
        suppressed = list(subscribe.get("suppressed_roles", []))
        stray = sorted(set(suppressed) - set(roles))
        if stray:
            return f"Suppressed roles {stray} are not contained in the set of roles"
        framework_id = info.get("id", {}).get("value")
        if framework_id:
            framework = self.state.frameworks_by_id.get(framework_id)
            if framework is None:
                # Unknown to this master: Mesos takes it for a framework that has
                # not yet reregistered after a master failover and admits it.
                framework = Framework(framework_id, info)
                self.state.frameworks_by_id[framework_id] = framework
            else:
                if info.get("principal") != framework.info.get("principal"):
                    return "Changing framework's principal is not allowed."
                # `user` and `checkpoint` cannot change; new values are ignored.
                for key in ("user", "checkpoint"):
                    if key in framework.info:
                        info[key] = framework.info[key]
                    else:
                        info.pop(key, None)
                old = framework.subscription
                if old is not None:
                    old.send({"type": "ERROR", "error": {"message": "Framework failed over"}})
                    old.close()
                    framework.subscription = None
                if framework.failover_timer is not None:
                    framework.failover_timer.cancel()
                    framework.failover_timer = None
                for offer in self.state.offers_of(framework):
                    self.allocator.remove_offer(offer)  # discarded, not rescinded
                framework.info = info
        else:
            self.state.framework_seq += 1
            framework_id = f"{self.state.master_id}-{self.state.framework_seq - 1:04d}"
            info["id"] = mesos_id(framework_id)
            framework = Framework(framework_id, info)
            self.state.frameworks_by_id[framework_id] = framework
        framework.suppressed = set(suppressed)
        framework.subscription = subscription
        subscription.framework_id = framework_id
        framework.send(
            {
                "type": "SUBSCRIBED",
                "subscribed": {
                    "framework_id": mesos_id(framework_id),
                    "heartbeat_interval_seconds": float(self.state.config.heartbeat_interval),
                    "master_info": self.state.master_info,
                },
            }
        )
        subscription.send({"type": "HEARTBEAT"})
        subscription.heartbeat = self.state.spawn(self.heartbeat(subscription))
        # The agents resend what is still unacknowledged to the new connection.
        for task in list(framework.tasks.values()):
            if task.pending and not task.finalized:
                task.retry_interval = self.state.config.update_retry_interval
                self.updates.forward_head(task)
        self.allocator.request_allocation()
        return None

    async def heartbeat(self, subscription: Subscription) -> None:
        while not subscription.closed:
            await asyncio.sleep(self.state.config.heartbeat_interval)
            subscription.send({"type": "HEARTBEAT"})

    def stream_ended(self, subscription: Subscription) -> None:
        framework = self.state.frameworks_by_id.get(subscription.framework_id or "")
        if framework is not None and framework.subscription is subscription:
            self._disconnect(framework)

    def _disconnect(self, framework: Framework) -> None:
        """The subscription connection broke: deactivate, start the failover timeout."""
        framework.subscription = None
        for offer in self.state.offers_of(framework):
            self.allocator.remove_offer(offer)
        if self.state.stopping:
            return
        timeout = framework.failover_timeout
        logger.info("framework %s disconnected; failover timeout %ss", framework.id, timeout)
        if timeout <= 0:
            self.remove_framework(framework)
        else:
            assert self.state.loop is not None
            framework.failover_timer = self.state.loop.call_later(
                timeout, self._failover_expired, framework.id
            )

    def _failover_expired(self, framework_id: str) -> None:
        framework = self.state.frameworks_by_id.get(framework_id)
        if framework is not None and framework.subscription is None:
            framework.failover_timer = None
            self.remove_framework(framework)

    def remove_framework(self, framework: Framework) -> None:
        """TEARDOWN or failover timeout: kill the tasks, forget the framework."""
        logger.info("removing framework %s", framework.id)
        if framework.failover_timer is not None:
            framework.failover_timer.cancel()
            framework.failover_timer = None
        for offer in self.state.offers_of(framework):
            self.allocator.remove_offer(offer)
        if framework.subscription is not None:
            framework.subscription.close()
            framework.subscription = None
        message = f"Framework {framework.id} removed"
        for task in list(framework.tasks.values()):
            if not task.terminal:
                self.updates.record_master_state(
                    task, "TASK_KILLED", message, "REASON_FRAMEWORK_REMOVED"
                )
            self.runner.shutdown_task(task, self.state.config.shutdown_grace_period)
            framework.completed_tasks[task.task_id] = framework.tasks.pop(task.task_id)
        for task in list(framework.unreachable_tasks.values()):
            self.updates.record_master_state(
                task, "TASK_KILLED", message, "REASON_FRAMEWORK_REMOVED"
            )
            framework.completed_tasks[task.task_id] = framework.unreachable_tasks.pop(task.task_id)
        framework.unregistered_time = now()
        self.state.frameworks_by_id.pop(framework.id, None)
        self.state.completed_frameworks[framework.id] = framework
        self.allocator.request_allocation()

    def update_framework(self, framework: Framework, update: JSON) -> None:
        info: JSON = dict(update["framework_info"])
        error = validate_framework_info(
            info,
            self.state.completed_frameworks,
            root_submissions=self.state.config.root_submissions,
        )
        if error is None:
            for key in ("principal", "user", "checkpoint"):
                if info.get(key) != framework.info.get(key):
                    error = f"Updating 'FrameworkInfo.{key}' is unsupported"
                    break
        multi_role = "MULTI_ROLE" in {c.get("type") for c in info.get("capabilities", [])}
        roles = info.get("roles", []) if multi_role else [info.get("role", "*")]
        suppressed = set(update.get("suppressed_roles", []))
        if error is None and not suppressed <= set(roles):
            error = f"Suppressed roles {sorted(suppressed - set(roles))} are not contained in the set of roles"
        if error is not None:
            raise ProtocolError(400, f"Failed to validate scheduler::Call: {error}")
        framework.info = info
        for offer in self.state.offers_of(framework):
            if offer.role not in roles:
                self.allocator.rescind(offer)
        for role in framework.suppressed - suppressed:
            framework.filters = [f for f in framework.filters if f.role != role]
        framework.suppressed = suppressed
        self.allocator.request_allocation()
