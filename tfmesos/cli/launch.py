"""A detached job's launcher: ``python -m tfmesos.cli.launch``, the job's
description in the environment's ``TFMESOS_DETACHED_JOB``
(:mod:`tfmesos.backends.jobspec`), run as an attached tfrun runs its job.

Its command line names no job: what the job carries (``--export``'s values,
the principal's secret) reaches it through a descriptor or a private file,
never its arguments, which ``ps`` shows to every user of the host. Each
backend's store starts it (:meth:`tfmesos.backends.jobs.JobStore.submit`):
the local daemon, a Slurm job's batch step, the process a Mesos launcher
task starts."""

from __future__ import annotations

import contextlib
import os
import sys
import time

from tfmesos.backends.jobspec import ENV_JOB, read_description
from tfmesos.backends.rundirjobs import ENV_STARTED, adopt
from tfmesos.cli.main import run_job
from tfmesos.errors import EXIT_USAGE, SpecError

__all__ = ["main"]


def main() -> int:
    started = time.monotonic()
    where = os.environ.pop(ENV_JOB, None)
    if not where:
        print(
            f"tfrun: error: tfmesos.cli.launch runs a detached job's launcher: ${ENV_JOB} "
            "names no job (tfrun --detach starts it)",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_USAGE
    try:
        job = read_description(where)
    except (OSError, ValueError, SpecError) as exc:
        print(f"tfrun: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    run_dir = adopt()
    _say_started()
    return run_job(job, started=started, run_dir=run_dir, as_program=True)


def _say_started() -> None:
    """Tell the local submitter, where it waits, that the job has begun."""
    fd = os.environ.pop(ENV_STARTED, None)
    if fd is None or not fd.isdigit():
        return
    with contextlib.suppress(OSError):  # a submitter gone (its terminal closed) costs nothing
        os.write(int(fd), b"ok")
    with contextlib.suppress(OSError):
        os.close(int(fd))


if __name__ == "__main__":
    from tfmesos.cli.tfrun import run

    sys.exit(run(main))
