"""``tfrun --detach``: the launcher as a daemon that outlives the terminal.

The submitting tfrun makes the run's directory (its name is the job's id)
and forks twice; the grandchild, in a session of its own with no terminal,
runs the job as an attached tfrun would and says through a pipe that it has
begun, and only then does the submitter print the id and exit. The run
directory's lock, the daemon's from then on, is how ``tfrun list`` tells a
running job. On Slurm (:func:`submit_slurm`) the job is one Slurm job in
place of the daemon, its batch script a tfrun that adopts the run
(:func:`adopt`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from tfmesos.common import rundirs
from tfmesos.errors import EXIT_TFRUN_FAILED, EXIT_USAGE
from tfmesos.launcher.events import Events, open_events
from tfmesos.slurm.commands import literal_filename
from tfmesos.spec import ClusterSpec

__all__ = [
    "CONSOLE",
    "EVENTS",
    "JOB",
    "STOP",
    "RunEvents",
    "follow_hint",
    "submit",
    "write_job",
]

EVENTS, JOB = rundirs.RECORDS
"""The run's event stream, in its directory; what the job is (its command,
backend, the launcher's pid)."""
CONSOLE = "console.log"
"""What the detached tfrun says (its standard output and error)."""
STOP = "stop.json"
"""Who asked ``tfrun stop`` to end the job, and when."""

_SHIELDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def submit(args: Any, argv: Sequence[str], name: str) -> Path:
    """Detach the job that ``args`` describe (parsed and checked). Returns,
    in the daemon only, the run's directory; the submitter exits here, 0
    once the daemon has begun the job."""
    # Until the daemon is in a session of its own, a signal to the submitter's
    # process group (the terminal's Ctrl-C, a closed SSH session) would reach
    # it too: ignored, and so discarded, from before the run's directory is
    # made (once it is there, the job runs) until then.
    before = {signum: signal.getsignal(signum) for signum in _SHIELDED}
    for signum in _SHIELDED:
        signal.signal(signum, signal.SIG_IGN)
    run_dir = rundirs.new_run_dir()
    if run_dir.parent != rundirs.runs_root():
        _fail(f"cannot keep the detached job in {rundirs.runs_root()}: see the warning above")
    ready, started = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child:
        os.close(started)
        # The run is the daemon's: a signal that stops this process now
        # (tfrun's clean-up releases what it holds) must not remove it.
        rundirs.hand_over(run_dir)
        for signum, handler in before.items():
            signal.signal(signum, handler)
        _submitter(run_dir, ready, child)
    os.close(ready)
    os.setsid()
    if os.fork():
        os._exit(0)  # the daemon is no session leader: it can never get a terminal
    # In a session of its own, with no terminal, nothing sends the daemon a
    # SIGHUP but by hand: each signal is handled as in an attached tfrun
    # (left ignored, a disposition every task's command would inherit).
    for signum, handler in before.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    _daemon_streams(run_dir)
    write_job(run_dir, args.backend, argv, name)
    with contextlib.suppress(OSError):  # a submitter gone (its terminal closed) costs nothing
        os.write(started, b"ok")
    os.close(started)
    return run_dir


ENV_RUN_DIR = "TFMESOS_DETACHED_RUN"
"""Set for the tfrun that a Slurm job runs as a detached job's launcher: the
run's directory, which the submitter made (:func:`adopt`)."""


