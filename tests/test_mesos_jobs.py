"""Whole jobs on the Mesos backend, through the test master and real Mesos.

The test master (tfmesos.testing.master) speaks the v1 scheduler HTTP API as
the Mesos docs and protos define it, and runs accepted tasks as real local
processes; these tests run tfrun and cluster() against it unchanged. Tests
that take the ``mesos`` fixture run twice: on the test master and on real
Apache Mesos (tests/mesos_clusters.py), seeing only what a framework or an
operator sees on both (the master's /state); what only the double can show
(the calls it received) is checked where ``mesos.double`` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import http.server
import json
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    MARK,
    PY,
    TWO_WORKERS_TRUE,
    JobProcesses,
    marked_master,
    popen_tfrun,
    py,
    run_tfrun,
    start_tfrun,
)
from tests.jobevents import JobEvents
from tests.mesos_clusters import CuttableProxy, HoldingProxy, MesosUnderTest, real_mesos_home
from tests.test_zookeeper import ZK_HOSTS, master_info, zookeeper_client
from tfmesos.mesos.recordio import encode
from tfmesos.mesos.scheduler import SchedulerClient, SchedulerError
from tfmesos.testing.master import ThreadedTestMaster
from tfmesos.testing.real_mesos import RealMesos


def framework_calls(master: ThreadedTestMaster, kind: str) -> list[dict]:  # type: ignore[type-arg]
    """The bodies of the calls of one type the master received and accepted."""
    return [c["body"] for c in master.calls(kind) if c["status"] in (200, 202)]


def launched_tasks(master: ThreadedTestMaster) -> list[dict]:  # type: ignore[type-arg]
    """Every TaskInfo the framework launched, from its accepted ACCEPT calls."""
    return [
        task
        for call in framework_calls(master, "ACCEPT")
        for op in call["accept"]["operations"]
        for task in op["launch"]["task_infos"]
    ]


def test_a_replica_job_runs_on_offers_and_is_torn_down(
    mesos: MesosUnderTest, job_procs: JobProcesses, tmp_path: Path
) -> None:
    code = "print('{job_name}:{task_index} ps={ps_hosts} workers={worker_hosts}')"
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "-m",
        mesos.url,
        *events.flag,
        "-w",
        "2",
        "-s",
        "1",
        "--worker-logs",
        "*",
        "--",
        *py(code),
        env=job_procs.env(),
    )
    assert result.returncode == 0, result.stderr
    assert events.verdict()["result"] == "succeeded", result.stderr
    # ps:0 and worker:1 placed from offers; the chief beside tfrun.
    placed = {e["task"]: e["backend"] for e in events.of("task_placed")}
    assert placed == {"ps:0": "mesos", "worker:0": "local", "worker:1": "mesos"}, placed
    assert "TEARDOWN call failed" not in result.stderr
    lines = sorted(result.stdout.splitlines())
    assert [line.split(" ")[1] for line in lines] == ["worker:0", "worker:1"]
    ps_port = int(re.search(r"ps=[^:]+:(\d+)", lines[0]).group(1))  # type: ignore[union-attr]
    workers = re.search(r"workers=(\S+)", lines[0]).group(1).split(",")  # type: ignore[union-attr]
    # ps:0 and worker:1 ran on Mesos agents, on ports taken from their offers.
    assert 31000 <= ps_port <= 32000
    assert 31000 <= int(workers[1].rsplit(":", 1)[1]) <= 32000
    assert sorted(t["name"].rsplit(" ", 1)[1] for t in mesos.tasks()) == [
        "/job:ps/task:0",
        "/job:worker/task:1",
    ]
    framework = mesos.framework()
    assert mesos.torn_down(), "the framework outlived the job"
    assert framework["capabilities"] == ["MULTI_ROLE", "PARTITION_AWARE"]
    assert framework["roles"] == ["*"]
    # Longer than tfrun may go on trying to regain the master: five missed
    # heartbeats (75 s), then the reconnect budget (120 s), and a heartbeat more.
    assert framework["failover_timeout"] == 210
    # On by default: a task outlives its agent's restart (README, --checkpoint).
    assert framework["checkpoint"] is True
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []
    if mesos.double is None:
        return
    master = mesos.double
    launched = launched_tasks(master)
    assert sorted(t["name"].rsplit(" ", 1)[1] for t in launched) == [
        "/job:ps/task:0",
        "/job:worker/task:1",
    ]
    for task in launched:
        ports = [r for r in task["resources"] if r["name"] == "ports"]
        assert len(ports) == 1
    (subscribe,) = framework_calls(master, "SUBSCRIBE")
    framework = subscribe["subscribe"]["framework_info"]
    # GPU_RESOURCES only for a job that asks for GPUs (docs/gpu-support.md).
    assert {c["type"] for c in framework["capabilities"]} == {"MULTI_ROLE", "PARTITION_AWARE"}
    assert framework["roles"] == ["*"]
    assert framework["failover_timeout"] == 210
    assert framework["checkpoint"] is True
    assert framework["user"]
    assert framework_calls(master, "SUPPRESS"), "no SUPPRESS once every task was placed"
    assert framework_calls(master, "TEARDOWN"), "no TEARDOWN at the end of the job"


def test_a_master_named_in_a_file_is_read_from_it(
    mesos: MesosUnderTest, job_procs: JobProcesses, tmp_path: Path
) -> None:
    """``-m file:///path`` (Mesos's own form: the file holds the master's
    address, as an operator's /etc/mesos/zk does) is read once, at start."""
    named = tmp_path / "master"
    named.write_text(mesos.url.split("://", 1)[1] + "\n")
    result = run_tfrun("-m", f"file://{named}", *TWO_WORKERS_TRUE, env=job_procs.env())
    assert result.returncode == 0, result.stderr + mesos.logs()
    assert [t["name"].rsplit(" ", 1)[1] for t in mesos.tasks()] == ["/job:worker/task:1"]
    assert mesos.torn_down()
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_a_task_that_fails_to_launch_is_retried(
    master: ThreadedTestMaster, job_procs: JobProcesses, tmp_path: Path
) -> None:
    master.fail_next_launch(r"/job:worker/task:1$", count=2)
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "-m", master.url, *events.flag, "-w", "2", "-s", "0", "--", *py("print('ok')"),
        env=job_procs.env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert events.verdict()["result"] == "succeeded", result.stderr
    ends = [e for e in events.of("task_exited") if e["task"] == "worker:1"]
    assert [(e["attempt"], e["action"]) for e in ends] == [
        (1, "relaunch"),
        (2, "relaunch"),
        (3, "finish"),
    ], ends
    assert all("TASK_FAILED" in e["reason"] for e in ends[:2]), ends
    relaunched = [(e["task"], e["attempt"]) for e in events.of("task_relaunched")]
    assert relaunched == [("worker:1", 2), ("worker:1", 3)]
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_a_dropped_subscription_is_renewed_without_losing_the_job(
    master: ThreadedTestMaster, job_procs: JobProcesses
) -> None:
    code = "import time; time.sleep(6); print('survived')"

    proc, _ = start_tfrun(
        "-m", master.url, "-w", "2", "-s", "0", "--", *py(code), env=job_procs.env()
    )
    dropped = master.drop_subscription()
    assert dropped
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.strip() == "[worker:0] survived"
    subscribes = framework_calls(master, "SUBSCRIBE")
    assert len(subscribes) == 2
    framework_id = subscribes[1]["subscribe"]["framework_info"]["id"]["value"]
    assert framework_id == subscribes[1]["framework_id"]["value"]
    # Said each time, as the same framework at the same master.
    attached = proc.events.of("backend_attached")
    assert [(e["framework_id"], e["master"]) for e in attached] == [(framework_id, master.url)] * 2
    assert framework_calls(master, "RECONCILE"), "no reconciliation after re-subscribing"
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_a_job_whose_tasks_are_placed_is_suppressed_again_after_resubscribing(
    master: ThreadedTestMaster, job_procs: JobProcesses, tmp_path: Path
) -> None:
    """A SUBSCRIBE sets the framework's suppressed roles to its own, none:
    the roles the job had suppressed are offered again (Master::_subscribe,
    which the double models). tfrun suppresses them anew rather than decline
    every agent's offer for an hour while it believes them suppressed."""
    done = tmp_path / "done"
    chief = f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.05)\n"
    proc, _ = start_tfrun(
        "-m", master.url, "-w", "1", "-s", "1", "--", *py(chief), env=job_procs.env()
    )
    try:

        def suppressed(m: Any) -> list[dict[str, Any]]:
            return [f for f in m.state()["frameworks"] if f["suppressed_roles"] == ["*"]]

        assert len(master.wait_for(suppressed, timeout=60)) == 1
        assert len(framework_calls(master, "SUPPRESS")) == 1
        master.drop_subscription()
        master.wait_for(lambda m: len(m.calls("SUBSCRIBE")) == 2, timeout=60)
        master.wait_for(suppressed, timeout=60)
        assert len(framework_calls(master, "SUPPRESS")) == 2
        done.touch()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_a_reconciliation_the_master_did_not_answer_is_asked_again(
    master: ThreadedTestMaster, job_procs: JobProcesses, tmp_path: Path
) -> None:
    """After a re-subscription tfrun asks for the state of its tasks, and asks
    again, backing off, until each is answered (Mesos's docs/reconciliation.md):
    here the first RECONCILE is refused, as by a master still recovering."""
    done = tmp_path / "done"
    chief = f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.05)\n"
    proc, _ = start_tfrun(
        "-m", master.url, "-w", "1", "-s", "1", "--", *py(chief), env=job_procs.env()
    )
    try:
        master.wait_for(lambda m: m.calls("SUPPRESS"), timeout=60)  # every task placed
        master.fail_next_call("RECONCILE")
        master.drop_subscription()
        answered = master.wait_for(
            lambda m: [c for c in m.calls("RECONCILE") if c["status"] == 202], timeout=60
        )
        statuses = [c["status"] for c in master.calls("RECONCILE")]
        assert statuses == [503, 202], statuses
        (ps,) = [t for t in master.tasks() if t["name"].endswith("/job:ps/task:0")]
        asked = [t["task_id"]["value"] for t in answered[0]["body"]["reconcile"]["tasks"]]
        assert asked == [ps["task_id"]]
        done.touch()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    # The warning's wording (the calls themselves are the master's record, above).
    assert "no answer yet to the reconciliation of ps:0; asking again" in err
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_a_new_leader_is_said_with_the_framework_it_keeps(
    master: ThreadedTestMaster, job_procs: JobProcesses, tmp_path: Path
) -> None:
    # The same master under two names in ZooKeeper (as tests/test_zookeeper.py
    # does): the first steps down, and the framework follows the next.
    zookeeper = zookeeper_client()
    group = f"/tfmesos-test-{uuid.uuid4().hex}"
    done = tmp_path / "done"
    code = f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.05)\n"
    try:
        first = zookeeper.create(
            f"{group}/json.info_", master_info("127.0.0.1", master.port),
            ephemeral=True, sequence=True, makepath=True,
        )  # fmt: skip
        zookeeper.create(
            f"{group}/json.info_", master_info("localhost", master.port),
            ephemeral=True, sequence=True,
        )  # fmt: skip
        proc, _ = start_tfrun(
            "-m", f"zk://{ZK_HOSTS}{group}", "-w", "2", "-s", "0", "--", *py(code),
            env=job_procs.env(),
        )  # fmt: skip
        old = proc.events.wait_for("backend_attached", proc)
        zookeeper.delete(first)
        new = proc.events.wait_for(
            "backend_attached", proc, where=lambda e: e["master"] != old["master"]
        )
        done.touch()
        _, err = proc.communicate(timeout=120)
    finally:
        zookeeper.delete(group, recursive=True)
        zookeeper.stop()
        zookeeper.close()
    assert proc.returncode == 0, err
    assert old["master"] == f"http://127.0.0.1:{master.port}", old
    assert new["master"] == f"http://localhost:{master.port}", new
    assert new["framework_id"] == old["framework_id"] and new["web_ui"] is None, new
    attached = proc.events.of("backend_attached")
    assert [e["master"] for e in attached] == [old["master"], new["master"]]
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_a_non_leading_master_redirects_to_the_leader(
    master: ThreadedTestMaster, job_procs: JobProcesses, tmp_path: Path
) -> None:
    leader = master.url.split("://", 1)[1]
    events = JobEvents(tmp_path / "events.jsonl")
    with ThreadedTestMaster(agents=1, leader=False, leader_address=leader) as standby:
        result = run_tfrun(
            "-m",
            f"{standby.url},{master.url}",
            *events.flag,
            "-w",
            "1",
            "-s",
            "1",
            "--",
            *py("print('led')"),
            env=job_procs.env(),
        )
    assert result.returncode == 0, result.stderr
    assert len(framework_calls(master, "SUBSCRIBE")) == 1  # the leader's: redirected to it
    [attached] = events.of("backend_attached")
    assert attached["master"] == master.url, attached  # the leader, not the master given first
    # The message's wording, as the user reads it.
    assert f"redirected to the leading master {master.url}" in result.stderr
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_a_job_that_does_not_fit_says_why_at_the_timeout(
    mesos: MesosUnderTest, job_procs: JobProcesses, tmp_path: Path
) -> None:
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "--wait-for-agents",  # else the job never fitting at once ends it at once
        "-m",
        mesos.url,
        *events.flag,
        "--timeout",
        "3",
        "-w",
        "2",
        "-s",
        "3",
        "-Cs",
        "3",
        "--",
        "true",
        env=job_procs.env(),
    )
    # Each ps task fits an agent (a task no agent could ever hold is refused
    # at once: tests/test_mesos_never_fits.py), but the two agents of 4 CPUs
    # hold two of the three together: --wait-for-agents waits for more.
    assert result.returncode == 124, result.stderr
    assert events.verdict()["result"] == "never up", result.stderr
    assert len({e["task"] for e in events.of("task_placed")} - {"worker:0"}) < 3
    # The diagnosis's wording: what is missing, what it needs, what was offered.
    assert "did not come up within 3s: still waiting for ps:" in result.stderr
    assert re.search(r"ps:\d needs cpus 3, mem 1 GiB, 1 port", result.stderr), result.stderr
    assert "the largest offer seen was cpus 4" in result.stderr
    assert mesos.torn_down()
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


