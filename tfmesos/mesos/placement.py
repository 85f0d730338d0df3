"""Placing tasks on offers: pure functions over Mesos JSON resources.

A task takes ``cpus``, ``mem``, whole ``gpus`` and one port from the offer's
``ports`` ranges. Each resource the task takes keeps the ``role`` and
``allocation_info`` of the offered resource it came from, as a MULTI_ROLE
framework must (``mesos.proto``, ``Resource.allocation_info``).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfmesos.common.resources import format_mib
from tfmesos.spec import TaskSpec

__all__ = [
    "PLACEMENTS",
    "GangFit",
    "OfferCapacity",
    "Placement",
    "describe_need",
    "describe_needs",
    "place",
    "spread",
]

PLACEMENTS = ("spread", "pack")
"""How a job's tasks are put on the offers that hold them all: ``spread``
over as many agents as can hold them, fewest of the job's tasks first (the
default: a lost agent costs few tasks, and every agent starts its share at
once); ``pack``, each offer filled in turn before the next."""

Resource = dict[str, Any]
_EPSILON = 1e-6


@dataclass
class _Scalar:
    template: Resource
    value: float


@dataclass
class OfferCapacity:
    """What is left of one offer while tasks are placed on it."""

    offer: dict[str, Any]
    scalars: dict[str, list[_Scalar]] = field(default_factory=dict)
    ports: list[tuple[Resource, list[int]]] = field(default_factory=list)
    """Each ports resource with its free ports as [begin, end] pairs, flattened."""
    _totals: dict[str, float] = field(default_factory=dict)
    _ports_left: int = 0

    @classmethod
    def of(cls, offer: dict[str, Any]) -> OfferCapacity:
        capacity = cls(offer)
        for resource in offer.get("resources", []):
            name = resource.get("name")
            if resource.get("type") == "SCALAR" and name in ("cpus", "mem", "gpus"):
                value = float(resource.get("scalar", {}).get("value", 0.0))
                capacity.scalars.setdefault(name, []).append(_Scalar(resource, value))
            elif resource.get("type") == "RANGES" and name == "ports":
                bounds: list[int] = []
                for r in resource.get("ranges", {}).get("range", []):
                    bounds += [int(r["begin"]), int(r["end"])]
                capacity.ports.append((resource, bounds))
        capacity._recount()
        return capacity

    def _recount(self) -> None:
        # Kept up to date by take() from here on: fits() is then O(1), which
        # matters when a thousand pending tasks meet each of hundreds of offers.
        self._totals = {name: sum(s.value for s in parts) for name, parts in self.scalars.items()}
        self._ports_left = sum(
            bounds[i + 1] - bounds[i] + 1
            for _, bounds in self.ports
            for i in range(0, len(bounds), 2)
        )

    def total(self, name: str) -> float:
        return self._totals.get(name, 0.0)

    def port_count(self) -> int:
        return self._ports_left

    def fits(self, task: TaskSpec) -> bool:
        totals = self._totals
        return (
            self._ports_left >= task.ports
            and totals.get("cpus", 0.0) + _EPSILON >= task.cpus
            and totals.get("mem", 0.0) + _EPSILON >= task.mem
            and totals.get("gpus", 0.0) + _EPSILON >= task.gpus
            and (task.ports == 1 or self._blocks(task.ports) > 0)
        )

    def _blocks(self, count: int) -> int:
        """How many places a block of ``count`` consecutive free ports can start at."""
        return sum(
            max(0, bounds[i + 1] - bounds[i] + 2 - count)
            for _, bounds in self.ports
            for i in range(0, len(bounds), 2)
        )

    def holds_port(self, port: int, count: int = 1) -> bool:
        """Whether ``port`` and the ``count - 1`` after it are free here."""
        return any(
            bounds[i] <= port and port + count - 1 <= bounds[i + 1]
            for _, bounds in self.ports
            for i in range(0, len(bounds), 2)
        )

    def take(self, task: TaskSpec, port: int | None = None) -> tuple[list[Resource], int]:
        """Take what ``task`` needs; return its resources and its port: ``port``
        if given (the offer must hold it), else one picked at random by offer
        and task. Not the first free port: one held outside Mesos would fail
        every relaunch, and every framework taking the first port picks the
        same one."""
        taken: list[Resource] = []
        for name, amount in (("cpus", task.cpus), ("mem", task.mem), ("gpus", float(task.gpus))):
            for scalar in self.scalars.get(name, []):
                if amount <= _EPSILON:
                    break
                part = min(amount, scalar.value)
                if part <= _EPSILON:
                    continue
                resource = _without_amount(scalar.template)
                resource["scalar"] = {"value": round(part, 3)}
                taken.append(resource)
                scalar.value -= part
                amount -= part
                self._totals[name] -= part
        count = task.ports
        if port is None:
            # Chosen by the offer and the task, so that a fit made again over
            # the same offers takes the same ports (GangFit), and a relaunch,
            # on a new offer, most likely another one.
            seed = f"{self.offer.get('id', {}).get('value', '')} {task.name}"
            places = self._ports_left if count == 1 else self._blocks(count)
            port = self._free_port(random.Random(seed).randrange(places), count)
        last = port + count - 1
        template, bounds, at = next(
            (t, b, i)
            for t, b in self.ports
            for i in range(0, len(b), 2)
            if b[i] <= port and last <= b[i + 1]
        )
        # The range around the ports, less them: none, one or two ranges.
        rest = [(b, e) for b, e in ((bounds[at], port - 1), (last + 1, bounds[at + 1])) if b <= e]
        bounds[at : at + 2] = [bound for pair in rest for bound in pair]
        self._ports_left -= count
        resource = _without_amount(template)
        resource["ranges"] = {"range": [{"begin": port, "end": last}]}
        taken.append(resource)
        return taken, port

    def _free_port(self, index: int, count: int = 1) -> int:
        """The first port of the ``index``-th place a block of ``count``
        consecutive free ports can start at, counting through the ranges in
        order (with ``count`` 1: the ``index``-th free port)."""
        for _, bounds in self.ports:
            for i in range(0, len(bounds), 2):
                size = bounds[i + 1] - bounds[i] + 2 - count
                if index < size:
                    return bounds[i] + index
                index -= max(size, 0)
        raise ValueError("the offer has no free port left")

    def summary(self) -> str:
        gpus = self.total("gpus")
        text = f"cpus {self.total('cpus'):g}, mem {format_mib(self.total('mem'))}"
        text += f", gpus {gpus:g}" if gpus else ""
        return text + f", {self.port_count()} ports"


def _without_amount(template: Resource) -> Resource:
    # A shallow copy: nested parts (allocation_info, reservations) are shared
    # and never changed, and deepcopy was most of the placement's CPU time.
    return {k: v for k, v in template.items() if k not in ("scalar", "ranges", "set")}


def describe_need(task: TaskSpec) -> str:
    text = f"cpus {task.cpus:g}, mem {format_mib(task.mem)}"
    ports = "1 port" if task.ports == 1 else f"{task.ports} consecutive ports"
    return text + (f", gpus {task.gpus}" if task.gpus else "") + f", {ports}"


def describe_needs(tasks: Sequence[TaskSpec]) -> str:
    """What ``tasks`` need together."""
    gpus = sum(t.gpus for t in tasks)
    text = f"cpus {sum(t.cpus for t in tasks):g}, mem {format_mib(sum(t.mem for t in tasks))}"
    return text + (f", gpus {gpus}" if gpus else "") + f", {sum(t.ports for t in tasks)} ports"


def _describe_amounts(cpus: float, mem: float, gpus: float, ports: int) -> str:
    """What offers hold together: their ``cpus``, ``mem``, ``gpus`` and ``ports``."""
    text = f"cpus {cpus:g}, mem {format_mib(mem)}"
    text += f", gpus {gpus:g}" if gpus else ""
    return text + f", {ports} ports"


def smallest_need(tasks: Sequence[TaskSpec]) -> TaskSpec:
    """A task that needs the least of each resource any of ``tasks`` needs: an
    offer that cannot fit it fits none of them."""
    return TaskSpec(
        "",
        0,
        min(t.cpus for t in tasks),
        min(t.mem for t in tasks),
        min(t.gpus for t in tasks),
        None,
        min(t.ports for t in tasks),
    )


def place(
    tasks: Sequence[TaskSpec],
    capacity: OfferCapacity,
    positions: Iterable[int] | None = None,
    smallest: TaskSpec | None = None,
) -> list[tuple[int, list[Resource], int]]:
    """First fit on one offer of ``tasks`` in order, or of those at
    ``positions`` in that order: (task position, resources, port). ``smallest``
    is ``smallest_need(tasks)`` when the caller already has it."""
    placed = []
    for position in range(len(tasks)) if positions is None else positions:
        task = tasks[position]
        if capacity.fits(task):
            resources, port = capacity.take(task)
            placed.append((position, resources, port))
            continue
        if smallest is None:
            smallest = smallest_need(tasks)
        if not capacity.fits(smallest):
            break  # full: no task left can fit
    return placed


Placement = dict[int, tuple[dict[str, Any], list[Resource], int]]
"""By task position: the offer, the resources taken from it, the port."""


def spread(
    tasks: Sequence[TaskSpec],
    offers: Sequence[tuple[OfferCapacity, Sequence[int] | None]],
    load: Mapping[str, int] | None = None,
) -> Placement | None:
    """Every task of ``tasks`` on the offers, in task order, each on the agent
    with the fewest tasks that can hold it, agents equally loaded taken in
    turn (the least lately used first, then offer order); or None if this
    greedy fit leaves a task out (a first fit, :class:`GangFit`, may still
    hold them all). ``offers``: each with the positions that may use it (None:
    every task); ``load``: the job's tasks already on each agent, by agent ID.

    Balanced by count, not by resources: the job's tasks are alike, and the
    count is what an agent's loss costs and what it starts at once."""
    load = load or {}
    by_agent: dict[str, list[tuple[OfferCapacity, frozenset[int] | None]]] = {}
    for capacity, candidates in offers:
        agent = str(capacity.offer.get("agent_id", {}).get("value", ""))
        allowed = None if candidates is None else frozenset(candidates)
        by_agent.setdefault(agent, []).append((capacity, allowed))
    agents = list(by_agent)
    # (tasks on the agent, when it last took one, offer order): a heap, so
    # that each task finds the least-loaded agent in O(log agents).
    heap = [(load.get(agent, 0), 0, order) for order, agent in enumerate(agents)]
    heapq.heapify(heap)
    smallest = smallest_need(tasks) if tasks else None
    placed: Placement = {}
    for position, task in enumerate(tasks):
        passed = []
        while heap:
            count, turn, order = heapq.heappop(heap)
            taken = _take_on_agent(by_agent[agents[order]], position, task)
            if taken is not None:
                placed[position] = taken
                heapq.heappush(heap, (count + 1, position + 1, order))
                break
            assert smallest is not None
            if any(capacity.fits(smallest) for capacity, _ in by_agent[agents[order]]):
                passed.append((count, turn, order))  # full for this task, not for all
        else:
            return None
        for entry in passed:
            heapq.heappush(heap, entry)
    return placed


