"""Finding the leading master in a real ZooKeeper server (``zk://``).

Masters register in ZooKeeper as Mesos does (src/master/contender/zookeeper.cpp,
src/zookeeper/group.cpp ``GroupProcess::doJoin``): an ephemeral, sequential
node ``<label>_<sequence>`` under the group path, ``json.info_`` holding the
master's ``MasterInfo`` as JSON, the older ``info_`` as a binary protobuf, and
the oldest, unlabelled ``<sequence>`` a bare ``UPID``. The leader is the
lowest sequence of all of them (src/zookeeper/detector.cpp), dialled at the
IP:port of its ``pid`` (src/scheduler/scheduler.cpp). .ci/run starts the
server (scripts/start-zookeeper).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psutil
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
from tfmesos.mesos.masters import MasterAddress, ZooKeeperSource, parse_masters
from tfmesos.mesos.zookeeper import ZooKeeperAuthError, ZooKeeperLeader
from tfmesos.testing.master import ThreadedTestMaster

ZK_HOSTS = os.environ.get("TFMESOS_TEST_ZOOKEEPER", "127.0.0.1:2181")


def zookeeper_client(auth: str | None = None) -> Any:
    """A started client of the ZooKeeper server scripts/start-zookeeper runs,
    with digest credentials ``user:password`` if given; under CI its absence
    fails the test, elsewhere it skips it, saying why."""
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    client = KazooClient(hosts=ZK_HOSTS, timeout=5, auth_data=[("digest", auth)] if auth else None)
    try:
        client.start(timeout=5)
    except KazooTimeoutError:
        message = f"no ZooKeeper server at {ZK_HOSTS}: start one with scripts/start-zookeeper"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI must run it)")
        pytest.skip(reason=message)
    return client


def packed_ip(ip: str) -> int:
    """``MasterInfo.ip`` as Mesos fills it (src/master/master.cpp: ``s_addr``,
    network order in memory, read as a host-order number on a little-endian
    host; MESOS-1201)."""
    return int.from_bytes(socket.inet_aton(ip), "little")


def master_info(host: str, port: int, ip: str = "127.0.0.1", pid_host: str | None = None) -> bytes:
    """A master's ``json.info_`` data, as ``JSON::protobuf(MasterInfo)`` writes it."""
    return json.dumps(
        {
            "id": uuid.uuid4().hex,
            "ip": packed_ip(ip),
            "pid": f"master@{pid_host or host}:{port}",
            "hostname": host,
            "port": port,
            "address": {"hostname": host, "ip": ip, "port": port},
            "version": "1.11.0",
        }
    ).encode()