@pytest.mark.parametrize("checkpoint", [True, False], ids=["checkpoint", "no-checkpoint"])
def test_a_lost_agent_fails_the_job_naming_the_task(
    checkpoint: bool, mesos: MesosUnderTest, job_procs: JobProcesses
) -> None:
    """By default (checkpointing) a task outlives its agent: the master calls
    it unreachable once the agent misses its pings. With ``--no-checkpoint``
    the double reports it so at once, and on real Mesos the command executor
    sees its agent go and ends the task (SIGTERM) before the master says
    anything (docs/test-master.md, "Real Mesos")."""
    proc, _ = start_tfrun(
        "-m",
        mesos.url,
        *([] if checkpoint else ["--no-checkpoint"]),
        "-w",
        "1",
        "-s",
        "1",
        "--",
        *py("import time; time.sleep(120)"),
        env=job_procs.env(),
    )
    events = proc.events
    agent_id = mesos.kill_agent_of("/job:ps/task:0")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert events.verdict()["result"] == "failed", err
    ps = events.exited()["ps:0"]
    assert (ps["host"], ps["action"]) == ("127.0.0.1", "fail job"), ps
    if mesos.real is not None and not checkpoint:
        assert ps["signal"] == "SIGTERM", ps
    else:
        assert re.match(r"ended in state (TASK_UNREACHABLE|AGENT_LOST)\b", ps["reason"]), ps
    assert mesos.torn_down()
    if checkpoint:
        mesos.end_orphans_of(agent_id, job_procs)
    assert [p.cmdline() for p in job_procs.wait_gone(30)] == []


