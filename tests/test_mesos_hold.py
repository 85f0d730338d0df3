"""The Mesos backend's parts alone: the offer hold's decisions and what status
updates mean for the tasks placed, without a master, a backend or an event loop."""

from __future__ import annotations

import random

import pytest

from tests.test_mesos_backend import offer
from tfmesos.backends.base import Launch, TaskEnded
from tfmesos.backends.mesos.hold import (
    DECLINE_IDLE_SECONDS,
    DECLINE_SECONDS,
    GANG_BACKOFF_SECONDS,
    GANG_HOLD_SECONDS,
    GPU_AGENT_GRACE,
    Accept,
    Decline,
    OfferHold,
    Revive,
    StartBackoff,
    StartHold,
    StopHold,
    Suppress,
)
from tfmesos.backends.mesos.tasks import STRAY_KILLS, PlacedTasks
from tfmesos.mesos.placement import OfferCapacity
from tfmesos.spec import ClusterSpec, Job

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def launches(spec: ClusterSpec) -> list[Launch]:
    return [Launch(f"id-{t.name}", t, {}) for t in spec.tasks()]


def three_tasks() -> list[Launch]:
    """ps:0 and two workers of 2 CPUs each: 6 CPUs in all."""
    return launches(ClusterSpec((Job("ps", 1, cpus=2, cmd="x"), Job("worker", 2, cpus=2, cmd="x"))))


def offered(hold: OfferHold, *offers: dict[str, object], pins: bool = False) -> list[object]:
    decisions: list[object] = []
    for each in offers:
        decisions += hold.offered(each, OfferCapacity.of(each), pins)
    return decisions + hold.place() + hold.suppress_if_idle(pins)


def test_offers_that_fit_part_of_the_job_are_held_until_the_whole_job_fits() -> None:
    hold = OfferHold(Clock(), random.Random(1))
    for launch in three_tasks():
        assert hold.add(launch) == []
    first = offered(hold, offer("a1", cpus=4))
    assert len(first) == 1 and isinstance(first[0], StartHold)
    assert GANG_HOLD_SECONDS <= first[0].seconds <= GANG_HOLD_SECONDS * 1.5
    assert list(hold.held) == ["offer-a1"]
    # The rest comes: every task is placed at once, the hold's timer stopped,
    # and with nothing waiting the role is suppressed.
    second = offered(hold, offer("a2", cpus=2))
    assert isinstance(second[0], StopHold)
    accepts = [d for d in second if isinstance(d, Accept)]
    placed = [launch.task_id for d in accepts for launch, _, _ in d.placed]
    assert sorted(placed) == ["id-ps:0", "id-worker:0", "id-worker:1"]
    assert {d.offer["id"]["value"] for d in accepts} == {"offer-a1", "offer-a2"}
    assert second[-1] == Suppress()
    assert hold.pending == [] and hold.held == {} and hold.suppressed


def test_a_hold_that_does_not_fit_is_given_back_then_asked_for_again() -> None:
    hold = OfferHold(Clock(), random.Random(1))
    for launch in three_tasks():
        hold.add(launch)
    offered(hold, offer("a1", cpus=4))
    expired = hold.hold_expired(pins=False)
    decline, suppress, backoff = expired
    assert isinstance(decline, Decline) and isinstance(backoff, StartBackoff)
    assert decline.refuse_seconds == backoff.seconds
    assert GANG_BACKOFF_SECONDS * 0.5 <= backoff.seconds <= GANG_BACKOFF_SECONDS * 1.5
    assert suppress == Suppress()
    assert hold.shortfall  # what the offers lacked, for progress()
    # While backing off, an offer that fits is declined, not held.
    assert offered(hold, offer("a2", cpus=8)) == [Decline({"value": "offer-a2"}, DECLINE_SECONDS)]
    assert hold.backoff_over() == [Revive()]
    assert not hold.suppressed


def test_offers_held_for_tasks_that_never_come_are_given_back_for_an_hour() -> None:
    hold = OfferHold(Clock(), random.Random(1))
    assert isinstance(offered(hold, offer("a1"))[0], StartHold)  # the tasks are yet to come
    assert hold.hold_expired(pins=False) == [
        Decline({"value": "offer-a1"}, DECLINE_IDLE_SECONDS),
        Suppress(),
    ]
    # Tasks that come later ask for offers again.
    assert hold.add(three_tasks()[0]) == [Revive()]


def test_a_task_that_needs_no_gpu_takes_a_gpu_agent_only_after_the_grace() -> None:
    clock = Clock()
    hold = OfferHold(clock, random.Random(1))
    (ps,) = launches(ClusterSpec((Job("ps", 1, cmd="x"),)))
    hold.add(ps)
    gpu_offer = offer("g1", gpus=1)
    assert offered(hold, gpu_offer) == [Decline({"value": "offer-g1"}, DECLINE_SECONDS)]
    clock.now += GPU_AGENT_GRACE
    decisions = offered(hold, gpu_offer)
    assert [type(d) for d in decisions] == [Accept, Suppress]


def test_updates_end_a_task_once_and_kill_a_written_off_task_that_runs_again() -> None:
    tasks = PlacedTasks()
    (launch,) = launches(ClusterSpec((Job("worker", 1, cmd="x"),)))
    tasks.add(launch, "a1", "10.0.0.2")

    def status(state: str) -> dict[str, object]:
        return {"task_id": {"value": launch.task_id}, "state": state, "agent_id": {"value": "a1"}}

    assert tasks.update(status("TASK_RUNNING")) == (None, None)
    ended, kill = tasks.update(status("TASK_UNREACHABLE"))
    assert isinstance(ended, TaskEnded) and ended.state == "TASK_UNREACHABLE" and kill is None
    assert tasks.unsettled() == {launch.task_id: "a1"}
    kills = [tasks.update(status("TASK_RUNNING"))[1] for _ in range(STRAY_KILLS + 2)]
    assert (
        kills[:STRAY_KILLS]
        == [
            {
                "type": "KILL",
                "kill": {"task_id": {"value": launch.task_id}, "agent_id": {"value": "a1"}},
            }
        ]
        * STRAY_KILLS
    )
    assert kills[STRAY_KILLS:] == [None, None]
    assert tasks.update(status("TASK_KILLED")) == (None, None)  # ended already
    assert tasks.unsettled() == {}


def test_an_agent_lost_ends_its_tasks_not_reported_yet() -> None:
    tasks = PlacedTasks()
    first, second = launches(ClusterSpec((Job("worker", 2, cmd="x"),)))
    tasks.add(first, "a1", "h1")
    tasks.add(second, "a2", "h2")
    assert tasks.agent_lost("a1") == [
        TaskEnded(first.task_id, "AGENT_LOST", None, "agent a1 was lost", "h1")
    ]
    assert tasks.agent_lost("a1") == []
