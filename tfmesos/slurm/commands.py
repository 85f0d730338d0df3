"""The Slurm commands the backend runs, as pure functions: what to ask
``sbatch`` and ``srun`` for, and how to read ``squeue``.

Nothing here runs anything, so that every command line is tested in
milliseconds (``tests/test_slurm_commands.py``); the backend runs them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tfmesos.spec import TaskSpec

__all__ = [
    "ACTIVE_STATES",
    "NEVER_REASONS",
    "JobStatus",
    "Shape",
    "explain_reason",
    "job_groups",
    "literal_filename",
    "never_runs",
    "parse_squeue",
    "sbatch_argv",
    "srun_prefix",
]

SQUEUE_FORMAT = "%i|%T|%r|%N"
"""Job id (``123``, ``123+1`` for a part of a heterogeneous job), state, reason, nodes."""

ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)
"""States in which a job still holds (or waits for) its allocation; any other
(COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED, OUT_OF_MEMORY,
BOOT_FAIL, DEADLINE) is its end."""

ENDS = {
    "COMPLETED": "its Slurm job ended",
    "FAILED": "its Slurm job failed",
    "CANCELLED": "its Slurm job was cancelled (scancel, or an administrator)",
    "TIMEOUT": "its Slurm job reached its time limit (--time)",
    "NODE_FAIL": "its Slurm job's node failed",
    "PREEMPTED": "its Slurm job was preempted",
    "OUT_OF_MEMORY": "its Slurm job ran out of memory",
    "BOOT_FAIL": "its Slurm job's node failed to boot",
    "DEADLINE": "its Slurm job missed its deadline",
}

REASONS = {
    "None": "the scheduler has not considered it yet",
    "Resources": "the resources it asks for are in use",
    "Priority": "jobs of higher priority are waiting ahead of it",
    "Dependency": "it waits for another job (a dependency in --sbatch-args)",
    "DependencyNeverSatisfied": (
        "a job it depends on (--dependency in --sbatch-args) ended in a way that can never "
        "satisfy it"
    ),
    "BeginTime": "its start time has not come (--begin in --sbatch-args)",
    "JobHeldUser": "it is held (scontrol release JOBID)",
    "JobHeldAdmin": "an administrator holds it",
    "PartitionConfig": "its partition can never give it this much (fewer tasks, CPUs or memory?)",
    "PartitionNodeLimit": "it asks for more nodes than its partition allows",
    "PartitionTimeLimit": "its --time is more than the partition's limit",
    "PartitionDown": "its partition is down",
    "PartitionInactive": "its partition is inactive",
    "ReqNodeNotAvail": "nodes it needs are not available (down, drained or reserved)",
    "Reservation": "it waits for its reservation",
    "QOSMaxCpuPerUserLimit": "your QOS's CPU limit per user is reached",
    "QOSMaxJobsPerUserLimit": "your QOS's limit on running jobs per user is reached",
    "AssocGrpCpuLimit": "your account's CPU limit is reached",
    "AssocGrpMemLimit": "your account's memory limit is reached",
    "AssocGrpGRES": "your account's GPU (GRES) limit is reached",
    "AssocMaxJobsLimit": "your account's limit on running jobs is reached",
    "InvalidAccount": "the account is not valid (--account)",
    "InvalidQOS": "the QOS is not valid (--qos)",
    "BadConstraints": "its constraints cannot be met",
    "Licenses": "it waits for licenses",
    "NodeDown": "a node it needs is down",
    "AssocMaxCpuPerJobLimit": "your account allows fewer CPUs in one job",
    "AssocMaxNodePerJobLimit": "your account allows fewer nodes in one job",
    "AssocMaxWallDurationPerJobLimit": "its --time is more than your account allows",
    "QOSMaxCpuPerJobLimit": "your QOS allows fewer CPUs in one job",
    "QOSMaxMemoryPerJob": "your QOS allows less memory in one job",
    "QOSMaxNodePerJobLimit": "your QOS allows fewer nodes in one job",
    "QOSMaxWallDurationPerJobLimit": "its --time is more than your QOS allows",
}

NEVER_REASONS = frozenset(
    {
        "PartitionConfig",
        "DependencyNeverSatisfied",
        "PartitionNodeLimit",
        "PartitionTimeLimit",
        "BadConstraints",
        "InvalidAccount",
        "InvalidQOS",
        "AssocMaxCpuPerJobLimit",
        "AssocMaxNodePerJobLimit",
        "AssocMaxWallDurationPerJobLimit",
        "QOSMaxCpuPerJobLimit",
        "QOSMaxMemoryPerJob",
        "QOSMaxNodePerJobLimit",
        "QOSMaxWallDurationPerJobLimit",
    }
)
"""Pending reasons that waiting cannot end: the job asks for more than its
partition, account or QOS gives one job, or for what does not exist. Slurm
queues such a job where it does not enforce those limits at submission
(``EnforcePartLimits=NO``, its default), and it would wait for ever."""


def literal_filename(path: str) -> str:
    """``path`` as sbatch's and srun's ``--output`` and ``--error`` take it
    literally: they read ``%x``, ``%j``, ... as patterns and ``%%`` as a
    ``%``. (A backslash would turn the patterns off and be dropped: the
    backend refuses a log directory with one.)"""
    return path.replace("%", "%%")


def never_runs(status: JobStatus) -> bool:
    """Whether Slurm will never start a job that shows ``status``."""
    return status.pending and status.reason in NEVER_REASONS


def explain_reason(reason: str) -> str:
    """Slurm's pending reason with what it means, where we know it."""
    meaning = REASONS.get(reason)
    return f"{reason}: {meaning}" if meaning else reason