def test_an_unreachable_master_is_reported_at_the_timeout(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "-m",
        f"127.0.0.1:{port}",
        *events.flag,
        "--timeout",
        "3",
        *TWO_WORKERS_TRUE,
        env=job_procs.env(),
    )
    assert result.returncode == 124
    assert events.verdict()["result"] == "never up", result.stderr
    assert "task_placed" not in events.names(), events.names()
    # The diagnosis's wording: which master, and why not.
    assert "not subscribed to a Mesos master yet: http://127.0.0.1:" in result.stderr
    assert "Connect call failed" in result.stderr or "Cannot connect" in result.stderr
    assert job_procs.wait_gone(10) == []


def test_a_master_lost_beyond_the_retry_budget_fails_the_job(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:

    lost = ThreadedTestMaster(agents=1, heartbeat_interval=1.0, allocation_interval=0.2).start()
    monkeypatch.setenv(MARK, job_procs.mark)
    job_procs.ignored.update(lost.call(lambda master: master.helper_pids()))
    proc, _ = start_tfrun(
        "-m",
        lost.url,
        "--reconnect-timeout",
        "3",
        "-w",
        "1",
        "-s",
        "1",
        "--",
        *py("import time; time.sleep(120)"),
        env=job_procs.env(),
    )
    events = proc.events
    lost.stop()  # the master and its agent go away, tasks and all
    _, err = proc.communicate(timeout=120)
    # The master lost for good is tfrun's own failure (125); a task lost, a task's (1):
    # whichever tfrun sees first.
    verdict = events.verdict()
    assert proc.returncode == verdict["exit_status"], err
    if verdict["result"] == "error":
        assert verdict["exit_status"] == 125, verdict
        assert "lost the Mesos master" in verdict["message"], verdict
    else:
        assert (verdict["result"], verdict["exit_status"]) == ("failed", 1), verdict
        ps = events.exited()["ps:0"]
        assert ps["reason"] == "lost its connection to the launcher", ps
    assert job_procs.wait_gone(10) == []


def test_killing_the_launcher_outright_leaves_no_task_on_mesos(
    mesos: MesosUnderTest, job_procs: JobProcesses
) -> None:
    import os
    import signal

    proc, _ = start_tfrun(
        "-m",
        mesos.url,
        "-w",
        "2",
        "-s",
        "1",
        "--",
        *py("import time; time.sleep(600)"),
        env=job_procs.env(),
    )
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # No TEARDOWN can be sent; the agents see their connection close and stop
    # their commands, and the master sees its tasks end.
    assert job_procs.wait_gone(15) == []
    mesos.wait_for(
        "every task over",
        lambda: (
            {t["state"] for t in mesos.tasks()} <= {"TASK_FAILED", "TASK_FINISHED", "TASK_KILLED"}
        ),
    )
    assert mesos.wait_for("no executor left", lambda: not mesos.left_on_agents())
    # The framework itself waits out its failover_timeout, disconnected.
    (framework,) = mesos.state()["frameworks"]
    assert framework["failover_timeout"] == 210
    assert framework["connected"] is False
    if mesos.double is not None:
        assert not framework_calls(mesos.double, "TEARDOWN")


def test_an_exception_in_a_cluster_block_tears_the_framework_down(
    mesos: MesosUnderTest, job_procs: JobProcesses
) -> None:
    import subprocess
    import textwrap

    from tests.conftest import ROOT

    script = textwrap.dedent(
        f"""
        from tfmesos import cluster

        with cluster([{{"name": "ps", "num": 1}}, {{"name": "worker", "num": 1}}],
                     master={mesos.url!r}, quiet=True) as c:
            print(sorted(c.targets), flush=True)
            raise RuntimeError("boom in the block")
        """
    )
    result = subprocess.run(
        [PY, "-c", script],
        capture_output=True,
        text=True,
        env=job_procs.env(),
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stdout.strip() == "['/job:ps/task:0', '/job:worker/task:0']"
    assert result.stderr.rstrip().endswith("RuntimeError: boom in the block")
    assert mesos.torn_down()
    assert job_procs.wait_gone(10) == []


def test_the_launcher_advertises_the_host_it_is_told(
    master: ThreadedTestMaster, job_procs: JobProcesses
) -> None:
    result = run_tfrun(
        "-m",
        master.url,
        "-w",
        "2",
        "-s",
        "0",
        "--worker-logs",
        "*",
        "--",
        *py("print('{worker_hosts}')"),
        env=job_procs.env(TFMESOS_ADVERTISE_HOST="127.0.0.1"),
    )
    assert result.returncode == 0, result.stderr
    # The chief runs beside the launcher and is reached at the advertised host.
    assert result.stdout.splitlines()[0].split(" ", 1)[1].startswith("127.0.0.1:")
    (subscribe,) = framework_calls(master, "SUBSCRIBE")
    assert subscribe["subscribe"]["framework_info"]["hostname"] == "127.0.0.1"
    launched = launched_tasks(master)
    env = {v["name"]: v["value"] for v in launched[0]["command"]["environment"]["variables"]}
    assert env["TFMESOS_LAUNCHER"].startswith("127.0.0.1:")


def test_a_task_that_never_starts_is_named_with_where_to_look(
    master: ThreadedTestMaster, job_procs: JobProcesses, tmp_path: Path
) -> None:
    master.fail_next_launch(r"/job:ps/task:0$", count=3, message="Failed to pull the image")
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "-m", master.url, *events.flag, "-w", "1", "-s", "1", "--", "true", env=job_procs.env()
    )
    assert result.returncode == 124
    assert events.verdict()["result"] == "never up", result.stderr
    failed = [e for e in events.of("task_exited") if e["task"] == "ps:0"]
    assert [(e["attempt"], e["action"]) for e in failed] == [
        (1, "relaunch"),
        (2, "relaunch"),
        (3, "give up"),
    ], failed
    reason = "ended in state TASK_FAILED: Failed to launch container: Failed to pull the image"
    assert all(e["reason"].startswith(reason) for e in failed), failed
    # The verdict's wording: how often, and where the task's own output is.
    assert "failed 3 times before the cluster was up; giving up" in result.stderr
    assert "its sandbox on its host" in result.stderr
    assert "re-subscribing" not in result.stderr  # the end of the stream was expected
    assert framework_calls(master, "TEARDOWN")
    assert job_procs.wait_gone(10) == []


def run_up_job(master_url: str, job_procs: JobProcesses) -> subprocess.CompletedProcess[str]:
    """1 ps and 2 workers that each say they are up, on ``master_url``, 30 s to come up."""
    return run_tfrun(
        *("-m", master_url, "--timeout", "30", "-w", "2", "-s", "1", "--"),
        *py("print('{job_name}:{task_index} up')"),
        env=job_procs.env(),
    )


# -- masters that misbehave -----------------------------------------------------


@pytest.fixture
def one_agent_master(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ThreadedTestMaster]:
    with marked_master(job_procs, monkeypatch, agents=1) as m:
        yield m


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (503, "Master has not finished recovery"),
        (400, "The stream ID 'x' included in this request didn't match the stream ID"),
    ],
)
def test_a_refused_accept_sends_its_tasks_back_for_another_offer(
    one_agent_master: ThreadedTestMaster, job_procs: JobProcesses, status: int, message: str
) -> None:
    # One agent: its resources come back only if the refused offer is given back.
    master = one_agent_master
    master.fail_next_call("ACCEPT", status=status, message=message)
    result = run_up_job(master.url, job_procs)
    refused = [c["body"] for c in master.calls("ACCEPT") if c["status"] == status]
    launched = launched_tasks(master)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[worker:0] worker:0 up"
    (refused_call,) = refused
    refused_ids = [
        task["task_id"]["value"]
        for op in refused_call["accept"]["operations"]
        for task in op["launch"]["task_infos"]
    ]
    # The first offer may come before every task is pending: the refused
    # ACCEPT holds ps:0 and perhaps worker:1.
    names = ", ".join(":".join(task_id.split(".")[:2]) for task_id in refused_ids)
    # The warning's wording: which tasks, and the master's answer.
    warning = next(line for line in result.stderr.splitlines() if "ACCEPT" in line)
    assert f"the ACCEPT that launches {names} failed" in warning
    assert message in warning
    # The same tasks, launched from a later offer.
    assert set(refused_ids) <= {task["task_id"]["value"] for task in launched}
    assert refused_call["accept"]["offer_ids"] not in [
        c["accept"]["offer_ids"] for c in framework_calls(master, "ACCEPT")
    ]
    assert job_procs.wait_gone(10) == []


