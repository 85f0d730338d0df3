"""``tfrun --detach`` and a detached job's commands (issue 37), local backend:
real tfrun subprocesses, each test with a state directory of its own so that
``tfrun list`` shows its jobs only."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, JobProcesses, py, runs_in, tfrun_argv, wait_until
from tests.jobevents import JobEvents
from tests.test_slurm_jobs import states

pytestmark = pytest.mark.e2e

POLL = 0.05


class Detached:
    """A test's tfrun, its runs under a state directory of its own."""

    def __init__(self, tmp_path: Path, job_procs: JobProcesses) -> None:
        self.state = tmp_path / "state"
        self.env = job_procs.env(XDG_STATE_HOME=str(self.state))
        self.job_procs = job_procs

    @property
    def runs(self) -> Path:
        return self.state / "tfmesos" / "runs"

    def tfrun(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            tfrun_argv(*args),
            capture_output=True,
            text=True,
            env=self.env,
            cwd=ROOT,
            timeout=timeout,
        )

    def popen(self, *args: str, **options: Any) -> subprocess.Popen[str]:
        return subprocess.Popen(
            tfrun_argv(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=ROOT,
            **options,
        )

    def submit(self, *args: str) -> str:
        """``tfrun --detach ARGS``: the job's id, the last line it printed."""
        done = self.tfrun("--detach", *args)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()[-1]

    def events(self, job: str) -> JobEvents:
        return JobEvents(self.runs / job / "events.jsonl")

    def json(self, *args: str) -> Any:
        done = self.tfrun(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.fixture
def detached(tmp_path: Path, job_procs: JobProcesses) -> Detached:
    return Detached(tmp_path, job_procs)


def waits_for(path: Path, then: str = "") -> list[str]:
    """A task's command: wait until ``path`` exists, then print ``then``."""
    return py(
        "import os, time\n"
        f"while not os.path.exists({str(path)!r}): time.sleep(0.02)\n"
        f"print({then!r}, flush=True)"
    )


def test_detach_returns_while_the_job_runs_and_outlives_its_session(
    detached: Detached, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    submitter = detached.popen(
        "--detach", "-w", "2", "--", *waits_for(go, "done"), start_new_session=True
    )
    out, err = submitter.communicate(timeout=60)
    assert submitter.returncode == 0, err
    job = out.splitlines()[-1]
    assert (detached.runs / job).is_dir()
    for follow in (f"tfrun logs -f {job}", f"tfrun wait {job}", f"tfrun stop {job}"):
        assert follow in err
    # The job is running (it waits for `go`), and no process of it is in the
    # submitter's session: the terminal closing (SIGHUP to its group) is nothing to it.
    [row] = detached.json("list")
    assert row["id"] == job and row["state"] in ("pending", "running"), row
    assert all(
        p.pid != submitter.pid and os.getsid(p.pid) != submitter.pid
        for p in detached.job_procs.alive()
    )
    with contextlib.suppress(ProcessLookupError):
        os.killpg(submitter.pid, signal.SIGHUP)
    go.touch()
    assert detached.tfrun("wait", job).returncode == 0
    assert detached.events(job).verdict()["result"] == "succeeded"
    assert detached.job_procs.wait_gone(30) == []


@pytest.mark.parametrize("made", ["", "console.log", "job.json"])
def test_a_sighup_to_the_submitters_group_while_it_submits_leaves_the_job_running(
    detached: Detached, tmp_path: Path, made: str
) -> None:
    go = tmp_path / "go"
    submitter = detached.popen("--detach", "-w", "2", "--", *waits_for(go), start_new_session=True)
    # Once the run's directory is there the job is as good as submitted:
    # the terminal closing then (its session's SIGHUP) must not end it, at
    # any moment of the daemon's start (it makes its console, then job.json,
    # then tells the submitter, which may be gone).

    def reached() -> bool:
        runs = runs_in(detached.runs) if detached.runs.is_dir() else []
        return bool(runs) and (runs[0] / made).exists()

    wait_until(reached, f"the run's directory{' and its ' + made if made else ''}", poll=0.001)
    os.killpg(submitter.pid, signal.SIGHUP)
    submitter.communicate(timeout=60)
    [run] = runs_in(detached.runs)
    wait_until(lambda: (run / "job.json").exists(), "the daemon's job.json")
    go.touch()
    assert detached.tfrun("wait", run.name).returncode == 0
    assert detached.events(run.name).verdict()["result"] == "succeeded"
    assert detached.job_procs.wait_gone(30) == []


def test_a_detached_jobs_tasks_get_sighup_as_an_attached_jobs_do(detached: Detached) -> None:
    # Before: the daemon ignored SIGHUP, and every task's command inherited it
    # ignored (1, SIG_IGN): such a command outlived a hang-up it would obey attached.
    show = py("import signal; print(int(signal.getsignal(signal.SIGHUP)))")
    job = detached.submit("-w", "2", "--", *show)
    assert detached.tfrun("wait", job).returncode == 0
    for task in ("worker:0", "worker:1"):
        assert detached.tfrun("logs", job, "--task", task).stdout == "0\n"


def test_wait_exits_with_the_jobs_status(detached: Detached) -> None:
    failing = detached.submit("-w", "2", "--", "sh", "-c", "exit $((3 * {task_index}))")
    succeeding = detached.submit("-w", "2", "--", "true")
    assert detached.tfrun("wait", failing).returncode == 3
    assert detached.tfrun("wait", succeeding).returncode == 0
    states = {row["id"]: (row["state"], row["exit_status"]) for row in detached.json("list")}
    assert states == {failing: ("failed", 3), succeeding: ("succeeded", 0)}


def test_logs_follow_a_task_as_its_lines_come_until_it_ends(
    detached: Detached, tmp_path: Path
) -> None:
    more, end = tmp_path / "more", tmp_path / "end"
    task = py(
        "import os, sys, time\n"
        "if os.environ['TFMESOS_TASK_INDEX'] == '1':\n"
        "    print('first line', flush=True)\n"
        f"    while not os.path.exists({str(more)!r}): time.sleep(0.02)\n"
        "    print('second line', flush=True)\n"
        "    sys.exit(0)\n"
        f"while not os.path.exists({str(end)!r}): time.sleep(0.02)\n"
    )
    job = detached.submit("-w", "2", "--", *task)
    follower = detached.popen("logs", "-f", "--task", "worker:1", job)
    assert follower.stdout is not None
    assert follower.stdout.readline() == "first line\n"  # while the task runs
    assert follower.poll() is None
    more.touch()
    assert follower.stdout.readline() == "second line\n"
    # worker:1 is over, worker:0 (and the job) not: the follower ends with the task.
    out, err = follower.communicate(timeout=60)
    assert (follower.returncode, out) == (0, ""), err
    assert err == f"tfrun logs: worker:1 done; job {job} goes on (running)\n"
    assert detached.json("status", job)["state"] == "running"
    end.touch()
    assert detached.tfrun("wait", job).returncode == 0
    done = detached.tfrun("logs", job, "--task", "worker:1")
    assert done.stdout == "first line\nsecond line\n"


def test_logs_follow_a_restarted_job_into_its_next_run_and_show_each_run(
    detached: Detached, tmp_path: Path
) -> None:
    crash, end = tmp_path / "crash", tmp_path / "end"
    task = py(
        "import os, sys, time\n"
        "run, index = os.environ['TFMESOS_RESTART'], os.environ['TFMESOS_TASK_INDEX']\n"
        "print('run', run, 'of', index, flush=True)\n"
        "if index == '1' and run == '0':\n"
        f"    while not os.path.exists({str(crash)!r}): time.sleep(0.02)\n"
        "    sys.exit(3)\n"
        f"while not os.path.exists({str(end)!r}): time.sleep(0.02)\n"
        "print('run', run, 'ends', flush=True)\n"
    )
    job = detached.submit("-w", "2", "--max-restarts", "1", "--", *task)
    follower = detached.popen("logs", "-f", "--task", "worker:1", job)
    assert follower.stdout is not None
    assert follower.stdout.readline() == "run 0 of 1\n"
    wait_until(lambda: detached.tfrun("logs", job).stdout, "worker:0's first line")
    crash.touch()  # worker:1 fails: the job starts again, and the follower follows
    assert follower.stdout.readline() == "run 1 of 1\n"
    assert follower.poll() is None
    end.touch()
    out, err = follower.communicate(timeout=60)
    assert (follower.returncode, out) == (0, "run 1 ends\n"), err
    assert "worker:1 launched again (run 1, attempt 1): worker.1.restart-1.log" in err
    assert detached.tfrun("wait", job).returncode == 0
    # The latest run's output by default; each run's on request.
    latest = detached.tfrun("logs", job, "--task", "worker:1")
    assert latest.stdout == "run 1 of 1\nrun 1 ends\n", latest.stderr
    first = detached.tfrun("logs", job, "--task", "worker:1", "--restart", "0")
    assert first.stdout == "run 0 of 1\n", first.stderr
    every = detached.tfrun("logs", job, "--restart", "all")  # worker:0's, run after run
    assert every.stdout == "run 0 of 0\nrun 1 of 0\nrun 1 ends\n", every.stderr
    assert every.stderr.splitlines() == [f"tfrun logs: run {n} of job {job}" for n in (0, 1)]
    # Followed from the first run on, once the job is over: every run's, then the end.
    again = detached.tfrun("logs", "-f", job, "--task", "worker:1", "--restart", "0")
    assert again.stdout == "run 0 of 1\nrun 1 of 1\nrun 1 ends\n", again.stderr
    missing = detached.tfrun("logs", job, "--restart", "2")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert "has no run 2: its runs are 0 to 1" in missing.stderr


def test_stop_leaves_no_process_and_wait_gives_the_stopped_status(
    detached: Detached, tmp_path: Path
) -> None:
    job = detached.submit("-w", "2", "--", *waits_for(tmp_path / "never"))
    detached.events(job).wait_for("cluster_up")
    assert detached.job_procs.alive()
    stopped = detached.tfrun("stop", job)
    assert (stopped.returncode, stopped.stderr) == (0, f"tfrun stop: job {job} stopped\n")
    assert [p.cmdline() for p in detached.job_procs.wait_gone(30)] == []
    assert detached.tfrun("wait", job).returncode == 143
    verdict = detached.events(job).verdict()
    assert verdict["result"] == "interrupted" and "tfrun stop" in verdict["stopped_by"]
    assert verdict["stopped_at"] <= verdict["ts"]
    again = detached.tfrun("stop", job)  # idempotent
    assert (again.returncode, again.stderr) == (0, "")
    assert detached.json("list")[0]["state"] == "stopped"


def test_two_stops_at_once_both_exit_0(detached: Detached, tmp_path: Path) -> None:
    # Stop is idempotent: two at once must both succeed, whichever ends the job.
    job = detached.submit("-w", "1", "--", *waits_for(tmp_path / "never"))
    detached.events(job).wait_for("cluster_up")
    stops = [detached.popen("stop", job) for _ in range(2)]
    said = [stop.communicate(timeout=60) for stop in stops]
    assert [stop.returncode for stop in stops] == [0, 0], said
    assert [p.cmdline() for p in detached.job_procs.wait_gone(30)] == []
    assert detached.tfrun("wait", job).returncode == 143


def test_list_and_status_agree_with_the_event_stream(detached: Detached) -> None:
    job = detached.submit("-w", "2", "-s", "1", "--", "sh", "-c", "exit $(({task_index} * 0))")
    assert detached.tfrun("wait", job).returncode == 0
    events = detached.events(job)
    status = detached.json("status", job)
    assert status["verdict"] == events.verdict()
    started = events.of("job_started")[-1]
    assert sorted(status["tasks"]) == sorted(t for ts in started["backends"].values() for t in ts)
    for name, exited in events.exited().items():
        task = status["tasks"][name]
        assert task["state"] == "exited" and task["last_event"] == exited
        assert task["host"] == exited["host"] and task["attempts"] == exited["attempt"]
    [row] = detached.json("list")
    assert row["id"] == job and row["backend"] == "local"
    assert (row["state"], row["exit_status"]) == ("succeeded", events.verdict()["exit_status"])
    assert (row["tasks"], row["restarts"]) == (3, len(events.of("job_restart")))
    assert row["duration"] == pytest.approx(events.verdict()["ts"] - events.all()[0]["ts"])
    absent = detached.tfrun("logs", job, "--task", "ps:3")
    assert absent.returncode == 2 and absent.stderr.count("\n") == 1
    assert "has no task ps:3" in absent.stderr


def test_bad_input_is_one_line_with_its_status(detached: Detached, tmp_path: Path) -> None:
    unknown = detached.tfrun("wait", "no-such-job")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1
    assert "no job 'no-such-job'" in unknown.stderr
    # A job refused by its backend (a GPU this machine lacks): no task ever started.
    refused = detached.submit("-w", "1", "-Gw", "1", "--", "true")
    assert detached.tfrun("wait", refused).returncode == 2
    logs = detached.tfrun("logs", refused)
    assert logs.returncode == 1 and logs.stderr.count("\n") == 1
    assert "has not started" in logs.stderr
    over = detached.tfrun("stop", refused)
    assert over.returncode == 0 and "is over already" in over.stderr
    assert over.stderr.count("\n") == 1
    # On Mesos: a master out of reach, and no master given (tests/test_mesos_detach.py has the rest).
    mesos = detached.tfrun(
        "--detach", "-m", "127.0.0.1:1", "--connect-timeout", "1", "-w", "1", "--", "true"
    )
    assert mesos.returncode == 125 and mesos.stderr.count("\n") == 1
    assert "could not reach the Mesos master at http://127.0.0.1:1" in mesos.stderr
    assert not detached.runs.exists() or len(runs_in(detached.runs)) == 1
    on_mesos = detached.tfrun("status", "--backend", "mesos", refused)
    assert on_mesos.returncode == 2 and on_mesos.stderr.count("\n") == 1
    assert "a detached Mesos job is found on its master: give -m" in on_mesos.stderr


def test_a_reader_gone_early_costs_no_traceback(detached: Detached) -> None:
    job = detached.submit("-w", "1", "--", "seq", "100000")
    assert detached.tfrun("wait", job).returncode == 0
    piped = subprocess.run(
        ["bash", "-c", f"{' '.join(tfrun_argv('logs', job))} | true"],
        capture_output=True,
        text=True,
        env=detached.env,
        cwd=ROOT,
        timeout=60,
    )
    assert (piped.stdout, piped.stderr) == ("", "")


def test_a_command_named_like_a_subcommand_still_runs(detached: Detached) -> None:
    done = detached.tfrun("-w", "1", "--", sys.executable, "-c", "print('ran')")
    assert done.returncode == 0 and "ran" in done.stdout
    listed = detached.tfrun("-w", "1", "--", "list")  # a command named list, not tfrun list
    assert listed.returncode == 127, listed.stderr


def test_list_shows_attached_runs_too(detached: Detached) -> None:
    done = detached.tfrun("-w", "2", "--", "sh", "-c", "exit {task_index}")
    assert done.returncode == 1, done.stderr
    [row] = detached.json("list")
    assert (row["state"], row["exit_status"], row["detached"]) == ("failed", 1, False)
    assert detached.tfrun("wait", row["id"]).returncode == 1
    logs = detached.tfrun("logs", row["id"], "--task", "all")
    assert logs.returncode == 0 and logs.stdout == "", logs.stderr


def test_attach_shows_the_console_and_ctrl_c_leaves_the_job_running(
    detached: Detached, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    job = detached.submit("-w", "1", "--", *waits_for(go, "went"))
    detached.events(job).wait_for("cluster_up")
    first = detached.popen("attach", job)
    assert first.stdout is not None
    assert "the full output of each task goes to" in first.stdout.readline()
    first.send_signal(signal.SIGINT)  # detaches: the job goes on
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0 and "detached" in err, err
    assert detached.json("status", job)["state"] == "running"
    second = detached.popen("attach", job)
    go.touch()
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert "[worker:0] went\n" in out and "job succeeded" in out


# -- Slurm: the launcher is a Slurm job of its own, the chief beside it --------


def slurm_jobs_of(detached: Detached, job: str) -> list[str]:
    """The Slurm jobs of a detached job: the one sbatch took, and each one
    its tasks say they run in (the same one, in its allocation)."""
    launcher = json.loads((detached.runs / job / "job.json").read_text())["slurm_job_id"]
    tasks = [e["job_id"] for e in detached.events(job).of("backend_attached")]
    return list(dict.fromkeys([launcher, *tasks]))


def steps_of(slurm_job: str) -> list[str]:
    """The job steps running in a Slurm job, its batch step aside (squeue -s)."""
    out = subprocess.run(
        ["squeue", "-h", "-s", "-j", slurm_job, "-o", "%i"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.split()
    return [step for step in out if not step.endswith(".batch")]


@pytest.mark.usefixtures("slurm")
def test_a_detached_slurm_job_runs_to_its_end_after_its_session_is_gone(
    detached: Detached, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    args = ("--detach", "--backend", "slurm", "-w", "2", "--", *waits_for(go, "went"))
    submitter = detached.popen(*args, start_new_session=True)
    out, err = submitter.communicate(timeout=120)
    assert submitter.returncode == 0, err
    job = out.splitlines()[-1]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(submitter.pid, signal.SIGHUP)  # the terminal closes
    detached.events(job).wait_for("cluster_up", timeout=300)
    assert all(os.getsid(p.pid) != submitter.pid for p in detached.job_procs.alive())
    # One Slurm job: the launcher in it, worker:1 a step of it (as sbatch users expect).
    [slurm_job] = slurm_jobs_of(detached, job)
    assert len(steps_of(slurm_job)) == 1, steps_of(slurm_job)
    go.touch()
    assert detached.tfrun("wait", job, timeout=300).returncode == 0
    assert detached.tfrun("logs", job, "--task", "worker:1").stdout == "went\n"
    [row] = detached.json("list")
    assert (row["backend"], row["state"], row["exit_status"]) == ("slurm", "succeeded", 0)
    ids = slurm_jobs_of(detached, job)
    wait_until(lambda: not set(states(ids).values()) & {"PENDING", "RUNNING", "COMPLETING"}, "ends")


@pytest.mark.usefixtures("slurm")
def test_a_detached_slurm_job_restarts_inside_its_one_allocation(
    detached: Detached, tmp_path: Path
) -> None:
    # worker:1 fails in the first run: the second run's steps start in the
    # same allocation, which no task's failure gives back.
    task = py(
        "import os, sys\n"
        "run, index = os.environ['TFMESOS_RESTART'], os.environ['TFMESOS_TASK_INDEX']\n"
        "print('run', run, 'of', index, flush=True)\n"
        "sys.exit(3 if (run, index) == ('0', '1') else 0)\n"
    )
    job = detached.submit("--backend", "slurm", "-w", "2", "--max-restarts", "1", "--", *task)
    assert detached.tfrun("wait", job, timeout=300).returncode == 0
    [slurm_job] = slurm_jobs_of(detached, job)
    assert detached.events(job).names().count("job_started") == 2
    first = detached.tfrun("logs", job, "--task", "worker:1", "--restart", "0")
    assert first.stdout == "run 0 of 1\n", first.stderr
    assert detached.tfrun("logs", job, "--task", "worker:1").stdout == "run 1 of 1\n"
    assert (detached.runs / job / "worker.1.restart-1.log").is_file()
    wait_until(lambda: states([slurm_job]).get(slurm_job) == "COMPLETED", "the job completes")


@pytest.mark.usefixtures("slurm")
def test_stop_cancels_a_detached_slurm_job_and_leaves_nothing(
    detached: Detached, tmp_path: Path
) -> None:
    job = detached.submit("--backend", "slurm", "-w", "2", "--", *waits_for(tmp_path / "never"))
    detached.events(job).wait_for("cluster_up", timeout=300)
    stopped = detached.tfrun("stop", job, timeout=300)
    assert stopped.returncode == 0, stopped.stderr
    ids = slurm_jobs_of(detached, job)
    assert len(ids) == 1  # the job, its launcher and its tasks' steps in it
    wait_until(lambda: not set(states(ids).values()) & {"PENDING", "RUNNING", "COMPLETING"}, "ends")
    assert [p.cmdline() for p in detached.job_procs.wait_gone(60)] == []
    assert detached.tfrun("wait", job).returncode == 143
    assert "tfrun stop" in detached.events(job).verdict()["stopped_by"]


def test_logs_follow_every_task_from_its_start_to_the_jobs_end(detached: Detached) -> None:
    job = detached.submit("-w", "2", "-s", "1", "--", "sh", "-c", "echo one {job_name}; echo two")
    followed = detached.tfrun("logs", "-f", "--task", "all", job)
    assert followed.returncode == 0, followed.stderr
    tasks = ("worker:0", "worker:1", "ps:0")
    expected = [f"[{t}] {word}" for t in tasks for word in (f"one {t[:-2]}", "two")]
    assert sorted(followed.stdout.splitlines()) == sorted(expected)


@pytest.mark.usefixtures("slurm")
def test_a_slurm_launcher_sbatch_refuses_is_one_line_and_leaves_nothing(
    detached: Detached,
) -> None:
    refused = detached.tfrun(
        "--detach", "--backend", "slurm", "--partition", "nosuch", "-w", "1", "--", "true"
    )
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "sbatch refused the detached job: " in refused.stderr
    assert refused.stdout == ""
    assert not detached.runs.exists() or runs_in(detached.runs) == []


def command_lines_holding(text: str) -> list[str]:
    """Every command line on this machine (``ps``'s, ``/proc/PID/cmdline``)
    that holds ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                line = (entry / "cmdline").read_bytes()
                if text.encode() in line:
                    shown = line.replace(b"\0", b" ").decode(errors="replace")
                    found.append(f"{entry.name}: {shown}")
    return found


@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_no_command_line_of_a_detached_job_holds_what_it_exports(
    detached: Detached, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    # Issue 46: the detached launcher was a copy of the submitter's command
    # line (the local daemon, a fork of it; Slurm's batch script ran
    # `tfrun --export ALL,MYSECRET=...` again), where any user's ps reads it.
    # Its job now comes typed, through a descriptor or a private file.
    if backend == "slurm":
        request.getfixturevalue("slurm")
    secret = uuid.uuid4().hex
    go = tmp_path / "go"
    command = py(
        "import os, time\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
        "print('sees', os.environ['MYSECRET'], flush=True)"
    )
    job = detached.submit(
        *("--backend", backend, "--export", f"ALL,MYSECRET={secret}", "-w", "2", "--", *command)
    )
    detached.events(job).wait_for("cluster_up", timeout=300)
    record = json.loads((detached.runs / job / "job.json").read_text())
    if backend == "local":
        launcher = Path(f"/proc/{record['pid']}/cmdline").read_bytes()
        assert b"tfmesos.cli.launch" in launcher and secret.encode() not in launcher
    assert command_lines_holding(secret) == []
    assert not (detached.runs / job / "job-description.json").exists()  # taken once read
    go.touch()
    assert detached.tfrun("wait", job, timeout=300).returncode == 0
    shown = detached.tfrun("logs", job, "--task", "worker:1")
    assert shown.stdout == f"sees {secret}\n", shown.stderr


def test_a_detached_jobs_console_is_capped_as_its_task_logs_are(
    detached: Detached,
) -> None:
    """A chief printing 1 MiB with ``TFMESOS_TASK_LOG_MAX=64K``: its log and
    the run's console.log (what the launcher showed of it) each hold at most
    the cap, the newest output kept. Before: console.log grew to the whole
    output (issue 45: 100 MB of it) while the task log kept to its cap."""
    detached.env["TFMESOS_TASK_LOG_MAX"] = "64K"
    prints = "import sys\nfor n in range(16384): print(f'{n:063d}')\nprint('the last line')"
    job = detached.submit("-w", "1", "--", *py(prints))
    assert detached.tfrun("wait", job).returncode == 0
    run = detached.runs / job

    def held(name: str) -> int:
        return sum(p.stat().st_size for p in run.glob(f"{name}*"))

    assert held("worker.0.log") <= 64 << 10
    wait_until(lambda: "job succeeded" in (run / "console.log").read_text(), "the verdict")
    assert held("console.log") <= 64 << 10, held("console.log")
    assert "the last line" in (run / "console.log").read_text()
    assert detached.job_procs.wait_gone(10) == []


def test_a_detached_job_on_the_test_master_is_refused_in_one_line(
    detached: Detached, master: Any
) -> None:
    """Issue 46: the test master keeps no framework labels and serves no
    agent's files, so a detached job there ran on where no tfrun command
    could find it (``no job ... on the Mesos master``), until the master was
    killed. Now it is refused before anything starts."""
    done = detached.tfrun("--detach", "-m", master.url, "-w", "2", "--", "true")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"tfrun: error: {master.url} is the tfmesos test master" in done.stderr
    assert "detached on real Mesos (scripts/start-mesos" in done.stderr
    assert not master.state()["frameworks"], master.state()["frameworks"]
