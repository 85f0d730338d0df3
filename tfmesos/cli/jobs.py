"""``tfrun list``, ``status``, ``logs``, ``wait``, ``stop``, ``attach``: a
detached job's commands (``tfrun --detach``, tfmesos.cli.detach).

Each backend that detaches a job has a :class:`JobStore`: where its jobs are
found by id, their state read, their logs, and how one is stopped. The local
backend's, :class:`LocalJobs`, reads the run directories under
``$XDG_STATE_HOME/tfmesos/runs``: a job's id is its directory's name, its
state its event stream (``events.jsonl``, tfmesos.backends.jobstate) and whether its
launcher still holds the directory's lock. Another backend (Mesos: the
master's state and the agents' sandboxes) brings a store of its own; the
commands below know only the interface.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from tfmesos.backends.jobs import JobError, JobStore, Run
from tfmesos.backends.jobstate import SCHEMA_VERSION, JobState, job_state, read_events
from tfmesos.cli import detach
from tfmesos.common import rundirs
from tfmesos.common.tasklog import log_name
from tfmesos.errors import EXIT_TFRUN_FAILED
from tfmesos.slurm.commands import SQUEUE_FORMAT, JobStatus, parse_squeue

__all__ = ["EXIT_NO_OUTPUT", "JobStore", "LocalJobs", "Run", "main"]

EXIT_NO_OUTPUT = 1
"""``tfrun logs`` of a task that never started: there is nothing to show."""
POLL = 0.1
"""Seconds between two looks at a job's state (its events, its launcher)
that ``wait`` waits on or ``-f`` follows."""
FOLLOW_POLL = 0.01
"""Seconds between two reads of the logs ``-f`` follows, between two looks
at the job's state: a line is printed within this of reaching its log
(bench/detach.py measures it), for a read() each time."""


class LocalJobs:
    """The local backend's detached jobs: this user's run directories."""

    backend = "local"

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or rundirs.runs_root()

    def runs(self) -> list[Run]:
        found = []
        with contextlib.suppress(OSError):
            for path in sorted(self.root.iterdir()):
                if path.is_symlink() or not (path / detach.JOB).exists():
                    continue
                with contextlib.suppress(ValueError):
                    found.append(self._run(path))
        return found

    def find(self, job_id: str) -> Run:
        path = self.root / job_id
        if job_id == rundirs.LATEST:
            runs = self.runs()
            if not runs:
                raise JobError("there is no detached job yet (tfrun --detach starts one)")
            return runs[-1]
        if "/" in job_id or job_id in ("", ".", "..") or not (path / detach.JOB).is_file():
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
            raise JobError(f"job {job_id}: its record {path / detach.JOB} cannot be read") from None

    def _run(self, path: Path) -> Run:
        record = json.loads((path / detach.JOB).read_text())
        if not isinstance(record, dict):
            raise ValueError(path)
        return Run(path.name, str(record.get("backend", "local")), path, record)

    def running(self, run: Run) -> bool:
        """Whether its launcher still runs (or, on Slurm, waits to)."""
        return _HANDLES.get(run.backend, _LOCAL).alive(run)

    def state(self, run: Run) -> JobState:
        # Whether it runs, looked at before the events: a job that ends in
        # between is read with its verdict, never as gone without one.
        running = self.running(run)
        return job_state(read_events(run.where / detach.EVENTS), running)

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
        return run.where / detach.CONSOLE

    def stop(self, run: Run) -> bool:
        if not self.running(run):
            return False
        detach.record_stop(run.where)
        handle = _HANDLES.get(run.backend, _LOCAL)
        handle.signal(run)
        while handle.alive(run):  # the launcher stops every task, then lets the run go
            time.sleep(POLL)
        if self.state(run).verdict is None:
            # Stopped before its launcher ran (a Slurm job still pending):
            # nobody else says the verdict.
            handle.verdict_for_never_started(run)
        return True


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
            stop = json.loads((run.where / detach.STOP).read_text())
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
        with open(run.where / detach.EVENTS, "a", encoding="utf-8") as events:
            events.write(json.dumps(verdict, separators=(",", ":")) + "\n")


class SlurmLauncher(LauncherHandle):
    """A detached Slurm job's launcher: the batch step of the job's one
    Slurm job (its id in ``job.json``), running while it holds the lock or
    Slurm has the job pending or running; stopped by ``scancel``: SIGTERM to
    its batch step (the launcher, which stops the tasks' steps) once it
    runs, the job itself while it waits."""

    def alive(self, run: Run) -> bool:
        if super().alive(run):
            return True
        status = self._squeue(run)
        return status is not None and status.active

    def signal(self, run: Run) -> None:
        import subprocess

        job_id = str(run.record.get("slurm_job_id"))
        status = self._squeue(run)
        argv = ["scancel", job_id]
        if status is not None and not status.pending:
            argv = ["scancel", "--signal=TERM", "--batch", job_id]
        subprocess.run(argv, capture_output=True, timeout=60, check=False)

    def _squeue(self, run: Run) -> JobStatus | None:
        import subprocess

        job_id = run.record.get("slurm_job_id")
        if not isinstance(job_id, str):
            return None
        try:
            done = subprocess.run(
                ["squeue", "-h", "-t", "all", "-j", job_id, "-o", SQUEUE_FORMAT],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return parse_squeue(done.stdout).get(job_id)


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


_LOCAL = LauncherHandle()
_HANDLES: dict[str, LauncherHandle] = {"local": _LOCAL, "slurm": SlurmLauncher()}
"""Each backend's launcher handle, by the backend's name (``job.json``'s)."""


def store_for(backend: str | None, args: argparse.Namespace | None = None) -> JobStore:
    given_id = str(getattr(args, "id", ""))
    if backend == "mesos" or (
        backend is None and (getattr(args, "master", None) or given_id.startswith("mesos-"))
    ):
        from tfmesos.backends.mesos.jobs import (
            MesosJobs,  # detached Mesos jobs: found on the master
        )

        return MesosJobs.from_args(args)
    if backend not in (None, "local", "slurm"):
        raise JobError(
            f"detached jobs are not yet kept on the {backend} backend: "
            "only the local, Slurm and Mesos backends' (tfrun --detach -w N -- command)"
        )
    return LocalJobs()


def main(argv: Sequence[str]) -> int:
    """``tfrun WORD ...`` for a WORD of :data:`tfmesos.cli.main.SUBCOMMANDS`."""
    word, rest = argv[0], list(argv[1:])
    parser = _parser(word)
    args = parser.parse_args(rest)
    try:
        store = store_for(args.backend, args)
        return int(COMMANDS[word](store, args))
    except JobError as exc:
        print(f"tfrun {word}: {exc}", file=sys.stderr, flush=True)
        return exc.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Its reader is gone (tfrun logs ID | head): nothing more to say, as
        # a command killed by SIGPIPE says nothing; the flush at exit must not either.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def _parser(word: str) -> argparse.ArgumentParser:
    from tfmesos.cli.parser import Parser

    class _JobParser(Parser):
        def _unknown_flag(self, word: str) -> str | None:
            return f"unknown flag {word.split('=', 1)[0]}" if word.startswith("-") else None

    usage = {
        "list": "tfrun list [--json]",
        "status": "tfrun status ID [--json]",
        "logs": "tfrun logs ID [--task worker:1|ps:0|all] [--restart N|all] [-f]",
        "wait": "tfrun wait ID",
        "stop": "tfrun stop ID",
        "attach": "tfrun attach ID",
    }[word]
    parser = _JobParser(prog=f"tfrun {word}", usage=usage, allow_abbrev=False)
    parser.add_argument(
        "--backend",
        choices=["local", "mesos", "slurm"],
        help="whose jobs: the local and Slurm backends' are all in this user's run directories; "
        "Mesos's (-m) are on the master",
    )
    _mesos_flags(parser)
    if word != "list":
        parser.add_argument(
            "id", metavar="ID", help="the job's id, as tfrun --detach printed it (or latest)"
        )
    if word in ("list", "status"):
        parser.add_argument(
            "--json", action="store_true", help="JSON, in the event stream's schema"
        )
    if word == "logs":
        parser.add_argument(
            "--task",
            default=None,
            metavar="TASK",
            help="whose output: worker:1, ps:0, chief:0, or all (default: the chief, worker:0)",
        )
        parser.add_argument(
            "--restart",
            default=None,
            type=_restart_asked,
            metavar="N|all",
            help="which run of a restarted job (--max-restarts): 0 for the first, N for the "
            "Nth restart, all for each in turn (default: the latest); with -f, from that run on",
        )
        parser.add_argument(
            "-f",
            "--follow",
            action="store_true",
            help="go on printing it as it comes, into the task's next attempt or run, "
            "until the task or the job ends",
        )
    return parser


def _mesos_flags(parser: argparse.ArgumentParser) -> None:
    """Where a detached Mesos job is found, and as whom (tfmesos.backends.mesos.jobs)."""
    parser.add_argument("-m", "--master", help="a detached Mesos job's master (else $MESOS_MASTER)")
    parser.add_argument("--principal", help="the principal the job's framework runs as")
    parser.add_argument("--secret-file", metavar="FILE", help="the principal's secret")
    parser.add_argument("--ssl-ca", metavar="PEM", help="the CA of a master over TLS")


def _list(store: JobStore, args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    for run in store.runs():
        state = store.state(run)
        rows.append(
            {
                "id": run.id,
                "name": run.name,
                "backend": run.backend,
                "detached": bool(run.record.get("detached")),
                "state": state.state,
                "tasks_up": state.tasks_up,
                "tasks": len(state.tasks),
                "restarts": state.restarts,
                "started": state.started or run.record.get("started"),
                "duration": state.duration(),
                "exit_status": state.exit_status,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    header = ("ID", "NAME", "BACKEND", "STATE", "TASKS", "RESTARTS", "START", "DURATION", "EXIT")
    table = [header]
    for row in rows:
        started = row["started"]
        table.append(
            (
                row["id"],
                _short(row["name"], 32),
                row["backend"],
                row["state"],
                f"{row['tasks_up']}/{row['tasks']}",
                str(row["restarts"]),
                time.strftime("%m-%d %H:%M:%S", time.localtime(started)) if started else "-",
                _duration(row["duration"]),
                "-" if row["exit_status"] is None else str(row["exit_status"]),
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        )
    return 0


def _status(store: JobStore, args: argparse.Namespace) -> int:
    run = store.find(args.id)
    state = store.state(run)
    if args.json:
        print(
            json.dumps(
                {
                    "id": run.id,
                    "name": run.name,
                    "backend": run.backend,
                    "state": state.state,
                    "restarts": state.restarts,
                    "log_dir": state.log_dir,
                    "tasks": {name: task.as_json() for name, task in state.tasks.items()},
                    "verdict": state.verdict,
                },
                indent=1,
            )
        )
        return 0
    print(f"job {run.id}: {state.state}, {run.name}")
    for name, task in state.tasks.items():
        last = task.last_event or {}
        reason = last.get("reason") or last.get("event") or "-"
        print(
            f"  {name:<12} {task.state:<10} host {task.host or '-':<15} "
            f"attempts {task.attempts}  last: {reason}"
        )
    if state.verdict is not None:
        print(f"verdict: {state.verdict.get('message')} (exit status {state.exit_status})")
        if state.verdict.get("stopped_by"):
            print(f"stopped by {state.verdict['stopped_by']}")
    elif not state.running:
        print("its launcher is gone without a verdict (killed?)")
    return 0


def _tasks_asked(state: JobState, run: Run, asked: str | None) -> list[str]:
    if asked == "all":
        return list(state.tasks)
    if asked is None:
        return ["chief:0" if "chief:0" in state.tasks else "worker:0"]
    task = asked if ":" in asked else f"worker:{asked}"
    if state.tasks and task not in state.tasks:
        raise JobError(f"job {run.id} has no task {task} (its tasks: {', '.join(state.tasks)})")
    return [task]


def _restart_asked(word: str) -> int | str:
    """``--restart``'s value: a run's number, or ``all``."""
    if word == "all":
        return word
    if not word.isdigit():
        raise argparse.ArgumentTypeError(f"{word!r} is not a run's number (0, 1, ...) or all")
    return int(word)


def _runs_asked(state: JobState, run: Run, asked: int | str | None) -> list[int]:
    """The runs whose logs are asked for, by restart number."""
    if not state.runs:
        return []
    if asked is None:
        return [len(state.runs) - 1]
    if asked == "all":
        return list(range(len(state.runs)))
    assert isinstance(asked, int)
    if asked >= len(state.runs):
        raise JobError(
            f"job {run.id} has no run {asked}: its runs are 0"
            + (f" to {len(state.runs) - 1}" if len(state.runs) > 1 else "")
            + " (--restart N: 0 for the first run, N for the Nth restart)"
        )
    return [asked]


def _logs(store: JobStore, args: argparse.Namespace) -> int:
    run = store.find(args.id)
    state = store.state(run)
    while args.follow and not state.tasks and state.verdict is None and state.running:
        time.sleep(POLL)  # a job not started yet: its tasks are known once it starts
        state = store.state(run)
    tasks = _tasks_asked(state, run, args.task)
    restarts = _runs_asked(state, run, args.restart)
    if args.follow:
        since = restarts[0] if restarts else 0
        return _follow(store, run, tasks, prefix=len(tasks) > 1, since=since)
    printed = False
    views = [(n, state.of_run(n)) for n in restarts] if restarts else [(0, state)]
    for restart, view in views:
        if len(restarts) > 1:
            sys.stdout.flush()
            print(f"tfrun logs: run {restart} of job {run.id}", file=sys.stderr, flush=True)
        for task in tasks:
            for log in store.task_logs(run, view, task):
                with contextlib.suppress(FileNotFoundError), open(log, "rb") as file:
                    _copy(file, f"[{task}] " if len(tasks) > 1 else "")
                    printed = True
    if not printed:
        raise JobError(
            f"task {tasks[0] if len(tasks) == 1 else 'of job ' + run.id} has not started"
            f"{'' if state.verdict is None else ' and the job is over'}: no output to show",
            EXIT_NO_OUTPUT,
        )
    return 0


def _copy(file: IO[bytes], prefix: str, partial: bytearray | None = None) -> None:
    """Write what ``file`` holds from where it is, each whole line with
    ``prefix``; an unfinished last line waits in ``partial`` (when given)."""
    data = file.read()
    if not data:
        return
    out = sys.stdout.buffer
    if not prefix:
        out.write(data)
    else:
        pending = (partial or bytearray()) + data
        *lines, rest = pending.split(b"\n")
        for line in lines:
            out.write(prefix.encode() + line + b"\n")
        if partial is None:
            if rest:
                out.write(prefix.encode() + rest + b"\n")
        else:
            partial[:] = rest
    out.flush()


@dataclasses.dataclass
class _Followed:
    task: str
    task_id: str | None = None
    """The launch of the task followed now."""
    path: Path | None = None
    file: IO[bytes] | None = None
    partial: bytearray = dataclasses.field(default_factory=bytearray)
    shown: set[str] = dataclasses.field(default_factory=set)
    """The launches whose output is all printed."""
    done: bool = False


def _follow(store: JobStore, run: Run, tasks: list[str], *, prefix: bool, since: int = 0) -> int:
    """Print each task's output from its start and as it comes, through
    each of its launches (a relaunch, a restart of the job) from run
    ``since`` on, until the job can launch it no more."""
    followed = [_Followed(task) for task in tasks]
    looked = -POLL
    try:
        while True:
            if time.monotonic() - looked >= POLL:
                looked = time.monotonic()
                state = store.state(run)
                for one in followed:
                    if not one.done:
                        prefixed = f"[{one.task}] " if prefix else ""
                        _follow_one(store, run, state, one, prefixed, since)
                if all(one.done for one in followed):
                    break
            else:  # between two looks at the state: what the logs have now
                for one in followed:
                    if one.file is not None:
                        _read_on(one, f"[{one.task}] " if prefix else "")
            time.sleep(FOLLOW_POLL)
    finally:
        for one in followed:
            if one.file is not None:
                one.file.close()
    never = [one.task for one in followed if not one.shown]
    if len(never) == len(followed):
        raise JobError(
            f"task {', '.join(never)} never started: the job ended before it did", EXIT_NO_OUTPUT
        )
    return 0


def _follow_one(
    store: JobStore, run: Run, state: JobState, one: _Followed, prefix: str, since: int
) -> None:
    if one.task_id is None:
        launched = next(
            (
                attempt
                for attempt in state.attempts
                if attempt.task == one.task
                and attempt.restart >= since
                and attempt.task_id not in one.shown
            ),
            None,
        )
        if launched is None:
            # Nothing (more) launched: wait while the job may launch it.
            one.done = not state.may_start_again(one.task)
            return
        logs = store.task_logs(run, state.of_attempt(launched), one.task)
        if not logs:  # a run that keeps no log here
            one.shown.add(launched.task_id)
            return
        one.task_id, one.path = launched.task_id, logs[-1]
        if one.shown:
            sys.stdout.buffer.flush()
            print(
                f"tfrun logs: {one.task} launched again (run {launched.restart}, attempt "
                f"{launched.attempt}): {one.path.name}",
                file=sys.stderr,
                flush=True,
            )
        if len(logs) > 1:
            with contextlib.suppress(FileNotFoundError), open(logs[0], "rb") as rotated:
                _copy(rotated, prefix, one.partial)
    over = state.attempt_over(one.task_id)  # looked at before the last read: nothing is missed
    if one.file is None and one.path is not None:
        with contextlib.suppress(FileNotFoundError):
            one.file = open(one.path, "rb")  # noqa: SIM115 - closed by _follow
    if one.file is not None:
        _read_on(one, prefix)
    if over:
        if one.file is not None:
            _copy(one.file, prefix, one.partial)  # what came before its end was said
            one.file.close()
        if one.partial:
            sys.stdout.buffer.write(prefix.encode() + bytes(one.partial) + b"\n")
            sys.stdout.buffer.flush()
            one.partial.clear()
        one.shown.add(one.task_id)
        one.task_id, one.path, one.file = None, None, None


def _read_on(one: _Followed, prefix: str) -> None:
    """Print what the followed log holds now, into its next file where it rotated."""
    assert one.file is not None
    _copy(one.file, prefix, one.partial)
    if _rotated(one):
        _copy(one.file, prefix, one.partial)
        one.file.close()
        one.file = open(one.path, "rb")  # type: ignore[arg-type]  # noqa: SIM115
        _copy(one.file, prefix, one.partial)


def _rotated(one: _Followed) -> bool:
    """Whether the file at the followed path is a new one (the log rotated)."""
    assert one.file is not None
    assert one.path is not None
    try:
        return os.stat(one.path).st_ino != os.fstat(one.file.fileno()).st_ino
    except OSError:
        return False


def _wait(store: JobStore, args: argparse.Namespace) -> int:
    run = store.find(args.id)
    while True:
        state = store.state(run)
        if state.verdict is not None:
            status = state.exit_status
            return EXIT_TFRUN_FAILED if status is None else status
        if not state.running:
            raise JobError(
                f"job {run.id}'s launcher is gone without a verdict (killed?)", EXIT_TFRUN_FAILED
            )
        time.sleep(POLL)


def _stop(store: JobStore, args: argparse.Namespace) -> int:
    run = store.find(args.id)
    state = store.state(run)
    if state.verdict is not None or not state.running:
        # Gone without a verdict (its launcher lost): what it left is ended
        # (a Mesos framework the master still lists, and its tasks).
        if state.verdict is None and store.stop(run):
            return 0
        if state.state != "stopped":
            print(
                f"tfrun stop: job {run.id} is over already ({state.state}"
                f"{'' if state.exit_status is None else f', exit status {state.exit_status}'}): "
                "nothing to stop",
                file=sys.stderr,
            )
        return 0
    store.stop(run)
    return 0


def _attach(store: JobStore, args: argparse.Namespace) -> int:
    """The job's console as an attached tfrun shows it, from its start;
    Ctrl-C leaves the job running."""
    run = store.find(args.id)
    with open(store.console(run), "rb") as console:
        try:
            while True:
                state = store.state(run)
                _copy(console, "", None)
                if state.verdict is not None or not state.running:
                    _copy(console, "", None)
                    return 0
                time.sleep(POLL)
        except KeyboardInterrupt:
            print(f"\ntfrun attach: detached; job {run.id} goes on", file=sys.stderr)
            return 0


def _short(text: str, width: int) -> str:
    text = text.removeprefix("[tfrun] ")
    return text if len(text) <= width else text[: width - 1] + "…"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


COMMANDS = {
    "list": _list,
    "status": _status,
    "logs": _logs,
    "wait": _wait,
    "stop": _stop,
    "attach": _attach,
}