def test_tasks_whose_accept_keeps_being_refused_are_reported(
    one_agent_master: ThreadedTestMaster, job_procs: JobProcesses
) -> None:
    master = one_agent_master
    master.fail_next_call("ACCEPT", count=10_000)
    result = run_tfrun(
        "-m",
        master.url,
        "--timeout",
        "4",
        "-w",
        "2",
        "-s",
        "1",
        "--",
        "true",
        env=job_procs.env(),
    )
    assert result.returncode == 124
    # The diagnosis's wording, and the warning said once.
    assert "the cluster did not come up within 4s: still waiting for ps:0" in result.stderr
    # Whether the tasks are between offers or placed again when the time is up.
    assert re.search(
        r"\d placed, \d waiting for offers \(2 sent back after their ACCEPT failed: "
        r"503 Master has not finished recovery\)",
        result.stderr,
    ), result.stderr
    assert result.stderr.count("the ACCEPT that launches") == 1  # said once, not per offer
    assert job_procs.wait_gone(10) == []


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never says a word on them."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
        for conn in held:
            conn.close()


def test_a_master_that_never_answers_subscribe_ends_within_the_budget(
    job_procs: JobProcesses,
) -> None:
    with silent_server() as port:
        result = run_tfrun(
            "-m",
            f"127.0.0.1:{port}",
            "--reconnect-timeout",
            "3",
            *TWO_WORKERS_TRUE,
            env=job_procs.env(),
            timeout=60,  # a hang guard: the message says the budget was kept
        )
    assert result.returncode == 125  # tfrun itself gave up
    assert re.search(
        rf"could not reach the Mesos master at http://127\.0\.0\.1:{port} \(no answer to "
        r"SUBSCRIBE within [\d.]+s\) within 3s",
        result.stderr,
    ), result.stderr
    assert job_procs.wait_gone(10) == []


