"""Real Mesos masters in ZooKeeper, as operators run them: three masters
electing their leader (``--zk``, ``--quorum=2``, ``--registry=replicated_log``)
with the leader killed mid-job, and a master registered with ZooKeeper
credentials (``--zk=zk://user:password@.../path``).

Needs real Mesos (tests/mesos_clusters.py: ``real_mesos_home``) and a
ZooKeeper server (scripts/start-zookeeper). The agents' ports lie in
27000-27999, apart from every other cluster's and below Linux's ephemeral ports
(32768-60999), which any connection may take.
"""

from __future__ import annotations

import re
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MARK, TWO_WORKERS_TRUE, JobProcesses, run_tfrun, start_tfrun
from tests.mesos_clusters import real_mesos_home, real_mesos_unavailable, wait_for
from tests.test_zookeeper import ZK_HOSTS, zookeeper_client
from tfmesos.testing.real_mesos import AgentSpec, MesosNotAvailable, RealMesos

AGENTS = (
    AgentSpec("cpus:4;mem:8192;ports:[27000-27499]", "rack:r1"),
    AgentSpec("cpus:4;mem:8192;ports:[27500-27999]", "rack:r2"),
)
USER = "tfmesos"
PASSWORD = "s3cr@t:pw@"
"""With '@' (the credentials end at the last one, include/mesos/zookeeper/url.hpp)."""

JSON = dict[str, Any]


def start(real: RealMesos, job_procs: JobProcesses) -> RealMesos:
    try:
        real.start(timeout=120)
    except MesosNotAvailable as exc:
        real_mesos_unavailable(f"it did not start: {exc}")
    job_procs.ignored.update(real.daemon_pids())
    return real


def back_on(real: RealMesos, leader: int, framework_id: str, agents: int) -> JSON | None:
    """The new leader's state once the framework re-subscribed to it and
    every agent re-registered with it, bringing the framework's two tasks.

    Not by "reregistered_time": the master shows it only for a framework it
    knew before the SUBSCRIBE, from an agent that re-registered first with
    its tasks; a framework that comes back first is added anew, with
    "registered_time" alone (master/readonly_handler.cpp)."""
    state: JSON | None = real.master_state(leader)
    found = framework_in(state, framework_id)
    if (
        state is None
        or found is None
        or not found.get("active")
        or sum(a.get("active", False) for a in state["slaves"]) < agents
        or sorted(t["state"] for t in found["tasks"]) != ["TASK_RUNNING"] * 2
    ):
        return None
    return state


def ended_once(task: JSON) -> bool:
    """Whether a task went from starting or running to one end, and no further.

    The only status after the end may be the master's own TASK_KILLED for a
    removed framework: a terminal task stays in the master's framework until
    the framework acknowledges its end, and a TEARDOWN that overtakes the
    acknowledgement appends TASK_KILLED to the task's statuses while its state
    stays the first end (apache/mesos src/master/master.cpp:
    ``Master::removeFramework`` calls ``updateTask`` for every task it holds).
    """
    states = [s["state"] for s in task["statuses"]]
    ends = [i for i, state in enumerate(states) if state in ("TASK_FINISHED", "TASK_KILLED")]
    if not ends:
        return False
    first = ends[0]
    return (
        set(states[:first]) <= {"TASK_STARTING", "TASK_RUNNING"}
        and set(states[first + 1 :]) <= {"TASK_KILLED"}
        and task["state"] == states[first]
    )


def framework_in(state: JSON | None, framework_id: str) -> JSON | None:
    if state is None:
        return None
    for framework in state["frameworks"] + state["completed_frameworks"]:
        if framework["id"] == framework_id:
            found: JSON = framework
            return found
    return None


@pytest.fixture
def ha(zk: Any, job_procs: JobProcesses, tmp_path: Path) -> Iterator[RealMesos]:
    """Three masters electing their leader under a fresh znode, two agents."""
    home = real_mesos_home()
    path = f"/tfmesos-test-{uuid.uuid4().hex}"
    real = RealMesos(
        home,
        agents=AGENTS,
        executor_env={MARK: job_procs.mark},
        base=tmp_path / "mesos",
        masters=3,
        zk=f"zk://{ZK_HOSTS}{path}",
    )
    try:
        yield start(real, job_procs)
    finally:
        real.stop()
        if zk.exists(path):
            zk.delete(path, recursive=True)