def submit_slurm(args: Any, argv: Sequence[str], spec: ClusterSpec) -> NoReturn:
    """Detach a Slurm job as one Slurm job: an allocation for every task
    (tfmesos.slurm.allocation), whose batch script runs the launcher, an
    attached tfrun, with the chief beside it, and starts the other tasks as
    job steps in it; the submitter exits once sbatch has accepted it. The
    run's directory must be where the node sees it too (a shared home)."""
    import shlex
    import subprocess

    from tfmesos.slurm import allocation

    run_dir = rundirs.new_run_dir()
    if run_dir.parent != rundirs.runs_root():
        _fail(f"cannot keep the detached job in {rundirs.runs_root()}: see the warning above")
    split = argv.index("--") if "--" in argv else len(argv)
    flags = [word for word in argv[:split] if word != "--detach"]
    inner = [sys.executable, "-m", "tfmesos.cli", "--backend", "slurm", *flags, *argv[split:]]
    options = {
        key: getattr(args.options, key, None)
        for key in ("partition", "account", "qos", "time", "sbatch_args")
    }
    sbatch, parts = allocation.sbatch_argv(
        spec,
        output=literal_filename(str(run_dir / CONSOLE)),
        cwd=os.getcwd(),
        options=options,
    )
    script = (
        "#!/bin/sh\n"
        "# tfrun --detach (tfmesos): the job's launcher, in the job's own allocation;\n"
        "# it starts the other tasks as job steps.\n"
        f"export {ENV_RUN_DIR}={shlex.quote(str(run_dir))}\n"
        f"export {allocation.ENV_ALLOCATION}={shlex.quote(parts)}\n"
        f"exec {shlex.join(inner)}\n"
    )
    write_job(run_dir, "slurm", argv, spec.name)
    # Made here, private: Slurm appends to it (and the run is not one that kept nothing).
    os.close(os.open(run_dir / CONSOLE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    try:
        done = subprocess.run(sbatch, input=script, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _forget(run_dir)
        _fail(f"sbatch did not take the detached job: {exc}")
    job_id = done.stdout.strip().split(";", 1)[0]
    if done.returncode != 0 or not job_id.isdigit():
        _forget(run_dir)
        last_line = done.stderr.strip().splitlines()[-1:] or [
            f"sbatch exited with {done.returncode}"
        ]
        # As an attached job's: Slurm out of reach is tfrun's failure, a
        # request it will never grant (a partition, an account) bad usage.
        unreachable = (
            "Unable to contact slurm controller" in last_line[0] or "timed out" in last_line[0]
        )
        _fail(
            f"sbatch refused the detached job: {last_line[0]}",
            EXIT_TFRUN_FAILED if unreachable else EXIT_USAGE,
        )
    record = json.loads((run_dir / JOB).read_text())
    _write_json(run_dir / JOB, {**record, "pid": None, "slurm_job_id": job_id})
    # The launcher, once it runs, waits for the lock (rundirs.adopt): it
    # finds job.json whole, its Slurm job's id in it. Until then squeue says
    # it waits.
    rundirs.release(run_dir)
    job = run_dir.name
    print(follow_hint(job) + f"\n(it is Slurm job {job_id})", file=sys.stderr, flush=True)
    print(job, flush=True)
    raise SystemExit(0)


def _forget(run_dir: Path) -> None:
    """A job Slurm never took: its directory goes, as one that kept nothing."""
    for name in (JOB, CONSOLE):
        with contextlib.suppress(OSError):
            (run_dir / name).unlink()
    rundirs.release(run_dir)


def adopt() -> Path | None:
    """The detached run this tfrun is the launcher of (a Slurm job's, as
    :func:`submit_slurm` started it), its lock taken; None for any other tfrun."""
    given = os.environ.pop(ENV_RUN_DIR, None)
    if not given:
        return None
    run_dir = Path(given)
    rundirs.adopt(run_dir)
    return run_dir


def _submitter(run_dir: Path, ready: int, child: int) -> NoReturn:
    """Wait for the daemon's word, then print the job's id last on standard
    output and how to follow it on standard error."""
    with os.fdopen(ready, "rb") as pipe:
        answer = pipe.read()
    with contextlib.suppress(ChildProcessError):
        os.waitpid(child, 0)
    if answer != b"ok":
        console = run_dir / CONSOLE
        console_text = console.read_text(errors="replace").strip() if console.exists() else ""
        _fail(f"the detached job did not start{': ' + console_text if console_text else ''}")
    job = run_dir.name
    print(follow_hint(job), file=sys.stderr, flush=True)
    print(job, flush=True)
    raise SystemExit(0)


def follow_hint(job: str) -> str:
    return (
        f"tfrun: job {job} runs detached; follow it with:\n"
        f"  tfrun logs -f {job}      # worker:0's output as it comes (--task all: every task's)\n"
        f"  tfrun status {job}\n"
        f"  tfrun wait {job}         # until it ends, with its exit status\n"
        f"  tfrun stop {job}"
    )


def _fail(message: str, status: int = EXIT_TFRUN_FAILED) -> NoReturn:
    print(f"tfrun: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(status)


def _daemon_streams(run_dir: Path) -> None:
    """Standard input from /dev/null; output and errors to the run's console."""
    null = os.open(os.devnull, os.O_RDONLY)
    console = os.open(run_dir / CONSOLE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(null, 0)
    os.dup2(console, 1)
    os.dup2(console, 2)
    os.close(null)
    os.close(console)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]


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
    _write_json(run_dir / JOB, record)


def _user() -> str:
    import getpass  # here: an attached job's tfrun needs it only where it is stopped

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def _write_json(path: Path, record: dict[str, Any]) -> None:
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
    _write_json(run_dir / STOP, record)
    return record


class RunEvents(Events):
    """The job's events, to its run's ``events.jsonl`` (which ``tfrun list``
    and the other commands read) and to ``--events`` where given; the
    verdict of a job ``tfrun stop`` ended says who stopped it and when.

    An attached job's run is the one its first ``job_started`` names, when
    this tfrun made it under the runs' root: ``job.json`` is written then,
    so that ``tfrun list`` shows attached runs too."""

    def __init__(
        self,
        streams: Sequence[Events],
        *,
        run_dir: Path | None = None,
        job: tuple[str, Sequence[str], str] | None = None,
    ) -> None:
        self._streams = list(streams)
        self._run_dir = run_dir
        self._job = job
        """An attached job's backend, argv and name, for its ``job.json``."""
        if run_dir is not None:
            self._streams.insert(0, open_events(run_dir / EVENTS))

    def record(self, obj: dict[str, Any]) -> None:
        if self._job is not None and obj["event"] == "job_started":
            self._adopt(obj.get("log_dir"))
        if obj["event"] == "job_verdict" and obj.get("result") == "interrupted" and self._run_dir:
            with contextlib.suppress(OSError, ValueError):
                stop = json.loads((self._run_dir / STOP).read_text())
                obj = {
                    **obj,
                    "stopped_by": stop.get("stopped_by"),
                    "stopped_at": stop.get("stopped_at"),
                }
        for stream in self._streams:
            stream.record(obj)

    def _adopt(self, log_dir: object) -> None:
        """Keep the attached job's events in its run's directory, once."""
        assert self._job is not None
        backend, argv, name = self._job
        self._job = None
        run = Path(str(log_dir)) if log_dir else None
        if run is None or run not in rundirs.held() or run.parent != rundirs.runs_root():
            return
        try:
            stream = open_events(run / EVENTS)
            write_job(run, backend, argv, name, detached=False)
        except OSError:
            return  # the run's logs are what matter; its listing is a convenience
        self._run_dir = run
        self._streams.insert(0, stream)

    def close(self) -> None:
        for stream in self._streams:
            stream.close()