def test_a_master_that_never_answers_subscribe_is_left_for_the_next(
    master: ThreadedTestMaster,
) -> None:
    framework: dict[str, Any] = {"user": getpass.getuser(), "name": "t", "roles": ["*"]}
    framework["capabilities"] = [{"type": "MULTI_ROLE"}]

    async def subscribe(masters: str) -> str:
        client = SchedulerClient(masters, framework, lambda event: None, subscribe_timeout=0.5)
        runner = asyncio.create_task(client.run())
        try:
            await asyncio.wait_for(client.subscribed.wait(), 15)
            assert client.master is not None
            return client.master.url
        finally:
            await client.close(teardown=True)
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner

    with silent_server() as port:
        assert asyncio.run(subscribe(f"127.0.0.1:{port},{master.url}")) == master.url


class _GarbledMaster(http.server.ThreadingHTTPServer):
    """Answers SUBSCRIBE with a stream that breaks the protocol, then (unless
    ``always``) redirects to a real master, as a master that steps down does.

    The stream is ``chunks``, a moment apart, so that what comes before the
    damage reaches the client on its own."""

    daemon_threads = True

    def __init__(self, chunks: list[bytes], leader: str, always: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _GarbledHandler)
        self.chunks = chunks
        self.leader = leader
        self.always = always
        self.garbled = 0
        self.release = threading.Event()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


class _GarbledHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _GarbledMaster

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server = self.server
        if body.get("type") != "SUBSCRIBE":
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif server.always or not server.garbled:
            server.garbled += 1
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Mesos-Stream-Id", str(uuid.uuid4()))
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in server.chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                time.sleep(0.3)
            # The stream stays open: only the client can end it.
            server.release.wait(60)
            self.close_connection = True
        else:
            self.send_response(307)
            # As Master::Http::redirect words it (src/master/http.cpp).
            self.send_header("Location", f"//{server.leader}/master/api/v1/scheduler")
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _record(event: dict[str, Any]) -> bytes:
    return encode(json.dumps(event).encode())


SUBSCRIBED = {
    "type": "SUBSCRIBED",
    "subscribed": {"framework_id": {"value": "garbled-0000"}, "heartbeat_interval_seconds": 15},
}


