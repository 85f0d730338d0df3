"""The Mesos backend's policy, in milliseconds: events in, calls out.

The backend's client is replaced by a recorder, so each rule (what is claimed,
where a task may go, what a task that comes back gets) is checked without a
master. End-to-end behaviour is in tests/test_mesos_jobs.py.
"""

from __future__ import annotations

import asyncio
import functools
import random
import socket
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from tfmesos.backends.base import BackendEvent, BackendFailed, Launch, TaskEnded, TaskPlaced
from tfmesos.backends.mesos import (
    DECLINE_IDLE_SECONDS,
    DECLINE_SECONDS,
    GPU_AGENT_GRACE,
    MesosBackend,
    MesosOptions,
    task_info,
)
from tfmesos.common import advertise
from tfmesos.errors import SpecError
from tfmesos.mesos.placement import GangFit, OfferCapacity
from tfmesos.mesos.roles import validate_role
from tfmesos.mesos.states import TaskState, exit_status
from tfmesos.spec import ClusterSpec, Job, Volume


def in_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test in a fresh event loop (the backend needs a running one)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


class RecordingClient:
    """Stands in for SchedulerClient: every call is taken at once, in order."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.subscribed = asyncio.Event()
        self.subscribed.set()
        self.master = None
        self.last_error = ""

    def submit(self, call: dict[str, Any]) -> asyncio.Future[str | None]:
        self.sent.append(call)
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    async def close(self, teardown: bool) -> None:
        return None

    def types(self) -> list[str]:
        return [call["type"] for call in self.sent]


def offer(
    agent: str, *, cpus: float = 4, mem: float = 4096, gpus: int = 0, host: str = "10.0.0.2"
) -> dict[str, Any]:
    resources = [
        {"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}, "role": "*"},
        {"name": "mem", "type": "SCALAR", "scalar": {"value": mem}, "role": "*"},
        {
            "name": "ports",
            "type": "RANGES",
            "ranges": {"range": [{"begin": 31000, "end": 31010}]},
            "role": "*",
        },
    ]
    if gpus:
        resources.append({"name": "gpus", "type": "SCALAR", "scalar": {"value": gpus}})
    return {
        "id": {"value": f"offer-{agent}"},
        "agent_id": {"value": agent},
        "hostname": host,
        "resources": resources,
    }


class Harness:
    def __init__(self, spec: ClusterSpec, monkeypatch: pytest.MonkeyPatch, **options: Any) -> None:
        monkeypatch.setenv(advertise.ADVERTISE_ENV, options.pop("host", "launcher.example"))
        self.backend = MesosBackend(spec, MesosOptions(master="127.0.0.1:1", **options))
        self.client = RecordingClient()
        self.backend.client = self.client  # type: ignore[assignment]
        self.events: list[BackendEvent] = []
        self.backend._sink = self.events.append
        self.subscribe()

    def subscribe(self) -> None:
        self.backend._on_event(
            {"type": "SUBSCRIBED", "subscribed": {"framework_id": {"value": "f"}}}
        )

    async def launch_all(self) -> list[Launch]:
        launches = [Launch(f"id-{t.name}", t, {}) for t in self.backend.spec.tasks()]
        for launch in launches:
            await self.backend.launch(launch)
        return launches

    def offers(self, *offers: dict[str, Any]) -> None:
        self.backend._on_event({"type": "OFFERS", "offers": {"offers": list(offers)}})

    def update(self, task_id: str, state: str, **fields: Any) -> None:
        status = {"task_id": {"value": task_id}, "state": state, "agent_id": {"value": "a1"}}
        status.update(fields)
        self.backend._on_event({"type": "UPDATE", "update": {"status": status}})

    async def settle(self) -> None:
        while self.backend._calls:
            await asyncio.gather(*self.backend._calls, return_exceptions=True)

    def accepted(self) -> list[tuple[str, list[str]]]:
        """(agent, task ids) of each ACCEPT sent."""
        found = []
        for call in self.client.sent:
            if call["type"] == "ACCEPT":
                infos = call["accept"]["operations"][0]["launch"]["task_infos"]
                found.append(
                    (infos[0]["agent_id"]["value"], [i["task_id"]["value"] for i in infos])
                )
        return found


def cpu_and_gpu_spec() -> ClusterSpec:
    return ClusterSpec((Job("ps", 1, cmd="x"), Job("worker", 1, gpus=1, cmd="x")), replica=True)


# -- what the framework claims -------------------------------------------------


def test_gpu_resources_is_claimed_only_by_a_job_that_asks_for_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cpu_only = Harness(ClusterSpec((Job("worker", 2, cmd="x"),), replica=True), monkeypatch)
    claimed = {c["type"] for c in cpu_only.backend.framework_info["capabilities"]}
    assert "GPU_RESOURCES" not in claimed
    assert {"MULTI_ROLE", "PARTITION_AWARE"} <= claimed
    gpu = Harness(cpu_and_gpu_spec(), monkeypatch)
    claimed = {c["type"] for c in gpu.backend.framework_info["capabilities"]}
    assert "GPU_RESOURCES" in claimed


def test_the_user_is_the_login_name_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ClusterSpec((Job("worker", 1, cmd="x"),), replica=True)
    assert Harness(spec, monkeypatch).backend.framework_info["user"]
    given = Harness(spec, monkeypatch, user="nobody").backend
    assert given.framework_info["user"] == "nobody"
    with pytest.raises(SpecError, match="user name"):
        Harness(spec, monkeypatch, user="two words")


# -- where tasks go ------------------------------------------------------------


@in_loop
async def test_cpu_tasks_leave_gpu_agents_to_gpu_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    harness = Harness(cpu_and_gpu_spec(), monkeypatch)
    await harness.launch_all()
    # The GPU agent's offer comes first: only the GPU task takes it.
    harness.offers(offer("gpu-agent", gpus=1), offer("cpu-agent"))
    await harness.settle()
    assert harness.accepted() == [("gpu-agent", ["id-worker:0"]), ("cpu-agent", ["id-ps:0"])]


@in_loop
async def test_a_cpu_task_takes_a_gpu_agent_after_waiting_for_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    harness = Harness(ClusterSpec((Job("worker", 1, cmd="x"),), replica=True), monkeypatch)
    await harness.launch_all()
    harness.offers(offer("gpu-agent", gpus=2))
    await harness.settle()
    assert harness.accepted() == []
    assert harness.client.types() == ["DECLINE"]
    # Nothing better came along in time: the GPU agent is better than none.
    harness.backend.hold.waiting_since["id-worker:0"] = time.monotonic() - GPU_AGENT_GRACE
    harness.offers(offer("gpu-agent", gpus=2))
    await harness.settle()
    assert harness.accepted() == [("gpu-agent", ["id-worker:0"])]


@in_loop
async def test_a_loopback_name_is_never_handed_to_a_remote_agent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = ClusterSpec((Job("worker", 2, cmd="x"),), replica=True)
    harness = Harness(spec, monkeypatch, host="localhost")
    await harness.launch_all()
    harness.offers(offer("remote", host="10.0.0.7"))
    await harness.settle()
    assert harness.accepted() == []
    failures = [e for e in harness.events if isinstance(e, BackendFailed)]
    assert failures
    assert "TFMESOS_ADVERTISE_HOST" in failures[0].message
    # An agent on this machine can dial it.
    harness.offers(offer("local", host="127.0.0.1"))
    await harness.settle()
    assert [agent for agent, _ in harness.accepted()] == ["local"]


# -- tasks that go away and come back ----------------------------------------------


@in_loop
async def test_an_unreachable_task_is_written_off_and_killed_if_it_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = ClusterSpec((Job("worker", 2, cmd="x"),), replica=True)
    harness = Harness(spec, monkeypatch)
    await harness.launch_all()
    harness.offers(offer("a1"))
    await harness.settle()
    harness.update("id-worker:1", "TASK_RUNNING")
    harness.update("id-worker:1", "TASK_UNREACHABLE", reason="REASON_AGENT_DISCONNECTED")
    ended = [e for e in harness.events if isinstance(e, TaskEnded)]
    assert [(e.task_id, e.state) for e in ended] == [("id-worker:1", "TASK_UNREACHABLE")]
    assert "lost contact" in ended[0].message
    # Re-subscribing asks about it again...
    harness.backend._on_event(
        {"type": "SUBSCRIBED", "subscribed": {"framework_id": {"value": "f"}}}
    )
    reconcile = [c for c in harness.client.sent if c["type"] == "RECONCILE"]
    asked = [t["task_id"]["value"] for t in reconcile[-1]["reconcile"]["tasks"]]
    assert "id-worker:1" in asked
    # ...and when it turns out to be running, it is killed, not left holding resources.
    harness.update("id-worker:1", "TASK_RUNNING")
    await harness.settle()
    kills = [c["kill"]["task_id"]["value"] for c in harness.client.sent if c["type"] == "KILL"]
    assert kills == ["id-worker:1"]
    # A terminal state settles it: it is no longer asked about.
    harness.update("id-worker:1", "TASK_KILLED")
    harness.backend._on_event(
        {"type": "SUBSCRIBED", "subscribed": {"framework_id": {"value": "f"}}}
    )
    reconcile = [c for c in harness.client.sent if c["type"] == "RECONCILE"]
    assert "id-worker:1" not in [t["task_id"]["value"] for t in reconcile[-1]["reconcile"]["tasks"]]


@pytest.mark.parametrize("state", ["TASK_GONE", "TASK_DROPPED", "TASK_GONE_BY_OPERATOR"])
@in_loop
async def test_final_partition_states_end_the_task(
    monkeypatch: pytest.MonkeyPatch, state: str
) -> None:
    harness = Harness(ClusterSpec((Job("worker", 2, cmd="x"),), replica=True), monkeypatch)
    await harness.launch_all()
    harness.offers(offer("a1"))
    await harness.settle()
    harness.update("id-worker:1", state)
    ended = [e for e in harness.events if isinstance(e, TaskEnded)]
    assert [(e.task_id, e.state) for e in ended] == [("id-worker:1", state)]
    assert any(isinstance(e, TaskPlaced) for e in harness.events)


# -- how tasks ended ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "message", "code"),
    [
        (TaskState.FINISHED, "Command exited with status 0", 0),
        (TaskState.FAILED, "Command exited with status 3", 3),
        (TaskState.FAILED, "Command terminated with signal Killed", 137),
        (TaskState.KILLED, "Command terminated with signal Terminated", 143),
        (TaskState.LOST, "Agent lost", None),
    ],
)
def test_exit_status_from_the_executors_words(state: TaskState, message: str, code: int) -> None:
    assert exit_status(state, message) == code


def test_terminal_states_are_mesos_own() -> None:
    # protobuf::isTerminalState (src/common/protobuf_utils.cpp).
    assert not TaskState.UNREACHABLE.terminal
    assert not TaskState.UNKNOWN.terminal
    assert TaskState.UNKNOWN.out_of_reach
    assert TaskState.GONE.terminal


# -- roles, volumes, hosts ---------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "accepted"),
    [
        ("*", True),
        ("ml", True),
        ("ml/team-a", True),
        ("a*b", True),  # only a whole '*' component is refused
        ("a\\b", True),  # backslash is not among roles.cpp's invalid characters
        ("", False),
        ("/ml", False),
        ("ml/", False),
        ("a//b", False),
        ("a/./b", False),
        ("a/../b", False),
        ("a/*", False),
        ("-ml", False),
        ("a/-b", False),
        ("a b", False),
        ("a\tb", False),
        ("a\x7fb", False),
    ],
)
def test_roles_are_validated_as_mesos_does(role: str, accepted: bool) -> None:
    assert (validate_role(role) is None) == accepted
    if accepted:
        MesosOptions(role=role)
    else:
        with pytest.raises(SpecError, match="bad Mesos role"):
            MesosOptions(role=role)


def test_volumes_without_an_image_are_sent() -> None:
    spec = ClusterSpec((Job("worker", 1, cmd="x"),), replica=True)
    options = MesosOptions(
        volumes=(Volume("/data", "/data", read_only=True), Volume("/scratch", "/tmp/scratch"))
    )
    launch = Launch("t1", spec.tasks()[0], {})
    info = task_info(launch, spec, options, offer("a1"), [], 31000, "alice")
    assert info["container"] == {
        "type": "MESOS",
        "volumes": [
            {"host_path": "/data", "container_path": "/data", "mode": "RO"},
            {"host_path": "/scratch", "container_path": "/tmp/scratch", "mode": "RW"},
        ],
    }


def test_the_docker_containerizer_without_an_image_is_refused() -> None:
    with pytest.raises(SpecError, match="give --image"):
        MesosOptions(containerizer="DOCKER")


def test_the_docker_containerizer_with_gpus_is_refused_by_the_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = ClusterSpec((Job("worker", 1, gpus=1),))
    with pytest.raises(SpecError, match="GPUs only to tasks of the Mesos containerizer"):
        Harness(spec, monkeypatch, containerizer="DOCKER", image="img")


def test_the_role_and_container_come_from_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ClusterSpec((Job("worker", 1, cmd="x"),), replica=True)
    options = MesosOptions(master="127.0.0.1:1", role="ml", image="img", force_pull_image=True)
    monkeypatch.setenv(advertise.ADVERTISE_ENV, "launcher.example")
    backend = MesosBackend.from_options(spec, options)
    assert backend.framework_info["roles"] == ["ml"]
    launch = Launch("t1", spec.tasks()[0], {})
    info = task_info(launch, spec, backend.options, offer("a1"), [], 31000, "alice")
    assert info["container"]["mesos"]["image"]["docker"] == {"name": "img"}
    assert info["container"]["mesos"]["image"]["cached"] is False


@pytest.mark.parametrize(
    ("fqdn", "hostname", "route", "chosen"),
    [
        ("localhost", "vm", None, "vm"),  # /etc/hosts: 127.0.0.1 localhost vm
        ("node1.example.com", "node1", "10.0.0.1", "node1.example.com"),
        ("localhost", "localhost", "10.0.0.1", "10.0.0.1"),
        ("localhost.localdomain", "127.0.0.1", None, None),
    ],
)
def test_the_advertised_host_is_never_a_loopback_name(
    fqdn: str, hostname: str, route: str | None, chosen: str | None
) -> None:
    assert advertise.choose_host(fqdn, hostname, route) == chosen


def test_advertised_host_says_how_to_set_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(advertise.ADVERTISE_ENV, raising=False)
    monkeypatch.setattr(socket, "getfqdn", lambda: "localhost")
    monkeypatch.setattr(socket, "gethostname", lambda: "localhost")
    monkeypatch.setattr(advertise, "_route_address", lambda: None)
    with pytest.raises(SpecError, match="set TFMESOS_ADVERTISE_HOST"):
        advertise.advertised_host()
    monkeypatch.setattr(socket, "gethostname", lambda: "vm")
    assert advertise.advertised_host() == "vm"
    monkeypatch.setenv(advertise.ADVERTISE_ENV, "127.0.0.1")
    assert advertise.advertised_host() == "127.0.0.1"  # the user's word is taken


# -- gang placement ------------------------------------------------------------


def three_task_spec() -> ClusterSpec:
    """ps:0 and two workers of 2 CPUs each: 6 CPUs in all."""
    return ClusterSpec((Job("ps", 1, cpus=2, cmd="x"), Job("worker", 2, cpus=2, cmd="x")))


@pytest.mark.parametrize("offers_first", [False, True], ids=["tasks-first", "offers-first"])
@in_loop
async def test_offers_that_fit_part_of_the_job_are_held_until_the_whole_job_fits(
    offers_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # offers-first: the first offers came before the launcher handed over
    # its tasks (the chief's local backend starts between the two).
    harness = Harness(three_task_spec(), monkeypatch)
    if offers_first:
        harness.offers(offer("a1", cpus=4))
        await harness.backend.launch_many(
            [Launch(f"id-{t.name}", t, {}) for t in harness.backend.spec.tasks()]
        )
    else:
        await harness.launch_all()
        harness.offers(offer("a1", cpus=4))
    await harness.settle()
    # Two of the three fit: nothing is launched, nothing declined.
    assert harness.client.types() == []
    assert "fit 2 of the 3 tasks waiting" in harness.backend.progress()
    harness.offers(offer("a2", cpus=2))
    await harness.settle()
    # Spread (the default): one task on each agent in turn, while each has room.
    assert harness.accepted() == [("a1", ["id-ps:0", "id-worker:1"]), ("a2", ["id-worker:0"])]
    assert harness.client.types() == ["ACCEPT", "ACCEPT", "SUPPRESS"]


@in_loop
async def test_offers_that_come_before_the_tasks_are_used_for_them_when_they_come(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The subscription can beat the launcher's first launches (the chief's
    # local backend starts between the two): the job fits the first offers
    # and is launched on them, without declining them and asking again.
    harness = Harness(three_task_spec(), monkeypatch)
    harness.offers(offer("a1", cpus=4), offer("a2", cpus=2), offer("small", cpus=1))
    await harness.settle()
    assert harness.client.types() == []
    await harness.backend.launch_many(
        [Launch(f"id-{t.name}", t, {}) for t in harness.backend.spec.tasks()]
    )
    await harness.settle()
    # Spread (the default): one task on each agent in turn, while each has room.
    assert harness.accepted() == [("a1", ["id-ps:0", "id-worker:1"]), ("a2", ["id-worker:0"])]
    # The offer that fits no task goes back with the short filter.
    assert harness.client.types() == ["DECLINE", "ACCEPT", "ACCEPT", "SUPPRESS"]
    assert harness.client.sent[0]["decline"]["offer_ids"] == [{"value": "offer-small"}]
    assert harness.client.sent[0]["decline"]["filters"]["refuse_seconds"] == DECLINE_SECONDS


@in_loop
async def test_offers_held_for_tasks_that_never_come_are_given_back_after_the_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tfmesos.backends.mesos import hold

    monkeypatch.setattr(hold, "GANG_HOLD_SECONDS", 0.01)
    harness = Harness(three_task_spec(), monkeypatch)
    harness.offers(offer("a1", cpus=4))
    while "SUPPRESS" not in harness.client.types():
        await asyncio.sleep(0.01)
    await harness.settle()
    assert harness.client.types() == ["DECLINE", "SUPPRESS"]
    assert harness.client.sent[0]["decline"]["filters"]["refuse_seconds"] == DECLINE_IDLE_SECONDS
    # Tasks that come later ask for offers again.
    await harness.launch_all()
    assert harness.client.types()[-1] == "REVIVE"


@in_loop
async def test_an_offer_that_fits_no_task_is_declined_not_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    harness = Harness(three_task_spec(), monkeypatch)
    await harness.launch_all()
    harness.offers(offer("small", cpus=1))
    await harness.settle()
    assert harness.client.types() == ["DECLINE"]
    assert harness.backend.hold.held == {}


@in_loop
async def test_a_hold_that_does_not_fit_the_job_is_given_back_and_asked_for_again_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tfmesos.backends.mesos import hold

    monkeypatch.setattr(hold, "GANG_HOLD_SECONDS", 0.01)
    monkeypatch.setattr(hold, "GANG_BACKOFF_SECONDS", 0.05)
    harness = Harness(three_task_spec(), monkeypatch)
    await harness.launch_all()
    harness.offers(offer("a1", cpus=4))
    while "REVIVE" not in harness.client.types():
        await asyncio.sleep(0.01)
    await harness.settle()
    # Declined with a filter as long as the wait, the role suppressed so that
    # the agent goes to another framework meanwhile, then offers asked for.
    assert harness.client.types() == ["DECLINE", "SUPPRESS", "REVIVE"]
    refuse = harness.client.sent[0]["decline"]["filters"]["refuse_seconds"]
    assert 0.025 <= refuse <= 0.075
    assert harness.accepted() == []
    # An offer that comes while the job waits to ask again is not held.
    harness.client.sent.clear()
    harness.backend.hold.backing_off = True
    harness.offers(offer("a1", cpus=4))
    await harness.settle()
    assert harness.client.types() == ["DECLINE"]


@in_loop
async def test_a_rescinded_offer_is_no_longer_held(monkeypatch: pytest.MonkeyPatch) -> None:
    harness = Harness(three_task_spec(), monkeypatch)
    await harness.launch_all()
    harness.offers(offer("a1", cpus=4))
    harness.backend._on_event({"type": "RESCIND", "rescind": {"offer_id": {"value": "offer-a1"}}})
    harness.offers(offer("a2", cpus=2))
    await harness.settle()
    # a1's room is gone: a2 alone fits one task, which is not launched alone.
    assert harness.accepted() == []
    assert "fit 1 of the 3 tasks waiting" in harness.backend.progress()


@in_loop
async def test_progress_names_the_offers_held_after_one_is_rescinded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    harness = Harness(three_task_spec(), monkeypatch)
    await harness.launch_all()
    harness.offers(offer("a1", cpus=2), offer("a2", cpus=2))
    assert "the 2 offers held (cpus 4, mem 8 GiB, 22 ports) fit 2 of the 3" in (
        harness.backend.progress()
    )
    harness.backend._on_event({"type": "RESCIND", "rescind": {"offer_id": {"value": "offer-a1"}}})
    assert "the 1 offers held (cpus 2, mem 4 GiB, 11 ports) fit 1 of the 3" in (
        harness.backend.progress()
    )
    harness.backend._on_event({"type": "RESCIND", "rescind": {"offer_id": {"value": "offer-a2"}}})
    assert "offers held" not in harness.backend.progress()
    assert harness.client.types() == []


def first_fit_from_scratch(backend: MesosBackend) -> dict[str, tuple[str, int]]:
    """The gang's placement by definition: each held offer, in the order it
    came, takes in turn those of its candidates that fit what is left of it
    and that no offer before it took. Task ID -> (offer ID, port)."""
    placed: dict[str, tuple[str, int]] = {}
    for held in backend.hold.held.values():
        capacity = OfferCapacity.of(held)
        for position in backend.hold.candidates_for(capacity):
            launch = backend.hold.pending[position]
            if launch.task_id not in placed and capacity.fits(launch.task):
                _, port = capacity.take(launch.task)
                placed[launch.task_id] = (held["id"]["value"], port)
    return placed


def kept_fit(backend: MesosBackend) -> dict[str, tuple[str, int]]:
    fit = backend.hold.fit_held()
    return {
        backend.hold.pending[position].task_id: (held["id"]["value"], port)
        for position, (held, _, port) in fit.placed.items()
    }


def mixed_spec() -> ClusterSpec:
    """Tasks of several sizes, some with GPUs, and one that no offer fits (the
    job never fits whole: the fit is checked as it grows)."""
    return ClusterSpec(
        (
            Job("ps", 2, cpus=3, mem=2048, cmd="x"),
            Job("worker", 20, cpus=1, mem=512, cmd="x"),
            Job("eval", 5, cpus=2, mem=3000, cmd="x"),
            Job("gpu", 4, cpus=1, mem=1024, gpus=1, cmd="x"),
            Job("huge", 1, cpus=100, mem=512, cmd="x"),
        )
    )


@pytest.mark.parametrize("seed", range(6))
@in_loop
async def test_the_fit_kept_across_events_equals_a_fit_from_scratch(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    from tfmesos.backends.mesos import hold

    monkeypatch.setattr(hold, "GANG_HOLD_SECONDS", 3600.0)
    # Tasks take GPU agents only when the test says they waited long enough.
    monkeypatch.setattr(hold, "GPU_AGENT_GRACE", 3600.0)
    rng = random.Random(seed)
    harness = Harness(mixed_spec(), monkeypatch)
    backend = harness.backend
    launches = [Launch(f"id-{t.name}", t, {}) for t in backend.spec.tasks()]
    huge = next(launch for launch in launches if launch.task.job_name == "huge")
    launches.remove(huge)
    rng.shuffle(launches)
    for launch in [huge, *launches[:-4]]:
        await backend.launch(launch)
    later = launches[-4:]
    agents = 0
    for _ in range(60):
        step = rng.random()
        if step < 0.6:
            batch = []
            for _ in range(rng.randint(1, 4)):
                agents += 1
                batch.append(
                    offer(
                        f"a{agents}",
                        cpus=rng.choice([0.5, 1, 2, 3, 4, 8]),
                        mem=rng.choice([256, 1024, 4096, 8192]),
                        gpus=rng.choice([0, 0, 0, 1, 2]),
                    )
                )
            harness.offers(*batch)
        elif step < 0.75 and backend.hold.held:
            # A held offer goes, from anywhere in the order they came.
            gone = rng.choice(list(backend.hold.held))
            backend._on_event({"type": "RESCIND", "rescind": {"offer_id": {"value": gone}}})
        elif step < 0.85 and len(backend.hold.pending) > 1:
            # A waiting task stops waiting (killed), or another starts to.
            await backend.kill(rng.choice(backend.hold.pending[1:]).task_id)
        elif step < 0.93 and later:
            await backend.launch(later.pop())
        else:
            # CPU tasks waited long enough to take room on GPU agents.
            for launch in backend.hold.pending:
                if rng.random() < 0.5:
                    backend.hold.waiting_since[launch.task_id] = time.monotonic() - 3600.0
        expected = first_fit_from_scratch(backend)
        assert kept_fit(backend) == expected
        if backend.hold.held:
            assert (
                f"the {len(backend.hold.held)} offers held" in backend.progress()
                and f"fit {len(expected)} of the {len(backend.hold.pending)} tasks waiting"
                in backend.progress()
            )
    await harness.settle()
    assert "ACCEPT" not in harness.client.types()


@in_loop
async def test_each_offer_held_is_fitted_once_while_the_tasks_waiting_stay_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fitted: list[str] = []
    fit_offer = GangFit.add

    def counting(fit: GangFit, capacity: OfferCapacity, candidates: Any) -> None:
        fitted.append(capacity.offer["id"]["value"])
        fit_offer(fit, capacity, candidates)

    monkeypatch.setattr(GangFit, "add", counting)
    harness = Harness(ClusterSpec((Job("worker", 40, cpus=1, cmd="x"),)), monkeypatch)
    await harness.launch_all()
    for agent in range(10):
        harness.offers(offer(f"a{agent}", cpus=4))
    await harness.settle()
    assert fitted == [f"offer-a{agent}" for agent in range(10)]
    assert len(harness.accepted()) == 10
    assert sum(len(tasks) for _, tasks in harness.accepted()) == 40


@in_loop
async def test_offers_one_event_at_a_time_are_accepted_as_when_they_come_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = ClusterSpec(
        (
            Job("ps", 2, cpus=3, mem=2048, cmd="x"),
            Job("worker", 12, cpus=1, mem=512, cmd="x"),
            Job("gpu", 2, cpus=1, mem=1024, gpus=1, cmd="x"),
        )
    )
    # More than the job needs, some offers too small for a task, GPUs on two.
    sizes = [(4, 4096, 0), (1, 1024, 1), (0.5, 4096, 0), (2, 1024, 0), (4, 4096, 1)]
    sizes += [(6, 4096, 0), (1, 256, 0), (2, 4096, 0), (4, 1024, 0), (6, 8192, 0)]
    batch = [offer(f"a{i}", cpus=c, mem=m, gpus=g) for i, (c, m, g) in enumerate(sizes)]
    accepts = []
    for events in ([batch], [[o] for o in batch]):
        harness = Harness(spec, monkeypatch)
        await harness.launch_all()
        for event in events:
            harness.offers(*event)
        await harness.settle()
        accepts.append([c for c in harness.client.sent if c["type"] == "ACCEPT"])
    assert accepts[0], "the offers fit the job"
    assert accepts[1] == accepts[0]
