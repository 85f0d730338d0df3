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
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from tfmesos.backends import BACKENDS, job_store, options_class
from tfmesos.backends.jobs import JobError, JobStore, Run
from tfmesos.backends.jobstate import JobState, TaskState
from tfmesos.common.pathtext import shown_path
from tfmesos.errors import EXIT_TFRUN_FAILED, EXIT_USAGE

__all__ = ["EXIT_NO_OUTPUT", "main"]

EXIT_NO_OUTPUT = 1
"""``tfrun logs`` of a task that never started: there is nothing to show."""
POLL = 0.1
"""Seconds between two looks at a job's state (its events, its launcher)
that ``wait`` waits on or ``-f`` follows."""
FOLLOW_POLL = 0.01
"""Seconds between two reads of the logs ``-f`` follows, between two looks
at the job's state: a line is printed within this of reaching its log
(bench/detach.py measures it), for a read() each time."""


def main(argv: Sequence[str]) -> int:
    """``tfrun WORD ...`` for a WORD of :data:`tfmesos.cli.main.SUBCOMMANDS`."""
    word, rest = argv[0], list(argv[1:])
    parser = _parser(word)
    args = parser.parse_args(rest)
    store: JobStore | None = None
    try:
        store = job_store(args.backend, args)
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
    except OSError as exc:
        if exc.filename is None:  # not a file of the job's: tfrun's own failure
            raise
        # A job's file this user cannot read (another's, a log made a
        # directory): one line, as for any other bad input.
        print(
            f"tfrun {word}: cannot read {shown_path(str(exc.filename))}: {exc.strerror or exc}",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_USAGE
    finally:
        if store is not None:
            store.close()


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
        choices=list(BACKENDS),
        help="whose jobs: the local and Slurm backends' are all in this user's run directories; "
        "Mesos's (-m) are on the master",
    )
    for name in BACKENDS:  # where each backend's jobs are found (Mesos: -m)
        options_class(name).add_job_flags(parser)
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
                "tasks_done": sum(1 for task in state.tasks.values() if task.state == "exited"),
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
    # As squeue, ray job list and torchx list lead: what the job is, how it
    # stands, then when; TASKS counts those done (exited) of all its tasks.
    header = ("ID", "NAME", "STATE", "EXIT", "TASKS", "STARTED", "DURATION", "RESTARTS", "BACKEND")
    table = [header]
    for row in rows:
        started = row["started"]
        table.append(
            (
                row["id"],
                _short(row["name"], 32),
                row["state"],
                "-" if row["exit_status"] is None else str(row["exit_status"]),
                f"{row['tasks_done']}/{row['tasks']}",
                time.strftime("%m-%d %H:%M:%S", time.localtime(started)) if started else "-",
                _duration(row["duration"]),
                str(row["restarts"]),
                row["backend"],
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
        reason = last.get("reason") or str(last.get("event") or "-").removeprefix("task_")
        print(
            f"  {name:<12} {_task_state(state, task):<10} host {task.host or '-':<15} "
            f"attempts {task.attempts}  last: {reason}"
        )
    if state.verdict is not None:
        print(f"verdict: {state.verdict.get('message')} (exit status {state.exit_status})")
        if state.verdict.get("stopped_by"):
            print(f"stopped by {state.verdict['stopped_by']}")
    elif not state.running:
        print("its launcher is gone without a verdict (killed?)")
    return 0


def _task_state(state: JobState, task: TaskState) -> str:
    """A task's state as a user reads it: ``running`` for a task registered
    in a cluster that is up, ``exited 0``, ``killed``."""
    if task.state == "exited":
        return "killed" if task.exit_code is None else f"exited {task.exit_code}"
    if task.state in ("registered", "up") and state.cluster_up and state.state == "running":
        return "running"
    return task.state


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
    sys.stdout.flush()
    print(f"tfrun logs: {_follow_end(store.state(run), run, tasks)}", file=sys.stderr, flush=True)
    return 0


def _follow_end(state: JobState, run: Run, tasks: list[str]) -> str:
    """Why following ended: how the job ended, or that its tasks followed
    are done while it goes on."""
    if state.verdict is not None:
        return f"job {run.id} {_ended(state)}"
    if not state.running:
        return f"job {run.id}'s launcher is gone without a verdict (killed?)"
    return f"{', '.join(tasks)} done; job {run.id} goes on ({state.state})"


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
            # On stderr: a script reads the status, and stdout stays empty.
            print(f"tfrun wait: job {run.id} {_ended(state)}", file=sys.stderr)
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
            print(f"tfrun stop: job {run.id} stopped", file=sys.stderr)
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
    print(f"tfrun stop: job {run.id} stopped", file=sys.stderr)
    return 0


def _ended(state: JobState) -> str:
    """How a job ended: ``succeeded (exit 0)``, ``stopped (exit 143)``."""
    status = state.exit_status
    return f"{state.state}" + ("" if status is None else f" (exit {status})")


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
