"""``tfrun list``, ``status``, ``wait``, ``stop``, ``logs`` in process
(tfmesos.cli.jobs), over run directories made here: what each says to a
user, in one line, with its status. No process."""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from tfmesos.backends import job_store
from tfmesos.cli import jobs
from tfmesos.common import rundirs


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.delenv("MESOS_MASTER", raising=False)
    return tmp_path


def said(capsys: pytest.CaptureFixture[str]) -> str:
    """What the command said on stderr: its one line."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def test_an_id_longer_than_a_file_name_is_no_job(
    state_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: OSError: [Errno 36] File name too long, a traceback and exit 1.
    (state_home / "tfmesos" / "runs").mkdir(parents=True)
    assert jobs.main(["status", "a" * 256]) == 2
    assert said(capsys).startswith("tfrun status: no job 'aaaa")


@pytest.mark.parametrize("word", ["list", "status", "stop"])
def test_a_state_home_this_user_cannot_read_is_one_line_and_exit_2(
    word: str, state_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another user's XDG_STATE_HOME: every look inside is refused (as root
    # nothing is, so the refusal is made here). Before: PermissionError,
    # a traceback and exit 1 (list: an empty table, as if there were no job).
    runs = state_home / "tfmesos" / "runs"
    runs.mkdir(parents=True)
    real_stat = Path.stat

    def refused(path: Path, **kwargs: bool) -> object:
        if path.is_relative_to(runs) and path != runs:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_stat(path, **kwargs)

    def unlisted(path: Path) -> object:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(Path, "stat", refused)
    monkeypatch.setattr(Path, "iterdir", unlisted)
    assert jobs.main([word] if word == "list" else [word, "some-job"]) == 2
    assert said(capsys) == (
        f"tfrun {word}: cannot read this user's jobs in {runs}: Permission denied "
        "(check $XDG_STATE_HOME)"
    )


def a_run(state_home: Path, job: str, *events: Mapping[str, object]) -> Path:
    """A detached job's run directory, as its launcher leaves it: its
    record, and ``events`` (``job_started`` first, its log directory the run's)."""
    run = state_home / "tfmesos" / "runs" / job
    run.mkdir(parents=True)
    (run / "job.json").write_text(json.dumps({"id": job, "backend": "local", "name": "x"}))
    started = {"event": "job_started", "restart": 0, "max_restarts": 0, "log_dir": str(run)}
    lines = [{"v": 1, "ts": 1.0 + n, **e} for n, e in enumerate([started, *events])]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    return run


LAUNCHED = {"event": "task_launched", "task": "worker:0", "attempt": 1, "task_id": "worker.0.a"}
KILLED = {"event": "task_exited", "task": "worker:0", "attempt": 1, "exit_code": None}
STOPPED = {"event": "job_verdict", "exit_status": 143, "result": "interrupted", "message": "m"}
SUCCEEDED = {"event": "job_verdict", "exit_status": 0, "result": "succeeded", "message": "m"}


def test_wait_says_how_the_job_ended_on_stderr(
    state_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: nothing, only the status.
    a_run(state_home, "done", LAUNCHED, SUCCEEDED)
    a_run(state_home, "stopped", LAUNCHED, KILLED, STOPPED)
    assert jobs.main(["wait", "done"]) == 0
    assert capsys.readouterr() == ("", "tfrun wait: job done succeeded (exit 0)\n")
    assert jobs.main(["wait", "stopped"]) == 143
    assert capsys.readouterr() == ("", "tfrun wait: job stopped stopped (exit 143)\n")


def test_logs_follow_says_how_the_job_ended(
    state_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: the output, then exit 0 without a word of the job's stop.
    run = a_run(state_home, "job", LAUNCHED, KILLED, STOPPED)
    (run / "worker.0.a.log").write_text("step 1\n")
    assert jobs.main(["logs", "-f", "job"]) == 0
    assert capsys.readouterr() == ("step 1\n", "tfrun logs: job job stopped (exit 143)\n")


def test_mesos_master_in_the_environment_chooses_the_store_as_submission_does(
    state_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: tfrun list, status, logs, stop looked only at -m, so with
    # $MESOS_MASTER set (where tfrun --detach submits) they looked here.
    a_run(state_home, "here", LAUNCHED, SUCCEEDED)

    def store(**given: object) -> str:
        args = argparse.Namespace(master=None, principal=None, secret_file=None, ssl_ca=None)
        for key, value in given.items():
            setattr(args, key, value)
        return type(job_store(None, args)).__name__

    assert store() == store(id="here") == store(id="latest") == "LocalJobs"
    monkeypatch.setenv("MESOS_MASTER", "127.0.0.1:5050")
    assert store() == "MesosJobs"  # tfrun list
    assert store(id="mesos-abc") == store(id="latest") == "MesosJobs"
    assert store(id="a" * 256) == "MesosJobs"
    assert store(id="here") == "LocalJobs"  # a run of this machine's, by its id


def test_list_shows_a_finished_jobs_tasks_as_done_of_all(
    state_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: TASKS counted the tasks up, so every finished job read 0/N;
    # and the columns led with BACKEND, the exit status last.
    second = {**LAUNCHED, "task": "worker:1", "task_id": "worker.1.a"}
    exited = {**KILLED, "exit_code": 0}
    a_run(state_home, "done", LAUNCHED, second, exited, {**exited, "task": "worker:1"}, SUCCEEDED)
    assert jobs.main(["list"]) == 0
    header, row = (line.split() for line in capsys.readouterr().out.splitlines())
    assert header == [
        "ID",
        "NAME",
        "STATE",
        "EXIT",
        "TASKS",
        "STARTED",
        "DURATION",
        "RESTARTS",
        "BACKEND",
    ]
    assert row[:5] == ["done", "x", "succeeded", "0", "2/2"]
    assert row[-1] == "local"


def test_status_says_a_task_in_a_cluster_up_is_running(
    state_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "registered ... last: task_registered" for a task at work,
    # and "exited" without its status.
    registered = {"event": "task_registered", "task": "worker:0", "attempt": 1, "host": "h"}
    second = {**LAUNCHED, "task": "worker:1", "task_id": "worker.1.a"}
    exited = {**KILLED, "task": "worker:1", "exit_code": 0, "reason": "exited with status 0"}
    up = {"event": "cluster_up"}
    run = a_run(state_home, "job", LAUNCHED, second, registered, up, exited)
    with open(run / rundirs.LOCK, "w") as lock:  # its launcher, running
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert jobs.main(["status", "job"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "job job: running, x"
    assert lines[1].split()[:2] == ["worker:0", "running"]
    assert lines[1].endswith("last: registered")
    assert lines[2].split()[:3] == ["worker:1", "exited", "0"]


def test_a_log_that_cannot_be_read_is_one_line_and_exit_2(
    state_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Another user's log, or (as root, where nothing is refused) a directory
    # in its place. Before: IsADirectoryError, a traceback and exit 1.
    run = a_run(state_home, "job", LAUNCHED, KILLED, STOPPED)
    (run / "worker.0.a.log").mkdir()
    assert jobs.main(["logs", "job"]) == 2
    assert said(capsys) == f"tfrun logs: cannot read {run}/worker.0.a.log: Is a directory"
