"""Faults between hosts of their own on real Mesos (issue 38): a leading
master's death with three masters on hosts of their own, tfrun cut from the
master shorter and longer than the framework's failover timeout, a host
name one agent cannot resolve, and the chief's host cut from the ps's.

Needs root and ``ip netns`` (skipped, saying why, elsewhere), real Mesos
(tests/mesos_clusters.py: ``real_mesos_home``) and, for the failover, a
ZooKeeper server listening on every address (scripts/start-zookeeper). The
timings go to stderr (``pytest -s`` shows them).
"""

from __future__ import annotations

import re
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import JobProcesses, popen_tfrun, py, start_tfrun
from tests.mesos_clusters import open_hosts, wait_for
from tests.test_real_mesos_ha import back_on, ended_once, framework_in
from tests.test_real_mesos_hosts import ONE_TASK
from tests.test_zookeeper import ZK_HOSTS
from tfmesos.errors import EXIT_NEVER_UP, EXIT_TASK_FAILED, EXIT_TFRUN_FAILED
from tfmesos.rendezvous.protocol import UNRESOLVED_STATUS
from tfmesos.testing.real_mesos import RealMesos

pytestmark = pytest.mark.e2e

JSON = dict[str, Any]


def test_a_name_an_agent_cannot_resolve_is_a_clear_error(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    """agent0's ``/etc/hosts`` does not name the client host, where tfrun
    listens: the task placed there cannot dial tfrun back. Its in-task agent
    gives up at once (no retry makes a name resolve) with a status of its
    own, and tfrun says which task, on which host, could not resolve which
    name; before, each attempt dialled for 30 s and tfrun said only
    ``Command exited with status 1``."""
    with open_hosts(job_procs, tmp_path / "mesos", [ONE_TASK, ONE_TASK]) as real:
        real.forget("agent0", "client")
        started = time.monotonic()
        proc = popen_tfrun(
            *("-m", real.master_address, "-w", "3", "-s", "0", "--", "sleep 600"),
            env=job_procs.env(),
            on=real.client.prefix(),
        )
        _, err = proc.communicate(timeout=180)
        took = time.monotonic() - started
        assert real.base is not None
        sandboxes = "".join(
            path.read_text(errors="replace")
            for path in (real.base / "agent0").glob(
                "slaves/*/frameworks/*/executors/*/runs/*/stderr"
            )
        )
    print(
        f"\nhosts: an unresolvable name, tfrun exited {proc.returncode} after {took:.2f}s",
        file=sys.stderr,
    )
    assert proc.returncode == EXIT_NEVER_UP, err
    said = re.findall(
        r"task worker:[12] on agent0 cannot resolve tfrun's host name client: its in-task "
        rf"agent exited with status {UNRESOLVED_STATUS} before registering",
        err,
    )
    # Each of its three attempts, on the one host with room for it.
    assert len(said) == 3, err
    assert "cannot resolve the launcher's host name client on agent0" in sandboxes, sandboxes
    assert job_procs.wait_gone(10) == []


def test_a_job_outlives_the_leading_masters_death_on_hosts(
    zk: Any, job_procs: JobProcesses, tmp_path: Path
) -> None:
    """tests/test_real_mesos_ha.py's failover on hosts of their own: three
    masters, each on its own host, electing their leader in the root
    namespace's ZooKeeper through the bridge (``RealMesos.hosts_zk``); tfrun
    on the client host finds the leader there too. The leader SIGKILLed
    mid-job, the framework and its tasks are back on the new leader, and
    the job ends as if nothing had happened."""
    path = f"/tfmesos-test-{uuid.uuid4().hex}"
    try:
        with open_hosts(
            job_procs,
            tmp_path / "mesos",
            [ONE_TASK, ONE_TASK],
            masters=3,
            zk=f"zk://{ZK_HOSTS}{path}",
        ) as real:
            _outlive_the_leader(real, job_procs, tmp_path)
    finally:
        if zk.exists(path):
            zk.delete(path, recursive=True)


def _outlive_the_leader(real: RealMesos, job_procs: JobProcesses, tmp_path: Path) -> None:
    old = real.wait_leader()
    gateway = real.network.gateway
    assert real.master_address.startswith(f"zk://{gateway}:"), real.master_address
    release = tmp_path / "release"
    command = f'while [ ! -e {release} ]; do sleep 0.1; done; echo "done {{task_index}}"'
    proc, _ = start_tfrun(
        *("-m", real.master_address, "-w", "3", "-s", "0", "--worker-logs", "*", "--", command),
        env=job_procs.env(),
        on=real.client.prefix(),
    )
    (framework,) = real.master_state(old)["frameworks"]
    framework_id = framework["id"]
    assert len(framework["tasks"]) == 2, framework["tasks"]
    killed_at = time.time()
    real.kill_master(old)
    new = real.wait_leader(timeout=120, other_than=old)

    state = wait_for(
        "the framework and its tasks back on the new leader",
        lambda: back_on(real, new, framework_id, 2),
        real,
    )
    found = framework_in(state, framework_id)
    assert found is not None
    came_back = found["reregistered_time" if "reregistered_time" in found else "registered_time"]
    print(
        f"\nhosts: master failover: new leader elected {state['elected_time'] - killed_at:.2f}s "
        f"after the SIGKILL, framework re-subscribed after {came_back - killed_at:.2f}s",
        file=sys.stderr,
    )
    release.touch()
    out, said = proc.communicate(timeout=180)
    assert proc.returncode == 0, said
    assert sorted(out.splitlines()) == [
        "[worker:0] done 0",
        "[worker:1] done 1",
        "[worker:2] done 2",
    ], said
    # The leader as ZooKeeper names it: its address on its host.
    assert f"leading master is now {real.master_url(new)}" in said, said
    assert "task worker:0 registered at client:" in said, said
    final = framework_in(real.master_state(new), framework_id)
    assert final is not None
    tasks = final["tasks"] + final["completed_tasks"]
    assert sorted(t["id"] for t in tasks) == sorted(t["id"] for t in framework["tasks"]), final
    assert not final.get("unreachable_tasks"), final
    for task in tasks:
        assert ended_once(task), task
    assert not job_procs.wait_gone(30)


CHIEF_NEEDS_PS = textwrap.dedent(
    """
    import json, os, sys, threading, time
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    config = json.loads(os.environ["TF_CONFIG"])
    me = config["task"]
    server = tf.distribute.Server(
        tf.train.ClusterSpec(config["cluster"]), job_name=me["type"], task_index=me["index"]
    )
    if me["type"] != "worker" or me["index"] != 0:
        server.join()
    with tf.device("/job:ps/task:0"):
        total = tf.compat.v1.Variable(1.0)
    step = total.assign_add(1.0)
    deadline = tf.compat.v1.RunOptions(timeout_in_ms=5000)

    def give_up():
        # TF 2.21 heeds neither deadline (RunOptions.timeout_in_ms nor
        # ConfigProto.operation_timeout_in_ms) on a ps whose packets vanish:
        # its step waits for ever, and the program must give up itself.
        time.sleep(15)
        print("no answer from ps:0 in 15 s; TF's 5 s deadline went unheeded", flush=True)
        os._exit(1)

    with tf.compat.v1.Session(server.target) as session:
        session.run(total.initializer)
        print("total", session.run(total), flush=True)
        while not os.path.exists(sys.argv[1]):
            time.sleep(0.1)
        print("the ps's host is cut off", flush=True)
        threading.Thread(target=give_up, daemon=True).start()
        print("total", session.run(step, options=deadline), flush=True)
    """
)


def test_the_chiefs_host_cut_from_the_ps_fails_the_job_and_leaves_nothing(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    """A replica job (``-w 2 -s 1``) whose chief, on the client host, keeps a
    variable on ps:0: once the client host is cut from the ps's, the chief's
    next step fails (TF's own deadline goes unheeded: the program gives up
    after 15 s); tfrun's verdict
    names the chief and shows TF's error in its last output, tfrun stops the
    ps and worker 1 (the ps through Mesos: tfrun no longer reaches its
    host), and nothing of the job is left on the agents. Documents existing
    behaviour."""
    release = tmp_path / "release"
    with open_hosts(job_procs, tmp_path / "mesos", [ONE_TASK, ONE_TASK]) as real:
        proc = popen_tfrun(
            *("-m", real.master_address, "-w", "2", "-s", "1", "--"),
            *(*py(CHIEF_NEEDS_PS), str(release)),
            env=job_procs.env(),
            on=real.client.prefix(),
        )
        assert proc.stdout is not None
        before = []  # TF's own chatter (worker 0's stderr) comes first
        while (line := proc.stdout.readline()) and not line.startswith("[worker:0] total"):
            before.append(line)
        assert line == "[worker:0] total 1.0\n", "".join(before) + proc.said()
        (ps,) = [e for e in proc.events.of("task_registered") if e["task"] == "ps:0"]
        host = ps["addr"].rsplit(":", 1)[0]
        assert host.startswith("agent"), ps
        cut_at = time.monotonic()
        real.cut("client", host)
        release.touch()
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - cut_at
        verdict = proc.events.verdict()

        def nothing_left() -> bool:
            left = [
                f"agent{i}: {t['id']}"
                for i in range(len(real.agents))
                for f in real.agent_state(i)["frameworks"]
                for e in f["executors"]
                for t in e.get("tasks", []) + e.get("queued_tasks", [])
            ]
            return not left

        wait_for("nothing of the job left on the agents", nothing_left, real)
        real.heal("client", host)
    print(
        f"\nhosts: the chief's host cut from the ps's ({host}): tfrun exited "
        f"{proc.returncode} {took:.2f}s after the cut\n{err[-1500:]}",
        file=sys.stderr,
    )
    assert proc.returncode == EXIT_TASK_FAILED, err
    assert "the ps's host is cut off" in out, out + err
    last = err[err.rindex("job failed") :]
    assert "task worker:0 on client exited with status 1" in last, err
    assert re.search(r"\| .*(DeadlineExceeded|Unavailable|no answer from ps:0)", last), last
    assert verdict["event"] == "job_verdict", verdict
    exited = proc.events.exited()
    assert exited["worker:0"]["exit_code"] == 1, exited
    assert job_procs.wait_gone(30) == []


def test_a_short_cut_between_tfrun_and_the_master_goes_unnoticed(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    """The client host cut from the master, the agents fine, while worker 1
    ends: tfrun hears its end from the task itself; the master's word of it
    waits in the connection until the cut heals (its agent resends it,
    unacknowledged, 10 s on). A cut shorter than tfrun's
    heartbeat window (five of the master's 15 s heartbeats) goes unnoticed:
    no re-subscription, the job succeeds, the framework is torn down and
    nothing is left. Documents existing behaviour."""
    with open_hosts(job_procs, tmp_path / "mesos", [ONE_TASK, ONE_TASK]) as real:
        release = tmp_path / "release"
        command = f'while [ ! -e {release}-{{task_index}} ]; do sleep 0.1; done; echo "done {{task_index}}"'
        proc, _ = start_tfrun(
            *("-m", real.master_address, "-w", "3", "-s", "0", "--worker-logs", "*"),
            *("--", command),
            env=job_procs.env(),
            on=real.client.prefix(),
        )
        (framework,) = real.state()["frameworks"]
        cut_at = time.monotonic()
        real.cut("client", "master")
        Path(f"{release}-1").touch()
        proc.events.wait_for("task_exited", proc, where=lambda e: e["task"] == "worker:1")

        def finished_in_the_master() -> bool:
            return any(
                t["id"].startswith("worker.1.") and t["state"] == "TASK_FINISHED"
                for f in real.state()["frameworks"]
                for t in f["tasks"] + f["completed_tasks"]
            )

        wait_for("worker 1 TASK_FINISHED in the master", finished_in_the_master, real)
        # Its agent resends the update that tfrun has not acknowledged (every
        # 10 s at first): the master's word has not reached tfrun.
        (registered,) = [e for e in proc.events.of("task_registered") if e["task"] == "worker:1"]
        assert real.base is not None
        log = real.base / f"{registered['addr'].rsplit(':', 1)[0]}.log"
        wait_for(
            "worker 1's agent resending TASK_FINISHED",
            lambda: "Resending task status update TASK_FINISHED" in log.read_text(errors="replace"),
            real,
        )
        real.heal("client", "master")
        healed_after = time.monotonic() - cut_at
        for index in (0, 2):
            Path(f"{release}-{index}").touch()
        out, err = proc.communicate(timeout=120)
        wait_for(
            "the framework torn down",
            lambda: not real.state()["frameworks"],
            real,
        )
        (ended,) = [f for f in real.state()["completed_frameworks"] if f["id"] == framework["id"]]
    print(f"\nhosts: tfrun cut from the master for {healed_after:.2f}s\n{err}", file=sys.stderr)
    assert proc.returncode == 0, err
    assert sorted(out.splitlines()) == [
        "[worker:0] done 0",
        "[worker:1] done 1",
        "[worker:2] done 2",
    ], err
    assert "re-subscribing" not in err, err
    assert "Mesos: subscribed" in err and err.count("Mesos: subscribed") == 1, err
    tasks = ended["tasks"] + ended["completed_tasks"]
    assert len(tasks) == 2 and all(ended_once(t) for t in tasks), tasks
    assert job_procs.wait_gone(30) == []


def test_a_long_cut_between_tfrun_and_the_master_ends_the_job(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    """The client host cut from the master for good, the agents fine: tfrun
    notices five missed heartbeats (75 s: real Mesos sends one every 15 s),
    re-subscribes for ``--reconnect-timeout`` (5 s here), gives up and exits
    125 saying so. The framework's failover timeout is longer than all that
    (``failover_timeout_for``): the master never tears the framework down
    while tfrun still tries. The tasks end because tfrun is gone (their
    in-task agents' connections to it close), not through the master, and
    nothing is left on the agents. Documents existing behaviour."""
    with open_hosts(job_procs, tmp_path / "mesos", [ONE_TASK, ONE_TASK]) as real:
        proc, _ = start_tfrun(
            *("-m", real.master_address, "-w", "3", "-s", "0", "--reconnect-timeout", "5"),
            *("--", "sleep 600"),
            env=job_procs.env(),
            on=real.client.prefix(),
        )
        cut_at = time.monotonic()
        real.cut("client", "master")
        _, err = proc.communicate(timeout=240)
        gave_up = time.monotonic() - cut_at
        stopped = proc.events.of("job_stopped")

        def nothing_left() -> bool:
            return not [
                t
                for i in range(len(real.agents))
                for f in real.agent_state(i)["frameworks"]
                for e in f["executors"]
                for t in e.get("tasks", []) + e.get("queued_tasks", [])
                if t.get("state") in ("TASK_STAGING", "TASK_STARTING", "TASK_RUNNING")
            ]

        wait_for("no task running on the agents", nothing_left, real)
        ended_after = time.monotonic() - cut_at
        # What the master makes of it: tfrun's connection went silent, not closed.
        kept = [(f["active"], f.get("connected")) for f in real.state()["frameworks"]]
        real.heal("client", "master")
    print(
        f"\nhosts: tfrun cut from the master for good: it exited {proc.returncode} after "
        f"{gave_up:.2f}s, no task ran on the agents after {ended_after:.2f}s; the master's "
        f"framework (active, connected): {kept}; job_stopped: {stopped}\n{err}",
        file=sys.stderr,
    )
    assert proc.returncode == EXIT_TFRUN_FAILED, err
    assert "no heartbeat from http://master:5050 for 75s" in err, err
    assert stopped, proc.events.names()
    # The master heard nothing of tfrun's end: the framework stays, its
    # failover timeout not yet started, with no task left to kill.
    assert kept == [(True, True)], kept
    assert job_procs.wait_gone(30) == []
