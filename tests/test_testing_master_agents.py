"""The test master's agents as Mesos's agent code runs tasks: the task's user,
volumes without an image, and agents that lose contact and come back.

Each test drives the master over raw HTTP (the helpers of test_testing_master)
and checks what a framework sees, as ``docs/test-master.md`` cites it.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.test_testing_master import JSON, Scheduler, framework_info, task_info, with_master
from tfmesos.testing.master import TestMaster

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
    path = Path("/mnt/tfmesos-test-vol")
    created = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    yield path
    if created:
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
