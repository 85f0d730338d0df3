"""Detached jobs kept in this user's run directories (``$XDG_STATE_HOME/
tfmesos/runs``): the store of the backends whose launcher runs where this
machine's files are (the local backend's daemon; a Slurm job on a shared
home). A job's id is its directory's name; its state its event stream
(``events.jsonl``, :mod:`tfmesos.backends.jobstate`) and whether its
launcher runs, which each backend's :class:`LauncherHandle` says (the
directory's lock; Slurm's queue too); what the job is, ``job.json``."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, NoReturn

from tfmesos.backends.jobs import JobError, JobStore, Run
from tfmesos.backends.jobstate import SCHEMA_VERSION, JobState, job_state, read_events
from tfmesos.common import rundirs
from tfmesos.common.pathtext import shown_path
from tfmesos.common.tasklog import log_name
from tfmesos.errors import EXIT_TFRUN_FAILED

__all__ = [
    "CONSOLE",
    "ENV_RUN_DIR",
    "ENV_RUN_LOCK",
    "ENV_STARTED",
    "EVENTS",
    "JOB",
    "POLL",
    "STOP",
    "LauncherHandle",
    "RunDirJobs",
    "adopt",
    "fail",
    "follow_hint",
    "record_stop",
    "write_job",
]

EVENTS, JOB = rundirs.RECORDS
"""The run's event stream, in its directory; what the job is (its command,
backend, the launcher's pid)."""
CONSOLE = "console.log"
"""What the detached tfrun says (its standard output and error)."""
STOP = "stop.json"
"""Who asked ``tfrun stop`` to end the job, and when."""
POLL = 0.1
"""Seconds between two looks at a stopped job's launcher."""
ENV_RUN_DIR = "TFMESOS_DETACHED_RUN"
"""Set for a detached job's launcher (:mod:`tfmesos.cli.launch`): its
run's directory, which the submitter made, and whose lock it takes
(:func:`adopt`)."""
ENV_RUN_LOCK = "TFMESOS_DETACHED_LOCK"
"""Set beside :data:`ENV_RUN_DIR` where the launcher inherits the lock (the
local daemon's, kept through its ``exec``): the descriptor that holds it."""
ENV_STARTED = "TFMESOS_DETACHED_STARTED"
"""Set where the submitter waits for the launcher's word that the job has
begun (the local daemon's): the pipe's descriptor to write ``ok`` to."""


class LauncherHandle:
    """A detached job's launcher on one backend: whether it runs, and the
    signal that stops it as Ctrl-C would. This one: a daemon on this machine,
    running while it holds its run's lock."""

    def alive(self, run: Run) -> bool:
        return _locked(run.where / rundirs.LOCK)

    def signal(self, run: Run) -> None:
        pid = run.record.get("pid")
        if isinstance(pid, int):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def verdict_for_never_started(self, run: Run) -> None:
        stop: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            stop = json.loads((run.where / STOP).read_text())
        verdict = {
            "v": SCHEMA_VERSION,
            "ts": time.time(),
            "event": "job_verdict",
            "exit_status": 128 + signal.SIGTERM,
            "result": "interrupted",
            "message": "the job was stopped before its launcher started",
            "signal": "SIGTERM",
            **stop,
        }
        with open(run.where / EVENTS, "a", encoding="utf-8") as events:
            events.write(json.dumps(verdict, separators=(",", ":")) + "\n")


