"""A command the kernel's OOM killer ends is said to be, not just "killed by
SIGKILL": tfrun, under a memory cgroup with a limit (as in a ``podman
--memory`` container, a Slurm step or a Mesos container), runs a task that
allocates twice that limit. The count the kernel keeps (tfmesos/agent/oomkills.py)
rises; tfrun reads it, or the task's agent does, and says so.

Needs root and a cgroup v1 memory hierarchy this test may make a cgroup in
(the one Mesos's cgroups isolators use); elsewhere it is skipped, saying why.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import JobProcesses, tfrun_argv
from tests.jobevents import JobEvents
from tests.test_local_jobs import RUN_BY
from tfmesos.agent import oomkills

HIERARCHY = Path("/sys/fs/cgroup/memory")
LIMIT_MIB = 200
"""tfrun, the task's agent where there is one, and the command: ~100 MiB."""
HOG_MIB = 2 * LIMIT_MIB

HOG = f"""\
import sys
print("allocating", flush=True)
hog = b"x" * ({HOG_MIB} << 20)
print("allocated", flush=True)
sys.exit(3)
"""


@pytest.fixture
def memory_cgroup() -> Iterator[Path]:
    """A memory cgroup of this test's with a ``LIMIT_MIB`` limit and no swap."""
    why = None
    if os.geteuid() != 0:
        why = "making a memory cgroup needs root"
    elif not (HIERARCHY / "cgroup.procs").exists():
        why = f"no cgroup v1 memory hierarchy at {HIERARCHY}"
    if why:
        print(f"\nskipping the OOM-killer test: {why}", file=sys.stderr)
        pytest.skip(why)
    cgroup = HIERARCHY / f"tfmesos-test-oom-{uuid.uuid4().hex[:8]}"
    try:
        cgroup.mkdir()
    except OSError as exc:
        print(f"\nskipping the OOM-killer test: cannot make {cgroup}: {exc}", file=sys.stderr)
        pytest.skip(f"cannot make {cgroup}: {exc}")
    try:
        (cgroup / "memory.limit_in_bytes").write_text(str(LIMIT_MIB << 20))
        # Where there is swap, over the limit would be swapped, not killed.
        (cgroup / "memory.swappiness").write_text("0")
        memsw = cgroup / "memory.memsw.limit_in_bytes"
        if memsw.exists():
            memsw.write_text(str(LIMIT_MIB << 20))
        yield cgroup
    finally:
        with contextlib.suppress(OSError):
            cgroup.rmdir()


@pytest.mark.parametrize("run_by", ["launcher", "forked-agents"])
def test_a_command_the_oom_killer_ended_is_said_to_be(
    memory_cgroup: Path, job_procs: JobProcesses, tmp_path: Path, run_by: str
) -> None:
    hog = tmp_path / "hog.py"
    hog.write_text(HOG)
    events = JobEvents(tmp_path / "events.jsonl")
    argv = tfrun_argv(*events.flag, "-w", "1", "-s", "0", "--", sys.executable, str(hog))
    # tfrun joins the cgroup, then runs: everything it starts is in it.
    result = subprocess.run(
        ["sh", "-c", f'echo $$ > {memory_cgroup}/cgroup.procs && exec "$@"', "sh", *argv],
        capture_output=True,
        text=True,
        env=job_procs.env(**RUN_BY[run_by][0]),
        timeout=240,
    )
    context = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "[worker:0] allocating" in result.stdout.splitlines(), context
    assert "allocated" not in result.stdout, context
    worker_0 = events.exited()["worker:0"]
    assert worker_0["signal"] == "SIGKILL", worker_0
    assert worker_0["reason"] == (
        "killed by SIGKILL by the kernel's OOM killer, over its memory cgroup's limit"
    ), worker_0
    assert (memory_cgroup / "memory.oom_control").read_text().splitlines()[-1] == "oom_kill 1"
    assert result.returncode == 137, context
    assert [p.cmdline() for p in job_procs.wait_gone(15)] == []


def test_a_plain_sigkill_beside_an_oom_kill_is_not_called_one(
    memory_cgroup: Path, job_procs: JobProcesses, tmp_path: Path
) -> None:
    # Both tasks in tfrun's memory cgroup: worker 0's helper is OOM-killed
    # (its shell goes on), then worker 1's command is killed by hand. The
    # count is the cgroup's, so before, worker 1 was said to be the OOM
    # killer's too (issue 40, item 7); the kernel's log says it was not.
    if oomkills.killed_by_oom_killer(0) is None:
        why = f"the kernel's log ({oomkills.KERNEL_LOG}) cannot be read here"
        print(f"\nskipping: {why}", file=sys.stderr)
        pytest.skip(why)
    hog = tmp_path / "hog.py"
    hog.write_text(HOG)
    events = JobEvents(tmp_path / "events.jsonl")
    script = f"[ {{task_index}} = 0 ] && {sys.executable} {hog}; exec sleep 300"
    argv = tfrun_argv(*events.flag, "-w", "2", "--", f"sh -c '{script}'")
    env = job_procs.env()
    with subprocess.Popen(
        ["sh", "-c", f'echo $$ > {memory_cgroup}/cgroup.procs && exec "$@"', "sh", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        counter = memory_cgroup / "memory.oom_control"
        events.wait_for("cluster_up", proc)
        deadline = time.monotonic() + 120  # a hang guard
        while counter.read_text().splitlines()[-1] != "oom_kill 1":
            assert time.monotonic() < deadline, "the hog was never OOM-killed"
            time.sleep(0.05)
        [sleeper] = [
            p
            for p in job_procs.alive()
            if p.environ().get("TFMESOS_TASK_ID", "").startswith("worker.1.")
            and p.name() == "sleep"
        ]
        sleeper.kill()
        _, err = proc.communicate(timeout=120)
    worker_1 = events.exited()["worker:1"]
    assert worker_1["signal"] == "SIGKILL", worker_1
    assert worker_1["reason"] == "killed by SIGKILL", (worker_1, err)
    assert [p.cmdline() for p in job_procs.wait_gone(15)] == []
