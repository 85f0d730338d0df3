"""Placement that spreads: where the offer hold puts a job's tasks once the
held offers hold them all, under ``spread`` (the default) and ``pack``."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.test_mesos_backend import offer
from tfmesos.backends.base import Launch
from tfmesos.backends.mesos.hold import Accept, OfferHold
from tfmesos.backends.mesos.tasks import PlacedTasks
from tfmesos.errors import SpecError
from tfmesos.mesos.placement import OfferCapacity, spread
from tfmesos.spec import ClusterSpec, Job

pytestmark = pytest.mark.unit


def workers(count: int, cpus: float = 1, gpus: int = 0) -> list[Launch]:
    spec = ClusterSpec((Job("worker", count, cpus=cpus, mem=128, gpus=gpus, cmd="x"),))
    return [Launch(f"id-{t.name}", t, {}) for t in spec.tasks()]


def place_all(
    hold: OfferHold, launches: list[Launch], offers: list[dict[str, Any]]
) -> dict[str, list[str]]:
    """Hand ``launches`` over, offer ``offers`` in one OFFERS event: the task
    names each agent was given."""
    for launch in launches:
        hold.add(launch)
    decisions: list[object] = []
    for each in offers:
        decisions += hold.offered(each, OfferCapacity.of(each), False)
    decisions += hold.place()
    placed: dict[str, list[str]] = {}
    for decision in decisions:
        if isinstance(decision, Accept):
            agent = decision.offer["agent_id"]["value"]
            placed[agent] = [launch.task.name for launch, _, _ in decision.placed]
    assert sum(map(len, placed.values())) == len(launches), placed
    return placed


def five_agents() -> list[dict[str, Any]]:
    return [offer(f"a{i}", cpus=8) for i in range(5)]


def test_ten_tasks_spread_two_to_each_of_five_agents_with_room() -> None:
    hold = OfferHold()
    placed = place_all(hold, workers(10), five_agents())
    assert {agent: len(names) for agent, names in placed.items()} == dict.fromkeys(
        ["a0", "a1", "a2", "a3", "a4"], 2
    )
    # In turn: each agent's next task comes once every other has one.
    assert placed["a0"] == ["worker:0", "worker:5"]


def test_under_pack_ten_tasks_fill_the_first_agent_with_room() -> None:
    hold = OfferHold(placement="pack")
    assert place_all(hold, workers(10), five_agents()) == {
        "a0": [f"worker:{i}" for i in range(8)],
        "a1": ["worker:8", "worker:9"],
    }


def test_spread_counts_the_tasks_the_job_already_has_on_each_agent() -> None:
    hold = OfferHold(load=lambda: {"a0": 3, "a1": 1})
    placed = place_all(hold, workers(3), [offer("a0"), offer("a1"), offer("a2")])
    # a2 (none yet), then a1 and a2 (one each), never a0 (three).
    assert placed == {"a1": ["worker:1"], "a2": ["worker:0", "worker:2"]}


def test_an_agent_full_for_a_task_is_passed_over_for_the_next_least_loaded() -> None:
    hold = OfferHold()
    placed = place_all(hold, workers(5), [offer("small", cpus=1), offer("big", cpus=8)])
    assert Counter({agent: len(names) for agent, names in placed.items()}) == Counter(
        small=1, big=4
    )


def test_where_the_greedy_spread_leaves_a_task_out_the_first_fit_is_kept() -> None:
    # Three 1-CPU tasks, then one of 3 CPUs, on two 3-CPU agents: spread puts
    # the small ones 2 and 1, leaving no agent room for the big one; the
    # first fit (3 and 0) holds them all.
    spec = ClusterSpec((Job("worker", 3, cpus=1, cmd="x"), Job("big", 1, cpus=3, cmd="x")))
    launches = [Launch(f"id-{t.name}", t, {}) for t in spec.tasks()]
    hold = OfferHold()
    placed = place_all(hold, launches, [offer("a0", cpus=3), offer("a1", cpus=3)])
    assert placed == {"a0": ["worker:0", "worker:1", "worker:2"], "a1": ["big:0"]}


def test_spread_keeps_an_agent_with_gpus_for_the_tasks_that_need_them() -> None:
    spec = ClusterSpec((Job("gpu", 1, cpus=1, gpus=1, cmd="x"), Job("worker", 4, cmd="x")))
    launches = [Launch(f"id-{t.name}", t, {}) for t in spec.tasks()]
    hold = OfferHold()
    placed = place_all(hold, launches, [offer("gpu-agent", cpus=8, gpus=1), offer("plain")])
    assert placed == {"gpu-agent": ["gpu:0"], "plain": [f"worker:{i}" for i in range(4)]}


def test_tasks_spread_on_one_agent_take_distinct_ports_and_keep_roles() -> None:
    tasks = [launch.task for launch in workers(4)]
    reserved = offer("a0")
    for resource in reserved["resources"]:
        resource["role"] = "ml"
        resource["allocation_info"] = {"role": "ml"}
    offers = [(OfferCapacity.of(reserved), None), (OfferCapacity.of(offer("a1")), None)]
    placed = spread(tasks, offers)
    assert placed is not None
    ports = [port for _, _, port in placed.values()]
    assert len(set(ports)) == 4
    on_reserved = [r for o, rs, _ in placed.values() if o is reserved for r in rs]
    assert on_reserved and all(r["allocation_info"] == {"role": "ml"} for r in on_reserved)


def test_spread_says_none_when_a_task_fits_no_offer() -> None:
    tasks = [launch.task for launch in workers(2, cpus=3)]
    assert spread(tasks, [(OfferCapacity.of(offer("a0", cpus=4)), None)]) is None


def test_the_load_counts_only_tasks_not_written_off() -> None:
    tasks = PlacedTasks()
    for index, launch in enumerate(workers(3)):
        tasks.add(launch, "a0" if index < 2 else "a1", "host")
    tasks.placed["id-worker:0"].ended = True
    assert tasks.per_agent() == {"a0": 1, "a1": 1}


def test_an_unknown_placement_is_refused() -> None:
    from tfmesos.backends.mesos.options import MesosOptions

    with pytest.raises(SpecError, match="spread or pack"):
        MesosOptions(master="m:5050", placement="scatter")
    with pytest.raises(ValueError, match="placement"):
        OfferHold(placement="scatter")
