"""Launches paced per agent (tfmesos/backends/mesos/pacing.py): at most
LAUNCHES_PER_AGENT of a job's tasks starting on an agent at once, the rest
launched on an offer of that agent held for them as slots free."""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_mesos_backend import Harness, in_loop, offer
from tfmesos.backends.base import Launch
from tfmesos.backends.mesos.hold import DECLINE_SECONDS, Accept, Decline, Placed
from tfmesos.backends.mesos.pacing import LAUNCHES_PER_AGENT, PACED_WAIT, LaunchPacer
from tfmesos.mesos.placement import OfferCapacity, place
from tfmesos.spec import ClusterSpec, Job

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def roomy(agent: str, serial: int = 0, cpus: float = 64) -> dict[str, Any]:
    """An offer of ``agent`` with room for 64 one-CPU tasks (ports too)."""
    made = offer(agent, cpus=cpus, mem=65536)
    made["id"] = {"value": f"offer-{agent}-{serial}"}
    for resource in made["resources"]:
        if resource["name"] == "ports":
            resource["ranges"] = {"range": [{"begin": 31000, "end": 31099}]}
    return made


def launches(count: int) -> list[Launch]:
    spec = ClusterSpec((Job("worker", count, cpus=1, mem=64, cmd="x"),))
    return [Launch(f"id-{t.name}", t, {}) for t in spec.tasks()]


def placed_on(each: dict[str, Any], tasks: list[Launch]) -> Placed:
    took = place([launch.task for launch in tasks], OfferCapacity.of(each))
    assert len(took) == len(tasks)
    return [(tasks[i], resources, port) for i, resources, port in took]


class Agents:
    """The job's tasks launched and not yet started, by agent, as a test sets them."""

    def __init__(self) -> None:
        self.in_flight: dict[str, int] = {}

    def __call__(self) -> dict[str, int]:
        return self.in_flight


def names(decision: object) -> list[str]:
    assert isinstance(decision, Accept)
    return [launch.task.name for launch, _, _ in decision.placed]


def test_a_job_within_the_limit_is_launched_at_once_and_its_offer_filtered() -> None:
    pacer = LaunchPacer(Agents())
    tasks = launches(LAUNCHES_PER_AGENT)
    now, refuse = pacer.admit(roomy("a1"), placed_on(roomy("a1"), tasks))
    assert [launch for launch, _, _ in now] == tasks
    assert refuse == DECLINE_SECONDS
    assert not pacer


def test_an_agent_starts_at_most_its_free_slots_and_the_rest_wait_for_it() -> None:
    agents = Agents()
    pacer = LaunchPacer(agents, limit=4)
    tasks = launches(10)
    agents.in_flight["a1"] = 1  # one of the job's tasks still starting there
    now, refuse = pacer.admit(roomy("a1"), placed_on(roomy("a1"), tasks))
    assert [launch for launch, _, _ in now] == tasks[:3]
    # The rest of the offer is to come straight back, for the tasks waiting.
    assert refuse == 0.0
    assert [launch.task_id for launch in pacer.waiting["a1"].launches] == [
        launch.task_id for launch in tasks[3:]
    ]


def test_the_agents_offer_is_held_until_a_slot_frees_then_launched_on() -> None:
    agents = Agents()
    pacer = LaunchPacer(agents, limit=4)
    tasks = launches(7)
    pacer.admit(roomy("a1"), placed_on(roomy("a1"), tasks))
    agents.in_flight["a1"] = 4
    # Its room back, while every slot is taken: held, nothing sent.
    assert pacer.offered(roomy("a1", 1)) == ([], [])
    assert pacer.offered(roomy("other")) is None  # no task waits for that agent
    agents.in_flight["a1"] = 2  # two reached TASK_STARTING
    decisions, back = pacer.progressed("a1")
    assert back == []
    assert [names(d) for d in decisions] == [["worker:4", "worker:5"]]
    assert isinstance(decisions[0], Accept) and decisions[0].refuse_seconds == 0.0
    # The last: the offer it comes on is filtered again, nothing waits.
    agents.in_flight["a1"] = 3
    decisions, back = pacer.offered(roomy("a1", 2)) or ([], [])
    assert [names(d) for d in decisions] == [["worker:6"]]
    assert isinstance(decisions[0], Accept)
    assert decisions[0].refuse_seconds == DECLINE_SECONDS
    assert not pacer