# A tiny protobuf encoder, enough for the binary ``MasterInfo`` of the older
# ``info_`` members (include/mesos/mesos.proto).


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int32s are ten-byte varints
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _int_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _bytes_field(number: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def master_info_protobuf(
    host: str, port: int, ip: str = "127.0.0.1", pid_host: str | None = None
) -> bytes:
    """A master's ``info_`` data: ``MasterInfo.SerializeToString()``."""
    address = _bytes_field(1, host) + _bytes_field(2, ip) + _int_field(3, port)
    capability = _int_field(1, 1)  # AGENT_UPDATE: a field the reader skips
    return b"".join(
        [
            _bytes_field(1, uuid.uuid4().hex),  # id
            _int_field(2, packed_ip(ip)),  # ip
            _int_field(3, port),  # port
            _bytes_field(4, f"master@{pid_host or ip}:{port}"),  # pid
            _bytes_field(5, host),  # hostname
            _bytes_field(6, "1.11.0"),  # version
            _bytes_field(7, address),  # address
            _bytes_field(9, capability),  # capabilities
        ]
    )


class Leaders:
    """``on_change`` for a :class:`ZooKeeperLeader`: what it heard, waited on."""

    def __init__(self) -> None:
        self.heard: list[MasterAddress | None] = []
        self._changed = threading.Condition()

    def __call__(self, leader: MasterAddress | None) -> None:
        with self._changed:
            self.heard.append(leader)
            self._changed.notify_all()

    def wait_for(self, url: str | None, timeout: float = 10.0) -> None:
        """Until the latest leader heard is ``url`` (None: no leader)."""

        def latest() -> str | None:
            leader = self.heard[-1] if self.heard else None
            return leader.url if leader else None

        with self._changed:
            assert self._changed.wait_for(lambda: bool(self.heard) and latest() == url, timeout), (
                self.heard
            )


@pytest.fixture
def group(zk: Any) -> Iterator[str]:
    path = f"/tfmesos-test-{uuid.uuid4().hex}"
    zk.ensure_path(path)
    yield path
    zk.delete(path, recursive=True)


@pytest.fixture
def watch(group: str) -> Iterator[Callable[[], tuple[ZooKeeperLeader, Leaders]]]:
    """Starts a :class:`ZooKeeperLeader` on the group, as ``-m zk://`` does."""
    started: list[ZooKeeperLeader] = []

    def start() -> tuple[ZooKeeperLeader, Leaders]:
        source = parse_masters(f"zk://{ZK_HOSTS}{group}")
        assert isinstance(source, ZooKeeperSource)
        leaders = Leaders()
        leader = ZooKeeperLeader(source, leaders)
        started.append(leader)
        leader.start(timeout=10)
        return leader, leaders

    yield start
    for leader in started:
        leader.stop()


def wait_for_zookeeper_session(pid: int, timeout: float = 60) -> None:
    """Wait until process ``pid`` has a connection open to ZooKeeper."""
    port = int(ZK_HOSTS.rsplit(":", 1)[1])
    proc = psutil.Process(pid)
    deadline = time.monotonic() + timeout
    while not any(
        c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
        for c in proc.net_connections(kind="tcp")
    ):
        assert proc.is_running(), "tfrun ended before it reached ZooKeeper"
        assert time.monotonic() < deadline, f"tfrun did not reach ZooKeeper within {timeout} s"
        time.sleep(0.05)


def _closed_port() -> int:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- which member leads, and where it is dialled ---------------------------------


def test_the_lowest_sequence_of_any_label_leads_and_its_pid_is_dialled(
    zk: Any, group: str, watch: Callable[[], tuple[ZooKeeperLeader, Leaders]]
) -> None:
    # Oldest first: a bare UPID, a binary MasterInfo, a JSON one, as masters
    # of three Mesos versions would leave them in one group.
    legacy = zk.create(f"{group}/", b"master@10.0.0.1:5050", ephemeral=True, sequence=True)
    binary = zk.create(
        f"{group}/info_",
        master_info_protobuf("m2.invalid", 5051, ip="10.0.0.2"),
        ephemeral=True,
        sequence=True,
    )
    zk.create(
        f"{group}/json.info_",
        master_info("m3.invalid", 5052, ip="10.0.0.3", pid_host="10.0.0.3"),
        ephemeral=True,
        sequence=True,
    )
    zk.create(f"{group}/log_replicas", b"")  # not a member: no sequence
    _, leaders = watch()
    leaders.wait_for("http://10.0.0.1:5050")
    zk.delete(legacy)  # the next in line: an info_ member, at its IP
    leaders.wait_for("http://10.0.0.2:5051")
    zk.delete(binary)
    leaders.wait_for("http://10.0.0.3:5052")


def test_a_json_member_below_an_info_member_leads(
    zk: Any, group: str, watch: Callable[[], tuple[ZooKeeperLeader, Leaders]]
) -> None:
    first = zk.create(
        f"{group}/json.info_",
        master_info("m1.invalid", 5051, ip="10.0.0.1", pid_host="10.0.0.1"),
        ephemeral=True,
        sequence=True,
    )
    zk.create(
        f"{group}/info_",
        master_info_protobuf("m2.invalid", 5052, ip="10.0.0.2"),
        ephemeral=True,
        sequence=True,
    )
    _, leaders = watch()
    leaders.wait_for("http://10.0.0.1:5051")
    zk.delete(first)
    leaders.wait_for("http://10.0.0.2:5052")
    assert [leader.url if leader else None for leader in leaders.heard] == [
        "http://10.0.0.1:5051",
        "http://10.0.0.2:5052",
    ]


def test_the_ip_is_dialled_not_the_hostname(
    zk: Any, group: str, watch: Callable[[], tuple[ZooKeeperLeader, Leaders]]
) -> None:
    # Real masters put their libprocess IP in pid, ip and address.ip, and
    # their host name (which may not resolve here) in hostname.
    zk.create(
        f"{group}/json.info_",
        master_info("master-1.example.invalid", 5050, ip="192.0.2.7", pid_host="192.0.2.7"),
        ephemeral=True,
        sequence=True,
    )
    _, leaders = watch()
    leaders.wait_for("http://192.0.2.7:5050")


def test_the_legacy_ip_field_is_read_in_network_order(
    zk: Any, group: str, watch: Callable[[], tuple[ZooKeeperLeader, Leaders]]
) -> None:
    # Only the deprecated fields: id, ip (packed, MESOS-1201), port.
    info = _bytes_field(1, "id") + _int_field(2, packed_ip("10.1.2.3")) + _int_field(3, 5055)
    zk.create(f"{group}/info_", info, ephemeral=True, sequence=True)
    _, leaders = watch()
    leaders.wait_for("http://10.1.2.3:5055")


def test_a_lowest_member_that_cannot_be_read_means_no_leader(
    zk: Any, group: str, watch: Callable[[], tuple[ZooKeeperLeader, Leaders]]
) -> None:
    zk.create(f"{group}/log_replicas", b"")  # so the member's sequence is above 0
    zk.create(
        f"{group}/json.info_",
        master_info("m.invalid", 5050, ip="10.0.0.9", pid_host="10.0.0.9"),
        ephemeral=True,
        sequence=True,
    )
    leader, leaders = watch()
    leaders.wait_for("http://10.0.0.9:5050")
    # A member below it that no Mesos detector can read: Mesos does not
    # pass it over for the next (src/master/detector/zookeeper.cpp fetched).
    intruder = zk.create(f"{group}/other_0000000000", b"{}", ephemeral=True)
    leaders.wait_for(None)
    assert "other_0000000000" in leader.why_no_leader()
    assert "unknown label 'other'" in leader.why_no_leader()
    zk.delete(intruder)
    leaders.wait_for("http://10.0.0.9:5050")
    garbled = zk.create(f"{group}/info_0000000000", b"\x0a\xff", ephemeral=True)
    leaders.wait_for(None)
    assert "info_0000000000" in leader.why_no_leader()
    zk.delete(garbled)
    leaders.wait_for("http://10.0.0.9:5050")


def test_https_when_libprocess_ssl_is_enabled(
    zk: Any,
    group: str,
    watch: Callable[[], tuple[ZooKeeperLeader, Leaders]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As the scheduler library decides: LIBPROCESS_SSL_ENABLED (or the older
    # SSL_ENABLED), nothing in MasterInfo.
    monkeypatch.setenv("LIBPROCESS_SSL_ENABLED", "true")
    zk.create(
        f"{group}/info_",
        master_info_protobuf("m.invalid", 5050, ip="10.0.0.4"),
        ephemeral=True,
        sequence=True,
    )
    _, leaders = watch()
    leaders.wait_for("https://10.0.0.4:5050")


def test_a_job_subscribes_to_an_info_member_at_its_ip(
    zk: Any, group: str, master: ThreadedTestMaster, job_procs: JobProcesses
) -> None:
    # The leader is an old-format member whose host name does not resolve;
    # a JSON member above it points nowhere. Only Mesos's choice runs the job.
    zk.create(
        f"{group}/info_",
        master_info_protobuf("master-1.example.invalid", master.port),
        ephemeral=True,
        sequence=True,
    )
    zk.create(
        f"{group}/json.info_",
        master_info("127.0.0.1", _closed_port()),
        ephemeral=True,
        sequence=True,
    )
    result = run_tfrun(
        "-m",
        f"zk://{ZK_HOSTS}{group}",
        "--timeout",
        "30",
        *TWO_WORKERS_TRUE,
        env=job_procs.env(),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"leading master is now http://127.0.0.1:{master.port}" in result.stderr
    assert job_procs.wait_gone(10) == []


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


def test_a_redirect_from_zookeepers_leader_is_not_followed(
    zk: Any, master: ThreadedTestMaster, job_procs: JobProcesses
) -> None:
    """ZooKeeper names a master that does not lead yet, and whose 307 names
    the dead leader by host name (a watch delay during a failover). Mesos's
    library never follows a 307: the leader is ZooKeeper's. tfrun waits for
    ZooKeeper to name the leader rather than dial the dead one."""
    group = f"/tfmesos-test-{uuid.uuid4().hex}"
    zk.ensure_path(group)
    dead = f"localhost:{_closed_port()}"
    with ThreadedTestMaster(agents=0, leader=False, leader_address=dead) as standby:
        member = zk.create(
            f"{group}/json.info_",
            master_info("127.0.0.1", standby.port),
            ephemeral=True,
            sequence=True,
        )

        # -v: until a master takes SUBSCRIBE the standby's 307 is said at
        # debug only (a redirect is not a subscription, and the first tries
        # are quiet), and the test waits for it before the leader changes.
        with subprocess.Popen(
            tfrun_argv("-v", "-m", f"zk://{ZK_HOSTS}{group}", *TWO_WORKERS_TRUE),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=job_procs.env(),
        ) as proc:  # its pipes closed and tfrun reaped at the end
            try:
                assert proc.stderr is not None
                seen = []
                for line in proc.stderr:
                    seen.append(line)
                    if "is not the leading master" in line:
                        break
                # The standby's view catches up: the next member leads.
                zk.create(
                    f"{group}/json.info_",
                    master_info("127.0.0.1", master.port),
                    ephemeral=True,
                    sequence=True,
                )
                zk.delete(member)
                _, err = proc.communicate(timeout=120)
            finally:
                if proc.poll() is None:
                    proc.kill()
    said = "".join(seen) + err
    assert proc.returncode == 0, said
    assert f"is not the leading master (it redirects to //{dead}" in said, said
    assert "redirected to the leading master" not in said, said
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
    assert result.returncode == 124
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
    assert result.returncode == 124
    assert f"ZooKeeper at {ZK_HOSTS} has no {group}: is that the path" in result.stderr
    # The masters may come up after tfrun: once the path and a master appear,
    # the job goes on (worker 1 runs on Mesos; worker 0, the chief, here).
    with subprocess.Popen(
        tfrun_argv("-m", url, "-w", "2", "-s", "0", "--", sys.executable, "-c", "pass"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=job_procs.env(),
        cwd=ROOT,
    ) as proc:  # its pipes closed and tfrun reaped at the end
        try:
            # tfrun is looking for the group before it exists: it has a session
            # with ZooKeeper open.
            wait_for_zookeeper_session(proc.pid)
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


def test_an_unreachable_zookeeper_is_retried_and_named_at_the_timeout(
    job_procs: JobProcesses,
) -> None:
    # One attempt gives ZooKeeper 5s; the job's --timeout comes during the second
    # (-v: the tries before any master answered are said at debug).
    result = run_tfrun(
        "-v",
        "-m",
        f"zk://127.0.0.1:{_closed_port()}/mesos",
        "--timeout",
        "8",
        *TWO_WORKERS_TRUE,
        env=job_procs.env(),
        timeout=120,
    )
    assert result.returncode == 124, result.stderr
    assert "the cluster did not come up within 8s" in result.stderr
    assert re.search(
        r"not subscribed to a Mesos master yet: no ZooKeeper server at 127\.0\.0\.1:\d+ "
        r"answered within 5s",
        result.stderr,
    ), result.stderr
    assert "trying again in" in result.stderr  # it tried again
    assert "backend failed" not in result.stderr
    assert job_procs.wait_gone(10) == []


def test_an_unreachable_zookeeper_ends_the_job_within_the_reconnect_budget(
    job_procs: JobProcesses,
) -> None:
    result = run_tfrun(
        "-m",
        f"zk://127.0.0.1:{_closed_port()}/mesos",
        "--reconnect-timeout",
        "2",
        *TWO_WORKERS_TRUE,
        env=job_procs.env(),
        timeout=120,
    )
    assert result.returncode == 125, result.stderr
    assert re.search(
        r"could not reach the Mesos master at zk://127\.0\.0\.1:\d+/mesos \(no ZooKeeper server "
        r"at 127\.0\.0\.1:\d+ answered within [\d.]+s\) within 2s",
        result.stderr,
    ), result.stderr
    assert job_procs.wait_gone(10) == []


# -- credentials (zk://user:password@...) ------------------------------------------

USER = "tfmesos"
PASSWORD = "p@ss:w0rd@"
"""A password with what splits URLs: '@' (the credentials end at the last
one, include/mesos/zookeeper/url.hpp) and ':' (the user ends at the first)."""


def authed_client(password: str = PASSWORD) -> Any:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=ZK_HOSTS, timeout=5, auth_data=[("digest", f"{USER}:{password}")])
    client.start(timeout=5)
    return client


@pytest.fixture
def restricted(zk: Any) -> Iterator[tuple[str, Any]]:
    """A group only ``USER:PASSWORD`` may read (an ACL an operator sets), and
    a client holding those credentials, to write in it."""
    from kazoo.security import make_digest_acl

    client = authed_client()
    path = f"/tfmesos-test-{uuid.uuid4().hex}"
    client.create(path, b"", acl=[make_digest_acl(USER, PASSWORD, all=True)])
    yield path, client
    client.delete(path, recursive=True)
    client.stop()
    client.close()


@pytest.fixture
def mesos_acl_group(zk: Any) -> Iterator[tuple[str, Any]]:
    """A group as masters given credentials leave it: readable by anyone,
    all else to its creator (EVERYONE_READ_CREATOR_ALL, src/zookeeper/group.cpp)."""
    from kazoo.security import CREATOR_ALL_ACL, READ_ACL_UNSAFE

    client = authed_client()
    path = f"/tfmesos-test-{uuid.uuid4().hex}"
    client.create(path, b"", acl=READ_ACL_UNSAFE + CREATOR_ALL_ACL)
    yield path, client
    client.delete(path, recursive=True)
    client.stop()
    client.close()


def zk_url(path: str, password: str | None = PASSWORD) -> str:
    credentials = f"{USER}:{password}@" if password is not None else ""
    return f"zk://{credentials}{ZK_HOSTS}{path}"


def test_credentials_are_sent_once_connected_and_read_a_restricted_group(
    restricted: tuple[str, Any],
) -> None:
    path, client = restricted
    client.create(
        f"{path}/json.info_",
        master_info("m.invalid", 5050, ip="10.0.0.5", pid_host="10.0.0.5"),
        ephemeral=True,
        sequence=True,
        acl=client.default_acl,
    )
    source = parse_masters(zk_url(path))
    assert isinstance(source, ZooKeeperSource)
    leaders = Leaders()
    leader = ZooKeeperLeader(source, leaders)
    try:
        leader.start(timeout=10)
        leaders.wait_for("http://10.0.0.5:5050")
    finally:
        leader.stop()


@pytest.mark.parametrize("password", ["wrong@pass", None])
def test_a_restricted_group_refuses_a_wrong_password_or_none(
    restricted: tuple[str, Any], password: str | None
) -> None:
    path, _ = restricted
    source = parse_masters(zk_url(path, password))
    assert isinstance(source, ZooKeeperSource)
    leader = ZooKeeperLeader(source, Leaders())
    with pytest.raises(ZooKeeperAuthError) as caught:
        leader.start(timeout=10)
    message = str(caught.value)
    if password is None:
        assert message == (
            f"ZooKeeper at {ZK_HOSTS} refuses to let a client without credentials read {path} "
            "(NoAuth): give them in the URL, zk://USER:PASSWORD@HOSTS/PATH"
        )
    else:
        assert message == (
            f"ZooKeeper at {ZK_HOSTS} refuses to let user {USER!r} read {path} (NoAuth): "
            "check the user and password in the zk:// URL (zk://USER:PASSWORD@HOSTS/PATH)"
        )
        assert password not in message
    leader.stop()  # stopped already: a second stop is harmless


def test_a_job_with_zk_credentials_runs(
    mesos_acl_group: tuple[str, Any], master: ThreadedTestMaster, job_procs: JobProcesses
) -> None:
    # What masters with credentials leave: anyone may read, so any password
    # works; before the fix every zk:// URL with credentials failed at start.
    path, client = mesos_acl_group
    client.create(
        f"{path}/json.info_",
        master_info("127.0.0.1", master.port),
        ephemeral=True,
        sequence=True,
        acl=client.default_acl,
    )
    result = run_tfrun(
        "-m", zk_url(path), "--timeout", "30", *TWO_WORKERS_TRUE, env=job_procs.env(), timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert f"leading master is now http://127.0.0.1:{master.port}" in result.stderr
    assert PASSWORD not in result.stderr
    assert job_procs.wait_gone(10) == []


def test_a_job_with_the_right_password_reads_a_restricted_group_and_runs(
    restricted: tuple[str, Any], master: ThreadedTestMaster, job_procs: JobProcesses
) -> None:
    path, client = restricted
    client.create(
        f"{path}/json.info_",
        master_info("127.0.0.1", master.port),
        ephemeral=True,
        sequence=True,
        acl=client.default_acl,
    )
    result = run_tfrun(
        "-m", zk_url(path), "--timeout", "30", *TWO_WORKERS_TRUE, env=job_procs.env(), timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert f"leading master is now http://127.0.0.1:{master.port}" in result.stderr
    assert job_procs.wait_gone(10) == []


def test_a_wrong_password_is_one_line_and_ends_the_job_at_once(
    restricted: tuple[str, Any], job_procs: JobProcesses
) -> None:
    path, _ = restricted
    # A reconnect budget no test would wait for: the job must not retry.
    result = run_tfrun(
        "-m",
        zk_url(path, "not-it@all"),
        "--reconnect-timeout",
        "3600",
        *TWO_WORKERS_TRUE,
        env=job_procs.env(),
        timeout=120,
    )
    assert result.returncode == 125, result.stderr
    expected = (
        f"ZooKeeper at {ZK_HOSTS} refuses to let user {USER!r} read {path} (NoAuth): "
        "check the user and password in the zk:// URL (zk://USER:PASSWORD@HOSTS/PATH)"
    )
    problem = [line for line in result.stderr.splitlines() if "NoAuth" in line]
    assert len(problem) == 1 and problem[0].endswith(expected), result.stderr
    assert "Traceback" not in result.stderr and "bug in tfmesos" not in result.stderr
    assert "re-subscribing" not in result.stderr, result.stderr
    assert "not-it@all" not in result.stderr
    assert job_procs.wait_gone(10) == []


def test_a_file_master_names_the_master(
    master: ThreadedTestMaster, job_procs: JobProcesses, tmp_path: Any
) -> None:
    # -m file:///path: the file holds the master's address (here behind a
    # file that names that file), read once at the start.
    (tmp_path / "address").write_text(f"127.0.0.1:{master.port}\n")
    (tmp_path / "pointer").write_text(f"file://{tmp_path / 'address'}\n")
    result = run_tfrun(
        "-m",
        f"file://{tmp_path / 'pointer'}",
        "--timeout",
        "30",
        *TWO_WORKERS_TRUE,
        env=job_procs.env(),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert len(master.calls("SUBSCRIBE")) >= 1
    assert job_procs.wait_gone(10) == []


def test_a_file_master_that_cannot_be_read_is_a_usage_error(
    job_procs: JobProcesses, tmp_path: Any
) -> None:
    missing = tmp_path / "no-such-file"
    result = run_tfrun("-m", f"file://{missing}", *TWO_WORKERS_TRUE, env=job_procs.env())
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"tfrun: error: Mesos master file://{missing}: cannot read {missing}: "
        "No such file or directory"
    ), result.stderr


def test_the_credentials_are_sent_again_on_every_connection(
    restricted: tuple[str, Any],
) -> None:
    # ZooKeeper keeps what a client authenticated as per connection, not per
    # session: after a reconnection the credentials must be sent again
    # (kazoo's auth_data is, before any request) or the group reads NoAuth.
    from tests.mesos_clusters import CuttableProxy

    path, client = restricted
    members = [
        client.create(
            f"{path}/json.info_",
            master_info(
                "m.invalid", port, ip=f"10.0.0.{port - 5000}", pid_host=f"10.0.0.{port - 5000}"
            ),
            ephemeral=True,
            sequence=True,
            acl=client.default_acl,  # only the creator may read it
        )
        for port in (5001, 5002)
    ]
    host, port = ZK_HOSTS.split(",")[0].rsplit(":", 1)
    assert host == "127.0.0.1", "the proxy forwards to 127.0.0.1"
    proxy = CuttableProxy(int(port))
    source = parse_masters(f"zk://{USER}:{PASSWORD}@127.0.0.1:{proxy.port}{path}")
    assert isinstance(source, ZooKeeperSource)
    leaders = Leaders()
    leader = ZooKeeperLeader(source, leaders)
    try:
        leader.start(timeout=10)
        leaders.wait_for("http://10.0.0.1:5001")
        proxy.cut()  # the connection ends; the session lives on (10 s)
        client.delete(members[0])  # heard of, and read, on the next connection
        proxy.restore()
        leaders.wait_for("http://10.0.0.2:5002")
        assert None not in leaders.heard  # never a NoAuth on the way
    finally:
        leader.stop()
        proxy.close()
