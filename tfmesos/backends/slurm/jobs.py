"""The Slurm backend's detached jobs: ``tfrun --detach`` as one Slurm job.

The job is one allocation for every task (:mod:`tfmesos.slurm.allocation`),
whose batch script runs the launcher, an attached tfrun, with the chief
beside it, and starts the other tasks as job steps in it; the submitter
exits once sbatch has accepted it. The run's directory must be where the
node sees it too (a shared home): the job is kept in it as a local one is
(:class:`~tfmesos.backends.rundirjobs.RunDirJobs`), its launcher the batch
step of its Slurm job (:class:`SlurmLauncher`)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import ClassVar, NoReturn

from tfmesos.backends.jobs import DetachedJob, Run
from tfmesos.backends.jobspec import ENV_JOB, to_json
from tfmesos.backends.rundirjobs import (
    CONSOLE,
    ENV_RUN_DIR,
    JOB,
    LauncherHandle,
    RunDirJobs,
    fail,
    follow_hint,
    write_job,
    write_json,
)
from tfmesos.common import rundirs
from tfmesos.errors import EXIT_TFRUN_FAILED, EXIT_USAGE
from tfmesos.slurm.commands import SQUEUE_FORMAT, JobStatus, literal_filename, parse_squeue

__all__ = ["SlurmJobs", "SlurmLauncher"]

DESCRIPTION = "job-description.json"
"""In the run's directory until the launcher takes it: the job's
description (:mod:`tfmesos.backends.jobspec`)."""


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
        job_id = str(run.record.get("slurm_job_id"))
        status = self._squeue(run)
        argv = ["scancel", job_id]
        if status is not None and not status.pending:
            argv = ["scancel", "--signal=TERM", "--batch", job_id]
        subprocess.run(argv, capture_output=True, timeout=60, check=False)

    def _squeue(self, run: Run) -> JobStatus | None:
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


class SlurmJobs(RunDirJobs):
    """The Slurm backend's detached jobs, in this user's run directories."""

    backend = "slurm"
    handle: ClassVar[LauncherHandle] = SlurmLauncher()

    @classmethod
    def submit(cls, job: DetachedJob) -> NoReturn:
        from tfmesos.slurm import allocation

        spec = job.spec
        run_dir = rundirs.new_run_dir()
        if run_dir.parent != rundirs.runs_root():
            fail(f"cannot keep the detached job in {rundirs.runs_root()}: see the warning above")
        # In the run's directory (private, where the node sees it), not in
        # the script, which Slurm keeps and shows, nor on a command line.
        described = run_dir / DESCRIPTION
        fd = os.open(described, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as file:
            file.write(to_json(job))
        options = {
            key: getattr(job.options, key, None)
            for key in ("partition", "account", "qos", "time", "sbatch_args")
        }
        sbatch, parts = allocation.sbatch_argv(
            spec,
            output=literal_filename(str(run_dir / CONSOLE)),
            cwd=os.getcwd(),
            options=options,
        )
        launcher = [sys.executable, "-m", "tfmesos.cli.launch"]
        script = (
            "#!/bin/sh\n"
            "# tfrun --detach (tfmesos): the job's launcher, in the job's own allocation;\n"
            "# it starts the other tasks as job steps.\n"
            f"export {ENV_RUN_DIR}={shlex.quote(str(run_dir))}\n"
            f"export {ENV_JOB}={shlex.quote(str(described))}\n"
            f"export {allocation.ENV_ALLOCATION}={shlex.quote(parts)}\n"
            f"exec {shlex.join(launcher)}\n"
        )
        write_job(run_dir, "slurm", job.argv, spec.name)
        # Made here, private: Slurm appends to it (and the run is not one that kept nothing).
        os.close(os.open(run_dir / CONSOLE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        _sbatch(sbatch, script, run_dir)


def _sbatch(sbatch: list[str], script: str, run_dir: Path) -> NoReturn:
    """Hand the job to sbatch; say its id once taken."""
    try:
        done = subprocess.run(sbatch, input=script, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _forget(run_dir)
        fail(f"sbatch did not take the detached job: {exc}")
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
        fail(
            f"sbatch refused the detached job: {last_line[0]}",
            EXIT_TFRUN_FAILED if unreachable else EXIT_USAGE,
        )
    record = json.loads((run_dir / JOB).read_text())
    write_json(run_dir / JOB, {**record, "pid": None, "slurm_job_id": job_id})
    # The launcher, once it runs, waits for the lock (rundirs.adopt): it
    # finds job.json whole, its Slurm job's id in it. Until then squeue says
    # it waits.
    rundirs.release(run_dir)
    name = run_dir.name
    print(follow_hint(name) + f"\n(it is Slurm job {job_id})", file=sys.stderr, flush=True)
    print(name, flush=True)
    raise SystemExit(0)


def _forget(run_dir: Path) -> None:
    """A job Slurm never took: its directory goes, as one that kept nothing."""
    for name in (JOB, CONSOLE, DESCRIPTION):
        with contextlib.suppress(OSError):
            (run_dir / name).unlink()
    rundirs.release(run_dir)
