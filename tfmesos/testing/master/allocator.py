"""Agents, allocation rounds, offers and refusal filters.

Models the hierarchical allocator (``src/master/allocator/mesos/hierarchical.cpp``,
``HierarchicalAllocatorProcess``: refusal filters, ``--min_allocatable_resources``,
``--filter_gpu_resources``), the master's offer bookkeeping
(``Master::offer``, ``Master::removeOffer``, ``--offer_timeout``) and the
DECLINE, REVIVE and SUPPRESS calls (``docs/scheduler-http-api.md``; scheduler.proto
``Call.Decline``, ``Call.Revive``, ``Call.Suppress``; mesos.proto ``Filters``).
The order of frameworks is a simple dominant share, not Mesos's sorter.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping

from tfmesos.testing.master.resources import (
    MILLI,
    Ranges,
    Resources,
    allocatable,
    normalize_ranges,
    parse_attributes,
    parse_ranges,
    split_ranges,
)
from tfmesos.testing.master.schema import JSON
from tfmesos.testing.master.state import (
    Agent,
    Filter,
    Framework,
    MasterState,
    Offer,
    mesos_id,
    resolve,
)

# Refuse filters: the default and the cap (mesos.proto `Filters`; allocator).
DEFAULT_REFUSE_SECONDS = 5.0
MAX_REFUSE_SECONDS = 365 * 24 * 3600.0


class Allocator:
    """Offers every agent's free resources to subscribed frameworks, round after round."""

    def __init__(self, state: MasterState) -> None:
        self.state = state
        self._pending = False

    # ---------------------------------------------------------------- agents

    def create_agents(self) -> None:
        """The agents of the configuration, with disjoint port slices on a shared host."""
        config = self.state.config
        hostnames = list(config.agent_hostnames or [config.hostname] * config.agents)
        if len(hostnames) != config.agents:
            raise ValueError("agent_hostnames must name one hostname per agent")
        ranges = parse_ranges(config.ports) if config.ports else []
        shared_host = len(set(hostnames)) < len(hostnames)
        if config.split_ports and shared_host and ranges:
            slices = split_ranges(ranges, config.agents)
        else:
            slices = [list(ranges) for _ in hostnames]
        gpu_agents = config.agents if config.gpu_agents is None else config.gpu_agents
        for index, hostname in enumerate(hostnames):
            self.add_agent(
                hostname=hostname,
                ports=slices[index],
                gpus=config.gpus if index < gpu_agents else 0,
            )

    def add_agent(
        self,
        *,
        hostname: str | None = None,
        cpus: float | None = None,
        mem: float | None = None,
        disk: float | None = None,
        gpus: int | None = None,
        ports: Ranges | str | None = None,
        attributes: Mapping[str, str | float] | None = None,
    ) -> str:
        """Register one more agent (defaults from the config); returns its agent ID."""
        state = self.state
        config = state.config
        resources = Resources()
        for name, value in (
            ("cpus", config.cpus if cpus is None else cpus),
            ("mem", config.mem if mem is None else mem),
            ("disk", config.disk if disk is None else disk),
            ("gpus", config.gpus if gpus is None else gpus),
        ):
            if value:
                resources.scalars[name] = round(float(value) * MILLI)
        if ports is None:
            port_ranges = parse_ranges(config.ports) if config.ports else []
        elif isinstance(ports, str):
            port_ranges = parse_ranges(ports)
        else:
            port_ranges = normalize_ranges(ports)
        if port_ranges:
            resources.ranges["ports"] = port_ranges
        agent_id = f"{state.master_id}-S{state.agent_seq}"
        state.agent_seq += 1
        agent = Agent(
            id=agent_id,
            hostname=hostname or config.hostname,
            port=5051 + state.agent_seq - 1,
            total=resources,
            attributes=parse_attributes(
                attributes if attributes is not None else config.attributes
            ),
        )
        state.agents_by_id[agent_id] = agent
        self.request_allocation()
        return agent_id

    # ---------------------------------------------------------------- offers

    def remove_offer(self, offer: Offer) -> None:
        if offer.timer is not None:
            offer.timer.cancel()
        self.state.offers_by_id.pop(offer.id, None)

    def rescind(self, offer: Offer) -> None:
        self.remove_offer(offer)
        framework = self.state.frameworks_by_id.get(offer.framework_id)
        if framework is not None:
            framework.send({"type": "RESCIND", "rescind": {"offer_id": mesos_id(offer.id)}})

    def _offer_timed_out(self, offer_id: str) -> None:
        offer = self.state.offers_by_id.get(offer_id)
        if offer is not None:
            offer.timer = None
            self.rescind(offer)

    def add_filter(
        self, framework: Framework, offer: Offer, resources: Resources, filters: JSON | None
    ) -> None:
        seconds = DEFAULT_REFUSE_SECONDS
        if filters is not None and "refuse_seconds" in filters:
            value = float(filters["refuse_seconds"])
            if math.isnan(value) or value < 0:
                seconds = DEFAULT_REFUSE_SECONDS
            else:
                seconds = min(value, MAX_REFUSE_SECONDS)
        if seconds > 0 and not resources.is_empty():
            framework.filters.append(
                Filter(offer.agent_id, offer.role, resources, time.monotonic() + seconds)
            )

    def offer_json(self, offer: Offer) -> JSON:
        """The ``Offer`` message (mesos.proto) as an OFFERS event carries it."""
        state = self.state
        agent = state.agents_by_id[offer.agent_id]
        ip = resolve(agent.hostname, state.config.ip)
        data: JSON = {
            "id": mesos_id(offer.id),
            "framework_id": mesos_id(offer.framework_id),
            "agent_id": mesos_id(offer.agent_id),
            "hostname": agent.hostname,
            "url": {
                "scheme": "http",
                "address": {"hostname": agent.hostname, "ip": ip, "port": agent.port},
                "path": "/slave(1)",
            },
            "resources": offer.resources.to_json(offer.role),
            "allocation_info": {"role": offer.role},
        }
        if agent.attributes:
            data["attributes"] = agent.attributes
        executors = sorted(
            executor_id
            for (framework_id, agent_id, executor_id) in state.executors
            if framework_id == offer.framework_id and agent_id == agent.id
        )
        if executors:
            data["executor_ids"] = [mesos_id(e) for e in executors]
        return data

    # ------------------------------------------------------------ allocation

    def request_allocation(self) -> None:
        """Run an allocation round soon (once, however often it is asked for)."""
        state = self.state
        if not self._pending and state.loop is not None and not state.stopping:
            self._pending = True
            state.loop.call_soon(self.allocate)

    async def run(self) -> None:
        """An allocation round every ``allocation_interval``."""
        while True:
            await asyncio.sleep(self.state.config.allocation_interval)
            self.allocate()

    def _share(self, framework: Framework) -> float:
        """The framework's dominant share of the cluster (for a DRF-like order)."""
        total = Resources()
        for agent in self.state.agents_by_id.values():
            if agent.state == "active":
                total = total + agent.total
        used = Resources()
        for task in framework.tasks.values():
            if not task.released:
                used = used + task.resources
        for offer in self.state.offers_of(framework):
            used = used + offer.resources
        shares = [
            used.scalars.get(name, 0) / total.scalars[name]
            for name in ("cpus", "mem", "disk", "gpus")
            if total.scalars.get(name)
        ]
        return max(shares, default=0.0)

    def allocate(self) -> None:
        """One allocation round: offer each agent's free resources to a framework's role."""
        state = self.state
        config = state.config
        self._pending = False
        if state.stopping or not config.leader:
            return
        now_monotonic = time.monotonic()
        frameworks = [f for f in state.frameworks_by_id.values() if f.subscription is not None]
        for framework in frameworks:
            framework.filters = [f for f in framework.filters if f.expires > now_monotonic]
        new_offers: dict[str, list[Offer]] = {}
        for agent in state.agents_by_id.values():
            if agent.state != "active":
                continue
            free = agent.total - agent.used
            for offer in state.offers_by_id.values():
                if offer.agent_id == agent.id:
                    free = free - offer.resources
            order = sorted(enumerate(frameworks), key=lambda item: (self._share(item[1]), item[0]))
            for _, framework in order:
                candidate = free
                if agent.has_gpus and "GPU_RESOURCES" not in framework.capabilities:
                    if config.filter_gpu_resources:
                        continue
                    candidate = free.without("gpus")
                if not allocatable(candidate):
                    continue
                role = next(
                    (
                        role
                        for role in framework.roles
                        if role not in framework.suppressed
                        and not any(
                            f.agent_id == agent.id
                            and f.role == role
                            and f.resources.contains(candidate)
                            for f in framework.filters
                        )
                    ),
                    None,
                )
                if role is None:
                    continue
                state.offer_seq += 1
                offer = Offer(
                    id=f"{state.master_id}-O{state.offer_seq - 1}",
                    framework_id=framework.id,
                    agent_id=agent.id,
                    role=role,
                    resources=candidate,
                )
                if config.offer_timeout is not None and state.loop is not None:
                    offer.timer = state.loop.call_later(
                        config.offer_timeout, self._offer_timed_out, offer.id
                    )
                state.offers_by_id[offer.id] = offer
                new_offers.setdefault(framework.id, []).append(offer)
                free = free - candidate
        for framework_id, offers in new_offers.items():
            framework = state.frameworks_by_id[framework_id]
            framework.send(
                {"type": "OFFERS", "offers": {"offers": [self.offer_json(o) for o in offers]}}
            )

    # ------------------------------------------------------------------ calls

    def decline(self, framework: Framework, decline: JSON) -> None:
        for offer_id in decline.get("offer_ids", []):
            offer = self.state.offers_by_id.get(offer_id["value"])
            if offer is None or offer.framework_id != framework.id:
                continue  # "Ignoring decline of offer ... since it is no longer valid"
            self.remove_offer(offer)
            self.add_filter(framework, offer, offer.resources, decline.get("filters"))

    def revive(self, framework: Framework, roles: list[str]) -> None:
        targets = set(roles) if roles else set(framework.roles)
        targets &= set(framework.roles)
        framework.suppressed -= targets
        framework.filters = [f for f in framework.filters if f.role not in targets]
        self.request_allocation()

    def suppress(self, framework: Framework, roles: list[str]) -> None:
        targets = set(roles) if roles else set(framework.roles)
        framework.suppressed |= targets & set(framework.roles)