@pytest.mark.parametrize(
    ("chunks", "why"),
    [
        ([b"garbage\n"], "RecordIOError: bad record length b'garbage'"),
        ([encode(b"{not json")], "JSONDecodeError"),
        ([_record({"type": "UPDATE", "update": {}})], "KeyError: 'status'"),
        ([_record(SUBSCRIBED), b"99999999999999999999999\n"], "record length header too long"),
    ],
    ids=["recordio", "json", "update-without-status", "after-subscribed"],
)
def test_an_unreadable_event_stream_is_dropped_and_the_master_resubscribed(
    master: ThreadedTestMaster, job_procs: JobProcesses, chunks: list[bytes], why: str
) -> None:
    garbled = _GarbledMaster(chunks, f"127.0.0.1:{master.port}")
    try:
        result = run_up_job(garbled.url, job_procs)
    finally:
        garbled.close()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[worker:0] worker:0 up"
    # The warning's wording: which master, and what was wrong with its stream.
    assert f"{garbled.url} sent an event stream that cannot be read" in result.stderr
    assert why in result.stderr
    assert len(framework_calls(master, "SUBSCRIBE")) == 1  # redirected to the leader
    assert job_procs.wait_gone(10) == []


def test_a_master_whose_streams_are_always_unreadable_ends_within_the_budget(
    job_procs: JobProcesses, job_events: JobEvents
) -> None:
    # Each stream breaks right after SUBSCRIBED: that is no working subscription.
    garbled = _GarbledMaster([_record(SUBSCRIBED), b"garbage\n"], "nowhere:5050", always=True)
    try:
        result = run_tfrun(
            "-m",
            garbled.url,
            *job_events.flag,
            "--reconnect-timeout",
            "3",
            *TWO_WORKERS_TRUE,
            env=job_procs.env(),
            timeout=60,
        )
    finally:
        garbled.close()
    assert result.returncode == 125
    assert job_events.verdict()["exit_status"] == 125
    # It had subscribed first, each time: the master was gained, then lost.
    attached = job_events.of("backend_attached")
    assert len(attached) >= 2 and {e["framework_id"] for e in attached} == {"garbled-0000"}
    assert {e["master"] for e in attached} == {garbled.url}, attached
    # The error's wording.
    assert re.search(
        r"lost the Mesos master \(http://127\.0\.0\.1:\d+ sent an event stream that cannot be "
        r"read \(RecordIOError: bad record length b'garbage'\)\) and could not re-subscribe "
        r"within 3s",
        result.stderr,
    ), result.stderr
    assert garbled.garbled >= 2  # it tried again before giving up
    assert job_procs.wait_gone(10) == []


def test_a_call_on_a_replaced_stream_is_late_not_fatal(master: ThreadedTestMaster) -> None:
    framework: dict[str, Any] = {"user": getpass.getuser(), "name": "t", "roles": ["*"]}
    framework["capabilities"] = [{"type": "MULTI_ROLE"}]

    async def scenario() -> tuple[str | None, str]:
        client = SchedulerClient(master.url, framework, lambda event: None)
        runner = asyncio.create_task(client.run())
        try:
            await asyncio.wait_for(client.subscribed.wait(), 15)
            current = client.stream_id
            client.stream_id = "a-stream-the-master-has-replaced"
            late = await client.call({"type": "REVIVE", "revive": {"roles": ["*"]}})
            client.stream_id = current
            # A call that is wrong in itself still fails loudly.
            with pytest.raises(SchedulerError) as wrong:
                await client.call({"type": "DECLINE"})
            return late, str(wrong.value)
        finally:
            await client.close(teardown=True)
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner

    late, wrong = asyncio.run(scenario())
    assert late is not None and late.startswith("400 The stream ID 'a-stream-the-master-has")
    assert "the master rejected DECLINE" in wrong


def test_a_refused_revive_is_tried_again(
    one_agent_master: ThreadedTestMaster, job_procs: JobProcesses
) -> None:
    # The ACCEPT is refused, and so is the REVIVE that should bring its
    # offer back: without another REVIVE no offer would ever come.
    master = one_agent_master
    master.fail_next_call("ACCEPT")
    master.fail_next_call("REVIVE")
    result = run_up_job(master.url, job_procs)
    assert result.returncode == 0, result.stderr
    revives = [c["status"] for c in master.calls("REVIVE")]
    assert revives[:2] == [503, 202], revives
    # The warning's wording.
    assert "REVIVE call failed: 503 Master has not finished recovery; again in 1s" in result.stderr
    assert job_procs.wait_gone(10) == []


def test_a_task_killed_by_a_signal_is_named_with_its_signal_and_last_lines(
    mesos: MesosUnderTest, job_procs: JobProcesses, tmp_path: Path
) -> None:
    code = (
        "import os, signal, time\n"
        "if '{job_name}:{task_index}' == 'worker:1':\n"
        "    print('about to die', flush=True); os.kill(os.getpid(), signal.SIGKILL)\n"
        "time.sleep(120)\n"
    )
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "-m", mesos.url, *events.flag, "-w", "2", "-s", "0", "--", *py(code), env=job_procs.env()
    )
    assert result.returncode == 137, result.stderr
    verdict = events.verdict()
    assert (verdict["result"], verdict["exit_status"]) == ("failed", 137), result.stderr
    worker_1 = events.exited()["worker:1"]
    assert worker_1["host"] == "127.0.0.1", worker_1
    # The command runs behind a shell, which reports its child's signal as 137.
    assert worker_1["signal"] == "SIGKILL" or worker_1["exit_code"] == 137, worker_1
    # The verdict's wording: the task's last lines, as the user reads them.
    assert "| about to die" in result.stderr
    assert mesos.torn_down()
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_a_job_in_a_role_is_offered_and_runs_in_that_role(
    mesos: MesosUnderTest, job_procs: JobProcesses
) -> None:
    result = run_tfrun(
        "-m", mesos.url, "--role", "ml", "-w", "3", "-s", "0", "--", "true", env=job_procs.env()
    )
    assert result.returncode == 0, result.stderr
    framework = mesos.framework()
    assert framework["roles"] == ["ml"]
    roles = [t["role"] for t in mesos.tasks()]
    assert roles == ["ml", "ml"], roles
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


