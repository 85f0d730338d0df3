"""A task over its memory, on agents that enforce it and on agents that only watch.

On a real Mesos 1.12 agent with ``--isolation=cgroups/cpu,cgroups/mem`` (the
Linux launcher, in a mount namespace of its own: tests/test_real_mesos_images.py
says why) the kernel OOM-kills the task's biggest process inside its cgroup,
the cgroups memory isolator hears of it, and the containerizer destroys the
container; the agent sends TASK_FAILED, SOURCE_AGENT,
REASON_CONTAINER_LIMITATION_MEMORY, "Memory limit exceeded: Requested: 288MB
Maximum Used: 288MB" and the cgroup's memory.stat (tfmesos/mesos/states.py).
Enforcement is real Mesos's to show (the test master does not emulate it).
With the agent's default isolation (``posix/cpu,posix/mem``), real Mesos's and
the test master's, memory is only measured: the task lives on.

tfrun must say which task, that it was killed for exceeding its memory, the
limit it was given and the flag that raises it, in one line as it stops the
job and in the verdict, without the cgroup's statistics.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import (
    MARK,
    MESOS_KINDS,
    TWO_WORKERS_TRUE,
    JobProcesses,
    marked_master,
    run_tfrun,
    start_tfrun,
)
from tests.jobevents import JobEvents
from tests.mesos_clusters import MesosUnderTest, real_mesos_home, real_mesos_unavailable
from tfmesos.mesos.states import EXECUTOR_MEM, MEM_FLAGS, describe_update
from tfmesos.testing.real_mesos import AgentSpec, MesosNotAvailable, RealMesos

JSON = dict[str, Any]
AGENT = AgentSpec("cpus:4;mem:8192;ports:[29000-29099]")
"""This test's one agent (ports of its own, as other clusters may run beside, and
below Linux's ephemeral ports, 32768-60999, which any connection may take)."""
TASK_MEM = 256
"""``-Mw``: the container's limit is this and the executor's 32 MB."""
HOG_MEM = 2 * TASK_MEM
"""What worker 1 allocates, every page written: twice its memory."""

HOG = """\
import sys, time
index, size, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
if index == "0":
    sys.exit(0)  # the chief, beside tfrun (no container, no limit)
print("allocating", flush=True)
hog = b"x" * (size << 20)
print("allocated", len(hog) >> 20, "MiB", flush=True)
time.sleep(hold)
sys.exit(3)
"""


LATE_HOG = """\
import os, sys, time
index, size, go = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if index == "0":
    sys.exit(0)
while not os.path.exists(go):
    time.sleep(0.05)
print("allocating", flush=True)
hog = b"x" * (size << 20)
print("allocated", len(hog) >> 20, "MiB", flush=True)
sys.exit(3)
"""
"""The hog of ``HOG``, which waits for the test's word (a file) to allocate."""
AGENT_DEAF = 3.0
"""How long the test keeps the Mesos agent stopped once the command is dead:
longer than the 2 s the launcher waited for its word before (three CI runs saw
a container's destroy take longer), less than the task's agent waits
(``tfmesos.agent.main.OOM_LINGER``)."""


@pytest.fixture
def hog(tmp_path: Path) -> Path:
    path = tmp_path / "hog.py"
    path.write_text(HOG)
    return path


def run_hog(
    mesos: MesosUnderTest, job_procs: JobProcesses, hog: Path, hold: float, events: JobEvents
) -> Any:
    """``tfrun -w 2 -s 0 -Mw 256``: worker 1 allocates twice that and holds
    it for ``hold`` seconds, then exits 3. Its events go to ``events``."""
    return run_tfrun(
        "-m",
        mesos.url,
        *events.flag,
        "-w",
        "2",
        "-s",
        "0",
        "-Mw",
        str(TASK_MEM),
        "--worker-logs",
        "*",
        "--",
        sys.executable,
        str(hog),
        "{task_index}",
        str(HOG_MEM),
        str(hold),
        env=job_procs.env(),
        timeout=240,
    )


