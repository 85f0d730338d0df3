"""Where runs keep their logs, and how many are kept."""

from __future__ import annotations

import asyncio
import fcntl
from pathlib import Path

import pytest

from tfmesos import ClusterSpec, Job, rundirs
from tfmesos.backends.local import LocalBackend
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
        left = sorted(p.name for p in root.iterdir())
    # The two newest before it, the running one, and the new one.
    assert left == sorted([old[1].name, old[3].name, old[4].name, new.name])
    assert (new / rundirs.LOCK).exists()
    assert locked(new)
    rundirs.release(new)
    assert not locked(new)
    rundirs.release(new)  # a second time: nothing


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
    asyncio.run(backend.close())
    assert not locked(backend.log_dir)


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
    from tfmesos.run import run_replica_job

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    spec = ClusterSpec((Job("worker", 1, cmd="true"),), replica=True, max_restarts=1)
    assert run_replica_job(spec, "local") == 0
    (run,) = rundirs.runs_root().iterdir()
    assert (run / rundirs.LOCK).exists() and not locked(run)
