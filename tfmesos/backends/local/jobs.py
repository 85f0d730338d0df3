"""The local backend's detached jobs: ``tfrun --detach``'s launcher as a
daemon on this machine that outlives the terminal.

The submitting tfrun makes the run's directory (its name is the job's id)
and forks twice; the grandchild, in a session of its own with no terminal,
becomes the launcher (``exec``: :mod:`tfmesos.cli.launch`, the job's
description in an anonymous file, so that its command line names nothing
of the job's), which runs the job as an attached tfrun would and says
through a pipe that it has begun; only then does the submitter print the id
and exit. The run directory's lock, inherited through the ``exec`` and the
launcher's from then on, is how ``tfrun list`` tells a running job
(:class:`~tfmesos.backends.rundirjobs.RunDirJobs`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

from tfmesos.backends.jobs import DetachedJob
from tfmesos.backends.jobspec import ENV_JOB, to_descriptor
from tfmesos.backends.rundirjobs import (
    CONSOLE,
    ENV_RUN_DIR,
    ENV_RUN_LOCK,
    ENV_STARTED,
    RunDirJobs,
    fail,
    follow_hint,
    write_job,
)
from tfmesos.common import proctree, rundirs
from tfmesos.errors import EXIT_TFRUN_FAILED

__all__ = ["LocalJobs"]

_SHIELDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class LocalJobs(RunDirJobs):
    """The local backend's detached jobs: this user's run directories."""

    backend = "local"

    @classmethod
    def submit(cls, job: DetachedJob) -> NoReturn:
        """Detach ``job``: the submitter exits here, 0 once the daemon has
        begun the job."""
        # Until the daemon is in a session of its own, a signal to the submitter's
        # process group (the terminal's Ctrl-C, a closed SSH session) would reach
        # it too: ignored, and so discarded, from before the run's directory is
        # made (once it is there, the job runs) until then.
        before = {signum: signal.getsignal(signum) for signum in _SHIELDED}
        for signum in _SHIELDED:
            signal.signal(signum, signal.SIG_IGN)
        run_dir = rundirs.new_run_dir()
        if run_dir.parent != rundirs.runs_root():
            fail(f"cannot keep the detached job in {rundirs.runs_root()}: see the warning above")
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
        write_job(run_dir, job.backend, job.argv, job.spec.name)
        _become_launcher(job, run_dir, started)


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
        fail(f"the detached job did not start{': ' + console_text if console_text else ''}")
    job = run_dir.name
    print(follow_hint(job), file=sys.stderr, flush=True)
    print(job, flush=True)
    raise SystemExit(0)


def _become_launcher(job: DetachedJob, run_dir: Path, started: int) -> NoReturn:
    """Replace this process with the job's launcher, handing it the job's
    description, the run's lock and the pipe to say it has begun through."""
    lock = rundirs.lock_descriptor(run_dir)
    described = to_descriptor(job)
    os.set_inheritable(started, True)
    env = dict(os.environ)
    env[ENV_JOB] = f"fd:{described}"
    env[ENV_RUN_DIR] = str(run_dir)
    env[ENV_STARTED] = str(started)
    if lock is not None:
        os.set_inheritable(lock, True)
        env[ENV_RUN_LOCK] = str(lock)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, "-m", "tfmesos.cli.launch"], env)
    except OSError as exc:
        print(f"tfrun: error: the detached job's launcher could not start: {exc}", flush=True)
        os._exit(EXIT_TFRUN_FAILED)


def _console_keeper(path: Path) -> int:
    """A pipe whose reader, a keeper of its own (:mod:`tfmesos.common.logkeeper`,
    which names nothing of the job on its command line), writes what comes
    to the run's console at ``path``, capped as every task's log is: the
    write end. The keeper ends once every writer has."""
    reader, writer = os.pipe()
    os.set_inheritable(writer, False)
    subprocess.Popen(
        [*proctree.bootstrap_command("tfmesos.common.logkeeper"), str(path)],
        stdin=reader,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(reader)
    return writer


def _daemon_streams(run_dir: Path) -> None:
    """Standard input from /dev/null; output and errors to the run's console,
    through its keeper (:func:`_console_keeper`), which caps it."""
    null = os.open(os.devnull, os.O_RDONLY)
    console = _console_keeper(run_dir / CONSOLE)
    os.dup2(null, 0)
    os.dup2(console, 1)
    os.dup2(console, 2)
    os.close(null)
    os.close(console)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
