"""Whole jobs through Mesos's agents: the task's user and volumes without an
image (real Mesos: the double runs every task as its own user and refuses
volumes, as an agent with ``--switch_user=false`` and ``filesystem/posix``
does), and agents that lose contact and return (the double's faults)."""

from __future__ import annotations

import os
import pwd
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import MARK, TWO_WORKERS_TRUE, JobProcesses, run_tfrun, start_tfrun
from tests.mesos_clusters import MesosUnderTest, real_mesos_home
from tfmesos.testing.master import ThreadedTestMaster
from tfmesos.testing.real_mesos import AgentSpec, RealMesos

NO_USER = "no-such-user-xyz"


def mesos_tasks(master: ThreadedTestMaster) -> list[dict]:  # type: ignore[type-arg]
    return master.tasks()


REAL_ONLY = pytest.mark.parametrize("mesos", ["real-mesos"], indirect=True)
"""A scenario of the agent's user switch: real Mesos's (the double has none)."""


@REAL_ONLY
def test_a_task_user_the_agents_lack_fails_the_job_naming_the_task(
    mesos: MesosUnderTest, job_procs: JobProcesses
) -> None:
    result = run_tfrun("-m", mesos.url, "--user", NO_USER, *TWO_WORKERS_TRUE, env=job_procs.env())
    assert result.returncode != 0
    assert "worker:1" in result.stderr
    assert f"Failed to chown directory to '{NO_USER}': No such user '{NO_USER}'" in result.stderr
    assert "TASK_DROPPED" in result.stderr
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def nobody_can_run_tfmesos() -> bool:
    """Whether ``nobody`` can run this interpreter and import tfmesos (a task run as
    nobody runs the launcher's own Python, as the README says agents must)."""
    if os.geteuid() != 0:
        return False
    import subprocess

    entry = pwd.getpwnam("nobody")
    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import tfmesos"],
            user=entry.pw_uid,
            group=entry.pw_gid,
            extra_groups=os.getgrouplist("nobody", entry.pw_gid),
            cwd="/",
            capture_output=True,
        )
    except OSError:
        return False
    return probe.returncode == 0


@REAL_ONLY
@pytest.mark.skipif(
    not nobody_can_run_tfmesos(),
    reason="needs root, and an interpreter and tfmesos that user nobody can run",
)
def test_tasks_run_as_the_user_the_job_names(
    mesos: MesosUnderTest, job_procs: JobProcesses
) -> None:
    nobody = pwd.getpwnam("nobody").pw_uid
    result = run_tfrun(
        "-m",
        mesos.url,
        "--user",
        "nobody",
        "-w",
        "2",
        "-s",
        "0",
        "--worker-logs",
        "*",
        "--",
        "sh",
        "-c",
        "echo {job_name}:{task_index} uid=$(id -u)",
        env=job_procs.env(),
    )
    assert result.returncode == 0, result.stderr
    # worker 0 runs beside tfrun; worker 1 on an agent, which switched to nobody.
    assert f"[worker:1] worker:1 uid={nobody}" in result.stdout.splitlines()
    [task] = [t for t in mesos.tasks() if t["name"].endswith("/job:worker/task:1")]
    assert task["user"] == "nobody"
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


as_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="filesystem/linux (host-path volumes) needs root"
)
MOUNT_POINT = Path("/mnt/tfmesos-test-vol")


@pytest.fixture
def mount_point() -> Iterator[Path]:
    """The absolute container path: the agent needs it to exist on the host (one of
    this test's own, so that concurrent runs do not share it)."""
    path = MOUNT_POINT.with_name(f"{MOUNT_POINT.name}-{uuid.uuid4().hex[:8]}")
    path.mkdir(parents=True)
    yield path
    path.rmdir()


def on_worker_1(command: str) -> tuple[str, ...]:
    """``sh -c COMMAND`` run by worker 1 only (worker 0 runs beside tfrun, not in a
    container, so it sees no volume)."""
    return ("sh", "-c", f"test {{task_index}} = 0 || {{ {command}; }}")


@pytest.fixture
def volume_mesos(job_procs: JobProcesses, tmp_path: Path) -> Iterator[MesosUnderTest]:
    """An agent that mounts host paths for tasks without an image: one real
    agent with the Linux launcher and the filesystem/linux isolator, in a
    mount namespace of its own (tests/test_real_mesos_images.py says why)."""
    from tests.test_real_mesos_images import (
        mesos_route_prerequisites,
        remove_cgroups,
        wrapped_home,
    )

    why = mesos_route_prerequisites()
    if why:
        print(f"\nskipping the real-Mesos volume run: {why}", file=sys.stderr)
        pytest.skip(why)
    home = wrapped_home(real_mesos_home(), tmp_path / "home", sysrq_workaround=False)
    root = f"tfmesos-test-{uuid.uuid4().hex[:12]}"
    # With filesystem/linux alone the agent aborted here, in its cgroups isolator
    # ("cgroups.cpp:155] Check failed: !subsystemSet.empty()"): name two.
    isolation = "cgroups/cpu,cgroups/mem,filesystem/linux"
    flags = {"launcher": "linux", "isolation": isolation, "cgroups_root": root}
    agents = [AgentSpec("cpus:4;mem:8192;ports:[30600-30699]")]
    real = RealMesos(
        home,
        agents=agents,
        agent_flags=flags,
        executor_env={MARK: job_procs.mark},
        base=tmp_path / "mesos",
    )
    try:
        with real:
            job_procs.ignored.update(real.daemon_pids())
            yield MesosUnderTest(real=real)
    finally:
        remove_cgroups(root)


