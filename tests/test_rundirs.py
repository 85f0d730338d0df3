"""Where runs keep their logs, and how many are kept."""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from pathlib import Path

import pytest

from tests.conftest import runs_in
from tfmesos import ClusterSpec, Job
from tfmesos.backends.local.backend import LocalBackend
from tfmesos.common import rundirs
from tfmesos.errors import SpecError


def test_runs_live_in_the_users_state_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert rundirs.runs_root() == tmp_path / "state" / "tfmesos" / "runs"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/dir")  # ignored, as the spec says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert rundirs.runs_root() == tmp_path / "home" / ".local" / "state" / "tfmesos" / "runs"


def test_only_the_newest_runs_are_kept_and_a_running_one_never_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setenv(rundirs.ENV_KEEP_RUNS, "3")
    root = rundirs.runs_root()
    root.mkdir(parents=True)
    old = [root / f"2020010{i}-000000-x" for i in range(1, 6)]
    for path in old:
        path.mkdir()
        (path / "worker.0.1.abc.log").write_text("old\n")
    # The second oldest is another tfrun's run, still going: it holds its lock.
    with open(old[1] / rundirs.LOCK, "wb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        new = rundirs.new_run_dir()
        assert new.parent == root
        left = sorted(p.name for p in runs_in(root))
        # The new run is not counted until it has kept something (a refused
        # job keeps nothing): the three newest before it, the running one,
        # the new one.
        assert left == sorted([old[1].name, old[2].name, old[3].name, old[4].name, new.name])
        assert (new / rundirs.LOCK).exists()
        assert locked(new)
        (new / "worker.0.1.abc.log").write_text("new\n")
        rundirs.release(new)
        assert not locked(new)
        # Now it counts: the two newest before it, the running one, and it.
        assert sorted(p.name for p in runs_in(root)) == sorted(
            [old[1].name, old[3].name, old[4].name, new.name]
        )
    rundirs.release(new)  # a second time: nothing


def test_refused_runs_leave_nothing_and_cost_no_real_run_its_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # TFMESOS_KEEP_RUNS=2, a real run, then two jobs refused once their run's
    # directory was made: the second refused one removed the real run's logs,
    # and each left its directory with only its .lock (issue 27).
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setenv(rundirs.ENV_KEEP_RUNS, "1")
    real = rundirs.new_run_dir()
    (real / "worker.0.1.abc.log").write_text("the real run's output\n")
    rundirs.release(real)
    for _ in range(2):
        refused = rundirs.new_run_dir()
        assert refused in rundirs.held()
        rundirs.release(refused)
        assert not refused.exists()
        assert refused not in rundirs.held()
    assert runs_in(rundirs.runs_root()) == [real]
    assert (real / "worker.0.1.abc.log").read_text() == "the real run's output\n"
    # The next real run is counted once it has kept something: only it stays.
    newer = rundirs.new_run_dir()
    (newer / "worker.0.1.abc.log").write_text("newer\n")
    assert real.exists()
    rundirs.release(newer)
    assert runs_in(rundirs.runs_root()) == [newer]


def test_latest_links_the_newest_run_and_is_never_pruned_as_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 40, item 16: `latest` to the newest run directory.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setenv(rundirs.ENV_KEEP_RUNS, "2")
    # A second apart each, as runs are named (runs of one second sort by
    # their random part).
    stamps = iter(f"20260101-0000{second:02d}" for second in range(60))
    monkeypatch.setattr(time, "strftime", lambda _: next(stamps))
    root = rundirs.runs_root()
    latest = root / "latest"
    made = []
    for number in range(4):
        run = rundirs.new_run_dir()
        made.append(run)
        # Relative, replaced whole: no temporary name left beside it.
        assert os.readlink(latest) == run.name
        assert latest.resolve() == run.resolve()
        (run / "worker.0.1.abc.log").write_text(f"run {number}\n")
        rundirs.release(run)
        assert sorted(p.name for p in root.iterdir() if p.name.startswith(".")) == []
    # The link is no run: the two newest runs are kept besides it.
    assert runs_in(root) == made[-2:]
    assert (latest / "worker.0.1.abc.log").read_text() == "run 3\n"
    # A run refused once its directory was made leaves nothing: `latest`
    # names the newest run left, not a directory gone.
    refused = rundirs.new_run_dir()
    assert latest.resolve() == refused.resolve()
    rundirs.release(refused)
    assert not refused.exists()
    assert latest.resolve() == made[-1].resolve()


def locked(run: Path) -> bool:
    """Whether a run (of this process or another) holds ``run``'s lock."""
    with open(run / rundirs.LOCK, "ab") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


def test_a_backend_lets_go_of_the_run_directory_it_made_when_it_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A program that runs one job after another (a notebook, the tests) does
    # not keep every run's lock, and an open file with it, to its end.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    spec = ClusterSpec((Job("worker", 1, cmd="true"),), replica=True)
    backend = LocalBackend(spec)
    assert locked(backend.log_dir)
    # One given the directory (every run of a restarting job, the chief beside
    # a Mesos job) leaves it to whoever made it.
    given = LocalBackend(spec, log_dir=backend.log_dir)
    asyncio.run(given.close())
    assert locked(backend.log_dir)
    (backend.log_dir / "worker.0.1.abc.log").write_text("output\n")
    asyncio.run(backend.close())
    assert not locked(backend.log_dir)
    # One that kept nothing (the job was refused) leaves nothing.
    empty = LocalBackend(spec)
    asyncio.run(empty.close())
    assert not empty.log_dir.exists()


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("", 50 << 20),
        ("0", 0),
        ("65536", 65536),
        ("1K", 1024),
        ("256K", 256 << 10),
        ("50M", 50 << 20),
        ("1GiB", 1 << 30),
    ],
)
def test_the_task_log_cap_reads_sizes(
    monkeypatch: pytest.MonkeyPatch, text: str, size: int
) -> None:
    monkeypatch.setenv(rundirs.ENV_TASK_LOG_MAX, text)
    assert rundirs.task_log_max() == size


