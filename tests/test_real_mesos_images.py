"""The task image on a real Apache Mesos 1.12 agent: tfrun jobs whose remote
tasks run ``--image`` (scripts/build-image's CPU image), with and without a
read-only ``-V`` volume, through both of Mesos's containerizers.

The test master runs no images (docs/test-master.md); these run them on
``mesos-agent`` itself (tfmesos.testing.real_mesos), one agent per test:

- **The Mesos containerizer** (``--containerizers=mesos``, the default):
  ``--launcher=linux --isolation=cgroups/cpu,cgroups/mem,filesystem/linux,docker/runtime``
  with a local Docker image store, ``--image_providers=docker
  --docker_registry=DIR --docker_store_dir=DIR2``: DIR holds the image as a
  ``docker save`` archive named after it (``DIR/localhost/tfmesos:cpu-….tar``,
  made here with ``podman save --format docker-archive``). Two things of this
  machine need working around, both in a copy of the Mesos folder that the
  test starts instead (:func:`wrapped_home`):

  * the Linux launcher and the cgroups isolators abort on the hybrid cgroup
    layout (``Check failed: !subsystemSet.empty()``, for the named hierarchy
    ``name=systemd``): ``sbin/mesos-agent`` starts the agent in a mount
    namespace of its own, without that mount (``unshare -m --propagation
    private``, then ``umount /sys/fs/cgroup/systemd``);
  * the kernel has no ``/proc/sysrq-trigger`` (no ``CONFIG_MAGIC_SYSRQ``), and
    the filesystem/linux isolator bind-mounts it read-only into every container
    with an image (``ROOTFS_CONTAINER_MOUNTS`` in
    src/slave/containerizer/mesos/isolators/filesystem/linux.cpp, no flag turns
    it off): ``mesos-containerizer launch`` fails with "Failed to prepare
    mounts: Failed to create mount target '…/proc/sysrq-trigger': No such file
    or directory" (it mkdirs a missing target, in procfs), whatever the image.
    ``libexec/mesos/mesos-containerizer`` drops that one mount from the launch
    info (``$MESOS_CONTAINERIZER_LAUNCH_INFO``) before the real one runs;
    :func:`test_without_proc_sysrq_trigger_the_agent_cannot_launch_an_image`
    keeps the agent's own message.

  Each agent gets a ``--cgroups_root`` of its own: on recovery the Linux
  launcher destroys every container under its root that it does not know.

- **The Docker containerizer** (``--containerizers=docker,mesos``) through
  podman's Docker-compatible API (``podman system service``, on a socket of
  the test session's), with the agent's ``--docker_socket`` and a ``docker``
  CLI. ``--docker_kill_orphans=false``: an agent that starts removes every
  ``mesos-*`` container it does not know, and podman's store is shared;
  each test removes its own containers instead.

A route this machine cannot give (not root, no ``unshare``, no cgroup v1
freezer, no ``docker`` CLI) is skipped with the reason; one whose containers
the agent fails to launch is skipped with the agent's own messages (the task's
status and its executor's stderr) printed, and fails under CI, where a
machine like this one is expected to run both. Without podman, or without the
image, everything is skipped, with the reason (failed under CI).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.conftest import MARK, ROOT, JobProcesses, run_tfrun, tfrun_argv
from tests.mesos_clusters import real_mesos_home
from tfmesos.testing.real_mesos import AgentSpec, MesosNotAvailable, RealMesos

pytestmark = pytest.mark.skipif(
    shutil.which("podman") is None,
    reason="podman is not installed: the task image cannot be built or saved here "
    "(Debian: apt-get install podman runc mmdebstrap)",
)

VENV_PYTHON = "/opt/tfmesos/venv/bin/python3"
"""The image's interpreter (docker/Dockerfile's virtual environment)."""
AGENT = AgentSpec("cpus:4;mem:8192;ports:[30500-30599]")
"""One agent, its ports outside those of the other real-Mesos tests (31000 and
up) that may run on this host at the same time, and below the ephemeral ones."""
MESOS_ROUTE = "Mesos containerizer"
DOCKER_ROUTE = "Docker containerizer"
SYSRQ = "/proc/sysrq-trigger"

PROBE = """
import json, os, sys
def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None
try:
    open('/data/written-by-a-task', 'w').close()
    writable = True
except OSError:
    writable = False