@pytest.mark.parametrize("checkpoint", [True, False], ids=["checkpoint", "no-checkpoint"])
def test_an_agent_restarted_mid_job(
    checkpoint: bool, job_procs: JobProcesses, tmp_path: Path
) -> None:
    """Real Mesos only: the double has no agent process to restart (its
    agents are the master's own; docs/test-master.md, "Real Mesos"). By
    default (checkpointing) the executor waits for its agent (``--recover=reconnect``)
    and the job goes on; with ``--no-checkpoint``, the executor ends its task when the agent
    goes, and the job fails naming it."""
    home = real_mesos_home()
    done = tmp_path / "done"
    # The chief ends once the test says so; ps:0 runs on an agent until then.
    chief = f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.05)\n"
    # The agent has ten pings (10 s), not three, to come back before the
    # master calls it unreachable.
    flags = {"max_agent_ping_timeouts": "10"}
    with RealMesos(
        home, executor_env={MARK: job_procs.mark}, base=tmp_path / "mesos", master_flags=flags
    ) as real:
        job_procs.ignored.update(real.daemon_pids())
        cluster = MesosUnderTest(real=real)
        args = ["-m", real.url, "-w", "1", "-s", "1"] + ([] if checkpoint else ["--no-checkpoint"])
        proc, _ = start_tfrun(*args, "--", *py(chief), env=job_procs.env())
        events = proc.events
        try:
            (task,) = [t for t in cluster.tasks() if t["name"].endswith("/job:ps/task:0")]
            index = next(i for i in range(3) if real.agent_id(i) == task["slave_id"])
            real.kill_agent(index)
            real.start_agent(index)
            job_procs.ignored.update(real.daemon_pids())
            real.wait_agents(3)
            if not checkpoint:
                # The chief ends once ps:0 has: its executor ends it when
                # its agent goes, which a loaded host notices late (the
                # chief, let go at once, once ended the job first, in CI).
                events.wait_for("task_exited", proc, where=lambda e: e["task"] == "ps:0")
            done.touch()
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        if checkpoint:
            assert proc.returncode == 0, err + real.logs()
            assert events.verdict()["result"] == "succeeded", err
        else:
            assert proc.returncode != 0, err
            assert events.verdict()["result"] == "failed", err
            ps = events.exited()["ps:0"]
            assert (ps["host"], ps["signal"]) == ("127.0.0.1", "SIGTERM"), ps
        assert cluster.torn_down()
        assert [p.cmdline() for p in job_procs.wait_gone(15)] == []


OLD_FAILOVER_TIMEOUT = 60.0
"""tfrun's failover_timeout until it was made to outlast the reconnect budget."""


def test_a_launcher_cut_off_from_a_real_master_for_over_a_minute_keeps_its_job(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    """Real Mesos only (the double's failover is the same code path the unit
    tests cover). The network between tfrun and the master fails for longer
    than the old 60 s failover timeout, within the reconnect budget: the
    master must not have removed the framework, nor killed ps:0, by the time
    tfrun re-subscribes."""
    home = real_mesos_home()
    done = tmp_path / "done"
    chief = f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.05)\n"
    with RealMesos(home, executor_env={MARK: job_procs.mark}, base=tmp_path / "mesos") as real:
        job_procs.ignored.update(real.daemon_pids())
        cluster = MesosUnderTest(real=real)
        proxy = CuttableProxy(int(real.address.rsplit(":", 1)[1]))
        proc, _ = start_tfrun(
            "-m", f"127.0.0.1:{proxy.port}", "-w", "1", "-s", "1", "--", *py(chief),
            env=job_procs.env(),
        )  # fmt: skip
        events = proc.events
        try:
            proxy.cut()
            cluster.wait_for(
                "the framework disconnected",
                lambda: not cluster.state()["frameworks"][0]["connected"],
            )
            # The outage is the scenario: it must last longer than the old
            # failover timeout, whatever either side does meanwhile.
            time.sleep(OLD_FAILOVER_TIMEOUT + 5)
            proxy.restore()
            # A framework the master removed meanwhile is gone from the list.
            cluster.wait_for(
                "the framework re-subscribed",
                lambda: any(f["connected"] for f in cluster.state()["frameworks"]),
                timeout=60,
            )
            ps_runs = [t for t in cluster.tasks() if t["name"].endswith("/job:ps/task:0")]
            # Still running: not killed with a removed framework.
            assert [t["state"] for t in ps_runs][-1:] == ["TASK_RUNNING"], ps_runs
            assert "TASK_KILLED" not in {t["state"] for t in ps_runs}, ps_runs
            done.touch()
            _, err = proc.communicate(timeout=120)
        finally:
            proxy.close()
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err + real.logs()
        assert events.verdict()["result"] == "succeeded", err
        # ps:0 ran through the outage: never relaunched, never a restart.
        assert sorted(e["task"] for e in events.of("task_launched")) == ["ps:0", "worker:0"]
        assert cluster.torn_down()
        assert [p.cmdline() for p in job_procs.wait_gone(15)] == []