def _take_on_agent(
    offers: list[tuple[OfferCapacity, frozenset[int] | None]], position: int, task: TaskSpec
) -> tuple[dict[str, Any], list[Resource], int] | None:
    """Take what ``task`` needs from the first of one agent's offers that may
    hold it, or None."""
    for capacity, allowed in offers:
        if (allowed is None or position in allowed) and capacity.fits(task):
            resources, port = capacity.take(task)
            return capacity.offer, resources, port
    return None


class GangFit:
    """The first fit of the waiting tasks over the held offers, in offer order.

    An offer's share depends only on the offers before it, so the fit is kept
    between OFFERS events and only new offers are fitted (refitting all was
    quadratic); an offer gone cuts the fit back to before it (``drop_from``)."""

    def __init__(self, tasks: Sequence[TaskSpec], key: list[str]) -> None:
        self.tasks = tasks
        self.key = key
        """The waiting tasks' IDs, in order: the fit is of these and no others."""
        self.offer_ids: list[str] = []
        self.placed: dict[int, tuple[dict[str, Any], list[Resource], int]] = {}
        """By task position: the offer, the resources taken from it, the port."""
        self.gpu_candidates: list[int] | None = None
        """The candidates the offers with GPUs were fitted with, if any was."""
        self._unplaced: dict[int, None] = dict.fromkeys(range(len(tasks)))
        """Positions not placed, in order (a dict: removal in O(1))."""
        self._took: list[list[int]] = []
        """The positions each offer took."""
        self._offered: list[tuple[float, float, float, int]] = []
        """What each offer held as offered: cpus, mem, gpus, ports."""
        self._smallest = smallest_need(tasks) if tasks else None
        self._needs: str | None = None

    @property
    def complete(self) -> bool:
        return len(self.placed) == len(self.tasks)

    def add(self, capacity: OfferCapacity, candidates: Sequence[int] | None) -> None:
        """Fit the next offer, as offered; ``candidates``: the positions that may
        use it, in the order they are to be tried, or None for every task in order."""
        offer = capacity.offer
        self._offered.append(
            (
                capacity.total("cpus"),
                capacity.total("mem"),
                capacity.total("gpus"),
                capacity.port_count(),
            )
        )
        unplaced = self._unplaced
        positions: Iterable[int] = (
            unplaced if candidates is None else [i for i in candidates if i in unplaced]
        )
        took = place(self.tasks, capacity, positions, self._smallest)
        for position, resources, port in took:
            self.placed[position] = (offer, resources, port)
            del unplaced[position]
        self._took.append([position for position, _, _ in took])
        self.offer_ids.append(offer["id"]["value"])

    def drop_from(self, index: int) -> None:
        """Forget the offers from ``index`` on and what they took."""
        for took in self._took[index:]:
            for position in took:
                del self.placed[position]
        del self._took[index:], self._offered[index:], self.offer_ids[index:]
        self._unplaced = dict.fromkeys(i for i in range(len(self.tasks)) if i not in self.placed)

    def shortfall(self) -> str:
        """What the offers fit of the tasks, and what the tasks need."""
        if self._needs is None:
            self._needs = describe_needs(self.tasks)
        held = _describe_amounts(
            sum(offered[0] for offered in self._offered),
            sum(offered[1] for offered in self._offered),
            sum(offered[2] for offered in self._offered),
            sum(offered[3] for offered in self._offered),
        )
        return (
            f"the {len(self.offer_ids)} offers held ({held}) fit {len(self.placed)} of the "
            f"{len(self.tasks)} tasks waiting, which need {self._needs} together"
        )
