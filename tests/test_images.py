"""The task image, built and run for real: jobs whose remote tasks run inside it.

The test master runs a task that names an image with ``podman --runtime runc
run`` (tfmesos/testing/master/images.py), as a Mesos agent's containerizer
would. The image is the one ``scripts/build-image cpu`` builds from this
checkout: CI builds it once and names it in $TFMESOS_TEST_IMAGE; otherwise the
first test that needs it builds it (on the base $TFMESOS_IMAGE_BASE, else a
Debian base made here with mmdebstrap), and later runs find it built.

Without podman, the tests that need it are skipped with the reason; the test
master's refusal of image tasks is tested everywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import ROOT, TWO_WORKERS_TRUE, JobProcesses, marked_master, run_tfrun
from tfmesos.testing.master import ThreadedTestMaster

NO_USER = "tfmesos-no-such-user"
VENV_PYTHON = "/opt/tfmesos/venv/bin/python3"
"""The image's interpreter (docker/Dockerfile's virtual environment)."""

needs_podman = pytest.mark.skipif(
    shutil.which("podman") is None,
    reason="podman is not installed: the task image cannot be built or run here "
    "(Debian: apt-get install podman runc mmdebstrap)",
)


def tfmesos_digest(package: Path) -> str:
    """A digest of the tfmesos package's sources, as the probe computes it."""
    h = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        h.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


PROBE = '''
"""Say where this task runs (into reports/), then train: a task's command."""
import hashlib, json, os, sys
from pathlib import Path

import tfmesos

here = Path(__file__).resolve().parent
package = Path(tfmesos.__file__).resolve().parent
h = hashlib.sha256()
for path in sorted(package.rglob("*.py")):
    h.update(str(path.relative_to(package)).encode() + b"\\0" + path.read_bytes())
try:
    containerenv = Path("/run/.containerenv").read_text()
except OSError:
    containerenv = None
try:
    with open("/data/written-by-a-task", "w"):
        pass
    data_writable = True
except OSError:
    data_writable = False
report = {
    "containerenv": containerenv,
    "executable": sys.executable,
    "tfmesos": str(package),
    "tfmesos_digest": h.hexdigest(),
    "data": sorted(os.listdir("/data")) if os.path.isdir("/data") else None,
    "data_writable": data_writable,
    "uid": os.getuid(),
    "sandbox": os.environ.get("MESOS_SANDBOX"),
    "sandbox_listing": sorted(os.listdir(os.environ["MESOS_SANDBOX"]))
    if os.access(os.environ.get("MESOS_SANDBOX", "/nonexistent"), os.R_OK) else None,
    "container_name": os.environ.get("MESOS_CONTAINER_NAME"),
}
name = os.environ["TFMESOS_JOB_NAME"] + "-" + os.environ["TFMESOS_TASK_INDEX"]
(here / "reports" / (name + ".json")).write_text(json.dumps(report))
script = str(here / "mnist_replica.py")
os.execv(sys.executable, [sys.executable, script, *sys.argv[1:]])
'''