def test_a_job_outlives_the_leading_masters_death(
    ha: RealMesos, job_procs: JobProcesses, tmp_path: Path
) -> None:
    real = ha
    old = real.wait_leader()
    assert real.zk is not None
    # The tasks on Mesos (workers 1 and 2) end once the file is there: it is
    # written after the new leader has the framework and its tasks back.
    release = tmp_path / "release"
    command = f'while [ ! -e {release} ]; do sleep 0.1; done; echo "done {{task_index}}"'
    proc, _ = start_tfrun(
        *("-m", real.zk, "-w", "3", "-s", "0", "--worker-logs", "*", "--", command),
        env=job_procs.env(),
    )
    try:
        (framework,) = real.master_state(old)["frameworks"]
        framework_id = framework["id"]
        assert len(framework["tasks"]) == 2, framework["tasks"]

        killed_at = time.time()
        real.kill_master(old)
        new = real.wait_leader(timeout=120, other_than=old)

        state = wait_for(
            "the framework and its tasks back on the new leader",
            lambda: back_on(real, new, framework_id, len(AGENTS)),
            real,
        )
        found = framework_in(state, framework_id)
        assert found is not None
        elected = state["elected_time"] - killed_at
        came_back = found[
            "reregistered_time" if "reregistered_time" in found else "registered_time"
        ]
        resubscribed = came_back - killed_at
        agents_back = max(a["reregistered_time"] for a in state["slaves"]) - killed_at
        print(
            f"\nmaster failover: new leader elected {elected:.2f}s after the SIGKILL, "
            f"framework re-subscribed after {resubscribed:.2f}s, agents re-registered "
            f"after {agents_back:.2f}s",
            file=sys.stderr,
        )
        release.touch()
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            # Reaped, not read to the end: a task it leaves may hold its
            # pipe open; the test's _tfruns_closed fixture closes it.
            proc.kill()
            proc.wait()
    said = err  # all it said: Tfrun.communicate reads tfrun's stderr file whole
    # What tfrun said of it, beside the figures (pytest -s shows both).
    print(
        "".join(
            line for line in said.splitlines(True) if "Mesos: " in line or "ZooKeeper: " in line
        ),
        file=sys.stderr,
    )
    assert proc.returncode == 0, said
    assert sorted(out.splitlines()) == [
        "[worker:0] done 0",
        "[worker:1] done 1",
        "[worker:2] done 2",
    ], said
    assert f"leading master is now {real.master_url(new)}" in said, said
    # A new leader starts the backoff again, as the scheduler driver's
    # detected() does: the first retry after tfrun hears of it (the new
    # leader answers 503 while it recovers, or a 307 to the dead one) waits
    # the initial 0.5 s, not a backoff grown on the dead leader.
    heard = said.index(f"leading master is now {real.master_url(new)}")
    retries = re.findall(r"re-subscribing in ([\d.]+)s", said[heard:])
    assert not retries or float(retries[0]) <= 0.5, said
    for task in range(3):
        assert f"task worker:{task} finished (exit 0)" in said, said
    # No task lost or started again: the new leader has the two tasks the old
    # one launched, and nothing else; each went from running to its end.
    # (TASK_KILLED is most real-Mesos jobs' end, failover or not: tfrun hears
    # a worker's exit from the worker itself and tears the framework down,
    # often before the command executor's TASK_FINISHED; see ended_once.)
    final = framework_in(real.master_state(new), framework_id)
    assert final is not None
    tasks = final["tasks"] + final["completed_tasks"]
    assert sorted(t["id"] for t in tasks) == sorted(t["id"] for t in framework["tasks"]), final
    assert not final.get("unreachable_tasks"), final
    for task in tasks:
        assert ended_once(task), task
    assert not job_procs.wait_gone(30)

    # The killed master, started again, stands by behind the new leader.
    real.start_master(old)
    job_procs.ignored.update(real.daemon_pids())
    wait_for(
        "the restarted master sending /state to the new leader",
        lambda: _leader_seen_by(real, old) == real.master_url(new),
        real,
    )
    assert real.leader_index() == new


def _leader_seen_by(real: RealMesos, index: int) -> str | None:
    """Where master ``index`` sends ``/state`` (it follows its own 307)."""
    try:
        state = real.get("/state", int(real.master_url(index).rsplit(":", 1)[1]))
    except (OSError, ValueError):
        return None
    pid = str(state.get("pid", ""))
    return "http://" + pid.split("@", 1)[1] if "@" in pid else None


# -- a master registered with ZooKeeper credentials ---------------------------------


@pytest.fixture
def restricted_group(zk: Any) -> Iterator[tuple[str, Any]]:
    """A znode only ``USER:PASSWORD`` may use (as an operator restricts it),
    and a client holding those credentials."""
    from kazoo.security import make_digest_acl

    client = zookeeper_client(f"{USER}:{PASSWORD}")
    path = f"/tfmesos-test-{uuid.uuid4().hex}"
    client.create(path, b"", acl=[make_digest_acl(USER, PASSWORD, all=True)])
    try:
        yield path, client
    finally:
        if client.exists(path):
            client.delete(path, recursive=True)
        client.stop()
        client.close()


