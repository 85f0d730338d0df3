"""Promises about the Mesos masters tfrun is given, held where the
adversarial run broke them (issue 27).

- A master that never took a SUBSCRIBE is held to the first-contact budget
  (``--connect-timeout``), a standby's 307 included: a standby pointing at a
  dead leader, or at itself, ends the job in one line within seconds.
- A host name no resolver takes (a label over 63 characters) or a port out
  of range is one line: bad usage from ``-m`` (or its ``file://``), a bad
  member from ZooKeeper; never the IDNA codec's traceback.
- A command whose bytes are not UTF-8 still names the framework: Mesos's JSON
  parser refuses the ``\\udcff`` json.dumps writes for such a byte, and the
  test master refuses it as Mesos does.
- ``-v`` never prints the ZooKeeper password (kazoo's debug output did).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, TWO_WORKERS_TRUE, JobProcesses, marked_master, tfrun_argv
from tests.test_zookeeper import ZK_HOSTS, master_info, zookeeper_client
from tfmesos.mesos.masters import (
    MasterAddress,
    follow_redirect,
    host_problem,
    port_problem,
)
from tfmesos.testing.master import ThreadedTestMaster

WRONG_MASTER_BOUND = 15.0
"""A wrong -m's bound, from tfrun's start to its exit (the first-contact
budget is 10 s)."""
LONG_LABEL = "a" * 64


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def tfrun(*args: str | bytes, env: dict[str, str], timeout: float = 120) -> tuple[int, str, float]:
    """tfrun's exit status, its stderr and how long it ran."""
    started = time.monotonic()
    result = subprocess.run(
        [*tfrun_argv(), *args], capture_output=True, env=env, cwd=ROOT, timeout=timeout
    )
    err = result.stderr.decode(errors="replace")
    return result.returncode, err, time.monotonic() - started