def write_idx(path: Path, array: np.ndarray) -> None:
    """An IDX file (MNIST's format): magic, dimensions, then the bytes."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(n).to_bytes(4, "big") for n in array.shape
    )
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def make_job_volume(root: Path) -> Path:
    """A folder for -V: the probe, the example, reports/ and data/ with the
    8x8 digits of examples/data as MNIST IDX files."""
    vol = root / "vol"
    (vol / "reports").mkdir(parents=True)
    (vol / "data").mkdir()
    # Tasks of a DOCKER container run as the image's user (nobody).
    for folder in (vol, vol / "reports"):
        folder.chmod(0o777)
    (vol / "probe.py").write_text(PROBE)
    shutil.copy(ROOT / "examples" / "mnist" / "mnist_replica.py", vol / "mnist_replica.py")
    table = np.loadtxt(ROOT / "examples" / "data" / "digits.csv.gz", delimiter=",")
    images = (table[:, :-1].reshape(-1, 8, 8) * (255 / 16)).round().astype(np.uint8)
    labels = table[:, -1].astype(np.uint8)
    n_val = len(images) // 5
    write_idx(vol / "data" / "train-images-idx3-ubyte", images[n_val:])
    write_idx(vol / "data" / "train-labels-idx1-ubyte", labels[n_val:])
    write_idx(vol / "data" / "t10k-images-idx3-ubyte", images[:n_val])
    write_idx(vol / "data" / "t10k-labels-idx1-ubyte", labels[:n_val])
    return vol


@pytest.fixture(scope="session")
def task_image() -> str:
    """The CPU task image of this checkout (built once, then found built)."""
    return checkout_image()


def checkout_image() -> str:
    """$TFMESOS_TEST_IMAGE, or the CPU task image scripts/build-image makes
    of this checkout (built once, then found built)."""
    named = os.environ.get("TFMESOS_TEST_IMAGE")
    if named:
        return named
    base = os.environ.get("TFMESOS_IMAGE_BASE") or "local"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build-image"), "cpu", "--base", base],
        stdout=subprocess.PIPE,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, "scripts/build-image cpu failed"
    return result.stdout.strip().splitlines()[-1]


def containers_of(master: ThreadedTestMaster) -> list[str]:
    """The containers this master started that still exist."""
    work_dir = master.call(lambda m: str(m.master_state.work_dir_path))
    return podman_names(work_dir)


def podman_names(label_value: str) -> list[str]:
    """ "NAME STATE" of each container labelled as the test master's at that work dir."""
    result = subprocess.run(
        [
            "podman",
            "ps",
            "--all",
            "--format",
            "{{.Names}} {{.State}}",
            "--filter",
            f"label=tfmesos.test-master={label_value}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.splitlines()


def task_key(task: dict) -> str:  # type: ignore[type-arg]
    """ "ps-0" for the task named "... /job:ps/task:0"."""
    match = re.search(r"/job:(\w+)/task:(\d+)$", task["name"])
    assert match is not None, task["name"]
    return f"{match[1]}-{match[2]}"


def run_mnist_in_containers(
    master: ThreadedTestMaster, job_procs: JobProcesses, image: str, tmp_path: Path, *extra: str
) -> tuple[dict[str, dict], dict[str, dict]]:  # type: ignore[type-arg]
    """Run the job; return the test master's tasks and the tasks' reports, by task."""
    vol = make_job_volume(tmp_path)
    # `python3` is the image's in a container, this interpreter beside tfrun.
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    started = time.monotonic()
    result = run_tfrun(
        "-m",
        master.url,
        "--image",
        image,
        *extra,
        "-V",
        f"{vol}:{vol}",
        "-V",
        f"{vol / 'data'}:/data:ro",
        "-w",
        "2",
        "-s",
        "1",
        "--",
        "python3",
        str(vol / "probe.py"),
        "--ps_hosts={ps_hosts}",
        "--worker_hosts={worker_hosts}",
        "--job_name={job_name}",
        "--task_index={task_index}",
        f"--data_dir={vol / 'data'}",
        env=job_procs.env(PATH=path),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    print(f"the job took {time.monotonic() - started:.1f} s")
    assert re.search(r"\[worker:0\] validation cross entropy = [0-9.]+", result.stdout)
    assert f"MNIST from {vol / 'data'}, 8x8 images" in result.stdout
    reports = {path.stem: json.loads(path.read_text()) for path in (vol / "reports").glob("*.json")}
    assert sorted(reports) == ["ps-0", "worker-0", "worker-1"]
    # The chief ran beside tfrun, on this host, with this interpreter.
    # (python3 on its PATH: the virtual environment's, whichever name it has)
    assert Path(reports["worker-0"]["executable"]).parent == Path(sys.executable).parent
    assert reports["worker-0"]["data"] is None
    tasks = {task_key(task): task for task in master.tasks()}
    assert sorted(tasks) == ["ps-0", "worker-1"]
    for key in tasks:
        report = reports[key]
        # Inside a container: podman's /run/.containerenv, which this host lacks.
        assert report["containerenv"] is not None, report
        # The image's Python and tfmesos, which is this checkout's.
        assert report["executable"] == VENV_PYTHON
        assert report["tfmesos"].startswith("/opt/tfmesos/venv/lib/")
        assert report["tfmesos_digest"] == tfmesos_digest(ROOT / "tfmesos")
        # The -V volumes: one at its host path (the probe, the example, the
        # data), one elsewhere and read-only.
        assert report["data"] == sorted(os.listdir(vol / "data"))
        assert report["data_writable"] is False
        assert report["sandbox"] == "/mnt/mesos/sandbox"
    assert reports["worker-0"]["containerenv"] is None
    assert not (vol / "data" / "written-by-a-task").exists()
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []
    deadline = time.monotonic() + 15
    while containers_of(master) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert containers_of(master) == []
    return tasks, reports


@needs_podman
def test_mnist_replica_runs_every_remote_task_in_the_image(
    master: ThreadedTestMaster, job_procs: JobProcesses, task_image: str, tmp_path: Path
) -> None:
    tasks, reports = run_mnist_in_containers(master, job_procs, task_image, tmp_path)
    for key, task in tasks.items():
        report = reports[key]
        # The Mesos containerizer runs the task as its user (here this
        # process's), whatever the image's USER says, with the sandbox at
        # /mnt/mesos/sandbox, its working directory holding stdout and stderr.
        assert report["uid"] == os.geteuid()
        assert {"stdout", "stderr"} <= set(report["sandbox_listing"])
        assert report["container_name"] is None
        assert task["container"]["type"] == "MESOS"
        assert task["container"]["mesos"]["image"]["docker"]["name"] == task_image


@needs_podman
def test_mnist_replica_in_the_image_with_the_docker_containerizer(
    master: ThreadedTestMaster, job_procs: JobProcesses, task_image: str, tmp_path: Path
) -> None:
    tasks, reports = run_mnist_in_containers(
        master, job_procs, task_image, tmp_path, "-C", "DOCKER"
    )
    for key, task in tasks.items():
        report = reports[key]
        # `docker run` without -u: the image's USER (nobody), who cannot read
        # the sandbox (mode 0750, the task user's), mounted all the same.
        assert report["uid"] == 65534
        assert report["sandbox_listing"] is None
        assert report["container_name"] == f"mesos-{task['container_id']}"
        assert task["container"]["type"] == "DOCKER"
        assert task["container"]["docker"]["image"] == task_image


@needs_podman
@pytest.mark.parametrize("containerizer", ["MESOS", "DOCKER"])
def test_a_task_user_the_agent_lacks_fails_with_the_agents_message(
    master: ThreadedTestMaster, job_procs: JobProcesses, task_image: str, containerizer: str
) -> None:
    """The agent creates the sandbox for the task's user before any container:
    a user it lacks is "No such user", whatever the image has (tfmesos gives the
    container the agent's /etc/passwd, and the Mesos containerizer looks the
    user up on the agent, launch.cpp)."""
    result = run_tfrun(
        "-m",
        master.url,
        "--image",
        task_image,
        "-C",
        containerizer,
        "--user",
        NO_USER,
        *TWO_WORKERS_TRUE,
        env=job_procs.env(),
    )
    assert result.returncode != 0
    assert f"Failed to chown directory to '{NO_USER}': No such user '{NO_USER}'" in result.stderr
    assert "TASK_DROPPED" in result.stderr
    assert containers_of(master) == []
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_without_podman_an_image_task_fails_to_launch(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never on the host: an agent that cannot provision the image fails the task."""
    monkeypatch.setenv("TFMESOS_PODMAN", "/nonexistent/podman")
    with marked_master(job_procs, monkeypatch, agents=2) as master:
        result = run_tfrun(
            "-m",
            master.url,
            "--image",
            "tfmesos/tfmesos:cpu",
            *TWO_WORKERS_TRUE,
            env=job_procs.env(),
        )
        assert result.returncode != 0
        assert "TASK_FAILED" in result.stderr
        assert "podman is not installed here" in result.stderr
        tasks = master.tasks()
        assert tasks
        for task in tasks:  # (a launch failure is tried again)
            status = task["statuses"][-1]
            assert status["state"] == "TASK_FAILED"
            assert status["reason"] == "REASON_CONTAINER_LAUNCH_FAILED"
            assert status["source"] == "SOURCE_AGENT"
            assert status["message"].startswith(
                "Failed to launch container: cannot provision image"
            )
            assert not Path(task["sandbox"], "stdout").exists()  # nothing ran
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_an_image_needs_the_linux_filesystem_isolator(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    with marked_master(job_procs, monkeypatch, agents=2, isolation="posix/cpu,posix/mem") as m:
        result = run_tfrun(
            "-m", m.url, "--image", "tfmesos/tfmesos:cpu", *TWO_WORKERS_TRUE, env=job_procs.env()
        )
        assert result.returncode != 0
        assert "Failed to launch container: Container root filesystems not supported" in (
            result.stderr
        )


# ------------------------------------------------ the agent's containers, raw


@needs_podman
def test_a_mesos_container_with_an_image_as_the_agent_makes_it(
    task_image: str, tmp_path: Path
) -> None:
    """The image's root filesystem, environment and working directory, the
    task's user (not the image's USER), the sandbox at /mnt/mesos/sandbox,
    host-path volumes at an absolute path (RO) and under the sandbox (RW), and
    the command's environment over the image's."""
    from tests.test_testing_master import Scheduler, framework_info, task_info, with_master

    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "greeting").write_text("hello\n")
    (tmp_path / "rw").mkdir(mode=0o777)
    (tmp_path / "rw").chmod(0o777)
    script = (
        "id -u; pwd; echo $MESOS_SANDBOX; echo $HOME; echo $PATH; echo $GREETING; "
        "echo ${MESOS_FRAMEWORK_ID:+agent-env}; cat /abs/greeting; "
        "test -e /run/.containerenv && echo containerenv; "
        "touch /abs/x 2>/dev/null || echo read-only; echo written > $MESOS_SANDBOX/rel/out; ls /mnt/mesos/sandbox"
    )

    @with_master(agents=1)
    async def scenario(master: Any, session: Any, sched: Scheduler) -> None:
        await sched.subscribe(framework_info())
        [offer] = await sched.offers()
        info = task_info("t1", offer, script)
        info["command"]["environment"] = {
            "variables": [{"name": "GREETING", "value": "from the command"}]
        }
        info["container"] = {
            "type": "MESOS",
            "mesos": {"image": {"type": "DOCKER", "docker": {"name": task_image}}},
            "volumes": [
                {"host_path": str(tmp_path / "ro"), "container_path": "/abs", "mode": "RO"},
                {"host_path": str(tmp_path / "rw"), "container_path": "rel", "mode": "RW"},
            ],
        }
        await sched.launch(offer, info)
        status = await sched.until("t1", "TASK_FINISHED", timeout=60)
        assert status["message"] == "Command exited with status 0"
        task = master.task("t1")
        lines = (Path(task["sandbox"]) / "stdout").read_text().splitlines()
        assert lines[:10] == [
            str(os.geteuid()),  # the framework's user, not the image's 65534
            "/workspace",  # the image's WORKDIR
            "/mnt/mesos/sandbox",
            "/workspace",  # the image's HOME over the agent's
            "/opt/tfmesos/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "from the command",
            "agent-env",  # the executor's MESOS_* variables
            "hello",
            "containerenv",
            "read-only",
        ]
        assert {"stdout", "stderr", "rel"} <= set(lines[10:])
        assert (tmp_path / "rw" / "out").read_text() == "written\n"
        assert (Path(task["sandbox"]) / "rel").is_dir()  # the mount point, made in the sandbox
        label = str(master.master_state.work_dir_path)
        await wait_until_async(lambda: podman_names(label) == [], 15)

    scenario()


async def wait_until_async(check: Any, timeout: float) -> None:
    import asyncio

    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.2)


@needs_podman
def test_a_docker_container_as_the_docker_executor_runs_it(task_image: str, tmp_path: Path) -> None:
    """`docker run`: the command's environment and MESOS_SANDBOX,
    MESOS_CONTAINER_NAME, MESOS_ALLOCATION_ROLE only; the image's user and
    working directory; "Container exited with status N"; both paths of a volume
    relative is an error of the run options."""
    from tests.test_testing_master import Scheduler, framework_info, task_info, with_master

    script = (
        "id -u; pwd; echo $MESOS_SANDBOX; echo $MESOS_CONTAINER_NAME; "
        "echo ${MESOS_FRAMEWORK_ID:-no-agent-env}; echo $MESOS_ALLOCATION_ROLE; "
        "ls /made-by-docker; exit 3"
    )

    @with_master(agents=1)
    async def scenario(master: Any, session: Any, sched: Scheduler) -> None:
        await sched.subscribe(framework_info())
        [offer] = await sched.offers()
        docker = {"image": task_image, "network": "HOST"}
        missing = tmp_path / "missing"
        first = task_info("t1", offer, script)
        first["container"] = {
            "type": "DOCKER",
            "docker": docker,
            "volumes": [{"host_path": str(missing), "container_path": "/made-by-docker"}],
        }
        await sched.launch(offer, first)
        status = await sched.until("t1", "TASK_FAILED", timeout=60)
        assert status["message"] == "Container exited with status 3"
        task = master.task("t1")
        lines = (Path(task["sandbox"]) / "stdout").read_text().splitlines()
        assert lines == [
            "65534",
            "/workspace",
            "/mnt/mesos/sandbox",
            f"mesos-{task['container_id']}",
            "no-agent-env",
            "*",
        ]
        assert missing.is_dir()  # the Docker daemon makes a missing host path
        [offer] = await sched.offers()
        second = task_info("t2", offer, "true")
        second["container"] = {
            "type": "DOCKER",
            "docker": docker,
            "volumes": [{"host_path": "a", "container_path": "b", "mode": "RW"}],
        }
        await sched.launch(offer, second)
        status = await sched.until("t2", "TASK_FAILED", timeout=60)
        assert status["reason"] == "REASON_CONTAINER_LAUNCH_FAILED"
        assert status["message"] == (
            "Failed to launch container: "
            "Both host_path 'a' and container_path 'b' of a volume are relative"
        )

    scenario()


@needs_podman
def test_killing_an_image_task_ends_its_container(task_image: str) -> None:
    from tests.test_testing_master import Scheduler, framework_info, task_info, with_master

    @with_master(agents=1)
    async def scenario(master: Any, session: Any, sched: Scheduler) -> None:
        await sched.subscribe(framework_info())
        [offer] = await sched.offers()
        info = task_info("t1", offer, "echo up; exec sleep 1000")
        info["container"] = {
            "type": "MESOS",
            "mesos": {"image": {"type": "DOCKER", "docker": {"name": task_image}}},
        }
        await sched.launch(offer, info)
        await sched.until("t1", "TASK_RUNNING", timeout=60)
        label = str(master.master_state.work_dir_path)
        stdout = Path(master.task("t1")["sandbox"]) / "stdout"
        await wait_until_async(lambda: stdout.read_text() == "up\n", 30)
        assert [line.split()[1] for line in podman_names(label)] == ["Up"]
        await sched.call("KILL", kill={"task_id": {"value": "t1"}})
        status = await sched.until("t1", "TASK_KILLED", timeout=30)
        assert status["message"] == "Command terminated with signal Terminated"
        await wait_until_async(lambda: podman_names(label) == [], 15)

    scenario()


@pytest.mark.e2e
@needs_podman
def test_a_missing_image_fails_the_launch(tmp_path: Path) -> None:
    from tests.test_testing_master import Scheduler, framework_info, task_info, with_master

    @with_master(agents=1)
    async def scenario(master: Any, session: Any, sched: Scheduler) -> None:
        await sched.subscribe(framework_info())
        [offer] = await sched.offers()
        info = task_info("t1", offer, f"touch {tmp_path}/ran")
        info["container"] = {
            "type": "MESOS",
            "mesos": {"image": {"type": "DOCKER", "docker": {"name": "localhost/no-such:image"}}},
        }
        await sched.launch(offer, info)
        status = await sched.until("t1", "TASK_FAILED", timeout=30)
        assert status["reason"] == "REASON_CONTAINER_LAUNCH_FAILED"
        assert status["message"].startswith(
            "Failed to launch container: Failed to provision image 'localhost/no-such:image': "
            "not in the local image store"
        )
        assert not (tmp_path / "ran").exists()

    scenario()


@pytest.mark.e2e
def test_the_reaper_removes_the_containers_it_was_told_of(tmp_path: Path) -> None:
    """If the master's process dies, its reaper removes every container still
    listed (here a stand-in command that leaves a file)."""
    import asyncio

    from tfmesos.testing.master.executor import Reaper

    async def scenario() -> None:
        reaper = Reaper()
        reaper.remove_container("mesos-a", ["touch", str(tmp_path / "a")])
        reaper.remove_container("mesos-b", ["touch", str(tmp_path / "b")])
        reaper.forget_container("mesos-b")
        await reaper.close()

    asyncio.run(scenario())
    assert (tmp_path / "a").exists()
    assert not (tmp_path / "b").exists()


@needs_podman
def test_a_frozen_partition_pauses_the_container_and_stopping_removes_it(
    task_image: str,
) -> None:
    """partition_agent(freeze=True) stops the task's processes: its container
    is paused (`podman pause`, the cgroup freezer); the master's stop kills and
    removes it all the same."""
    from tests.test_testing_master import Scheduler, framework_info, task_info, with_master

    labels: list[str] = []

    @with_master(agents=1)
    async def scenario(master: Any, session: Any, sched: Scheduler) -> None:
        await sched.subscribe(framework_info())
        [offer] = await sched.offers()
        info = task_info("t1", offer, "exec sleep 1000")
        info["container"] = {
            "type": "MESOS",
            "mesos": {"image": {"type": "DOCKER", "docker": {"name": task_image}}},
        }
        await sched.launch(offer, info)
        await sched.until("t1", "TASK_RUNNING", timeout=60)
        labels.append(str(master.master_state.work_dir_path))
        await wait_until_async(
            lambda: [n.split()[1] for n in podman_names(labels[0])] == ["Up"], 30
        )
        master.partition_agent(master.task("t1")["agent_id"], freeze=True)
        await wait_until_async(
            lambda: [n.split()[1] for n in podman_names(labels[0])] == ["Paused"], 15
        )

    scenario()
    assert podman_names(labels[0]) == []