def test_a_master_registered_with_zk_credentials_is_found_with_them(
    restricted_group: tuple[str, Any], job_procs: JobProcesses, tmp_path: Path
) -> None:
    from kazoo.security import Permissions

    path, client = restricted_group
    url = f"zk://{USER}:{PASSWORD}@{ZK_HOSTS}{path}"
    real = RealMesos(
        real_mesos_home(),
        agents=AGENTS[:1],
        executor_env={MARK: job_procs.mark},
        base=tmp_path / "mesos",
        zk=url,
    )
    start(real, job_procs)
    try:
        real.wait_leader()
        # The master's member: readable by anyone, all else to its creator
        # (EVERYONE_READ_CREATOR_ALL, src/zookeeper/group.cpp).
        members = [c for c in client.get_children(path) if c.startswith("json.info_")]
        assert len(members) == 1, client.get_children(path)
        acls, _ = client.get_acls(f"{path}/{members[0]}")
        assert sorted((a.id.scheme, a.id.id, a.perms) for a in acls) == sorted(
            [("world", "anyone", Permissions.READ), ("digest", _digest_id(), Permissions.ALL)]
        )

        result = run_tfrun("-m", url, "--timeout", "60", *TWO_WORKERS_TRUE, env=job_procs.env())
        assert result.returncode == 0, result.stderr
        assert f"leading master is now {real.url}" in result.stderr
        assert PASSWORD not in result.stderr

        wrong = f"zk://{USER}:wr@ng@{ZK_HOSTS}{path}"
        refused = run_tfrun(
            "-m", wrong, "--reconnect-timeout", "3600", *TWO_WORKERS_TRUE, env=job_procs.env()
        )
        assert refused.returncode == 125, refused.stderr
        assert refused.stderr.splitlines()[-1] == (
            f"tfrun: error: the mesos backend failed: ZooKeeper at {ZK_HOSTS} refuses to let "
            f"user {USER!r} read {path} (NoAuth): check the user and password in the zk:// "
            "URL (zk://USER:PASSWORD@HOSTS/PATH)"
        ), refused.stderr
        assert "Traceback" not in refused.stderr and "wr@ng" not in refused.stderr
        assert not job_procs.wait_gone(30)

    finally:
        real.stop()


def _digest_id() -> str:
    from kazoo.security import make_digest_acl_credential

    credential: str = make_digest_acl_credential(USER, PASSWORD)
    return credential


def test_a_reconciliation_a_new_leader_drops_is_asked_again(
    ha: RealMesos, job_procs: JobProcesses, tmp_path: Path
) -> None:
    """A new leader knows the agents from its registry but not their tasks
    until each agent re-registers, and drops the reconciliation of a task on
    an agent not yet back (Master::reconcile, case 2: "the framework will
    have to retry"). The agents are stopped through the failover, so tfrun's
    first RECONCILE after re-subscribing goes unanswered: it must ask again,
    backing off, and be answered once the agents are back."""
    real = ha
    old = real.wait_leader()
    done = tmp_path / "done"
    chief = f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.05)\n"
    proc, _ = start_tfrun(
        "-m", real.zk or "", "-w", "1", "-s", "1", "--", sys.executable, "-c", chief,
        env=job_procs.env(),
    )  # fmt: skip
    asking_again = "no answer yet to the reconciliation of ps:0; asking again"
    try:
        (framework,) = real.master_state(old)["frameworks"]
        framework_id = framework["id"]
        for index in range(len(AGENTS)):
            real.pause_agent(index)
        real.kill_master(old)
        new = real.wait_leader(timeout=120, other_than=old)
        log = real.base / f"master{new}.log" if real.base else None
        assert log is not None
        wait_for(
            "the new leader dropping the reconciliation of ps:0",
            lambda: "Dropping reconciliation of task" in log.read_text(errors="replace"),
            real,
        )
        # (tfrun's stderr is a file, not a pipe: start_tfrun's Tfrun.said reads it)
        wait_for("tfrun asking again", lambda: asking_again in proc.said(), real)
        for index in range(len(AGENTS)):
            real.resume_agent(index)

        def answered() -> bool:
            found = framework_in(real.master_state(new), framework_id)
            return found is not None and [t["state"] for t in found["tasks"]] == ["TASK_RUNNING"]

        wait_for("ps:0 back on the new leader", answered, real)
        done.touch()
        proc.wait(timeout=120)
    finally:
        for index in range(len(AGENTS)):
            real.resume_agent(index)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.said() + real.logs(40)
    text = log.read_text(errors="replace")
    # Asked at least twice of the new leader: dropped once, then answered.
    assert text.count("Performing explicit task state reconciliation") >= 2, text[-4000:]
    assert not job_procs.wait_gone(30)
