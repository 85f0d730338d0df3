"""The Mesos client's pure parts: RecordIO, master addresses, placement, TaskInfo."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tfmesos import ClusterSpec, Job, SpecError
from tfmesos.backends.base import Launch
from tfmesos.backends.mesos import MesosOptions, task_info
from tfmesos.mesos.masters import MasterAddress, ZooKeeperSource, parse_masters
from tfmesos.mesos.placement import OfferCapacity, place
from tfmesos.mesos.recordio import RecordIODecoder, RecordIOError, encode
from tfmesos.mesos.zookeeper import leader_from_master_info
from tfmesos.spec import TaskSpec, Volume

# -- RecordIO (docs/recordio.md) ------------------------------------------------


def test_recordio_example_from_the_docs() -> None:
    # The docs' example: two records, "hello" and "world!".
    assert RecordIODecoder().feed(b"5\nhello6\nworld!") == [b"hello", b"world!"]


@given(st.lists(st.binary(max_size=200)), st.integers(min_value=1, max_value=50))
def test_recordio_round_trip_in_any_chunking(records: list[bytes], size: int) -> None:
    stream = b"".join(encode(r) for r in records)
    decoder = RecordIODecoder()
    out: list[bytes] = []
    for i in range(0, len(stream), size):
        out += decoder.feed(stream[i : i + size])
    assert out == records


@given(st.binary(max_size=500))
def test_recordio_garbage_is_a_clear_error_or_records(data: bytes) -> None:
    decoder = RecordIODecoder(max_record=1000)
    with contextlib.suppress(RecordIOError):
        decoder.feed(data)


@pytest.mark.parametrize("bad", [b"x\n", b"-1\n", b"12345678901234567890123\n", b"99999999\n"])
def test_recordio_bad_headers(bad: bytes) -> None:
    with pytest.raises(RecordIOError):
        RecordIODecoder(max_record=1 << 20).feed(bad)


# -- master addresses ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "url"),
    [
        ("master:5050", "http://master:5050"),
        ("master", "http://master:5050"),
        ("https://m.example:443/", "https://m.example:443"),
        ("//leader:5051", "http://leader:5051"),
        ("10.0.0.1:5050", "http://10.0.0.1:5050"),
    ],
)
def test_master_addresses(text: str, url: str) -> None:
    assert MasterAddress.parse(text).url == url


def test_master_lists_and_zookeeper() -> None:
    masters = parse_masters("a:5050,b:5051")
    assert [m.url for m in masters] == ["http://a:5050", "http://b:5051"]  # type: ignore[union-attr]
    zk = parse_masters("zk://u:p@z1:2181,z2:2181/mesos")
    assert zk == ZooKeeperSource("z1:2181,z2:2181", "/mesos", "u:p")


@pytest.mark.parametrize(
    "bad", ["", "ftp://m:5050", "m:notaport", "zk://z1:2181", "zk://z1:2181/", ","]
)
def test_bad_masters_are_spec_errors(bad: str) -> None:
    with pytest.raises(SpecError):
        parse_masters(bad)


@given(st.text(max_size=60))
def test_master_parsing_never_crashes(text: str) -> None:
    with contextlib.suppress(SpecError):
        parse_masters(text)


def test_leader_from_master_info_json() -> None:
    info = {
        "address": {"hostname": "m1", "ip": "10.0.0.1", "port": 5050},
        "hostname": "m1",
        "port": 5050,
    }
    # The scheduler library dials the address, not the name (scheduler.cpp).
    assert leader_from_master_info(json.dumps(info).encode()).url == "http://10.0.0.1:5050"


# -- placement ----------------------------------------------------------------


def offer(
    cpus: float, mem: float, gpus: float = 0, ports: tuple[int, int] = (31000, 31001)
) -> dict:  # type: ignore[type-arg]
    def scalar(name: str, value: float) -> dict:  # type: ignore[type-arg]
        return {
            "name": name,
            "type": "SCALAR",
            "scalar": {"value": value},
            "role": "*",
            "allocation_info": {"role": "ml"},
        }

    resources = [scalar("cpus", cpus), scalar("mem", mem)]
    if gpus:
        resources.append(scalar("gpus", gpus))
    resources.append(
        {
            "name": "ports",
            "type": "RANGES",
            "ranges": {"range": [{"begin": ports[0], "end": ports[1]}]},
            "role": "*",
            "allocation_info": {"role": "ml"},
        }
    )
    return {
        "id": {"value": "o1"},
        "agent_id": {"value": "a1"},
        "hostname": "agent1",
        "framework_id": {"value": "f"},
        "resources": resources,
    }


def task(
    name: str = "worker", index: int = 0, cpus: float = 1, mem: float = 100, gpus: int = 0
) -> TaskSpec:
    return TaskSpec(name, index, cpus, mem, gpus, None)


def test_several_tasks_share_an_offer_each_with_its_own_port() -> None:
    placed = place(
        [task(index=0), task(index=1), task(index=2)], OfferCapacity.of(offer(2.5, 1000))
    )
    assert [p[0] for p in placed] == [0, 1]  # the third does not fit the CPUs left
    ports = [p[2] for p in placed]
    # Two ports of the offer's range (31000-32000), each its own: taken at
    # random, not the first (tfmesos.mesos.placement, OfferCapacity.take).
    assert len(set(ports)) == 2 and all(31000 <= port <= 32000 for port in ports)
    for _, resources, port in placed:
        by_name = {r["name"]: r for r in resources}
        assert by_name["cpus"]["scalar"] == {"value": 1}
        assert by_name["ports"]["ranges"] == {"range": [{"begin": port, "end": port}]}
        assert all(r["allocation_info"] == {"role": "ml"} for r in resources)


def test_ports_run_out() -> None:
    placed = place(
        [task(index=i, cpus=0.1) for i in range(3)], OfferCapacity.of(offer(4, 1000, ports=(5, 5)))
    )
    assert len(placed) == 1


def test_gpus_are_whole_and_required() -> None:
    assert place([task(gpus=1)], OfferCapacity.of(offer(4, 1000))) == []
    placed = place([task(gpus=2)], OfferCapacity.of(offer(4, 1000, gpus=2)))
    gpus = [r for r in placed[0][1] if r["name"] == "gpus"]
    assert gpus[0]["scalar"] == {"value": 2}


# -- TaskInfo -------------------------------------------------------------------


def test_task_info_with_a_docker_image_on_the_mesos_containerizer() -> None:
    spec = ClusterSpec((Job("worker", 1, cmd="x"),), name="job")
    options = MesosOptions(
        image="tfmesos/tfmesos:2", volumes=(Volume("/data", "/data", read_only=True),)
    )
    launch = Launch("t1", spec.tasks()[0], {"TFMESOS_SECRET": "s"})
    resources, port = OfferCapacity.of(offer(4, 4096)).take(spec.tasks()[0])
    info = task_info(launch, spec, options, offer(4, 4096), resources, port, "alice")
    assert info["task_id"] == {"value": "t1"}
    assert info["agent_id"] == {"value": "a1"}
    assert info["command"]["user"] == "alice"
    assert info["command"]["value"] == "exec python3 -m tfmesos.agent"
    env = {v["name"]: v["value"] for v in info["command"]["environment"]["variables"]}
    assert env["TFMESOS_HOST"] == "agent1"
    assert env["TFMESOS_PORT"] == str(port)
    assert info["container"]["type"] == "MESOS"
    assert info["container"]["mesos"]["image"] == {
        "type": "DOCKER",
        "docker": {"name": "tfmesos/tfmesos:2"},
        "cached": True,
    }
    volumes = info["container"]["volumes"]
    assert {"host_path": "/etc/passwd", "container_path": "/etc/passwd", "mode": "RO"} in volumes
    assert {"host_path": "/data", "container_path": "/data", "mode": "RO"} in volumes


def test_task_info_with_the_docker_containerizer_uses_host_networking() -> None:
    spec = ClusterSpec((Job("worker", 1, cmd="x"),))
    options = MesosOptions(image="img", containerizer="DOCKER", force_pull_image=True)
    launch = Launch("t1", spec.tasks()[0], {})
    resources, port = OfferCapacity.of(offer(4, 4096)).take(spec.tasks()[0])
    info = task_info(launch, spec, options, offer(4, 4096), resources, port, "bob")
    assert info["container"]["docker"] == {
        "image": "img",
        "network": "HOST",
        "force_pull_image": True,
    }


# -- the failover timeout ---------------------------------------------------------


@pytest.mark.parametrize("reconnect", [1.0, 120.0, 600.0, 86400.0])
def test_the_master_keeps_the_tasks_longer_than_tfrun_keeps_trying(reconnect: float) -> None:
    from tfmesos.backends.mesos import MesosBackend
    from tfmesos.mesos.scheduler import DEFAULT_HEARTBEAT_SECONDS, MISSED_HEARTBEATS

    spec = ClusterSpec((Job("worker", 2, cmd="true"),), replica=True)
    backend = MesosBackend(spec, MesosOptions(master="127.0.0.1:5050", reconnect_timeout=reconnect))
    failover = backend.framework_info["failover_timeout"]
    # tfrun notices a dead stream only after five missed heartbeats, then
    # re-subscribes for the whole budget: the master must wait out both.
    assert failover > MISSED_HEARTBEATS * DEFAULT_HEARTBEAT_SECONDS + reconnect
    assert failover >= 60