class RunDirJobs(JobStore):
    """The jobs in this user's run directories, whichever backend ran them
    (``tfrun list`` shows the local and Slurm ones together): each run's
    launcher is asked through its own backend's :attr:`handle`."""

    backend = "local"
    handle: ClassVar[LauncherHandle] = LauncherHandle()
    """How this backend's launchers are seen and stopped."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or rundirs.runs_root()

    def runs(self) -> list[Run]:
        found = []
        try:
            paths = sorted(self.root.iterdir())
        except FileNotFoundError:  # no job run yet
            return []
        except OSError as exc:  # another user's state home, or a file
            raise self._unreadable(exc) from None
        for path in paths:
            with contextlib.suppress(OSError, ValueError):  # one run's records half gone
                if not path.is_symlink() and (path / JOB).exists():
                    found.append(self._run(path))
        return found

    def _unreadable(self, exc: OSError) -> JobError:
        """This user's jobs cannot be read where ``$XDG_STATE_HOME`` puts them."""
        return JobError(
            f"cannot read this user's jobs in {shown_path(str(self.root))}: "
            f"{exc.strerror or exc} (check $XDG_STATE_HOME)"
        )

    def find(self, job_id: str) -> Run:
        path = self.root / job_id
        if job_id == rundirs.LATEST:
            runs = self.runs()
            if not runs:
                raise JobError("there is no detached job yet (tfrun --detach starts one)")
            return runs[-1]
        if "/" in job_id or job_id in ("", ".", "..") or not self._is_run(path):
            matches = [run for run in self.runs() if run.id.endswith(job_id)] if job_id else []
            if len(matches) == 1:
                return matches[0]
            if matches:
                raise JobError(
                    f"{job_id!r} is the end of {len(matches)} jobs' ids "
                    f"({', '.join(run.id for run in matches[:3])}...): give more of it"
                )
            raise JobError(f"no job {job_id!r} among this user's jobs (tfrun list shows them)")
        try:
            return self._run(path)
        except ValueError:
            raise JobError(f"job {job_id}: its record {path / JOB} cannot be read") from None

    def _is_run(self, path: Path) -> bool:
        try:
            return (path / JOB).is_file()
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:  # an id no run's directory can have
                return False
            raise self._unreadable(exc) from None

    def _run(self, path: Path) -> Run:
        record = json.loads((path / JOB).read_text())
        if not isinstance(record, dict):
            raise ValueError(path)
        return Run(path.name, str(record.get("backend", "local")), path, record)

    def _handle(self, run: Run) -> LauncherHandle:
        from tfmesos.backends import RUN_DIRECTORY_STORES, job_store_class

        if run.backend == self.backend or run.backend not in RUN_DIRECTORY_STORES:
            # An attached run on another backend (tfrun -m, here): its
            # launcher is this machine's, as a local job's.
            return self.handle
        found = job_store_class(run.backend)  # the run's own backend's
        assert issubclass(found, RunDirJobs)
        return found.handle

    def running(self, run: Run) -> bool:
        """Whether its launcher still runs (or, on Slurm, waits to)."""
        return self._handle(run).alive(run)

    def state(self, run: Run) -> JobState:
        # Whether it runs, looked at before the events: a job that ends in
        # between is read with its verdict, never as gone without one.
        running = self.running(run)
        return job_state(read_events(run.where / EVENTS), running)

    def task_logs(self, run: Run, state: JobState, task: str) -> list[Path]:
        task_state = state.tasks.get(task)
        if task_state is None or task_state.task_id is None or state.log_dir is None:
            return []
        log = Path(state.log_dir) / log_name(task_state.task_id)
        legacy = log.with_name(f"{task_state.task_id}.log")  # a run from before plain names
        if not log.exists() and legacy.exists():
            log = legacy
        rotated = log.with_name(log.name + ".1")
        return [rotated, log] if rotated.exists() else [log]

    def console(self, run: Run) -> Path:
        return run.where / CONSOLE

    def stop(self, run: Run) -> bool:
        if not self.running(run):
            return False
        record_stop(run.where)
        handle = self._handle(run)
        handle.signal(run)
        while handle.alive(run):  # the launcher stops every task, then lets the run go
            time.sleep(POLL)
        if self.state(run).verdict is None:
            # Stopped before its launcher ran (a Slurm job still pending):
            # nobody else says the verdict.
            handle.verdict_for_never_started(run)
        return True


def _locked(path: Path) -> bool:
    """Whether another process holds the lock on ``path``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # and the lock with it
    return False


def adopt() -> Path | None:
    """The detached run this process is the launcher of, as its submitter
    made it, its lock taken; None for a launcher that keeps no run here
    (a Mesos task's, which keeps it in its sandbox)."""
    given = os.environ.pop(ENV_RUN_DIR, None)
    held_by = os.environ.pop(ENV_RUN_LOCK, None)
    if not given:
        return None
    run_dir = Path(given)
    rundirs.adopt(run_dir, int(held_by) if held_by and held_by.isdigit() else None)
    return run_dir


def follow_hint(job: str) -> str:
    return (
        f"tfrun: job {job} runs detached; follow it with:\n"
        f"  tfrun logs -f {job}      # worker:0's output as it comes (--task all: every task's)\n"
        f"  tfrun status {job}\n"
        f"  tfrun wait {job}         # until it ends, with its exit status\n"
        f"  tfrun stop {job}"
    )


def fail(message: str, status: int = EXIT_TFRUN_FAILED) -> NoReturn:
    """A submitter's one line, and its exit."""
    print(f"tfrun: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(status)


def write_job(
    run_dir: Path, backend: str, argv: Sequence[str], name: str, *, detached: bool = True
) -> None:
    """``job.json``: what the job is, for ``tfrun list`` and ``tfrun stop``."""
    record = {
        "id": run_dir.name,
        "backend": backend,
        "name": name,
        "argv": list(argv),
        "cwd": os.getcwd(),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "user": _user(),
        "started": time.time(),
        "detached": detached,
    }
    write_json(run_dir / JOB, record)


def _user() -> str:
    import getpass  # here: an attached job's tfrun needs it only where it is stopped

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def write_json(path: Path, record: dict[str, Any]) -> None:
    """Written whole or not at all: a reader never finds half of it."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        json.dump(record, file)
        file.write("\n")
    os.replace(temporary, path)


def record_stop(run_dir: Path) -> dict[str, Any]:
    """``stop.json``: who stops the job, and when (the verdict says it)."""
    record = {
        "stopped_by": f"{_user()}@{socket.gethostname()} (tfrun stop, pid {os.getpid()})",
        "stopped_at": time.time(),
    }
    write_json(run_dir / STOP, record)
    return record