release = read('/etc/os-release') or ''
print('REPORT ' + json.dumps(dict(
    executable=sys.executable,
    greeting=read('/data/greeting'),
    data_writable=writable,
    sandbox=os.environ.get('MESOS_SANDBOX'),
    uid=os.getuid(),
    cwd=os.getcwd(),
    os=release.splitlines()[:1],
)))
"""
"""A task's command (``python3 -c``; no braces: tfrun fills ``{…}`` in commands)."""


def say(text: str) -> None:
    print(f"\n{text}", file=sys.stderr, flush=True)


def route_unavailable(route: str, reason: str, expected: bool) -> NoReturn:
    """Skip, printing why; under CI fail instead when the route is expected
    to work here (its prerequisites are all present)."""
    if expected and os.environ.get("CI"):
        pytest.fail(f"the {route} route is expected to work on this machine, but: {reason}")
    say(f"skipping the {route} route: {reason}")
    pytest.skip(f"the {route} route: {reason}")


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    runtime = ["--runtime", "runc"] if shutil.which("runc") else []
    return subprocess.run(["podman", *runtime, *args], capture_output=True, text=True, check=check)


# ------------------------------------------------------------- the image


@pytest.fixture(scope="session")
def task_image() -> str:
    """The CPU task image of this checkout: $TFMESOS_TEST_IMAGE, or built
    (once; then found built)."""
    named = checkout_image()
    if podman("image", "exists", named, check=False).returncode != 0:
        reason = f"the task image {named} is not in podman's store"
        if os.environ.get("CI"):
            pytest.fail(reason)
        say(f"skipping: {reason}")
        pytest.skip(reason)
    return named


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


def _cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tfmesos" / "real-mesos-images"


@pytest.fixture(scope="session")
def docker_store(task_image: str) -> tuple[Path, Path]:
    """``(--docker_registry, --docker_store_dir)`` for the Mesos containerizer:
    the image saved as ``REGISTRY/NAME.tar`` (``docker save``'s format), and
    the agent's store of unpacked layers; both kept in
    ``$XDG_CACHE_HOME/tfmesos/real-mesos-images/IMAGE-ID/`` for later runs
    (those of other images removed: some 4 GB each)."""
    image_id = podman("image", "inspect", "--format", "{{.Id}}", task_image).stdout.strip()
    folder = _cache() / image_id[:12]
    for other in _cache().glob("*") if _cache().is_dir() else ():
        if other != folder:
            shutil.rmtree(other, ignore_errors=True)
    registry, store = folder / "registry", folder / "store"
    archive = registry / f"{task_image}.tar"
    if not archive.is_file():
        archive.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        # (podman refuses a ':' in -o's file name: saved, then renamed)
        fd, saving = tempfile.mkstemp(prefix=".saving-", suffix=".tar", dir=archive.parent)
        os.close(fd)
        os.unlink(saving)
        podman("save", "--format", "docker-archive", "-o", saving, task_image)
        os.rename(saving, archive)
        say(f"saved {task_image} for the agent's image store in {time.monotonic() - started:.0f} s")
    store.mkdir(parents=True, exist_ok=True)
    return registry, store


# ------------------------------------------------- the agents of each route


def _mounts() -> list[list[str]]:
    return [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]


def _cgroup_v1_freezer() -> bool:
    return any(m[2] == "cgroup" and "freezer" in m[3].split(",") for m in _mounts() if len(m) > 3)


CONTAINERIZER_WRAPPER = """#!{python}
# mesos-containerizer, less the read-only bind mount of /proc/sysrq-trigger
# that the filesystem/linux isolator adds to every container with an image:
# this kernel has none (no CONFIG_MAGIC_SYSRQ), and "mesos-containerizer
# launch" fails on it ("Failed to create mount target ...: No such file or
# directory"). (tests/test_real_mesos_images.py)
import json, os, sys
REAL = {real!r}
KEY = "MESOS_CONTAINERIZER_LAUNCH_INFO"
if sys.argv[1:2] == ["launch"] and os.environ.get(KEY, "").startswith("{{"):
    info = json.loads(os.environ[KEY])
    info["mounts"] = [
        m for m in info.get("mounts", []) if not m.get("target", "").endswith({sysrq!r})
    ]
    os.environ[KEY] = json.dumps(info)
os.execv(REAL, [REAL, *sys.argv[1:]])
"""