@as_root
def test_a_read_only_volume_without_an_image_is_mounted_for_the_task(
    volume_mesos: MesosUnderTest, job_procs: JobProcesses, tmp_path: Path, mount_point: Path
) -> None:
    mesos = volume_mesos
    (tmp_path / "greeting").write_text("hello from the host\n")
    volume = ("-V", f"{tmp_path}:{mount_point}:ro")
    common = ("-m", mesos.url, *volume, "-w", "2", "-s", "0", "--worker-logs", "*", "--")
    read = run_tfrun(*common, *on_worker_1(f"cat {mount_point}/greeting"), env=job_procs.env())
    assert read.returncode == 0, read.stderr
    assert "[worker:1] hello from the host" in read.stdout.splitlines()
    [task] = [t for t in mesos.tasks() if t["name"].endswith("/job:worker/task:1")]
    assert task["container"]["volumes"] == [
        {"host_path": str(tmp_path), "container_path": str(mount_point), "mode": "RO"}
    ]
    write = run_tfrun(*common, *on_worker_1(f"echo x > {mount_point}/new"), env=job_procs.env())
    assert write.returncode != 0
    assert "Read-only file system" in write.stdout + write.stderr
    assert not (tmp_path / "new").exists()
    assert list(mount_point.iterdir()) == []  # mounted in the task's namespace only
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_a_volume_whose_host_path_is_missing_fails_the_task_with_the_agent_s_message(
    mesos: MesosUnderTest, job_procs: JobProcesses, tmp_path: Path
) -> None:
    missing = tmp_path / "missing"
    result = run_tfrun(
        "-m",
        mesos.url,
        "-V",
        f"{missing}:/mnt/tfmesos-test-vol",
        *TWO_WORKERS_TRUE,
        env=job_procs.env(),
    )
    assert result.returncode != 0
    # The agents have no filesystem/linux isolator: real Mesos's here (posix
    # isolation), and the double's, which refuses volumes as they do.
    message = "Volumes in ContainerInfo is not supported"
    assert (
        f"task worker:1 on 127.0.0.1 ended in state TASK_FAILED: Failed to launch container: {message}"
        in result.stderr
    )
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def worker_1_tasks(master: ThreadedTestMaster) -> list[dict]:  # type: ignore[type-arg]
    tasks = [t for t in master.tasks() if t["name"].endswith("/job:worker/task:1")]
    return sorted(tasks, key=lambda t: float(t["launched_at"]))


def unreachable_agent(master: ThreadedTestMaster) -> str:
    [agent] = [a["id"] for a in master.agents() if a["state"] == "unreachable"]
    return str(agent)


def test_a_task_back_from_a_partition_before_the_cluster_is_up_is_killed(
    master: ThreadedTestMaster, job_procs: JobProcesses, tmp_path: Path
) -> None:
    """Worker 1's agent loses contact as it starts the task (whose processes are
    cut off too): TASK_UNREACHABLE, so the job relaunches it on the other agent.
    When the agent comes back with the old task running (TASK_RUNNING,
    REASON_AGENT_REREGISTERED), the client KILLs it."""
    flag = tmp_path / "done"
    master.partition_next_launch(r"/job:worker/task:1$", freeze=True)
    proc, said = start_tfrun(
        "-m", master.url, "-w", "2", "-s", "0", "--",
        "sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.1; done",
        env=job_procs.env(),
    )  # fmt: skip
    try:
        old, new = worker_1_tasks(master)
        assert old["agent_id"] == unreachable_agent(master) != new["agent_id"]
        assert "ended in state TASK_UNREACHABLE" in "".join(said)
        assert master.reregister_agent(old["agent_id"])
        killed = master.wait_task_state(old["task_id"], "TASK_KILLED")
        assert any(
            c["body"]["kill"]["task_id"]["value"] == old["task_id"] for c in master.calls("KILL")
        )
        assert killed["statuses"][-1]["source"] == "SOURCE_EXECUTOR"
        assert master.task(new["task_id"])["state"] == "TASK_RUNNING"
        flag.touch()
        _, err = proc.communicate(timeout=120)
    finally:
        flag.touch()
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    assert "reported gone, is running again" in "".join(said) + err
    assert master.task(old["task_id"])["state"] == "TASK_KILLED"
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_a_partition_after_the_cluster_is_up_fails_the_job_and_the_task_dies_on_return(
    master: ThreadedTestMaster, job_procs: JobProcesses
) -> None:
    proc, _ = start_tfrun(
        "-m", master.url, "-w", "2", "-s", "0", "--", "sleep", "600", env=job_procs.env()
    )
    try:
        [task] = worker_1_tasks(master)
        master.partition_agent(task["agent_id"], freeze=True)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode != 0
    assert "task worker:1 on 127.0.0.1 ended in state TASK_UNREACHABLE" in err
    # The job tore its framework down: the master wrote the task off as killed,
    # but its processes run on where the master cannot reach them...
    assert master.task(task["task_id"])["state"] == "TASK_KILLED"
    assert job_procs.alive()
    # ...until the agent comes back and is told to shut the framework down.
    assert master.reregister_agent(task["agent_id"])
    assert [p.cmdline() for p in job_procs.wait_gone(30)] == []
    assert master.task(task["task_id"])["state"] == "TASK_KILLED"
