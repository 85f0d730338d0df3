"""``tfrun``'s main: a job's command line parsed (:mod:`tfmesos.cli.parser`),
then run to its verdict (:func:`run_job`, :func:`tfmesos.launcher.run.run_replica_job`),
handed typed to its backend's store to detach (``--detach``:
:meth:`tfmesos.backends.jobs.JobStore.submit`), or handed to a detached
job's command (``tfrun list``, ...: :mod:`tfmesos.cli.jobs`)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from tfmesos.backends import job_store_class
from tfmesos.backends.jobs import DetachedJob
from tfmesos.cli.detach import RunEvents
from tfmesos.cli.parser import SUBCOMMANDS, parse_args
from tfmesos.common import rundirs
from tfmesos.common.pathtext import shown_path
from tfmesos.errors import (
    EXIT_TFRUN_FAILED,
    EXIT_USAGE,
    ResourceError,
    SpecError,
    TFMesosError,
    interrupted_status,
)

__all__ = ["main", "run_job"]


def main(argv: Sequence[str] | None = None) -> int:
    started = time.monotonic()
    given = sys.argv[1:] if argv is None else list(argv)
    if given[:1] == ["help"] and (len(given) == 1 or given[1] in SUBCOMMANDS):
        # tfrun help (as git help, docker help): --help's, not "-w is required".
        given = [*given[1:], "--help"]
    if given and given[0] in SUBCOMMANDS:  # tfrun list, status ID, ...: never a job's flags
        from tfmesos.cli.jobs import main as jobs_main

        return jobs_main(given)
    args, spec = parse_args(given)
    job = DetachedJob(
        backend=args.backend,
        spec=spec,
        options=args.options,
        verbose=bool(args.verbose),
        events=None if args.events is None else str(args.events),
        argv=tuple(given),
    )
    if args.detach:
        # Returns never: the launcher is a daemon, a Slurm job or a Mesos task.
        job_store_class(args.backend).submit(job)
    return run_job(job, started=started, as_program=argv is None)


def run_job(
    job: DetachedJob,
    *,
    started: float,
    run_dir: Path | None = None,
    as_program: bool = False,
) -> int:
    """Run ``job`` attached, here, to its verdict: tfrun's own job, or a
    detached one's in its launcher (``run_dir``: the run's directory the
    submitter made, where the job's events are kept)."""
    options = job.options
    if run_dir is not None and not options.log_dir:
        options = dataclasses.replace(options, log_dir=str(run_dir))
    logging.basicConfig(format="[tfrun] %(message)s", level=logging.INFO, stream=sys.stderr)
    # -v is tfmesos's own detail, not every library's (asyncio's "Using selector").
    logging.getLogger("tfmesos").setLevel(logging.DEBUG if job.verbose else logging.INFO)
    # kazoo narrates every ZooKeeper connection step at INFO.
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    options.start_early(job.spec)
    from tfmesos.launcher.events import NO_EVENTS, Events, open_events
    from tfmesos.launcher.run import LateSignals, run_replica_job

    events: Events = NO_EVENTS
    if job.events is not None:
        try:
            events = open_events(job.events)
        except OSError as exc:
            options.discard_early()
            print(
                f"tfrun: error: --events: cannot write {shown_path(job.events)}: "
                f"{exc.strerror or exc}",
                file=sys.stderr,
                flush=True,
            )
            return EXIT_USAGE
    # Every run's events are kept in its directory too, for tfrun list and the others.
    if run_dir is not None:
        events = RunEvents([events], run_dir=run_dir)
    else:
        events = RunEvents([events], job=(job.backend, job.argv, job.spec.name))
    late = LateSignals()  # from the job's end to tfrun's, no signal cuts the verdict short
    made_before = rundirs.held()

    def verdict(status: int, result: str, message: str, stopped_by: str | None = None) -> int:
        events.emit(
            "job_verdict", exit_status=status, result=result, message=message, signal=stopped_by
        )
        return status

    try:
        status = run_replica_job(
            job.spec, job.backend, options, started=started, events=events, late_signals=late
        )
    except (ResourceError, SpecError) as exc:
        # Bad usage, found when the backend looked (a job this machine can
        # never hold, a certificate that cannot be used): said as usage is.
        print(f"tfrun: error: {exc}", file=sys.stderr, flush=True)
        return verdict(EXIT_USAGE, "refused", str(exc))
    except TFMesosError as exc:
        print(f"tfrun: error: {exc}", file=sys.stderr, flush=True)
        return verdict(exc.exit_status, "error", str(exc))
    except Exception as exc:
        # A bug, or a failure nobody foresaw: tfrun's own, not a task's.
        traceback.print_exc()
        print("tfrun: error: tfrun itself failed (above)", file=sys.stderr, flush=True)
        return verdict(EXIT_TFRUN_FAILED, "error", f"tfrun itself failed: {exc!r}")
    except KeyboardInterrupt as exc:  # before the job's loop took signals in (tfmesos.cli.tfrun)
        signum = getattr(exc, "signum", signal.SIGINT)  # SignalInterrupt's, or Ctrl-C's
        name = signal.Signals(signum).name
        verdict(
            interrupted_status(signum),
            "interrupted",
            f"tfrun was stopped by {name}",
            name,
        )
        raise
    finally:
        # A job refused or failed before its backend let go of its run's
        # directory: one that kept nothing goes (rundirs.release).
        for run in rundirs.held() - made_before:
            rundirs.release(run)
        options.discard_early()
        events.close()
        if run_dir is not None:
            rundirs.release(run_dir)
        if not as_program:
            # Called in a process that goes on: its own handlers back. (Run
            # as tfrun, they stay taken in until the interpreter exits.)
            late.restore()
    if as_program and job.backend == "local":
        _exit_now(status)
    return status


def _exit_now(status: int) -> NoReturn:
    """End tfrun, run as a program, once a local job is over, without the
    interpreter's teardown of its ~200 modules (~25 ms of CPU and wall after
    the job's last word; docs/benchmarks.md, "The fixed cost"): every task
    is reaped and every line written, and what is left is to flush."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or broken: nothing more to say
            stream.flush()
    os._exit(status)