def worker_1_statuses(mesos: MesosUnderTest) -> list[JSON]:
    """Every update of worker 1 as the master holds it: the double's own
    record, or real Mesos's operator API (``GET_TASKS``; ``/state`` leaves out
    message and reason)."""
    if mesos.double is not None:
        tasks = mesos.double.tasks()
    else:
        request = urllib.request.Request(
            mesos.url + "/api/v1",
            data=json.dumps({"type": "GET_TASKS"}).encode(),
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            listed = json.loads(answer.read())["get_tasks"]
        tasks = [t for key in ("tasks", "completed_tasks") for t in listed.get(key, [])]
    [task] = [t for t in tasks if t["name"].endswith("/job:worker/task:1")]
    statuses: list[JSON] = task["statuses"]
    return statuses


@pytest.fixture
def enforcing_mesos(job_procs: JobProcesses, tmp_path: Path) -> Iterator[MesosUnderTest]:
    """One agent that enforces memory: a real agent with the Linux launcher
    and ``cgroups/cpu,cgroups/mem``."""
    from tests.test_real_mesos_images import (
        mesos_route_prerequisites,
        remove_cgroups,
        wait_executors_gone,
        wrapped_home,
    )

    why = mesos_route_prerequisites()
    if why:
        print(f"\nskipping the real-Mesos cgroups/mem run: {why}", file=sys.stderr)
        pytest.skip(why)
    home = wrapped_home(real_mesos_home(), tmp_path / "home", sysrq_workaround=False)
    root = f"tfmesos-test-{uuid.uuid4().hex[:12]}"
    flags = {
        "launcher": "linux",
        "isolation": "cgroups/cpu,cgroups/mem,filesystem/linux",
        "cgroups_root": root,
    }
    real = RealMesos(
        home,
        agents=[AGENT],
        agent_flags=flags,
        # Mesos's own: test_a_limit_mesos_names_late_is_named_still stops
        # the agent for seconds, which RealMesos's 3 s would call a loss.
        master_flags={"agent_ping_timeout": "15secs", "max_agent_ping_timeouts": "5"},
        executor_env={MARK: job_procs.mark},
        base=tmp_path / "mesos",
    )
    try:
        try:
            real.start()
        except MesosNotAvailable as exc:
            real_mesos_unavailable(f"the cgroups/mem agent did not start: {exc}")
        try:
            job_procs.ignored.update(real.daemon_pids())
            yield MesosUnderTest(real=real)
        finally:
            # Its containers destroyed first, or their cgroups outlive it.
            wait_executors_gone(real)
            real.stop()
    finally:
        remove_cgroups(root)


@pytest.fixture(params=MESOS_KINDS)
def watching_mesos(
    request: pytest.FixtureRequest,
    job_procs: JobProcesses,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[MesosUnderTest]:
    """One agent with the default isolation, ``posix/cpu,posix/mem`` (the
    double's only one)."""
    if request.param == "test-master":
        with marked_master(job_procs, monkeypatch, agents=0) as double:
            double.call(lambda m: m.add_agent(cpus=4, mem=8192, ports="29100-29199"))
            yield MesosUnderTest(double=double)
        return
    real = RealMesos(
        real_mesos_home(),
        agents=[AgentSpec("cpus:4;mem:8192;ports:[29100-29199]")],
        executor_env={MARK: job_procs.mark},
        base=tmp_path / "mesos",
    )
    try:
        real.start()
    except MesosNotAvailable as exc:
        real_mesos_unavailable(f"it did not start: {exc}")
    try:
        job_procs.ignored.update(real.daemon_pids())
        yield MesosUnderTest(real=real)
    finally:
        real.stop()


def test_a_task_over_its_memory_is_killed_and_tfrun_names_it_the_limit_and_the_flag(
    enforcing_mesos: MesosUnderTest, job_procs: JobProcesses, hog: Path, tmp_path: Path
) -> None:
    mesos = enforcing_mesos
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_hog(mesos, job_procs, hog, hold=60, events=events)
    context = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.returncode == 1, context
    assert events.verdict()["result"] == "failed", context
    # Killed before it could hold what it asked for.
    assert "[worker:1] allocating" in result.stdout.splitlines(), context
    # The kernel stops the allocation at the limit.
    assert "allocated" not in result.stdout, context

    assert_the_limit_is_named(mesos, events, result.stderr, context)
    assert [p.cmdline() for p in job_procs.wait_gone(15)] == []


def assert_the_limit_is_named(
    mesos: MesosUnderTest, events: JobEvents, stderr: str, context: str
) -> None:
    """Mesos said worker 1's container went over its memory, and tfrun said
    so, in the event and in the user's two lines."""
    [end] = [
        s for s in worker_1_statuses(mesos) if s["state"] not in ("TASK_STARTING", "TASK_RUNNING")
    ]
    print("what the agent sent:", json.dumps(end, indent=1))
    assert (end["state"], end["source"], end["reason"]) == (
        "TASK_FAILED",
        "SOURCE_AGENT",
        "REASON_CONTAINER_LIMITATION_MEMORY",
    )
    limit = TASK_MEM + EXECUTOR_MEM
    head, _, stats = end["message"].partition("\n\nMEMORY STATISTICS: \n")
    assert head == f"Memory limit exceeded: Requested: {limit:g}MB Maximum Used: {limit:g}MB", end
    assert f"hierarchical_memory_limit {int(limit) << 20}\n" in stats
    assert end["limitation"] == {
        "resources": [{"name": "mem", "type": "SCALAR", "scalar": {"value": limit}}]
    }, end
    assert "container_status" not in end, end

    reason = (
        f"ended in state TASK_FAILED: killed for exceeding its memory limit of {TASK_MEM} MiB "
        f"(raise it with -Mw/--worker-mem); the agent said: {head} (the task's {TASK_MEM} MiB "
        "and 32 MiB for its executor)"
    )
    worker_1 = events.exited()["worker:1"]
    assert (worker_1["host"], worker_1["reason"], worker_1["action"]) == (
        "127.0.0.1",
        reason,
        "fail job",
    ), worker_1
    # The wording the user reads, the subject of this test: in one line as
    # tfrun stops the job, and in the verdict.
    said = f"task worker:1 on 127.0.0.1 {reason}"
    lines = stderr.splitlines()
    assert f"[tfrun] {said}: stopping every task" in lines, context
    assert f"[tfrun] job failed: {said}; its last output:" in lines, context
    assert "MEMORY STATISTICS" not in stderr, context


def test_a_limit_mesos_names_late_is_named_still(
    enforcing_mesos: MesosUnderTest, job_procs: JobProcesses, tmp_path: Path
) -> None:
    """The container's destroy, and so the agent's TASK_FAILED, comes seconds
    after the task's own report of a SIGKILL: tfrun waits for it."""
    real = enforcing_mesos.real
    assert real is not None
    hog, go = tmp_path / "late_hog.py", tmp_path / "go"
    hog.write_text(LATE_HOG)
    proc, _ = start_tfrun(
        "-m", real.url, "-w", "2", "-s", "0", "-Mw", str(TASK_MEM), "--worker-logs", "*",
        "--", sys.executable, str(hog), "{task_index}", str(HOG_MEM), str(go),
        env=job_procs.env(),
    )  # fmt: skip

    def hogs() -> list[Any]:
        found = []
        for process in job_procs.alive():
            with contextlib.suppress(psutil.Error):  # gone, or a zombie
                if process.cmdline()[1:3] == [str(hog), "1"]:
                    found.append(process)
        return found

    deadline = time.monotonic() + 60
    while not hogs():
        assert time.monotonic() < deadline, "worker 1's command never started"
        time.sleep(0.05)
    real.pause_agent(0)
    try:
        go.touch()
        deadline = time.monotonic() + 60
        while hogs():  # the kernel kills it; the stopped agent hears nothing yet
            assert time.monotonic() < deadline, "worker 1's command was never killed"
            time.sleep(0.05)
        time.sleep(AGENT_DEAF)  # the fault injected: an agent slow to destroy the container
    finally:
        real.resume_agent(0)
    stdout, stderr = proc.communicate(timeout=120)
    context = f"exit {proc.returncode}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    assert proc.returncode == 1, context
    assert "allocated" not in stdout, context
    assert_the_limit_is_named(enforcing_mesos, proc.events, stderr, context)
    assert [p.cmdline() for p in job_procs.wait_gone(15)] == []


def test_a_task_within_a_small_memory_finishes_where_memory_is_enforced(
    enforcing_mesos: MesosUnderTest, job_procs: JobProcesses, tmp_path: Path
) -> None:
    """64 MiB (96 MB for the container) hold the executor, the task's agent
    and a command: the kernel finds no excess."""
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "-m", enforcing_mesos.url, *events.flag, "-Mw", "64", *TWO_WORKERS_TRUE,
        env=job_procs.env(), timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert events.exited()["worker:1"]["exit_code"] == 0, events.exited()
    statuses = worker_1_statuses(enforcing_mesos)
    assert not [s for s in statuses if "reason" in s and "LIMITATION" in s["reason"]], statuses


def test_a_task_over_its_memory_lives_on_where_the_agent_only_watches_memory(
    watching_mesos: MesosUnderTest, job_procs: JobProcesses, hog: Path, tmp_path: Path
) -> None:
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_hog(watching_mesos, job_procs, hog, hold=1, events=events)
    context = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert f"[worker:1] allocated {HOG_MEM} MiB" in result.stdout.splitlines(), context
    verdict = events.verdict()
    assert (verdict["result"], verdict["exit_status"]) == ("failed", 3), context
    worker_1 = events.exited()["worker:1"]
    assert (worker_1["host"], worker_1["exit_code"], worker_1["signal"]) == (
        "127.0.0.1",
        3,
        None,
    ), worker_1
    [end] = [
        s
        for s in worker_1_statuses(watching_mesos)
        if s["state"] not in ("TASK_STARTING", "TASK_RUNNING")
    ]
    assert "reason" not in end or end["reason"] != "REASON_CONTAINER_LIMITATION_MEMORY", end
    assert [p.cmdline() for p in job_procs.wait_gone(15)] == []


@pytest.mark.e2e
def test_the_memory_flags_named_are_tfrun_s() -> None:
    result = run_tfrun("--help")
    for flags in MEM_FLAGS.values():
        short, long = flags.split("/")
        assert f"{short} MIB, {long} MIB" in result.stdout, result.stdout


def test_an_update_for_a_memory_limit_says_the_limit_and_the_flag_without_the_statistics() -> None:
    # A real agent's words (Mesos 1.12, cgroups/mem), its memory.stat cut short.
    message = (
        "Memory limit exceeded: Requested: 288MB Maximum Used: 288MB\n\n"
        "MEMORY STATISTICS: \nhierarchical_memory_limit 301989888\ntotal_rss 301727744\n\n"
    )
    status = {"message": message, "reason": "REASON_CONTAINER_LIMITATION_MEMORY"}
    assert describe_update(status, "ps", 256.0) == (
        "killed for exceeding its memory limit of 256 MiB (raise it with -Ms/--server-mem); "
        "the agent said: Memory limit exceeded: Requested: 288MB Maximum Used: 288MB "
        "(the task's 256 MiB and 32 MiB for its executor)"
    )
    # A job of the Python API: no tfrun flag to name.
    assert describe_update({"reason": "REASON_CONTAINER_LIMITATION_MEMORY"}, "eval") == (
        "killed for exceeding its memory limit (raise the eval job's mem)"
    )
    # Other ends are as they were: the message, then the reason in words.
    assert describe_update(
        {"message": "Command exited with status 3", "reason": "REASON_COMMAND_EXECUTOR_FAILED"}
    ) == ("Command exited with status 3; REASON_COMMAND_EXECUTOR_FAILED")