@dataclass(frozen=True)
class Shape:
    """What one task asks Slurm for. Slurm allocates whole CPUs: a task's
    CPUs are rounded up, and its memory is asked per CPU so that it follows
    the task wherever Slurm puts it."""

    cpus: int
    mem_per_cpu: int
    """MiB."""
    gpus: int

    @classmethod
    def of(cls, task: TaskSpec) -> Shape:
        cpus = max(1, math.ceil(task.cpus - 1e-9))
        return cls(cpus, max(1, math.ceil(task.mem / cpus - 1e-9)), task.gpus)

    def options(self) -> list[str]:
        options = [f"--cpus-per-task={self.cpus}", f"--mem-per-cpu={self.mem_per_cpu}M"]
        if self.gpus:
            # Per task: --gres counts per node, and tasks may share a node.
            options.append(f"--gpus-per-task={self.gpus}")
        return options


def job_groups(tasks: Sequence[TaskSpec]) -> list[tuple[Shape, list[int]]]:
    """The parts of one Slurm job for ``tasks``: one per shape, in the order
    first seen, with the positions of its tasks. One part is a plain job; more
    make a heterogeneous job."""
    groups: dict[Shape, list[int]] = {}
    for position, task in enumerate(tasks):
        groups.setdefault(Shape.of(task), []).append(position)
    return list(groups.items())


def sbatch_argv(
    groups: Sequence[tuple[Shape, int]],
    *,
    name: str,
    output: str,
    cwd: str | None,
    options: Mapping[str, object],
) -> list[str]:
    """``sbatch`` for one allocation holding every task: each part asks for
    its tasks' count and shape, with the user's partition, account, QOS, time
    limit and extra options; the script comes on stdin."""
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={name}",
        f"--output={output}",
        "--open-mode=append",
        # The tasks get tfrun's environment, as on the local backend.
        "--export=ALL",
        # tfrun relaunches what fails; a job Slurm requeued would come back
        # to a launcher that has moved on.
        "--no-requeue",
    ]
    if cwd:
        argv.append(f"--chdir={cwd}")
    common = []
    for key in ("partition", "account", "qos", "time"):
        value = options.get(key)
        if value is not None:
            common.append(f"--{key}={value}")
    extra = options.get("sbatch_args") or ()
    assert isinstance(extra, (tuple, list))
    for index, (shape, count) in enumerate(groups):
        if index:
            argv.append(":")
        argv += [f"--ntasks={count}", *shape.options(), *common, *map(str, extra)]
    return argv


def srun_prefix(shape: Shape, group: int | None) -> list[str]:
    """``srun`` for one task in the allocation, on one node, with exactly its
    share (``--exact``), so that every task's step starts at once beside the
    others; ``group`` is its part of a heterogeneous job."""
    argv = ["srun"]
    if group is not None:
        argv.append(f"--het-group={group}")
    argv += [
        "--ntasks=1",
        "--nodes=1",
        "--exact",
        *shape.options(),
        # One task's end is not the others': tfrun decides what ends the job.
        "--kill-on-bad-exit=0",
        "--wait=0",
        "--export=ALL",
        "--open-mode=append",
        "--quiet",
    ]
    return argv


@dataclass(frozen=True)
class JobStatus:
    """One Slurm job (all its parts) as squeue shows it."""

    state: str
    reason: str
    nodes: str

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"


def parse_squeue(text: str) -> dict[str, JobStatus]:
    """``squeue -h -t all -o '%i|%T|%r|%N'`` by job: the parts of a
    heterogeneous job (``123+0``, ``123+1``) make one, pending while any part
    is, running while any part runs, its end the first part's that ended."""
    parts: dict[str, list[JobStatus]] = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 4 or not fields[0]:
            continue
        job_id = fields[0].split("+", 1)[0]
        parts.setdefault(job_id, []).append(JobStatus(fields[1], fields[2], fields[3]))
    jobs = {}
    for job_id, statuses in parts.items():
        nodes = ",".join(
            dict.fromkeys(s.nodes for s in statuses if s.nodes and s.nodes != "(null)")
        )
        pending = [s for s in statuses if s.pending]
        active = [s for s in statuses if s.active]
        if pending:
            jobs[job_id] = JobStatus("PENDING", pending[0].reason, nodes)
        elif active:
            running = [s for s in active if s.state == "RUNNING"] or active
            jobs[job_id] = JobStatus(running[0].state, running[0].reason, nodes)
        else:
            worst = next((s for s in statuses if s.state != "COMPLETED"), statuses[0])
            jobs[job_id] = JobStatus(worst.state, worst.reason, nodes)
    return jobs