AGENT_WRAPPER = """#!/bin/sh
# mesos-agent in a mount namespace of its own, without the named cgroup v1
# hierarchy (name=systemd, no controllers) that makes the Linux launcher and
# the cgroups isolators abort. (tests/test_real_mesos_images.py)
exec unshare -m --propagation private sh -c \\
  'if grep -q " /sys/fs/cgroup/systemd cgroup " /proc/self/mounts; then
     umount /sys/fs/cgroup/systemd || exit 1
   fi
   exec "$0" "$@"' {real} "$@"
"""


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def wrapped_home(home: Path, folder: Path, sysrq_workaround: bool) -> Path:
    """A Mesos folder like ``home`` (its files linked) whose ``mesos-agent``
    runs in a mount namespace of its own, and whose ``mesos-containerizer``
    leaves out the mount of /proc/sysrq-trigger where this kernel lacks it
    (and ``sysrq_workaround``)."""
    (folder / "sbin").mkdir(parents=True)
    (folder / "libexec" / "mesos").mkdir(parents=True)
    for name in ("bin", "lib", "share"):
        (folder / name).symlink_to(home / name)
    (folder / "sbin" / "mesos-master").symlink_to(home / "sbin" / "mesos-master")
    _executable(
        folder / "sbin" / "mesos-agent", AGENT_WRAPPER.format(real=home / "sbin" / "mesos-agent")
    )
    for helper in (home / "libexec" / "mesos").iterdir():
        (folder / "libexec" / "mesos" / helper.name).symlink_to(helper)
    if sysrq_workaround and not os.path.exists(SYSRQ):
        wrapper = folder / "libexec" / "mesos" / "mesos-containerizer"
        wrapper.unlink()
        real = str(home / "libexec" / "mesos" / "mesos-containerizer")
        _executable(
            wrapper, CONTAINERIZER_WRAPPER.format(python=sys.executable, real=real, sysrq=SYSRQ)
        )
    return folder


def mesos_route_prerequisites() -> str | None:
    """Why the Mesos containerizer's route cannot be tried here, or None."""
    if os.geteuid() != 0:
        return "the Linux launcher and the filesystem/linux isolator need root"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    if not _cgroup_v1_freezer():
        return "no cgroup v1 freezer hierarchy: Mesos 1.12's Linux launcher needs one"
    return None


