"""What a job is: frozen, validated specifications.

Every check that can be made before anything starts is made here, when a spec
is built, so that bad input costs the user nothing but a clear message.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from tfmesos.common import taskenv
from tfmesos.common.exported import carried, parse_export
from tfmesos.errors import SpecError
from tfmesos.rendezvous import protocol

__all__ = [
    "CHIEF",
    "CHIEF_JOB",
    "EVALUATOR_JOB",
    "MAX_COMMAND_LINE",
    "MAX_NPROC",
    "MAX_RESTARTS",
    "MAX_TASKS",
    "ClusterSpec",
    "Job",
    "TaskSpec",
    "Volume",
    "coerce_jobs",
    "parse_volume",
]

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
REPLICA_JOBS = ("ps", "worker", "chief", "evaluator")
CHIEF_JOB = "chief"
"""TensorFlow's ``chief`` (``tfrun --chief``): its end is the job's."""
EVALUATOR_JOB = "evaluator"
"""TensorFlow's side-car ``evaluator`` (``tfrun --evaluator``): in no cluster
list, and no rank; its end does not end the job, nor does its failure."""
SINGLE_JOBS = (CHIEF_JOB, EVALUATOR_JOB)
"""Jobs of at most one task, as TensorFlow's TF_CONFIG has them."""

MAX_TASKS = 10_000
"""The most tasks one job may have, on any backend (the local backend has
lower limits of its own: :func:`tfmesos.common.resources.local_task_limit`)."""
MAX_RESTARTS = 1000
"""More restarts than this is a job that fails for good, restarted for ever."""
MAX_COMMAND_LINE = 131071
"""Linux takes at most 128 KiB, its terminating NUL included, in one argument
(``MAX_ARG_STRLEN``): a shell command line is one, ``sh -c LINE``."""
_EXEC_PREFIX = len("exec ")
"""What the agent may put in front of a simple command (``exec_if_simple``)."""
ADDRESS_ALLOWANCE = 64
"""Bytes of the cluster message allowed for each task's address."""
MESSAGE_ALLOWANCE = 1024
"""Bytes of the cluster message allowed for its fixed fields and its proof."""


