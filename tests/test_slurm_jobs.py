"""Whole jobs on the Slurm backend, against real Slurm daemons.

``scripts/start-slurm`` sets up a one-node Slurm (``.ci/run`` runs it before
the tests); where no Slurm answers, these tests are skipped and say why, except
under CI, where a missing Slurm is a failure. Each test's tasks run as real
job steps: the tests look at the jobs with ``squeue`` and at every process of
the job through the mark in its environment (Slurm gives the tasks tfrun's).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import (
    MWMS,
    PY,
    JobProcesses,
    check_four_tensorflow_workers,
    popen_tfrun,
    py,
    run_tfrun,
    start_tfrun,
)
from tests.jobevents import JobEvents

RELEASE_BOUND = 15.0
"""docs and README: a job's allocation is gone within 15 s of tfrun's death."""


pytestmark = pytest.mark.usefixtures("slurm")


def submitted(events: JobEvents) -> list[str]:
    """The Slurm jobs tfrun submitted, in order (their backend_attached events)."""
    return [e["job_id"] for e in events.of("backend_attached") if e["backend"] == "slurm"]


def states(job_ids: list[str]) -> dict[str, str]:
    """Each job's state as squeue shows it (finished jobs included)."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i %T"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        job, state = line.split()
        found.setdefault(job.split("+")[0], state)
    return found


ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"}


def wait_released(job_ids: list[str], timeout: float) -> dict[str, str]:
    """Wait until none of the jobs holds or waits for an allocation; their states."""
    deadline = time.monotonic() + timeout
    while True:
        now = states(job_ids)
        if not any(state in ACTIVE for state in now.values()) or time.monotonic() > deadline:
            return now
        time.sleep(0.1)


@pytest.fixture
def blocker() -> Iterator[list[str]]:
    """Jobs a test submits to hold resources; cancelled at its end."""
    jobs: list[str] = []
    yield jobs
    if jobs:
        subprocess.run(["scancel", *jobs], check=False, timeout=30)
        wait_released(jobs, 30)


def node_memory() -> int:
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%m"], capture_output=True, text=True, timeout=30
    ).stdout
    return int(out.split()[0])