@pytest.fixture(scope="session")
def mesos_homes(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    """The wrapped Mesos folders for the Mesos containerizer's route, by
    whether the /proc/sysrq-trigger workaround is in."""
    home = real_mesos_home()
    why = mesos_route_prerequisites()
    if why:
        route_unavailable(MESOS_ROUTE, why, expected=False)
    base = tmp_path_factory.mktemp("mesos-homes")
    return {
        workaround: wrapped_home(home, base / f"sysrq-workaround-{workaround}", workaround)
        for workaround in (True, False)
    }


CONTAINERS_CONF = """[containers]
# Limits a sandbox allows (podman's defaults may exceed them), as scripts/build-image.
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
"""


@pytest.fixture(scope="session")
def podman_socket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """podman's Docker-compatible API on a socket of this session's
    (``podman system service``, stopped by its pid at the end)."""
    if shutil.which("docker") is None:
        route_unavailable(
            DOCKER_ROUTE,
            "no docker CLI here (the agent runs `docker`; Debian: apt-get install docker.io)",
            expected=False,
        )
    folder = tmp_path_factory.mktemp("podman-service")
    socket = folder / "podman.sock"
    (folder / "containers.conf").write_text(CONTAINERS_CONF)
    env = dict(os.environ, CONTAINERS_CONF=str(folder / "containers.conf"))
    runtime = ["--runtime", "runc"] if shutil.which("runc") else []
    with open(folder / "service.log", "wb") as log:
        service = subprocess.Popen(
            ["podman", *runtime, "system", "service", "--time=0", f"unix://{socket}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        # (it waits for podman's store lock: a build holds it for minutes)
        deadline = time.monotonic() + 300
        while not socket.exists():
            if service.poll() is not None or time.monotonic() > deadline:
                log_text = (folder / "service.log").read_text(errors="replace")[-2000:]
                route_unavailable(
                    DOCKER_ROUTE, f"podman system service did not start: {log_text}", True
                )
            time.sleep(0.2)
        version = subprocess.run(
            ["docker", "-H", f"unix://{socket}", "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
        )
        if version.returncode != 0:
            route_unavailable(DOCKER_ROUTE, f"docker version: {version.stderr.strip()}", True)
        yield socket
    finally:
        service.terminate()
        try:
            service.wait(10)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()


# ------------------------------------------------------------ one cluster


def container_ids(real: RealMesos) -> list[str]:
    """The ids of every container the agent ran (its sandboxes' folders)."""
    assert real.base is not None
    return sorted(
        run.name
        for run in real.base.glob("agent0/slaves/*/frameworks/*/executors/*/runs/*")
        if run.name != "latest"
    )


def agent_messages(real: RealMesos) -> str:
    """What the agent said of its tasks: each task's last status, and the last
    lines of each executor's stderr (where ``mesos-containerizer`` and the
    Docker executor write why a container did not start)."""
    lines = []
    for task in all_tasks(real):
        last = task["statuses"][-1] if task.get("statuses") else {}
        message = f": {last['message']}" if last.get("message") else ""
        # (a task's name ends with its target; the command comes before)
        lines.append(f"{task['name'].rsplit(' ', 1)[-1]}: {task['state']}{message}")
    assert real.base is not None
    for stderr in sorted(real.base.glob("agent0/slaves/*/frameworks/*/executors/*/runs/*/stderr")):
        if stderr.parent.name == "latest":
            continue
        text = stderr.read_text(errors="replace").strip().splitlines()
        lines.append(f"executor stderr ({stderr.parent.name}):")
        lines += [f"  {line}" for line in text[-4:]]
    return "\n".join(lines)


def all_tasks(real: RealMesos) -> list[dict[str, Any]]:
    state = real.state()
    return [
        task
        for framework in state["frameworks"] + state["completed_frameworks"]
        for key in ("tasks", "completed_tasks")
        for task in framework.get(key, [])
    ]


def worker_task(real: RealMesos) -> dict[str, Any]:
    """The job's one remote task, worker:1 (its last launch, if relaunched)."""
    tasks = all_tasks(real)
    assert tasks and all(t["name"].endswith("/job:worker/task:1") for t in tasks), tasks
    return max(tasks, key=lambda t: max(s["timestamp"] for s in t["statuses"]))


def never_ran(real: RealMesos) -> bool:
    """No task of the job reached TASK_RUNNING: their containers did not start."""
    return not any(
        status["state"] == "TASK_RUNNING"
        for task in all_tasks(real)
        for status in task.get("statuses", [])
    )


def wait_executors_gone(real: RealMesos, timeout: float = 15.0) -> None:
    """Until the agent has no executor left (it has destroyed their containers
    and cgroups), or ``timeout``: a job's end does not wait for that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, IndexError):
            state = real.agent_state(0)
            if not any(f.get("executors") for f in state["frameworks"]):
                return
        time.sleep(0.2)


@contextlib.contextmanager
def one_agent(
    route: str, home: Path, flags: dict[str, str], job_procs: JobProcesses, base: Path
) -> Iterator[RealMesos]:
    real = RealMesos(
        home, agents=[AGENT], executor_env={MARK: job_procs.mark}, agent_flags=flags, base=base
    )
    try:
        real.start()
    except MesosNotAvailable as exc:
        route_unavailable(route, f"the agent did not start: {exc}", expected=True)
    try:
        job_procs.ignored.update(real.daemon_pids())
        yield real
    finally:
        ran = container_ids(real)
        wait_executors_gone(real)
        real.stop()
        if route == DOCKER_ROUTE:
            for container in ran:
                podman("rm", "--force", "--ignore", f"mesos-{container}", check=False)


def mesos_flags(store: tuple[Path, Path]) -> dict[str, str]:
    registry, store_dir = store
    return {
        "launcher": "linux",
        "isolation": "cgroups/cpu,cgroups/mem,filesystem/linux,docker/runtime",
        "image_providers": "docker",
        "docker_registry": str(registry),
        "docker_store_dir": str(store_dir),
        # Its own: a Linux launcher recovering destroys every container under
        # its root that it does not know, another agent's included.
        "cgroups_root": f"tfmesos-test-{uuid.uuid4().hex[:12]}",
    }


def remove_cgroups(root: str) -> None:
    """The (empty) cgroups the agent made under its root, in each hierarchy,
    those of containers it had not destroyed yet when it was stopped included."""
    for top in sorted(Path("/sys/fs/cgroup").glob(f"*/{root}")):
        for folder, _, _ in os.walk(top, topdown=False):
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def docker_flags(socket: Path) -> dict[str, str]:
    return {
        "containerizers": "docker,mesos",
        "docker": shutil.which("docker") or "docker",
        "docker_socket": str(socket),
        # podman's store is shared: an agent that starts would remove every
        # mesos-* container it does not know (the test master's too).
        "docker_kill_orphans": "false",
    }


# ------------------------------------------------------------ one job


def run_job(
    real: RealMesos,
    job_procs: JobProcesses,
    image: str,
    tmp_path: Path,
    *extra: str,
) -> tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]]:
    """``tfrun -w 2 -s 0 --image IMAGE EXTRA -- python3 -c PROBE``: the result,
    and each worker's report by task ("worker:1")."""
    # `python3` is the image's in a container, this interpreter beside tfrun.
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    started = time.monotonic()
    result = run_tfrun(
        "-m",
        real.url,
        "--image",
        image,
        *extra,
        "--worker-logs",
        "*",
        "-w",
        "2",
        "-s",
        "0",
        "--",
        "python3",
        "-c",
        PROBE,
        env=job_procs.env(PATH=path),
        timeout=420,
    )
    print(f"the job took {time.monotonic() - started:.1f} s (exit {result.returncode})")
    reports = {}
    for line in result.stdout.splitlines():
        match = re.fullmatch(r"\[(worker:\d+)\] REPORT (.*)", line)
        if match:
            reports[match[1]] = json.loads(match[2])
    return result, reports


def check_job(
    route: str,
    real: RealMesos,
    result: subprocess.CompletedProcess[str],
    reports: dict[str, dict[str, Any]],
) -> None:
    """The job succeeded, its chief on this host and worker 1 in the image;
    or the route is unavailable here, with the agent's messages."""
    if result.returncode != 0 and never_ran(real):
        route_unavailable(
            route,
            f"tfrun exited {result.returncode}: {result.stderr.strip()[-1500:]}\n"
            f"the agent's messages:\n{agent_messages(real)}",
            expected=True,
        )
    context = (
        f"tfrun exited {result.returncode}\nstdout:\n{result.stdout[-3000:]}\n"
        f"stderr:\n{result.stderr[-3000:]}\nthe agent's messages:\n{agent_messages(real)}"
    )
    try:
        check_reports(real, result, reports)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{context}") from None


def check_reports(
    real: RealMesos,
    result: subprocess.CompletedProcess[str],
    reports: dict[str, dict[str, Any]],
) -> None:
    assert result.returncode == 0
    assert sorted(reports) == ["worker:0", "worker:1"]
    # The chief ran beside tfrun, with this interpreter.
    assert Path(reports["worker:0"]["executable"]).parent == Path(sys.executable).parent
    remote = reports["worker:1"]
    assert remote["executable"] == VENV_PYTHON, remote
    assert remote["sandbox"] == "/mnt/mesos/sandbox"
    assert remote["os"] == ['PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"']
    # The agent's working directory is not in the image: the image's WORKDIR.
    assert remote["cwd"] == "/workspace"
    task = worker_task(real)
    # Its command exited 0 (as the task's agent told tfrun); tfrun may end
    # the task before its agent process exits by itself.
    assert "task worker:1 finished (exit 0)" in result.stderr
    assert task["state"] in ("TASK_FINISHED", "TASK_KILLED"), task["state"]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A folder for ``-V …:/data:ro``, holding one file."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "greeting").write_text("hello from the host\n")
    return folder


def check_volume(reports: dict[str, dict[str, Any]], data: Path) -> None:
    remote = reports["worker:1"]
    assert remote["greeting"] == "hello from the host\n"
    assert remote["data_writable"] is False
    assert not (data / "written-by-a-task").exists()
    assert reports["worker:0"]["greeting"] is None  # (no /data on this host)


# ------------------------------------------------- the Mesos containerizer


@pytest.mark.parametrize("volume", [False, True], ids=["image", "image-and-ro-volume"])
def test_an_image_job_on_the_mesos_containerizer(
    mesos_homes: dict[bool, Path],
    docker_store: tuple[Path, Path],
    task_image: str,
    job_procs: JobProcesses,
    tmp_path: Path,
    data: Path,
    volume: bool,
) -> None:
    flags = mesos_flags(docker_store)
    try:
        with one_agent(MESOS_ROUTE, mesos_homes[True], flags, job_procs, tmp_path / "m") as real:
            extra = ("-V", f"{data}:/data:ro") if volume else ()
            result, reports = run_job(real, job_procs, task_image, tmp_path, *extra)
            check_job(MESOS_ROUTE, real, result, reports)
            if volume:
                check_volume(reports, data)
            else:
                assert reports["worker:1"]["greeting"] is None
            # The task's user (this process's), not the image's USER.
            assert reports["worker:1"]["uid"] == os.geteuid()
            task = worker_task(real)
            assert task["container"]["type"] == "MESOS"
            assert task["container"]["mesos"]["image"]["docker"]["name"] == task_image
    finally:
        remove_cgroups(flags["cgroups_root"])
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_without_proc_sysrq_trigger_the_agent_cannot_launch_an_image(
    mesos_homes: dict[bool, Path],
    docker_store: tuple[Path, Path],
    task_image: str,
    job_procs: JobProcesses,
    tmp_path: Path,
) -> None:
    """Why the route needs its mesos-containerizer wrapper: on a kernel
    without /proc/sysrq-trigger the filesystem/linux isolator's mount of it
    fails every container with an image, in the agent's own words."""
    if os.path.exists(SYSRQ):
        say(f"skipping: this kernel has {SYSRQ}; the agent mounts it as it is")
        pytest.skip(f"this kernel has {SYSRQ}")
    flags = mesos_flags(docker_store)
    try:
        with one_agent(MESOS_ROUTE, mesos_homes[False], flags, job_procs, tmp_path / "m") as real:
            result, _ = run_job(real, job_procs, task_image, tmp_path)
            assert result.returncode != 0
            assert "ended in state TASK_FAILED: Executor terminated" in result.stderr
            assert never_ran(real)
            messages = agent_messages(real)
            say(f"the agent's messages without the workaround:\n{messages}")
            assert re.search(
                r"Failed to prepare mounts: Failed to create mount target "
                r"'[^']*/proc/sysrq-trigger': No such file or directory",
                messages,
            ), messages
    finally:
        remove_cgroups(flags["cgroups_root"])
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


# ------------------------------------------------ the Docker containerizer


@pytest.mark.parametrize("volume", [False, True], ids=["image", "image-and-ro-volume"])
def test_an_image_job_on_the_docker_containerizer(
    podman_socket: Path,
    task_image: str,
    job_procs: JobProcesses,
    tmp_path: Path,
    data: Path,
    volume: bool,
) -> None:
    home = real_mesos_home()
    flags = docker_flags(podman_socket)
    with one_agent(DOCKER_ROUTE, home, flags, job_procs, tmp_path / "m") as real:
        extra = ("-V", f"{data}:/data:ro") if volume else ()
        result, reports = run_job(real, job_procs, task_image, tmp_path, "-C", "DOCKER", *extra)
        check_job(DOCKER_ROUTE, real, result, reports)
        if volume:
            check_volume(reports, data)
        # `docker run` without -u: the image's USER (nobody).
        assert reports["worker:1"]["uid"] == 65534
        task = worker_task(real)
        assert task["container"]["type"] == "DOCKER"
        assert task["container"]["docker"]["image"] == task_image
        ran = container_ids(real)
    assert ran
    for container in ran:
        assert podman("container", "exists", f"mesos-{container}", check=False).returncode == 1
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


HOST_AGENT_WRAPPER = """#!/bin/sh
# mesos-agent on a host of its own: "ip netns exec" mounted a sysfs of the
# host's over /sys, without this machine's cgroup hierarchies, which the
# Linux launcher and the cgroups isolators need: mounted again (the same
# hierarchies, as one may mount a v1 hierarchy twice), in a mount namespace
# of the agent's own. (tests/test_real_mesos_images.py)
exec unshare -m --propagation private sh -c \\
  'mount -t tmpfs -o mode=755 tmpfs /sys/fs/cgroup || exit 1
   {mounts}
   exec "$0" "$@"' {real} "$@"
"""


def on_a_host(home: Path, folder: Path) -> Path:
    """A Mesos folder like the wrapped ``home`` whose ``mesos-agent`` mounts
    this machine's cgroup v1 hierarchies (but ``name=systemd``) again first."""
    mounts = []
    for fields in _mounts():
        if len(fields) > 3 and fields[2] == "cgroup" and "name=systemd" not in fields[3]:
            options = [o for o in fields[3].split(",") if o not in ("rw", "relatime")]
            mounts.append(
                f"mkdir -p {fields[1]} && mount -t cgroup -o {','.join(options)} cgroup "
                f"{fields[1]} || exit 1"
            )
    folder.mkdir(parents=True)
    for entry in home.iterdir():
        if entry.name != "sbin":
            (folder / entry.name).symlink_to(entry.resolve() if entry.is_symlink() else entry)
    (folder / "sbin").mkdir()
    (folder / "sbin" / "mesos-master").symlink_to(home / "sbin" / "mesos-master")
    text = HOST_AGENT_WRAPPER.format(
        mounts="\n   ".join(mounts), real=home / "sbin" / "mesos-agent"
    )
    _executable(folder / "sbin" / "mesos-agent", text)
    return folder


def test_an_image_job_across_hosts_of_their_own(
    mesos_homes: dict[bool, Path],
    docker_store: tuple[Path, Path],
    task_image: str,
    job_procs: JobProcesses,
    tmp_path: Path,
) -> None:
    """``--image`` from the client host of hosts of their own
    (``RealMesos(hosts=True)``): worker 1 and worker 2 in the image on two
    agents, each on its own host, the chief beside tfrun. (The two agents
    share one cgroups root: both start before any container, so neither's
    recovery finds the other's.)"""
    from tfmesos.testing import netns

    why = netns.hosts_unavailable()
    if why:
        say(f"skipping a run on hosts of their own: {why}")
        pytest.skip(why)
    flags = mesos_flags(docker_store)
    spec = AgentSpec("cpus:1.2;mem:2048;ports:[30500-30599]")
    real = RealMesos(
        on_a_host(mesos_homes[True], tmp_path / "home"),
        agents=[spec, spec],
        executor_env={MARK: job_procs.mark},
        agent_flags=flags,
        base=tmp_path / "m",
        hosts=True,
    )
    try:
        try:
            real.start()
        except MesosNotAvailable as exc:
            route_unavailable(MESOS_ROUTE, f"the agents did not start: {exc}", expected=True)
        job_procs.ignored.update(real.daemon_pids())
        path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
        result = subprocess.run(
            real.client_argv(
                tfrun_argv(
                    *("-m", real.master_address, "--image", task_image, "--worker-logs", "*"),
                    *("-w", "3", "-s", "0", "--", "python3", "-c", PROBE),
                )
            ),
            capture_output=True,
            text=True,
            env=job_procs.env(PATH=path),
            cwd=ROOT,
            timeout=420,
        )
        reports = {}
        for line in result.stdout.splitlines():
            match = re.fullmatch(r"\[(worker:\d+)\] REPORT (.*)", line)
            if match:
                reports[match[1]] = json.loads(match[2])
        if result.returncode != 0 and never_ran(real):
            route_unavailable(
                MESOS_ROUTE,
                f"tfrun exited {result.returncode}: {result.stderr.strip()[-1500:]}",
                expected=True,
            )
        assert result.returncode == 0, result.stderr[-3000:]
        assert sorted(reports) == ["worker:0", "worker:1", "worker:2"], result.stdout[-3000:]
        for remote in (reports["worker:1"], reports["worker:2"]):
            assert remote["executable"] == VENV_PYTHON, remote
            assert remote["os"] == ['PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"']
        placed = {
            line.split(" registered at ")[1].split(":")[0]
            for line in result.stderr.splitlines()
            if " registered at " in line
        }
        assert placed == {"client", "agent0", "agent1"}, result.stderr
    finally:
        for index in range(len(real.agents)):
            with contextlib.suppress(OSError, ValueError, IndexError, AssertionError):
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline and any(
                    f.get("executors") for f in real.agent_state(index)["frameworks"]
                ):
                    time.sleep(0.2)
        real.stop()
        remove_cgroups(flags["cgroups_root"])
    assert netns.leftovers(os.getpid()) == []
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []
