"""The test master's agents as Mesos's agent code runs tasks: the task's user,
volumes without an image, and agents that lose contact and come back.

Each test drives the master over raw HTTP (the helpers of test_testing_master)
and checks what a framework sees, as ``docs/test-master.md`` cites it.
"""

from __future__ import annotations

import os
import pwd
import uuid
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.test_testing_master import JSON, Scheduler, framework_info, task_info, with_master
from tfmesos.testing.master import TestMaster

pytestmark = pytest.mark.e2e  # every test here starts processes

NO_USER = "no-such-user-xyz"
AWARE = [{"type": "PARTITION_AWARE"}]

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the agent switches users as root only")


def has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@pytest.fixture(autouse=True)
def _no_such_user() -> None:
    assert not has_user(NO_USER)


# ------------------------------------------------------------------ the user


@with_master(agents=1)
async def test_a_task_whose_command_user_does_not_exist_is_dropped(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    """Slave::__run: Framework::addExecutor fails to chown the sandbox; the agent
    sends TASK_DROPPED (partition-aware) with REASON_EXECUTOR_TERMINATED."""
    stream = await sched.subscribe(framework_info(capabilities=AWARE))
    [offer] = await sched.offers()
    info = task_info("t1", offer, "echo should-not-run")
    info["command"]["user"] = NO_USER
    await sched.launch(offer, info)
    status = await stream.update("t1")
    sandbox = master.task("t1")["sandbox"]
    assert status["state"] == "TASK_DROPPED"
    assert status["source"] == "SOURCE_AGENT"
    assert status["reason"] == "REASON_EXECUTOR_TERMINATED"
    assert status["message"] == (
        f"Failed to create executor directory '{sandbox}': "
        f"Failed to chown directory to '{NO_USER}': No such user '{NO_USER}'"
    )
    assert "uuid" in status  # an agent update: reliable, to be acknowledged
    await sched.ack(status)
    assert not Path(sandbox).exists()


@with_master(agents=1)
async def test_a_framework_user_that_does_not_exist_loses_the_task(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    """Without CommandInfo.user the FrameworkInfo.user counts; frameworks that are
    not partition-aware get TASK_LOST instead of TASK_DROPPED."""
    stream = await sched.subscribe(framework_info(user=NO_USER))
    [offer] = await sched.offers()
    await sched.launch(offer, task_info("t1", offer, "true"))
    status = await stream.update("t1")
    assert (status["state"], status["reason"]) == ("TASK_LOST", "REASON_EXECUTOR_TERMINATED")
    assert status["message"].endswith(f"No such user '{NO_USER}'")


@with_master(agents=1, switch_user=False)
async def test_without_switch_user_the_task_runs_as_the_agent(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    await sched.subscribe(framework_info(user=NO_USER))
    [offer] = await sched.offers()
    await sched.launch(offer, task_info("t1", offer, "id -u"))
    await sched.until("t1", "TASK_FINISHED")
    stdout = Path(master.task("t1")["sandbox"]) / "stdout"
    assert stdout.read_text().strip() == str(os.geteuid())


@as_root
@with_master(agents=1)
async def test_the_agent_runs_the_task_as_its_user_in_a_sandbox_of_theirs(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    nobody = pwd.getpwnam("nobody")
    await sched.subscribe()
    [offer] = await sched.offers()
    info = task_info("t1", offer, "id -u; id -g; touch mine")
    info["command"]["user"] = "nobody"
    await sched.launch(offer, info)
    await sched.until("t1", "TASK_FINISHED")
    sandbox = Path(master.task("t1")["sandbox"])
    assert (sandbox / "stdout").read_text().split() == [str(nobody.pw_uid), str(nobody.pw_gid)]
    assert sandbox.stat().st_uid == nobody.pw_uid
    assert sandbox.stat().st_mode & 0o777 == 0o750
    assert (sandbox / "mine").stat().st_uid == nobody.pw_uid


# ------------------------------------------------------------------- volumes


def volume_task(offer: JSON, task_id: str, command: str, *volumes: JSON) -> JSON:
    return task_info(task_id, offer, command, container={"type": "MESOS", "volumes": list(volumes)})


@pytest.fixture
def mount_point() -> Iterator[Path]:
    """An absolute container path that exists on the host, as the agent requires."""
    path = Path(f"/mnt/tfmesos-test-vol-{uuid.uuid4().hex[:8]}")
    path.mkdir(parents=True)
    yield path
    path.rmdir()


@as_root
def test_host_paths_are_mounted_in_the_task_s_own_mount_namespace(
    tmp_path: Path, mount_point: Path
) -> None:
    """filesystem/linux + volume/host_path: a bind mount at an absolute container
    path (read-only for RO) and under the sandbox for a relative one, in a mount
    namespace of the task's own: the host's mount point stays empty."""
    (tmp_path / "greeting").write_text("hello\n")

    @with_master(agents=1, isolation="filesystem/linux")
    async def scenario(
        master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
    ) -> None:
        await sched.subscribe()
        [offer] = await sched.offers()
        command = (
            f"cat {mount_point}/greeting vol/greeting; "
            f"touch {mount_point}/ro 2>&1 | grep -c 'Read-only file system'; "
            "touch vol/rw && echo wrote"
        )
        volumes = [
            {"host_path": str(tmp_path), "container_path": str(mount_point), "mode": "RO"},
            {"host_path": str(tmp_path), "container_path": "vol", "mode": "RW"},
        ]
        await sched.launch(offer, volume_task(offer, "t1", command, *volumes))
        await sched.until("t1", "TASK_FINISHED")
        stdout = Path(master.task("t1")["sandbox"]) / "stdout"
        assert stdout.read_text().split() == ["hello", "hello", "1", "wrote"]

    scenario()
    assert (tmp_path / "rw").exists() and not (tmp_path / "ro").exists()
    assert list(mount_point.iterdir()) == []


@with_master(agents=1)
async def test_a_missing_host_path_fails_the_container_launch(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe()
    [offer] = await sched.offers()
    volume = {"host_path": "/no/such/host/path", "container_path": "vol", "mode": "RO"}
    await sched.launch(offer, volume_task(offer, "t1", "true", volume))
    status = await stream.update("t1")
    assert (status["state"], status["source"], status["reason"]) == (
        "TASK_FAILED",
        "SOURCE_AGENT",
        "REASON_CONTAINER_LAUNCH_FAILED",
    )
    if os.geteuid() == 0:  # filesystem/linux
        expected = "Path '/no/such/host/path' in HOST_PATH volume does not exist"
    else:  # the agent's default isolation: filesystem/posix
        expected = "Volumes in ContainerInfo is not supported"
    assert status["message"] == f"Failed to launch container: {expected}"


@as_root
@with_master(agents=1)
async def test_an_absolute_container_path_must_exist_on_the_host(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe()
    [offer] = await sched.offers()
    volume = {"host_path": "/tmp", "container_path": "/no/such/mount/point", "mode": "RW"}
    await sched.launch(offer, volume_task(offer, "t1", "true", volume))
    status = await stream.update("t1")
    assert status["state"] == "TASK_FAILED"
    assert status["message"] == (
        "Failed to launch container: Mount point '/no/such/mount/point' is an absolute path. "
        "It must exist if the container shares the host filesystem"
    )


@with_master(agents=1, isolation="posix/cpu,posix/mem")
async def test_filesystem_posix_refuses_volumes(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe()
    [offer] = await sched.offers()
    volume = {"host_path": "/tmp", "container_path": "vol", "mode": "RW"}
    await sched.launch(offer, volume_task(offer, "t1", "true", volume))
    status = await stream.update("t1")
    assert (status["state"], status["reason"]) == ("TASK_FAILED", "REASON_CONTAINER_LAUNCH_FAILED")
    assert (
        status["message"] == "Failed to launch container: Volumes in ContainerInfo is not supported"
    )


# ------------------------------------------------- agents that lose contact


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def sent(master: TestMaster, task_id: str) -> list[JSON]:
    """The UPDATE statuses the master sent for one task, in order."""
    return [
        e["update"]["status"]
        for e in master.events()
        if e["type"] == "UPDATE" and e["update"]["status"]["task_id"]["value"] == task_id
    ]


async def running(sched: Scheduler, master: TestMaster, command: str = "sleep 600") -> JSON:
    [offer] = await sched.offers()
    await sched.launch(offer, task_info("t1", offer, command))
    await sched.until("t1", "TASK_RUNNING")
    return master.task("t1")


@with_master(agents=1)
async def test_a_partitioned_agent_s_task_keeps_running_and_returns_when_it_reregisters(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    """Master::markUnreachable then __reregisterSlave, for a PARTITION_AWARE framework."""
    stream = await sched.subscribe(framework_info(capabilities=AWARE))
    task = await running(sched, master)
    agent_id = master.partition_agent()
    unreachable = await stream.update("t1", "TASK_UNREACHABLE")
    assert unreachable["source"] == "SOURCE_MASTER"
    assert unreachable["reason"] == "REASON_AGENT_REMOVED"
    assert unreachable["message"] == "health check timed out"
    assert unreachable["unreachable_time"]["nanoseconds"] > 0
    assert "uuid" not in unreachable
    failure = await stream.next("FAILURE")
    assert failure["failure"] == {"agent_id": {"value": agent_id}}
    assert alive(task["pid"])
    assert master.agents()[0]["state"] == "unreachable"
    # A KILL now reaches no agent: the master answers for the unreachable task.
    await sched.call("KILL", kill={"task_id": {"value": "t1"}, "agent_id": {"value": agent_id}})
    answer = await stream.update("t1")
    assert (answer["state"], answer["reason"]) == ("TASK_UNREACHABLE", "REASON_RECONCILIATION")

    assert master.reregister_agent(agent_id) is True
    back = await stream.update("t1")
    assert (back["state"], back["source"]) == ("TASK_RUNNING", "SOURCE_MASTER")
    assert back["reason"] == "REASON_AGENT_REREGISTERED"
    assert back["message"] == "Unreachable agent re-reregistered"
    assert "uuid" not in back
    assert master.framework(sched.framework_id)["task_ids"] == ["t1"]
    await sched.call("KILL", kill={"task_id": {"value": "t1"}})
    await sched.until("t1", "TASK_KILLED")
    await master.wait_for(lambda: not alive(task["pid"]))


@with_master(agents=1)
async def test_a_framework_that_is_not_partition_aware_sees_lost_then_running(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    """__removeSlave sends TASK_LOST; __reregisterSlave re-adds the tasks of every
    framework (its partition-aware set is not consulted) with their state."""
    stream = await sched.subscribe()
    await running(sched, master)
    agent_id = master.partition_agent()
    lost = await stream.update("t1", "TASK_LOST")
    assert lost["reason"] == "REASON_AGENT_REMOVED"
    assert master.reregister_agent(agent_id)
    back = await stream.update("t1")
    assert (back["state"], back["reason"]) == ("TASK_RUNNING", "REASON_AGENT_REREGISTERED")


@with_master(agents=1)
async def test_updates_of_a_partitioned_agent_wait_until_it_reregisters(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe(framework_info(capabilities=AWARE))
    task = await running(sched, master, "while [ ! -e go ]; do sleep 0.05; done")
    agent_id = master.partition_agent()
    await stream.update("t1", "TASK_UNREACHABLE")
    (Path(task["sandbox"]) / "go").touch()
    await master.wait_task_state("t1", "TASK_FINISHED")  # as the agent knows it
    assert [s["state"] for s in sent(master, "t1")][-1] == "TASK_UNREACHABLE"
    assert master.reregister_agent(agent_id)
    back = await stream.update("t1")
    assert (back["state"], back["reason"]) == ("TASK_FINISHED", "REASON_AGENT_REREGISTERED")
    resent = await stream.update("t1")
    assert (resent["state"], resent["source"]) == ("TASK_FINISHED", "SOURCE_EXECUTOR")
    await sched.ack(resent)
    await master.wait_for(lambda: master.framework(sched.framework_id)["task_ids"] == [])


@with_master(agents=1)
async def test_an_unreachable_agent_marked_gone_is_refused_and_its_tasks_die(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    """Master::markGone for an unreachable agent; its reregistration is refused
    with a ShutdownMessage, and the agent kills its tasks."""
    stream = await sched.subscribe(framework_info(capabilities=AWARE))
    task = await running(sched, master)
    agent_id = master.partition_agent()
    await stream.update("t1", "TASK_UNREACHABLE")
    master.mark_agent_gone(agent_id)
    gone = await stream.update("t1")
    assert (gone["state"], gone["reason"]) == (
        "TASK_GONE_BY_OPERATOR",
        "REASON_AGENT_REMOVED_BY_OPERATOR",
    )
    assert gone["message"] == "Agent has been marked gone"
    assert alive(task["pid"])
    assert master.reregister_agent(agent_id) is False
    await master.wait_for(lambda: not alive(task["pid"]))
    assert [s["state"] for s in sent(master, "t1")][-1] == "TASK_GONE_BY_OPERATOR"
    assert master.agents()[0]["state"] == "gone"


@with_master(agents=1)
async def test_an_agent_that_restarts_without_its_tasks_makes_them_gone(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    """An agent that died (kill_agent) and comes back under its ID reports no task:
    __reregisterSlave forgets its unreachable tasks, and reconciliation then
    answers TASK_GONE (task unknown, agent registered: Master::reconcile)."""
    stream = await sched.subscribe(framework_info(capabilities=AWARE))
    task = await running(sched, master)
    agent_id = master.kill_agent()
    await stream.update("t1", "TASK_UNREACHABLE")
    await master.wait_for(lambda: not alive(task["pid"]))
    assert master.reregister_agent(agent_id)
    tasks = [{"task_id": {"value": "t1"}, "agent_id": {"value": agent_id}}]
    await sched.call("RECONCILE", reconcile={"tasks": tasks})
    answer = await stream.update("t1")
    assert (answer["state"], answer["reason"]) == ("TASK_GONE", "REASON_RECONCILIATION")


@with_master(agents=1)
async def test_tasks_of_a_framework_removed_meanwhile_are_shut_down_on_return(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    """Master::removeFramework marks unreachable tasks TASK_KILLED; the agent
    that comes back is told to shut the framework down."""
    stream = await sched.subscribe(framework_info(capabilities=AWARE))
    task = await running(sched, master)
    agent_id = master.partition_agent(freeze=True)
    await stream.update("t1", "TASK_UNREACHABLE")
    await sched.call("TEARDOWN")
    assert master.task("t1")["state"] == "TASK_KILLED"
    assert alive(task["pid"])
    assert master.reregister_agent(agent_id)
    await master.wait_for(lambda: not alive(task["pid"]))