def test_a_real_master_offers_again_after_resubscribing_and_tfrun_suppresses_anew(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    """Real Mesos only (the double's version, above, drops the subscription
    itself). A SUBSCRIBE sets the framework's suppressed roles to those it
    names, none (Master::_subscribe): after the network between tfrun and
    the master fails and tfrun re-subscribes, the master's allocator must
    hold the job's role suppressed again, as its own endpoint reports."""
    home = real_mesos_home()
    done = tmp_path / "done"
    chief = f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.05)\n"
    with RealMesos(home, executor_env={MARK: job_procs.mark}, base=tmp_path / "mesos") as real:
        job_procs.ignored.update(real.daemon_pids())
        cluster = MesosUnderTest(real=real)
        proxy = CuttableProxy(int(real.address.rsplit(":", 1)[1]))

        def suppressed() -> list[str] | None:
            frameworks = real.get("/allocator/offer_constraints_debug")["frameworks"]
            if len(frameworks) != 1:
                return None
            (framework,) = frameworks.values()
            roles: list[str] = framework["suppressed_roles"]
            return roles

        proc, _ = start_tfrun(
            "-m", f"127.0.0.1:{proxy.port}", "-w", "1", "-s", "1", "--", *py(chief),
            env=job_procs.env(),
        )  # fmt: skip
        try:
            cluster.wait_for("the job's role suppressed", lambda: suppressed() == ["*"])
            proxy.cut()
            cluster.wait_for(
                "the framework disconnected",
                lambda: not cluster.state()["frameworks"][0]["connected"],
            )
            proxy.restore()
            cluster.wait_for(
                "the framework re-subscribed",
                lambda: cluster.state()["frameworks"][0]["connected"],
                timeout=60,
            )
            cluster.wait_for("the job's role suppressed again", lambda: suppressed() == ["*"])
            done.touch()
            _, err = proc.communicate(timeout=120)
        finally:
            proxy.close()
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err + real.logs()
        assert cluster.torn_down()
        assert [p.cmdline() for p in job_procs.wait_gone(15)] == []


def test_a_call_a_real_master_is_slow_to_answer_holds_up_no_acknowledgement(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    """Real Mesos only (the client's side of it: tests/test_scheduler_calls.py).
    The master is slow with the SUPPRESS tfrun sends once every task is
    placed: the acknowledgements of the tasks' updates, which do not depend
    on it, reach the master meanwhile (sent one at a time, each would wait
    behind it for up to the call timeout while the agents resend)."""
    home = real_mesos_home()
    done = tmp_path / "done"
    chief = f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.05)\n"
    with RealMesos(home, executor_env={MARK: job_procs.mark}, base=tmp_path / "mesos") as real:
        job_procs.ignored.update(real.daemon_pids())
        cluster = MesosUnderTest(real=real)
        proxy = HoldingProxy(real.url, hold="SUPPRESS")
        proc, _ = start_tfrun(
            "-m", proxy.url, "-w", "2", "-s", "1", "--", *py(chief), env=job_procs.env()
        )
        try:
            assert proxy.held.wait(60), proxy.calls()

            def running_acknowledged() -> bool:
                acks = [s for kind, s in proxy.calls() if kind == "ACKNOWLEDGE"]
                tasks = cluster.tasks()
                return (
                    len(tasks) == 2
                    and all(t["state"] == "TASK_RUNNING" for t in tasks)
                    and len(acks) >= 2
                    and set(acks) == {202}
                )

            cluster.wait_for("the tasks' updates acknowledged", running_acknowledged)
            assert "SUPPRESS" not in [kind for kind, _ in proxy.calls()]
            proxy.release()
            cluster.wait_for("the SUPPRESS answered", lambda: ("SUPPRESS", 202) in proxy.calls())
            done.touch()
            _, err = proc.communicate(timeout=120)
        finally:
            proxy.close()
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err + real.logs()
        assert cluster.torn_down()
        assert [p.cmdline() for p in job_procs.wait_gone(15)] == []


def test_a_port_an_agent_offers_that_a_process_outside_mesos_holds_costs_the_job_nothing(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The agents' first ports are held by listeners of this test, as by any
    service the agent's --resources did not leave out: a task given one fails
    ('already in use') and is relaunched on another offer, which must not
    hand it the same port again."""
    ports = "32600-32699"  # no other test's; two agents: 32600-32649, 32650-32699
    with contextlib.ExitStack() as held:
        for port in (32600, 32650):
            listener = held.enter_context(socket.socket())
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("0.0.0.0", port))
            listener.listen()
        with marked_master(job_procs, monkeypatch, agents=2, ports=ports) as master:
            events = JobEvents(tmp_path / "events.jsonl")
            result = run_tfrun(
                "-m", master.url, *events.flag, "--timeout", "30", "-w", "2", "-s", "1", "--",
                "true", env=job_procs.env(),
            )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert events.verdict()["result"] == "succeeded", result.stderr
    addresses = {e["task"]: e["addr"] for e in events.of("task_registered")}
    assert not {addresses["ps:0"], addresses["worker:1"]} & {
        "127.0.0.1:32600",
        "127.0.0.1:32650",
    }, addresses


def test_a_job_stopped_before_subscribed_still_tears_its_framework_down(
    mesos: MesosUnderTest, job_procs: JobProcesses
) -> None:
    # The master has the SUBSCRIBE (and registers the framework); its
    # answer, SUBSCRIBED with the framework's id, is held until tfrun is
    # stopping. Before, tfrun sent no TEARDOWN (it had no id), and the
    # framework stayed on the master for its failover timeout (issue 40,
    # item 10).
    proxy = HoldingProxy(mesos.url, hold="SUBSCRIBE", answer_held=True)
    try:
        proc = popen_tfrun("-m", proxy.url, "-w", "2", "--", "true", env=job_procs.env())
        assert proxy.held.wait(60), proxy.calls()
        mesos.wait_for("the framework registered", lambda: mesos.state()["frameworks"])
        proc.send_signal(signal.SIGTERM)
        proc.events.wait_for("job_stopping", proc)
        proxy.release()
        _, err = proc.communicate(timeout=120)
    finally:
        proxy.close()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert ("TEARDOWN", 202) in proxy.calls(), (proxy.calls(), err)
    mesos.wait_for("the framework torn down", lambda: not mesos.state()["frameworks"])