def test_an_offer_that_no_longer_holds_them_sends_them_back_to_wait_for_any() -> None:
    agents = Agents()
    pacer = LaunchPacer(agents, limit=2)
    tasks = launches(4)
    pacer.admit(roomy("a1"), placed_on(roomy("a1"), tasks))
    agents.in_flight["a1"] = 0
    # Another framework took the agent's room meanwhile: half a CPU is left.
    small = roomy("a1", 1, cpus=0.5)
    decisions, back = pacer.offered(small) or ([], [])
    assert back == tasks[2:]
    assert decisions == [Decline(small["id"], 0.0)]
    assert not pacer


def test_tasks_whose_agent_launches_nothing_for_a_while_wait_for_any_offer() -> None:
    clock, agents = Clock(), Agents()
    pacer = LaunchPacer(agents, clock, limit=2)
    tasks = launches(4)
    pacer.admit(roomy("a1"), placed_on(roomy("a1"), tasks))
    agents.in_flight["a1"] = 2
    held = roomy("a1", 1)
    pacer.offered(held)
    clock.now += PACED_WAIT - 1
    assert pacer.overdue() == ([], [])
    clock.now += 1
    assert pacer.overdue() == ([Decline(held["id"], 0.0)], tasks[2:])


def test_a_lost_agents_waiting_tasks_and_a_killed_task_are_let_go() -> None:
    agents = Agents()
    pacer = LaunchPacer(agents, limit=1)
    tasks = launches(3)
    pacer.admit(roomy("a1"), placed_on(roomy("a1"), tasks))
    held = roomy("a1", 1)
    agents.in_flight["a1"] = 1
    pacer.offered(held)
    assert pacer.forget(tasks[1].task_id) == []  # one still waits
    assert pacer.forget(tasks[2].task_id) == [Decline(held["id"], 0.0)]
    assert not pacer
    agents.in_flight["a1"] = 0
    pacer.admit(roomy("a1"), placed_on(roomy("a1"), tasks))
    assert pacer.agent_lost("a1") == tasks[1:]
    assert not pacer


@in_loop
async def test_the_backend_launches_an_agents_share_in_slots_as_its_tasks_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    count = LAUNCHES_PER_AGENT + 4
    spec = ClusterSpec((Job("worker", count, cpus=1, mem=64, cmd="x"),), replica=True)
    harness = Harness(spec, monkeypatch, placement="pack")
    await harness.launch_all()
    harness.offers(roomy("a1"))
    await harness.settle()
    (first,) = harness.accepted()
    assert len(first[1]) == LAUNCHES_PER_AGENT
    accept = next(c for c in harness.client.sent if c["type"] == "ACCEPT")
    assert accept["accept"]["filters"]["refuse_seconds"] == 0.0
    # The agent's room comes back before any task started: held.
    harness.offers(roomy("a1", 1))
    await harness.settle()
    assert len(harness.accepted()) == 1
    assert "DECLINE" not in harness.client.types()
    # Launched in a wave once as many slots are free as tasks wait (4).
    for task_id in first[1][:3]:
        harness.update(task_id, "TASK_RUNNING")
    await harness.settle()
    assert len(harness.accepted()) == 1
    harness.update(first[1][3], "TASK_STARTING")
    await harness.settle()
    second = harness.accepted()[1]
    assert second[0] == "a1" and len(second[1]) == 4
    assert not harness.backend.pacer
    placed = {task_id for _, ids in harness.accepted() for task_id in ids}
    assert placed == {f"id-worker:{i}" for i in range(count)}
