"""Finding the leading master in a real ZooKeeper server (``zk://``).

Masters register in ZooKeeper as Mesos does (src/master/contender): an
ephemeral, sequential node ``json.info_<sequence>`` under the group path,
holding the master's ``MasterInfo`` as JSON; the leader is the lowest sequence.
.ci/run starts the server (scripts/start-zookeeper).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import (
    ROOT,
    TWO_WORKERS_TRUE,
    JobProcesses,
    marked_master,
    run_tfrun,
    start_tfrun,
    tfrun_argv,
)
from tfmesos.testing.master import ThreadedTestMaster

ZK_HOSTS = os.environ.get("TFMESOS_TEST_ZOOKEEPER", "127.0.0.1:2181")


@pytest.fixture
def zk() -> Iterator[Any]:
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    client = KazooClient(hosts=ZK_HOSTS, timeout=5)
    try:
        client.start(timeout=5)
    except KazooTimeoutError:
        message = f"no ZooKeeper server at {ZK_HOSTS}: start one with scripts/start-zookeeper"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI must run it)")
        pytest.skip(reason=message)
    yield client
    client.stop()
    client.close()


def master_info(host: str, port: int) -> bytes:
    return json.dumps(
        {
            "id": uuid.uuid4().hex,
            "pid": f"master@{host}:{port}",
            "hostname": host,
            "port": port,
            "address": {"hostname": host, "ip": "127.0.0.1", "port": port},
            "version": "1.11.0",
        }
    ).encode()


@pytest.fixture
def master(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ThreadedTestMaster]:
    with marked_master(job_procs, monkeypatch, agents=2) as m:
        yield m


def test_the_leader_is_found_in_zookeeper_and_followed_when_it_changes(
    zk: Any, master: ThreadedTestMaster, job_procs: JobProcesses
) -> None:
    group = f"/tfmesos-test-{uuid.uuid4().hex}"
    zk.ensure_path(group)
    # The same master under two names: a change of leader the client must
    # follow, while the tasks it knows stay known (as after a real failover,
    # when agents re-register with the new leader).
    first = zk.create(
        f"{group}/json.info_", master_info("127.0.0.1", master.port), ephemeral=True, sequence=True
    )
    zk.create(
        f"{group}/json.info_", master_info("localhost", master.port), ephemeral=True, sequence=True
    )
    zk.create(f"{group}/log_replicas", b"")  # other members of the group are not masters

    code = "import time; time.sleep(8); print('done {task_index}')"
    proc, seen = start_tfrun(
        "-m",
        f"zk://{ZK_HOSTS}{group}",
        "-w",
        "2",
        "-s",
        "0",
        "--worker-logs",
        "*",
        "--",
        sys.executable,
        "-c",
        code,
        env=job_procs.env(),
    )
    assert any("leading master is now http://127.0.0.1" in line for line in seen), seen
    zk.delete(first)  # the leader steps down; the next in line leads
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, "".join(seen) + err
    assert "leading master is now http://localhost" in err
    assert sorted(out.splitlines()) == ["[worker:0] done 0", "[worker:1] done 1"]
    subscribes = [c["body"] for c in master.calls("SUBSCRIBE") if c["status"] == 200]
    assert len(subscribes) == 2
    # The second SUBSCRIBE is a re-subscription of the same framework.
    assert "framework_id" not in subscribes[0]
    renewed = subscribes[1]["subscribe"]["framework_info"]["id"]["value"]
    assert subscribes[1]["framework_id"]["value"] == renewed
    assert job_procs.wait_gone(10) == []
    zk.delete(group, recursive=True)


def test_no_master_in_zookeeper_ends_with_a_clear_error(zk: Any, job_procs: JobProcesses) -> None:
    group = f"/tfmesos-test-{uuid.uuid4().hex}"
    zk.ensure_path(group)
    result = run_tfrun(
        "-m",
        f"zk://{ZK_HOSTS}{group}",
        "--timeout",
        "3",
        *TWO_WORKERS_TRUE,
        env=job_procs.env(),
        timeout=120,
    )
    assert result.returncode == 1
    assert (
        "not subscribed to a Mesos master yet: no leading master known "
        f"(no master has registered under {group} in ZooKeeper at {ZK_HOSTS})" in result.stderr
    )
    zk.delete(group, recursive=True)


def test_a_group_path_that_does_not_exist_is_named_and_watched_for(
    zk: Any, master: ThreadedTestMaster, job_procs: JobProcesses
) -> None:
    group = f"/tfmesos-test-{uuid.uuid4().hex}"  # not created
    url = f"zk://{ZK_HOSTS}{group}"
    result = run_tfrun(
        "-m",
        url,
        "--timeout",
        "2",
        *TWO_WORKERS_TRUE,
        env=job_procs.env(),
        timeout=120,
    )
    assert result.returncode == 1
    assert f"ZooKeeper at {ZK_HOSTS} has no {group}: is that the path" in result.stderr
    # The masters may come up after tfrun: once the path and a master appear,
    # the job goes on (worker 1 runs on Mesos; worker 0, the chief, here).
    proc = subprocess.Popen(
        tfrun_argv("-m", url, "-w", "2", "-s", "0", "--", sys.executable, "-c", "pass"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=job_procs.env(),
        cwd=ROOT,
    )
    try:
        time.sleep(2)
        zk.ensure_path(group)
        zk.create(
            f"{group}/json.info_",
            master_info("127.0.0.1", master.port),
            ephemeral=True,
            sequence=True,
        )
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "leading master is now http://127.0.0.1" in err
    assert job_procs.wait_gone(10) == []
    zk.delete(group, recursive=True)


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_zookeeper_is_retried_and_named_at_the_timeout(
    job_procs: JobProcesses,
) -> None:
    # One attempt gives ZooKeeper 5s; the job's --timeout comes during the second.
    started = time.monotonic()
    result = run_tfrun(
        "-m",
        f"zk://127.0.0.1:{_closed_port()}/mesos",
        "--timeout",
        "8",
        *TWO_WORKERS_TRUE,
        env=job_procs.env(),
        timeout=120,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert "the cluster was not up after 8s" in result.stderr
    assert re.search(
        r"not subscribed to a Mesos master yet: no ZooKeeper server at 127\.0\.0\.1:\d+ "
        r"answered within 5s",
        result.stderr,
    ), result.stderr
    assert "re-subscribing in" in result.stderr  # it tried again
    assert "backend failed" not in result.stderr
    # Not held up by a connection attempt on the way out.
    assert elapsed < 8 + 4, elapsed
    assert job_procs.wait_gone(10) == []


def test_an_unreachable_zookeeper_ends_the_job_within_the_reconnect_budget(
    job_procs: JobProcesses,
) -> None:
    started = time.monotonic()
    result = run_tfrun(
        "-m",
        f"zk://127.0.0.1:{_closed_port()}/mesos",
        "--reconnect-timeout",
        "2",
        *TWO_WORKERS_TRUE,
        env=job_procs.env(),
        timeout=120,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert re.search(
        r"lost the Mesos master \(no ZooKeeper server at 127\.0\.0\.1:\d+ answered within 2s\) "
        r"and could not re-subscribe within 2s",
        result.stderr,
    ), result.stderr
    # The budget, a last try, and start-up and teardown; not kazoo's 15 s.
    assert elapsed < 2 + 6, elapsed
    assert job_procs.wait_gone(10) == []