def test_a_replica_job_runs_its_remote_tasks_as_one_slurm_job(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    code = (
        "import os; print('{job_name}:{task_index} ps={ps_hosts} workers={worker_hosts} "
        "job=' + os.environ.get('SLURM_JOB_ID', '-') + ' step=' + os.environ.get('SLURM_STEP_ID', '-') "
        "+ ' secret=' + str('TFMESOS_SECRET' in os.environ))"
    )
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "--backend", "slurm", *events.flag, "-w", "3", "-s", "1", "--worker-logs", "*", "--",
        *py(code), env=job_procs.env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert events.verdict()["result"] == "succeeded", result.stderr
    placed = {e["task"]: e["backend"] for e in events.of("task_placed")}
    assert placed == {
        "ps:0": "slurm",
        "worker:0": "local",
        "worker:1": "slurm",
        "worker:2": "slurm",
    }
    [started] = events.of("job_started")
    assert started["backends"] == {"slurm": ["ps:0", "worker:1", "worker:2"], "local": ["worker:0"]}
    assert started["log_dir"] and Path(started["log_dir"]).is_dir()
    [attached] = events.of("backend_attached")
    job = attached["job_id"]
    assert (attached["restart"], attached["tasks"]) == (0, ["ps:0", "worker:1", "worker:2"])
    names = events.names()
    assert names.index("job_started") < names.index("backend_attached")
    assert names.index("backend_attached") < names.index("task_placed")
    # The submission's wording (the one check of it): the job, its size and its tasks.
    assert f"Slurm: submitted job {job} (3 x 1 CPU, 1024 MiB) for ps:0, worker:1, worker:2" in (
        result.stderr
    )
    lines = sorted(result.stdout.splitlines())
    assert [line.split(" ")[1] for line in lines] == ["worker:0", "worker:1", "worker:2"]
    # The chief ran beside tfrun; the other workers in the Slurm job, each a step.
    assert "job=- step=-" in lines[0]
    assert f"job={job}" in lines[1] and f"job={job}" in lines[2]
    assert "secret=False" in lines[1] and "secret=False" in lines[2]
    hosts = re.search(r"ps=(\S+) workers=(\S+)", lines[0])
    assert hosts is not None
    addresses = [hosts.group(1), *hosts.group(2).split(",")]
    assert len(set(addresses)) == 4, addresses  # each task took a port of its own
    assert not any(a.startswith(("localhost:", "127.")) for a in addresses), addresses
    # A job that went well ends by itself: COMPLETED, not CANCELLED.
    assert wait_released([job], 30) == {job: "COMPLETED"}
    assert job_procs.wait_gone(10) == []


def test_a_job_that_does_not_fit_says_slurms_reason_at_the_timeout(
    job_procs: JobProcesses, blocker: list[str], tmp_path: Path
) -> None:
    memory = node_memory()
    held = subprocess.run(
        ["sbatch", "--parsable", f"--mem={memory - 1024}", "--output=/dev/null", "--wrap", "sleep 600"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.strip()  # fmt: skip
    blocker.append(held)
    deadline = time.monotonic() + 30
    while states([held]).get(held) != "RUNNING":
        assert time.monotonic() < deadline, "the blocking job never ran"
        time.sleep(0.2)
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "--backend", "slurm", *events.flag, "--timeout", "6", "-w", "3", "-s", "0", "-Mw", "2048",
        "--", "true", env=job_procs.env(),
    )  # fmt: skip
    assert result.returncode == 124, result.stderr
    assert events.verdict()["result"] == "never up", result.stderr
    assert "task_placed" not in events.names(), events.names()
    (job,) = submitted(events)
    # The diagnosis's wording: Slurm's reason, in words.
    assert re.search(
        r"the cluster did not come up within 6s: still waiting for worker:1, worker:2 \(Slurm job "
        rf"{job} is pending \(Resources: the resources it asks for are in use\)\)",
        result.stderr,
    ), result.stderr
    # Cancelled at the timeout, not left in the queue.
    assert states([job])[job] == "CANCELLED"
    assert job_procs.wait_gone(10) == []


def test_a_job_slurm_can_never_run_is_refused_in_slurms_words(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "--backend", "slurm", *events.flag, "-w", "2", "-s", "0", "-Mw", str(node_memory() * 4),
        "--", "true", env=job_procs.env(),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    verdict = events.verdict()
    assert (verdict["result"], verdict["exit_status"]) == ("refused", 2), verdict
    assert "task_placed" not in events.names(), events.names()
    assert re.search(
        r"^tfrun: error: Slurm refused the job for worker:1: Memory specification can not be "
        r"satisfied",
        result.stderr,
        re.M,
    ), result.stderr
    assert job_procs.wait_gone(10) == []


def _watchdog(job_procs: JobProcesses) -> list[psutil.Process]:
    return [p for p in job_procs.alive() if "tfmesos.slurm.watchdog" in " ".join(p.cmdline())]


@pytest.mark.parametrize("also_the_watchdog", [False, True], ids=["tfrun", "tfrun-and-watchdog"])
def test_killing_tfrun_outright_releases_its_allocation_within_the_bound(
    job_procs: JobProcesses, also_the_watchdog: bool
) -> None:
    # The command ignores SIGTERM: its agent kills it 5 s after asking.
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    proc, _ = start_tfrun(
        "--backend", "slurm", "-w", "2", "-s", "1", "--", *py(code), env=job_procs.env()
    )  # fmt: skip
    (job,) = submitted(proc.events)
    assert states([job])[job] == "RUNNING"
    watchdogs = _watchdog(job_procs)
    assert len(watchdogs) == 1
    if also_the_watchdog:
        # Without it, the job's own script sees tfrun's connection close.
        watchdogs[0].kill()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = time.monotonic()
    final = wait_released([job], RELEASE_BOUND)
    took = time.monotonic() - killed
    assert final[job] not in ACTIVE, f"job {job} still {final[job]} {took:.1f}s after"
    assert job_procs.wait_gone(5) == []


def test_tfrun_killed_while_its_job_waits_in_the_queue_leaves_no_job(
    job_procs: JobProcesses, blocker: list[str]
) -> None:
    memory = node_memory()
    held = subprocess.run(
        ["sbatch", "--parsable", f"--mem={memory - 1024}", "--output=/dev/null", "--wrap", "sleep 600"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.strip()  # fmt: skip
    blocker.append(held)
    proc = popen_tfrun(
        "--backend", "slurm", "-w", "2", "-s", "0", "-Mw", "2048", "--", "true",
        env=job_procs.env(),
    )  # fmt: skip
    job = proc.events.wait_for("backend_attached", proc)["job_id"]
    assert states([job])[job] == "PENDING"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # Nothing in the job could run yet: tfrun's watchdog removes it.
    assert wait_released([job], RELEASE_BOUND)[job] == "CANCELLED"
    assert job_procs.wait_gone(5) == []


def node_cpus() -> int:
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%c"], capture_output=True, text=True, timeout=30
    ).stdout
    return int(out.split()[0])


def our_jobs(name: str) -> list[str]:
    """The jobs of this name Slurm still holds or queues."""
    out = subprocess.run(
        ["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True, timeout=30
    ).stdout
    return out.split()


def test_a_job_no_node_can_ever_hold_ends_in_seconds_with_exit_2(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    # sbatch takes it (EnforcePartLimits=NO, Slurm's default) and it would
    # wait in the queue for ever: "PartitionConfig".
    name = f"never-fits-{job_procs.mark[:8]}"
    cpus = str(node_cpus() * 10 + 2)
    events = JobEvents(tmp_path / "events.jsonl")
    started = time.monotonic()
    try:
        result = run_tfrun(
            "--backend", "slurm", "-n", name, *events.flag, "-w", "2", "-s", "0", "-Cw", cpus,
            "--", "true", env=job_procs.env(), timeout=60,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        # On a timeout, subprocess.run leaves the output undecoded, even with text=True.
        pytest.fail(
            f"tfrun still waited after 60s:\n{(exc.stderr or b'').decode(errors='replace')}"
        )
    took = time.monotonic() - started
    assert result.returncode == 2, result.stderr
    assert took < 20, (took, result.stderr)
    verdict = events.verdict()
    assert (verdict["result"], verdict["exit_status"]) == ("refused", 2), verdict
    errors = [line for line in result.stderr.splitlines() if line.startswith("tfrun: error:")]
    (job,) = submitted(events)
    assert errors == [
        f"tfrun: error: Slurm will never run the job for worker:1: job {job} is pending "
        "(PartitionConfig: its partition can never give it this much (fewer tasks, CPUs or "
        "memory?)); it was cancelled"
    ], result.stderr
    assert states([job]).get(job, "gone") not in ACTIVE
    assert our_jobs(name) == []
    assert job_procs.wait_gone(10) == []


def test_a_job_whose_dependency_can_never_be_satisfied_ends_in_seconds_with_exit_2(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    # A job it depends on failed: Slurm keeps it pending for ever,
    # "DependencyNeverSatisfied" (unless kill_invalid_depend is set).
    failed = subprocess.run(
        ["sbatch", "--parsable", "--wait", "-o", "/dev/null", "-n", "1", "--wrap", "false"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert failed.returncode != 0, failed.stderr
    depend = failed.stdout.strip().split(";")[0]
    name = f"never-depends-{job_procs.mark[:8]}"
    events = JobEvents(tmp_path / "events.jsonl")
    started = time.monotonic()
    try:
        result = run_tfrun(
            "--backend", "slurm", "-n", name, *events.flag, "-w", "2",
            f"--sbatch-args=--dependency=afterok:{depend}", "--", "true", env=job_procs.env(),
            timeout=60,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"tfrun still waited after 60s:\n{(exc.stderr or b'').decode(errors='replace')}"
        )
    assert result.returncode == 2, result.stderr
    assert time.monotonic() - started < 20, result.stderr
    verdict = events.verdict()
    assert (verdict["result"], verdict["exit_status"]) == ("refused", 2), verdict
    errors = [line for line in result.stderr.splitlines() if line.startswith("tfrun: error:")]
    (job,) = submitted(events)
    assert errors == [
        f"tfrun: error: Slurm will never run the job for worker:1: job {job} is pending "
        "(DependencyNeverSatisfied: a job it depends on (--dependency in --sbatch-args) ended in "
        "a way that can never satisfy it); it was cancelled"
    ], result.stderr
    assert our_jobs(name) == []
    assert job_procs.wait_gone(10) == []


def test_a_chdir_this_machine_lacks_is_said_by_the_chief_which_runs_where_tfrun_runs(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    # The chief runs beside tfrun, where --chdir is not checked (it is the
    # same path on each host). Before, its agent failed to start in it: a
    # traceback at os.chdir three times and exit 124 (125 without the fork
    # server, tfrun's own traceback).
    missing = tmp_path / "not here"
    result = run_tfrun(
        "--backend", "slurm", "--chdir", str(missing), "-w", "2", "--worker-logs", "*",
        "--", "pwd", env=job_procs.env(), timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        f"[worker:0] [tfmesos agent] working directory {missing} does not exist here; "
        f"running in {tmp_path}"
    ) in result.stdout.splitlines(), result.stdout
    assert f"[worker:0] {tmp_path}" in result.stdout.splitlines(), result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert job_procs.wait_gone(10) == []


def test_a_percent_in_the_log_dir_is_taken_literally(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    # sbatch and srun read %x, %j, ... in a file name as patterns.
    log_dir = tmp_path / "logs %x 100%% %j"
    code = "import os; print('hello from', os.environ['TFMESOS_TASK_INDEX'])"
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "--backend", "slurm", *events.flag, "--log-dir", str(log_dir), "-w", "2", "-s", "0",
        "--worker-logs", "*", "--", *py(code), env=job_procs.env(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "[worker:1] hello from 1" in result.stdout
    (job,) = submitted(events)
    assert events.of("job_started")[0]["log_dir"] == str(log_dir)
    assert sorted(p.name for p in tmp_path.iterdir()) == [events.path.name, log_dir.name]
    names = sorted(p.name for p in log_dir.iterdir())
    assert f"slurm-{job}.out" in names, names
    assert "worker.1.log" in names, names
    task_log = log_dir / "worker.1.log"
    assert "hello from 1" in task_log.read_text()
    assert "Mesos" not in result.stderr
    assert job_procs.wait_gone(10) == []


def test_a_per_task_pattern_after_another_in_the_log_dir_is_taken_literally(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    # srun 22.05 undoes the %% escaping itself, and where a per-task pattern
    # (%t, %n, %N, %u) follows another it hands slurmstepd a name it reads
    # again: each task's step failed, "Slurmd could not connect IO", exit 124.
    log_dir = tmp_path / "v%j%t %n%N %u%5t 100%%t"
    code = "import os; print('hello from', os.environ['TFMESOS_TASK_INDEX'])"
    result = run_tfrun(
        "--backend", "slurm", "--log-dir", str(log_dir), "-w", "3",
        "--worker-logs", "*", "--", *py(code), env=job_procs.env(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "[worker:2] hello from 2" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [log_dir.name]
    for index in (1, 2):
        task_log = log_dir / f"worker.{index}.log"
        assert f"hello from {index}" in task_log.read_text()
    assert job_procs.wait_gone(10) == []


def test_a_relative_log_dir_is_tfruns_not_the_chdirs(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    # sbatch reads a relative --output from the job's --chdir: the job's own
    # output file could not be opened (JobLaunchFailure, three times, 124).
    (tmp_path / "here").mkdir()
    (tmp_path / "there").mkdir()
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "--backend", "slurm", *events.flag, "--log-dir", "logs", "--chdir", str(tmp_path / "there"),
        "-w", "2", "--", "true", env=job_procs.env(), timeout=120, cwd=tmp_path / "here",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    log_dir = tmp_path / "here" / "logs"
    assert events.of("job_started")[0]["log_dir"] == str(log_dir)
    assert (log_dir / "worker.1.log").is_file()
    assert list((tmp_path / "there").iterdir()) == []
    assert job_procs.wait_gone(10) == []


def test_a_backslash_in_the_log_dir_is_refused_before_anything_starts(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    # sbatch takes a backslash as "no patterns here" and drops it.
    log_dir = tmp_path / "logs\\here"
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "--backend", "slurm", *events.flag, "--log-dir", str(log_dir), "-w", "2", "-s", "0", "--", "true",
        env=job_procs.env(), timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"tfrun: error: --log-dir: Slurm cannot write to {log_dir}: sbatch and srun drop a "
        "backslash from a file name (and stop reading %j in it); choose a directory without one"
    ], result.stderr
    # Nothing is made for a refused job: before, --log-dir's own check made
    # the directory before Slurm's refused it.
    assert [p for p in tmp_path.iterdir() if p != events.path] == []
    assert submitted(events) == []
    assert job_procs.alive() == []


def test_a_backslash_in_the_state_directory_is_refused_naming_it_and_making_nothing(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    # No --log-dir: the run's directory is under $XDG_STATE_HOME. Before, the
    # refusal blamed --log-dir, which was not given, after making the run's
    # directory.
    state = tmp_path / "state\\here"
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "--backend", "slurm", *events.flag, "-w", "2", "--", "true",
        env=job_procs.env(XDG_STATE_HOME=str(state)), timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    root = state / "tfmesos" / "runs"
    assert result.stderr.strip().splitlines() == [
        f"tfrun: error: Slurm cannot write the run's logs under {root} "
        "($XDG_STATE_HOME/tfmesos/runs): sbatch and srun drop a backslash from a file name "
        "(and stop reading %j in it); give --log-dir a directory without one, or set "
        "XDG_STATE_HOME to one"
    ], result.stderr
    assert not state.exists()
    assert submitted(events) == []
    assert job_procs.alive() == []


def test_a_slurm_task_that_printed_nothing_is_said_to_have_its_log_here_not_on_mesos(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        reason = "submitting a job as another user (sbatch --uid) takes root"
        print(f"\nskipping: {reason}", file=sys.stderr)
        pytest.skip(reason)
    # The job runs as nobody, who cannot open its output file in this
    # directory: it fails before its script can print a word.
    log_dir = tmp_path / "logs"
    log_dir.mkdir(mode=0o700)
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "--backend", "slurm", *events.flag, "--log-dir", str(log_dir), "--sbatch-args=--uid=nobody",
        "-w", "2", "-s", "0", "--", "true", env=job_procs.env(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 124, result.stderr
    assert events.verdict()["result"] == "never up", result.stderr
    # A Slurm job for each attempt at worker:1: each relaunch is a job of its own.
    attached = events.of("backend_attached")
    assert [e["tasks"] for e in attached] == [["worker:1"]] * 3, attached
    assert len({e["job_id"] for e in attached}) == 3, attached
    # The verdict's wording: where the task's own output is.
    assert f"it printed nothing the launcher could see: its own output is kept in {log_dir}" in (
        result.stderr
    )
    assert "Mesos" not in result.stderr
    assert job_procs.wait_gone(10) == []


def test_a_full_log_disk_is_said_naming_each_slurm_task_and_costs_it_nothing(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        reason = (
            "the full disk must be seen by slurmd, outside any namespace: mounting it takes root"
        )
        print(f"\nskipping: {reason}", file=sys.stderr)
        pytest.skip(reason)
    # srun wrote each step's log: once the disk filled, the rest of the task's
    # output was lost without a word and the last line said it was all kept.
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
    try:
        code = "for n in range(3000): print('line %05d' % n, 'x' * 40)\nprint('END')"
        result = run_tfrun(
            "--backend", "slurm", "--log-dir", str(disk / "logs"), "-w", "2",
            "--worker-logs", "*", "--", *py(code), env=job_procs.env(), timeout=120,
        )  # fmt: skip
    finally:
        subprocess.run(["umount", str(disk)], check=True)
    assert result.returncode == 0, result.stderr
    assert "[worker:1] END" in result.stdout.splitlines()
    assert re.search(
        rf"task worker:1 on \S+ cannot write its log {re.escape(str(disk))}/logs/worker\.1\.\S+ "
        rf"\(No space left on device: the log disk is full \(the filesystem at {re.escape(str(disk))}\)\)",
        result.stderr,
    ), result.stderr
    last = result.stderr.splitlines()[-1]
    assert re.search(r"but for what could not be kept of (\S+, )?worker:1(, \S+)?'s", last), last
    assert job_procs.wait_gone(10) == []


def test_what_a_slurm_task_left_in_a_session_of_its_own_ends_with_its_killed_agent(
    job_procs: JobProcesses,
) -> None:
    # proctrack/linuxproc follows parents: the command's setsid child of an
    # agent killed outright lived on under pid 1 after the step and the job.
    proc, _ = start_tfrun(
        "--backend", "slurm", "-w", "2", "--",
        "sh", "-c", "setsid sleep 300 & sleep 300", env=job_procs.env(),
    )  # fmt: skip
    events = proc.events
    try:
        agents = [
            p
            for p in job_procs.alive()
            if "tfmesos.agent.main" in " ".join(p.cmdline())
            and p.name() != "srun"  # it carries the agent's command line
            and p.environ().get("TFMESOS_TASK_ID", "").startswith("worker.1.")
        ]
        assert len(agents) == 1, agents  # the cluster is up: every agent has registered
        # Each task's sleep and its setsid child: registered agents start
        # their commands once the cluster is up, so a moment after this line.
        deadline = time.monotonic() + 30
        sleeps: list[psutil.Process] = []
        while len(sleeps) < 4 and time.monotonic() < deadline:
            sleeps = [p for p in job_procs.alive() if p.cmdline()[:2] == ["sleep", "300"]]
        assert len(sleeps) == 4, sleeps
        agents[0].kill()
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode != 0, stderr
        assert events.verdict()["result"] == "failed", stderr
        assert events.exited()["worker:1"]["action"] == "fail job", events.exited()
        assert job_procs.wait_gone(15) == [], stderr
    finally:
        job_procs.kill_all()
        proc.wait(30)


def test_two_by_two_are_four_tensorflow_workers_on_slurm(job_procs: JobProcesses) -> None:
    """``--nproc-per-task 2``: worker:1's agent, a Slurm job step, reserves
    two consecutive ports on its node (Slurm hands out none), and each of
    its processes is a TensorFlow worker at one of them: MultiWorkerMirrored
    sees four, which all-reduce together. Before: no TF_CONFIG."""
    pytest.importorskip("tensorflow", reason="tensorflow is a test extra")
    result = run_tfrun(
        "--backend", "slurm", "-w", "2", "--nproc-per-task", "2", "--worker-logs", "*",
        "--", PY, MWMS, env=job_procs.env(), timeout=600,
    )  # fmt: skip
    check_four_tensorflow_workers(result)


def test_several_processes_per_task_on_slurm(job_procs: JobProcesses, tmp_path: Path) -> None:
    """``--nproc-per-task 2``: worker:1, a Slurm job step, runs two processes
    with torchrun's numbers, each named and logged; one that fails is named."""
    code = (
        "import os, sys; print('rank', os.environ['RANK'], 'local', os.environ['LOCAL_RANK'], "
        "'of', os.environ['WORLD_SIZE'], 'group', os.environ['GROUP_RANK'], flush=True); "
        "sys.exit(3 if os.environ['RANK'] == sys.argv[1] else 0)"
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    result = run_tfrun(
        "--backend", "slurm", "--log-dir", str(logs), "-w", "2", "--nproc-per-task", "2",
        "--worker-logs", "*", "--", *py(code), "-1", env=job_procs.env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for rank in range(4):
        group, local = divmod(rank, 2)
        line = f"[worker:{group}.{local}] rank {rank} local {local} of 4 group {group}"
        assert line in result.stdout.splitlines(), result.stdout
    (own,) = [p for p in logs.rglob("worker.1.local-rank-1.log")]
    assert own.read_text() == "rank 3 local 1 of 4 group 1\n"
    failed = run_tfrun(
        "--backend", "slurm", "-w", "2", "--nproc-per-task", "2", "--", *py(code), "3",
        env=job_procs.env(),
    )  # fmt: skip
    assert failed.returncode == 3, failed.stderr[-3000:]
    assert "task worker:1" in failed.stderr
    assert "exited with status 3 (its process of local rank 1)" in failed.stderr