def _number(value: object, what: str, *, minimum: float, allow_equal: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpecError(f"{what} must be a number, not {value!r}")
    if value < minimum or (value == minimum and not allow_equal):
        relation = "at least" if allow_equal else "more than"
        raise SpecError(f"{what} must be {relation} {minimum:g}, not {value!r}")
    return float(value)


def _count(value: object, what: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{what} must be a whole number, not {value!r}")
    if value < 0:
        raise SpecError(f"{what} must not be negative, not {value}")
    return value


@dataclass(frozen=True)
class Job:
    """A group of identical tasks, as in the original ``tfmesos.Job``."""

    name: str
    num: int
    cpus: float = 1.0
    mem: float = 1024.0
    """Memory in MiB."""
    gpus: int = 0
    cmd: str | None = None
    """Replica mode: the shell command each task runs. ``None``: a TF server."""
    start: int = 0
    """Kept for the original's signature; only 0 is accepted (see __post_init__)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise SpecError(
                f"job name {self.name!r} must start with a letter and hold only letters, "
                "digits, '_' and '-'"
            )
        where = f"job {self.name!r}"
        object.__setattr__(self, "num", _count(self.num, f"{where}: num"))
        object.__setattr__(self, "start", _count(self.start, f"{where}: start"))
        if self.start:
            # The original took tasks start..num-1 and listed them from index
            # 0, so each task's address sat at the wrong index. A TF cluster
            # definition names every task of a job; tfmesos can only name the
            # ones it starts.
            raise SpecError(
                f"{where}: start={self.start} is not supported: tfmesos starts every task "
                "of a job (indices 0 to num-1), since the cluster definition must list them all"
            )
        object.__setattr__(
            self, "cpus", _number(self.cpus, f"{where}: cpus", minimum=0, allow_equal=False)
        )
        object.__setattr__(
            self, "mem", _number(self.mem, f"{where}: mem", minimum=0, allow_equal=False)
        )
        object.__setattr__(self, "gpus", _count(self.gpus, f"{where}: gpus"))
        if self.cmd is not None:
            if not isinstance(self.cmd, str) or not self.cmd.strip():
                raise SpecError(f"{where}: cmd must be a non-empty string")
            unknown = [
                p for p in taskenv.placeholders_in(self.cmd) if p not in taskenv.PLACEHOLDERS
            ]
            if unknown:
                known = " ".join(f"{{{p}}}" for p in taskenv.PLACEHOLDERS)
                raise SpecError(
                    f"unknown placeholder {{{unknown[0]}}} in the command (known: {known}; "
                    "write {{name}} for a literal {name})"
                )

    @classmethod
    def coerce(cls, value: Job | Mapping[str, Any]) -> Job:
        """A ``Job`` from a ``Job`` or from a dict of its fields."""
        if isinstance(value, Job):
            return value
        if not isinstance(value, Mapping):
            raise SpecError(f"a job must be a dict or a tfmesos.Job, not {type(value).__name__}")
        allowed = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise SpecError(
                f"unknown job field {unknown[0]!r} (known: {', '.join(sorted(allowed))})"
            )
        if "name" not in value or "num" not in value:
            raise SpecError("a job needs at least a 'name' and a 'num'")
        return cls(**value)


@dataclass(frozen=True)
class TaskSpec:
    """One task of a job: what it needs and what it runs."""

    job_name: str
    index: int
    cpus: float
    mem: float
    gpus: int
    cmd: str | None
    ports: int = 1
    """Consecutive ports the task takes, from the one it is given: a worker's
    N processes with ``--nproc-per-task N`` are N TensorFlow workers, each at
    its own (:func:`tfmesos.common.taskenv.process_cluster`)."""

    @property
    def name(self) -> str:
        return f"{self.job_name}:{self.index}"

    @property
    def target(self) -> str:
        return f"/job:{self.job_name}/task:{self.index}"


@dataclass(frozen=True)
class Volume:
    host_path: str
    container_path: str
    read_only: bool = False


def parse_volume(text: str) -> Volume:
    """``/host:/container[:ro|rw]``, as ``-V`` takes it."""
    parts = text.split(":")
    mode = "rw"
    if len(parts) == 3 and parts[2] in ("ro", "rw"):
        mode = parts.pop()
    if len(parts) != 2 or not all(p.startswith("/") for p in parts):
        raise SpecError(f"volume {text!r} must be /host/path:/container/path[:ro|rw]")
    return Volume(parts[0], parts[1], read_only=mode == "ro")


_SHELL_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
"""A name a POSIX shell keeps in the environment of what it runs (compiled
only when a job has an environment of its own)."""


def _check_variable(name: object, value: object) -> None:
    """One variable of the job's environment (``-e``'s ``env``,
    ``cluster(env=...)``): what an environment can hold, and none the
    launcher sets itself (:func:`tfmesos.common.taskenv.launchers_own`)."""
    if not isinstance(name, str) or not isinstance(value, str):
        raise SpecError(f"environment variable {name!r} must be a name with a string value")
    if not name or "=" in name:
        raise SpecError(
            f"environment variable name {name!r} is not one an environment can hold: "
            "a name is not empty and has no '='"
        )
    for what, text in (("name", name), ("value", value)):
        if "\0" in text:
            raise SpecError(
                f"environment variable {name!r}: its {what} holds a NUL byte (\\0), "
                "which no environment can hold"
            )
        try:
            text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:
            raise SpecError(
                f"environment variable {name!r}: its {what} holds {text[exc.start]!r}, "
                "which no environment can hold (not UTF-8)"
            ) from None
    if not re.fullmatch(_SHELL_NAME, name):
        # Every task's command runs through /bin/sh -c, and dash (Debian's
        # /bin/sh) drops such a name from the environment it passes on: the
        # variable would vanish without a word.
        raise SpecError(
            f"environment variable name {name!r} is not one /bin/sh passes on to the command "
            "(which runs through it): letters, digits and '_', not starting with a digit"
        )
    # surrogateescape: a value from os.environ may carry bytes that are not UTF-8.
    size = len(name.encode("utf-8", "surrogateescape")) + 1
    size += len(value.encode("utf-8", "surrogateescape"))
    if size > MAX_COMMAND_LINE:
        # NAME=VALUE is one string of the environment, which Linux caps as it
        # does one argument: execve would fail in every task (E2BIG).
        raise SpecError(
            f"environment variable {name} is {size} bytes as NAME=VALUE; one variable can be "
            f"at most {MAX_COMMAND_LINE} bytes (Linux's limit on one string, MAX_ARG_STRLEN): "
            "pass large data in a file"
        )
    if name == taskenv.GPU_VARIABLE:
        raise SpecError(
            f"environment variable {name} is set by tfmesos for each task and cannot be given "
            "in the job's environment (-e, env=): it names the GPUs the task was given "
            "(-Gw/-Gs); to choose which of this machine's GPUs tfrun hands out, set it in "
            "tfrun's own environment"
        )
    if taskenv.launchers_own(name):
        raise SpecError(
            f"environment variable {name} is set by tfmesos for each task and cannot be given "
            f"in the job's environment (-e, env=): every {taskenv.OWN_PREFIX}* name, TF_CONFIG "
            "and torchrun's and JAX's (RANK, MASTER_PORT, ...) are the launcher's; set another "
            "name, or set it in the command itself (VAR=... python ...)"
        )


def _check_text(what: str, text: str) -> None:
    """A command line, directory or name each task is given: what a process
    can take as an argument (no NUL byte) and encode (UTF-8), said before
    anything starts rather than as a traceback in each task."""
    if "\0" in text:
        raise SpecError(f"{what} holds a NUL byte (\\0), which no command line can hold")
    try:
        text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise SpecError(
            f"{what} holds {text[exc.start]!r}, which no command line can hold (not UTF-8)"
        ) from None


MAX_NPROC = 1024
"""The most processes one task may run (``--nproc-per-task``)."""


def _check_nproc(spec: ClusterSpec) -> None:
    """Several processes per task: a whole number, in replica mode. (Each
    worker task's processes are TensorFlow workers of their own:
    :func:`tfmesos.common.taskenv.process_cluster`.)"""
    nproc = spec.nproc
    if isinstance(nproc, bool) or not isinstance(nproc, int) or not 1 <= nproc <= MAX_NPROC:
        raise SpecError(
            f"--nproc-per-task must be a whole number from 1 to {MAX_NPROC}, not {nproc!r}"
        )
    if not spec.replica:
        raise SpecError("--nproc-per-task runs a command: it needs replica mode")


CHIEF = "worker:0"
"""The chief's task name in replica mode without a ``chief`` job
(TensorFlow's convention: worker 0); with one, ``chief:0``."""


@dataclass(frozen=True)
class ClusterSpec:
    """A whole job: its task groups and how to run them."""

    jobs: tuple[Job, ...]
    name: str = "tfmesos"
    replica: bool = False
    """Replica mode: tasks run ``cmd``; the job ends when the workers end,
    or the chief, where there is one (:attr:`ending_job`)."""
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    initializer: str | None = None
    finalizer: str | None = None
    forward_logs: frozenset[str] | None = None
    """Names (``worker:0``) of tasks whose output is printed; ``None``: all."""
    start_timeout: float | None = None
    """Seconds to wait for every task to register before giving up."""
    protocol: str = "grpc"
    tls_cert: str | None = None
    """PEM certificate the rendezvous serves TLS with (tasks pin it)."""
    tls_key: str | None = None
    max_restarts: int = 0
    """Replica mode: times the whole job is started again after a task fails
    or is lost once the cluster is up. Fine-grained mode: times, in all, a
    worker's server that dies is started again at its address
    (:mod:`tfmesos.launcher.relaunch`)."""
    nproc: int = 1
    """Replica mode: the processes each task runs (``tfrun --nproc-per-task``),
    as torchrun's ``--nproc_per_node`` (:mod:`tfmesos.agent.nproc`)."""
    export: str = "ALL"
    """Which of the submitting environment every task sees (``--export``,
    :func:`tfmesos.common.exported.parse_export`): ``ALL``, ``NONE``, ``NAME,...``."""
    cluster_file: bool = False
    """Each task finds the cluster's definition in a file, not in
    ``TF_CONFIG`` and the ``TFMESOS_*_HOSTS`` (``tfrun --cluster-file``,
    :mod:`tfmesos.common.clusterfile`): for a job whose addresses are too many for
    one environment variable."""
    exported: Mapping[str, str] = field(init=False, repr=False, default_factory=dict)
    """The variables ``export`` carries from this process's environment as it
    is when the spec is made: sent to every task in its cluster message."""

    def __post_init__(self) -> None:
        jobs = tuple(self.jobs)
        object.__setattr__(self, "jobs", jobs)
        self._check_jobs()
        if self.replica:
            self._check_replica_jobs()
        self._check_single_tasks()
        if self.start_timeout is not None:
            _number(self.start_timeout, "the start timeout", minimum=0, allow_equal=False)
        if (
            isinstance(self.max_restarts, bool)
            or not isinstance(self.max_restarts, int)
            or not 0 <= self.max_restarts <= MAX_RESTARTS
        ):
            raise SpecError(
                f"--max-restarts / max_restarts= must be a whole number from 0 to {MAX_RESTARTS}, "
                f"not {self.max_restarts!r}"
            )
        if self.nproc != 1:
            _check_nproc(self)
        for key, value in self.env.items():
            _check_variable(key, value)
        try:
            export = parse_export(self.export)
        except ValueError as exc:
            raise SpecError(str(exc)) from None
        object.__setattr__(self, "exported", carried(os.environ, export))
        self._check_texts()
        if (self.tls_cert is None) != (self.tls_key is None):
            raise SpecError("TLS needs both a certificate and its key")
        self._check_sizes()

    def _check_jobs(self) -> None:
        """Jobs named once, with tasks, within the limit on tasks."""
        if not self.jobs:
            raise SpecError("a cluster needs at least one job")
        names = [job.name for job in self.jobs]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate:
            raise SpecError(f"job {duplicate!r} is defined twice")
        if not any(job.num > job.start for job in self.jobs):
            raise SpecError("the cluster has no task to run")
        total = sum(job.num - job.start for job in self.jobs)
        if total > MAX_TASKS:
            raise SpecError(f"a job can have at most {MAX_TASKS} tasks in all, not {total}")

    def _check_single_tasks(self) -> None:
        for job in self.jobs:
            if job.name in SINGLE_JOBS and job.num > 1:
                raise SpecError(
                    f"job {job.name!r} has at most one task, as TensorFlow's TF_CONFIG has it, "
                    f"not {job.num}"
                )

    def _check_replica_jobs(self) -> None:
        for job in self.jobs:
            if job.name not in REPLICA_JOBS:
                raise SpecError(
                    "replica mode runs only 'chief', 'ps', 'worker' and 'evaluator' jobs, "
                    f"not {job.name!r}"
                )
            if job.cmd is None:
                raise SpecError(f"replica mode needs a command for job {job.name!r}")
        if not any(job.name in ("worker", CHIEF_JOB) and job.num > 0 for job in self.jobs):
            raise SpecError("replica mode needs at least one worker (-w 1)")

    def _check_texts(self) -> None:
        texts = [(f"job {job.name!r}'s command", job.cmd) for job in self.jobs]
        texts += [("the initializer", self.initializer), ("the finalizer", self.finalizer)]
        texts += [("the working directory (--chdir)", self.cwd), ("the job's name", self.name)]
        for what, text in texts:
            if isinstance(text, str):
                _check_text(what, text)

    def _check_sizes(self) -> None:
        """What each task receives must fit the wire's frame and Linux's
        limit on one argument; said before anything starts."""
        commands = [("the command", job.cmd, _EXEC_PREFIX) for job in self.jobs if job.cmd]
        commands += [
            (f"the {name}", line, 0)
            for name, line in (("initializer", self.initializer), ("finalizer", self.finalizer))
            if line
        ]
        for what, line, prefix in commands:
            size = len(line.encode("utf-8", "surrogateescape"))
            if size + prefix > MAX_COMMAND_LINE:
                raise SpecError(
                    f"{what} is {size} bytes; a shell command line can be at most "
                    f"{MAX_COMMAND_LINE - prefix} bytes (Linux's limit on one argument, "
                    "MAX_ARG_STRLEN): pass large data in a file"
                )
        content = {
            "cmd": max((job.cmd or "" for job in self.jobs), key=len),
            "cwd": self.cwd,
            "env": dict(self.env),
            "extra_config": {"initializer": self.initializer, "finalizer": self.finalizer},
            "exported": dict(self.exported),
        }
        size = len(json.dumps(content, separators=(",", ":")))
        tasks = sum(job.num - job.start for job in self.jobs)
        if size + tasks * ADDRESS_ALLOWANCE + MESSAGE_ALLOWANCE > protocol.MAX_FRAME:
            carried_size = len(json.dumps(content["exported"], separators=(",", ":")))
            raise SpecError(
                f"the command, environment, initializer and finalizer take {size} bytes of the "
                f"message each task receives ({carried_size} of them the variables of this "
                "environment every task is sent: --export), which with the addresses of the "
                f"job's {tasks} tasks must fit in 1 MiB ({protocol.MAX_FRAME} bytes): pass large "
                "data in a file, or narrow --export"
            )

    def tasks(self) -> list[TaskSpec]:
        return [
            TaskSpec(
                job.name,
                index,
                job.cpus,
                job.mem,
                job.gpus,
                job.cmd,
                taskenv.processes_of(job.name, self.nproc),
            )
            for job in self.jobs
            for index in range(job.start, job.num)
        ]

    def forwards(self, task: TaskSpec) -> bool:
        return self.forward_logs is None or task.name in self.forward_logs

    @functools.cached_property
    def ending_job(self) -> str:
        """The job whose end is the job's, in replica mode: the chief
        (``tfrun --chief``), else the workers. Kept: :meth:`is_chief` asks
        for every piece of output a task sends."""
        return CHIEF_JOB if self.has_job(CHIEF_JOB) else "worker"

    def has_job(self, name: str) -> bool:
        """Whether the job named ``name`` has a task."""
        return any(job.name == name and job.num > 0 for job in self.jobs)

    def is_chief(self, task: TaskSpec) -> bool:
        """Whether ``task`` is the job's chief, in replica mode: ``chief:0``
        (``tfrun --chief``), else worker 0. A backend whose tasks run
        elsewhere has it run beside the launcher
        (``Backend.chief_beside_launcher``)."""
        if not self.replica or task.index != 0:
            return False
        return task.job_name == self.ending_job


def coerce_jobs(
    jobs: Job | Mapping[str, Any] | Iterable[Job | Mapping[str, Any]],
) -> tuple[Job, ...]:
    """Accept what the original ``cluster()`` accepted: a dict, a Job, or a list of either."""
    if isinstance(jobs, (Job, Mapping)):
        return (Job.coerce(jobs),)
    return tuple(Job.coerce(job) for job in jobs)