@pytest.fixture
def master(job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with marked_master(job_procs, monkeypatch, agents=1) as m:
        yield m


# -- 1. a redirect is not a subscription ------------------------------------


@pytest.mark.parametrize("leader", ["dead", "itself"])
def test_a_standby_whose_leader_never_answers_fails_within_the_first_contact_budget(
    job_procs: JobProcesses, leader: str
) -> None:
    """A standby answers 307; before the fix that counted as a master
    answering, and tfrun kept at it for the 120 s reconnect budget, saying
    'redirected to the leading master ... re-subscribing' dozens of times."""
    dead = closed_port()
    with ThreadedTestMaster(leader=False, leader_address=f"127.0.0.1:{dead}") as standby:
        standby_url = f"http://127.0.0.1:{standby.port}"
        if leader == "itself":
            standby.set_leader(False, leader_address=f"127.0.0.1:{standby.port}")
        status, err, elapsed = tfrun(
            "-m", f"127.0.0.1:{standby.port}", *TWO_WORKERS_TRUE, env=job_procs.env()
        )
    print(f"tfrun at a standby pointing at {leader}: exit {status} after {elapsed:.1f}s:\n{err}")
    assert status == 125, err
    assert elapsed < WRONG_MASTER_BOUND, (elapsed, err)
    (line,) = err.splitlines()
    assert line.startswith(
        f"tfrun: error: the mesos backend failed: could not reach the Mesos master at {standby_url} ("
    ), line
    if leader == "dead":
        assert (
            f"{standby_url} is not the leading master: it redirects to "
            f"http://127.0.0.1:{dead}, which does not answer (" in line
        ), line
    else:
        assert f"{standby_url} is not the leading master, and it redirects to itself" in line
    assert line.endswith(" within 10s"), line
    assert job_procs.wait_gone(10) == []


def test_redirects_that_loop_or_run_on_are_named() -> None:
    a, b = MasterAddress("http", "a", 5050), MasterAddress("http", "b", 5050)
    chain = [a]
    assert follow_redirect(chain, "//b:5050/master/api/v1/scheduler", False) == b
    assert follow_redirect(chain, "//a:5050/master/api/v1/scheduler", False) == (
        "http://a:5050 is not the leading master, and its redirects loop: "
        "http://a:5050 -> http://b:5050 -> http://a:5050"
    )
    chain = [MasterAddress("http", "h", 5000)]
    for port in range(5001, 5006):
        assert isinstance(follow_redirect(chain, f"//h:{port}", False), MasterAddress)
    assert "more than 5 redirects" in str(follow_redirect(chain, "//h:5006", False))
    bad = follow_redirect([a], f"//{LONG_LABEL}:5050", False)
    assert "redirects to an address that cannot be dialled" in str(bad), bad


# -- 2. host names and ports no one can dial --------------------------------


@pytest.mark.parametrize(
    ("host", "problem"),
    [
        ("127.0.0.1", None),
        ("::1", None),
        ("fe80::1%eth0", None),
        ("b\u00fccher.example", None),
        ("a" * 63 + ".example.", None),
        (LONG_LABEL, "a host name with a label of 64 characters; at most 63 are allowed"),
        ("a..b", "a host name with an empty label (two dots in a row)"),
        ("1:2:3:x::", "not an IPv6 address"),
    ],
)
def test_host_names_are_checked_as_dns_takes_them(host: str, problem: str | None) -> None:
    assert host_problem(host) == problem
    assert port_problem(5050) is None and port_problem(0) and port_problem(65536)


@pytest.mark.e2e
@pytest.mark.parametrize(
    "given",
    [
        f"{LONG_LABEL}.example.com:5050",
        f"127.0.0.1:5050,http://{LONG_LABEL}:5050",
        f"zk://{LONG_LABEL}:2181/mesos",
        "file",
        "127.0.0.1:99999999",
        "x" * 254 + ":5050",
    ],
    ids=["-m", "a-list", "zk", "file", "port", "254-characters"],
)
def test_an_address_no_one_can_dial_is_bad_usage_in_one_line(given: str, tmp_path: Path) -> None:
    """Before the fix a label over 63 characters reached the HTTP client,
    whose IDNA codec failed: a 54-line traceback, 'a bug in tfmesos', 125."""
    if given == "file":
        master_file = tmp_path / "master"
        master_file.write_text(f"{LONG_LABEL}.example.com:5050\n")
        given = f"file://{master_file}"
    status, err, _ = tfrun("-m", given, *TWO_WORKERS_TRUE, env=dict(os.environ))
    assert status == 2, err
    (line,) = err.splitlines()
    assert line.startswith("tfrun: error: "), line
    kind = "bad ZooKeeper URL" if given.startswith("zk://") else "bad Mesos master address"
    assert kind in line, line
    if "99999999" in given:
        assert "99999999" in line or "out of range" in line, line
    elif given.startswith("x"):
        assert "254 characters; at most 253" in line, line
    else:
        assert "a label of 64 characters; at most 63 are allowed" in line, line


@pytest.mark.parametrize(
    "address",
    [{"ip": LONG_LABEL, "port": 5050}, {"ip": "127.0.0.1", "port": 99999999}],
    ids=["long-label", "port"],
)
def test_a_zookeeper_member_no_one_can_dial_is_one_line(
    zk: Any, job_procs: JobProcesses, address: dict[str, Any]
) -> None:
    group = f"/tfmesos-test-{uuid.uuid4().hex}"
    zk.ensure_path(group)
    try:
        # A member without a pid is dialled at its address (MasterInfo.address).
        zk.create(
            f"{group}/json.info_",
            json.dumps({"id": "m", "hostname": "h", "address": address}).encode(),
            sequence=True,
        )
        status, err, elapsed = tfrun(
            "-m", f"zk://{ZK_HOSTS}{group}", *TWO_WORKERS_TRUE, env=job_procs.env()
        )
    finally:
        zk.delete(group, recursive=True)
    print(f"exit {status} after {elapsed:.1f}s:\n{err}")
    assert status == 125, err
    (line,) = err.splitlines()
    assert line.startswith("tfrun: error: the mesos backend failed: could not reach"), line
    assert f"the lowest member, {group}/json.info_0000000000, cannot be read: its address" in line
    assert "cannot be dialled: " in line, line
    assert "Traceback" not in err and "bug" not in err, err
    assert job_procs.wait_gone(10) == []


# -- 3. a framework name that is not UTF-8 ----------------------------------


@pytest.mark.e2e  # the test master starts helper processes
def test_the_test_master_refuses_a_lone_surrogate_as_mesos_does() -> None:
    """json.dumps writes a byte read with surrogateescape as "\\udcff";
    Mesos's picojson refuses half a surrogate pair (_parse_codepoint) and the
    master answers 400 "Failed to parse body into JSON: syntax error at line 1
    near: " and the rest of the line (picojson::_parse; src/common/http.hpp)."""
    call = {
        "type": "SUBSCRIBE",
        "subscribe": {"framework_info": {"user": "u", "name": "[tfrun] echo \udcff"}},
    }
    with ThreadedTestMaster(agents=0) as m:
        request = urllib.request.Request(
            f"http://127.0.0.1:{m.port}/api/v1/scheduler",
            data=json.dumps(call).encode(),
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30).close()
        with refused.value:
            body = refused.value.read().decode()
    assert refused.value.code == 400, body
    assert body == 'Failed to parse body into JSON: syntax error at line 1 near: "}}}', body


def test_a_command_that_is_not_utf8_still_names_the_framework(
    master: Any, job_procs: JobProcesses
) -> None:
    """The default framework name is made from the command: before the fix
    its byte 0xff went out as "\\udcff", and the master refused SUBSCRIBE."""
    status, err, _ = tfrun(
        "-m", f"127.0.0.1:{master.port}", "-w", "2", "-s", "0", "--", "echo", b"\xff",
        env=job_procs.env(),
    )  # fmt: skip
    assert status == 0, err
    (subscribe, *_) = master.calls("SUBSCRIBE")
    name = subscribe["body"]["subscribe"]["framework_info"]["name"]
    assert name == "[tfrun] echo '\ufffd'", name
    assert job_procs.wait_gone(10) == []


# -- 4. -v and the ZooKeeper password ---------------------------------------

USER = "adv"
PASSWORD = "S3cretPW-" + uuid.uuid4().hex[:8]


def test_verbose_never_prints_the_zookeeper_password(
    zk: Any, master: Any, job_procs: JobProcesses
) -> None:
    """kazoo's debug output, which -v showed, printed every request, the
    digest credentials too: "Auth(auth_type=0, scheme='digest',
    auth='adv:S3cretPW')"."""
    from kazoo.security import CREATOR_ALL_ACL, READ_ACL_UNSAFE

    client = zookeeper_client(f"{USER}:{PASSWORD}")
    group = f"/tfmesos-test-{uuid.uuid4().hex}"
    try:
        # As masters given credentials leave their group: anyone may read.
        client.create(group, b"", acl=READ_ACL_UNSAFE + CREATOR_ALL_ACL)
        client.create(
            f"{group}/json.info_",
            master_info("127.0.0.1", master.port),
            ephemeral=True,
            sequence=True,
            acl=client.default_acl,
        )
        status, err, _ = tfrun(
            "-v", "-m", f"zk://{USER}:{PASSWORD}@{ZK_HOSTS}{group}", *TWO_WORKERS_TRUE,
            env=job_procs.env(),
        )  # fmt: skip
    finally:
        client.delete(group, recursive=True)
        client.stop()
        client.close()
    assert status == 0, err
    # -v shows tfmesos's own detail ...
    assert f"leading master is now http://127.0.0.1:{master.port}" in err, err
    # ... and never the password, nor kazoo's requests.
    assert PASSWORD not in err, [line for line in err.splitlines() if PASSWORD in line]
    assert "Sending request" not in err, err
    assert job_procs.wait_gone(10) == []