@pytest.mark.parametrize(
    ("name", "text"),
    [
        (rundirs.ENV_TASK_LOG_MAX, "lots"),
        # A cap of a byte was no cap at all (its halves empty); a few bytes would
        # rotate at every byte.
        (rundirs.ENV_TASK_LOG_MAX, "1"),
        (rundirs.ENV_TASK_LOG_MAX, "1000"),
        (rundirs.ENV_KEEP_RUNS, "0"),
    ],
)
def test_bad_settings_are_spec_errors(
    monkeypatch: pytest.MonkeyPatch, name: str, text: str
) -> None:
    monkeypatch.setenv(name, text)
    with pytest.raises(SpecError, match=name):
        rundirs.task_log_max() if name == rundirs.ENV_TASK_LOG_MAX else rundirs.keep_runs()


@pytest.mark.e2e
def test_a_restarting_job_lets_go_of_its_run_directory_when_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tfmesos.launcher.run import run_replica_job

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    spec = ClusterSpec((Job("worker", 1, cmd="true"),), replica=True, max_restarts=1)
    assert run_replica_job(spec, "local") == 0
    (run,) = runs_in(rundirs.runs_root())
    assert (run / rundirs.LOCK).exists() and not locked(run)


PRIVATE_LOG_JOBS = {
    "run-by-tfrun": ({}, ["-w", "2", "-s", "1"]),
    "agent-per-task": ({"TFMESOS_LOCAL_AGENTS": "1"}, ["-w", "2", "-s", "1"]),
    # Each process's own log too (TASK_ID.local-rank-N.log), 0644 before.
    "processes-per-task": ({}, ["-w", "2", "--nproc-per-task", "2"]),
    # The tasks' logs and slurm-JOBID.out, made by Slurm's step and job:
    # 0644 before.
    "slurm": ({}, ["--backend", "slurm", "-Mw", "256", "-Ms", "256", "-w", "2", "-s", "1"]),
}


@pytest.mark.e2e
@pytest.mark.parametrize("how", list(PRIVATE_LOG_JOBS))
def test_a_jobs_logs_and_events_are_its_users_alone(
    tmp_path: Path, how: str, request: pytest.FixtureRequest
) -> None:
    import os
    import stat
    import subprocess
    import sys

    if how == "slurm":
        request.getfixturevalue("slurm")  # Slurm up, or skipped saying why
    extra_env, job = PRIVATE_LOG_JOBS[how]
    env = {**os.environ, **extra_env}  # the test's own state directory (conftest)
    logs, events = tmp_path / "new" / "logs", tmp_path / "events.jsonl"
    tfrun = [sys.executable, "-m", "tfmesos.cli", "--events", str(events)]
    for extra in (["--log-dir", str(logs)], []):
        # A umask that lets others read what is not made private on purpose.
        before = os.umask(0o022)
        try:
            result = subprocess.run(
                [*tfrun, *extra, *job, "--", "echo hello"],
                capture_output=True,
                text=True,
                timeout=180,
                env=env,
                cwd=tmp_path,
            )
        finally:
            os.umask(before)
        assert result.returncode == 0, result.stderr
        where = logs if extra else max(runs_in(rundirs.runs_root()))
        assert stat.S_IMODE(where.stat().st_mode) == 0o700, where
        files = [p for p in where.iterdir() if p.name != rundirs.LOCK]
        assert len(files) >= 3
        modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files}
        assert set(modes.values()) == {"0o600"}, modes
        assert stat.S_IMODE(events.stat().st_mode) == 0o600
        events.unlink()
