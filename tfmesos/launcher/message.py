"""What each task is given: the environment it is launched with, and the
cluster message it is sent once every task has registered (its command, its
place, the cluster's definition), with its size check."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from tfmesos.common import clusterfile, taskenv
from tfmesos.common.shell import exec_if_simple
from tfmesos.errors import ClusterStartError, SpecError
from tfmesos.launcher.attempts import Attempt
from tfmesos.rendezvous import protocol
from tfmesos.spec import EVALUATOR_JOB, MAX_COMMAND_LINE, ClusterSpec

__all__ = [
    "check_environment",
    "check_size",
    "cluster_def_of",
    "cluster_message",
    "launch_env",
    "summary",
    "targets",
]


def cluster_def_of(attempts: Iterable[Attempt]) -> dict[str, list[str]]:
    """``{'worker': ['host:port', ...], ...}``: each job's addresses, in
    index order, jobs in the order their tasks come. An evaluator is in no
    cluster list, as TensorFlow documents its side-car evaluator."""
    by_job: dict[str, list[tuple[int, str]]] = {}
    for task in attempts:
        if task.spec.job_name == EVALUATOR_JOB:
            continue
        by_job.setdefault(task.spec.job_name, []).append((task.spec.index, task.addr))
    return {job: [a for _, a in sorted(pairs)] for job, pairs in by_job.items()}


def cluster_message(
    spec: ClusterSpec,
    task: Attempt,
    *,
    run_id: str,
    restart: int,
    cluster_def: Mapping[str, list[str]],
) -> dict[str, object]:
    """What ``task`` runs, with the cluster's definition."""
    return {
        "type": protocol.CLUSTER,
        "job_name": task.spec.job_name,
        "task_index": task.spec.index,
        "run_id": run_id,
        "restart": restart,
        "max_restarts": spec.max_restarts,
        "nproc": spec.nproc,
        "cluster_file": spec.cluster_file,
        "cluster_def": dict(cluster_def),
        "cmd": task.spec.cmd,
        "cwd": spec.cwd,
        "env": dict(spec.env),
        # tfrun's environment as --export carries it: here, over the
        # authenticated rendezvous, never in what the backend's cluster
        # manager keeps about the task (a Mesos TaskInfo is in /state).
        "exported": dict(spec.exported),
        "extra_config": {
            "initializer": spec.initializer,
            "finalizer": spec.finalizer,
        },
        "server": {
            "protocol": spec.protocol,
            "cpus": task.spec.cpus,
            "gpus": task.spec.gpus,
        },
    }


def launch_env(
    spec: ClusterSpec,
    task_id: str,
    *,
    rendezvous: str,
    secret: bytes,
    restart: int,
    tls_pem: str | None,
    silence_limit: float,
) -> dict[str, str]:
    """What a task is launched with, before it dials in: the job's own
    environment (``-e``), and how its agent reaches the launcher (at
    ``rendezvous``, unless tfrun is reached through another address) and
    proves who it is."""
    env = dict(spec.env)
    env.update(
        {
            protocol.ENV_LAUNCHER: os.environ.get(protocol.ENV_RENDEZVOUS_VIA) or rendezvous,
            protocol.ENV_TASK_ID: task_id,
            protocol.ENV_SECRET: secret.hex(),
            taskenv.ENV_RESTART: str(restart),
        }
    )
    if tls_pem is not None:
        env[protocol.ENV_TLS_CERT] = tls_pem
    if protocol.ENV_SILENCE_LIMIT in os.environ:
        env[protocol.ENV_SILENCE_LIMIT] = f"{silence_limit:g}"
    return env


def targets(protocol: str, cluster_def: Mapping[str, list[str]]) -> dict[str, str]:
    """Each task's target (``/job:worker/task:0``) and its URL."""
    return {
        f"/job:{job}/task:{index}": f"{protocol}://{addr}"
        for job, addrs in cluster_def.items()
        for index, addr in enumerate(addrs)
    }


def check_size(sealed: dict[str, Any]) -> None:
    """Refuse a sealed message over the rendezvous's frame. The spec's check
    allowed for the addresses; this is the real message (the same size for
    every task, give or take)."""
    size = len(protocol.encode_json(sealed)) - 5
    if size > protocol.MAX_FRAME:
        raise ClusterStartError(
            f"the message each task receives would be {size} bytes, more than "
            f"the rendezvous's 1 MiB ({protocol.MAX_FRAME} bytes): shorten the command "
            "or its environment"
        )


def check_environment(spec: ClusterSpec, cluster_def: Mapping[str, list[str]]) -> None:
    """Refuse, before any command starts, a job whose environment variable or
    filled-in command line exceeds Linux's limit on one string
    (``MAX_ARG_STRLEN``), which would fail every command with "Argument list
    too long". A :class:`~tfmesos.errors.SpecError`; ``--cluster-file`` mends
    it."""
    tasks = sum(len(addrs) for addrs in cluster_def.values())
    flag = f"{clusterfile.FLAG} (cluster_file=True in Python)"
    jobs = [job for job in spec.jobs if job.num > 0]
    for job in jobs:
        if job.cmd is None or not any(
            n.endswith("_hosts") for n in taskenv.placeholders_in(job.cmd)
        ):
            continue
        values = taskenv.placeholder_values(cluster_def, job.name, job.num - 1, spec.nproc)
        line = exec_if_simple(taskenv.fill_placeholders(job.cmd, values))
        size = _size(line) + (len(protocol.ENV_COMMAND) + 1 if spec.nproc > 1 else 0)
        if size > MAX_COMMAND_LINE:
            used = ", ".join(
                dict.fromkeys(
                    f"{{{n}}}" for n in taskenv.placeholders_in(job.cmd) if n.endswith("_hosts")
                )
            )
            raise SpecError(
                f"the command line of job {job.name!r} would be {size:,} bytes with {used} filled in "
                f"with the addresses of the job's {tasks} tasks; Linux takes at most "
                f"{MAX_COMMAND_LINE:,} in one (MAX_ARG_STRLEN), and no file can shorten a "
                f"placeholder: run with {flag} and have the command read the addresses from the "
                f"file ${clusterfile.ENV_CLUSTER_FILE} names (TF_CONFIG's JSON) instead of {used}"
            )
    over: dict[str, int] = {}
    for job in jobs:
        env = taskenv.task_environment(cluster_def, job.name, job.num - 1, nproc=spec.nproc)
        for name, value in env.items():
            if spec.cluster_file and name in clusterfile.FILE_VARIABLES:
                continue
            size = _size(name) + 1 + _size(value)
            if size > MAX_COMMAND_LINE:
                over[name] = max(size, over.get(name, 0))
    if over:
        sizes = " and ".join(f"{name} {size:,} bytes" for name, size in over.items())
        raise SpecError(
            f"the cluster's definition is too large for a task's environment: {sizes} (as "
            f"NAME=VALUE) with the addresses of the job's {tasks} tasks; Linux takes at most "
            f"{MAX_COMMAND_LINE:,} in one variable (MAX_ARG_STRLEN), and every command would "
            f"fail with 'Argument list too long': run with {flag}, and each task reads the "
            f"cluster from the file ${clusterfile.ENV_CLUSTER_FILE} names (TF_CONFIG's JSON) "
            "instead of the environment"
        )


def _size(text: str) -> int:
    # surrogateescape: a value from os.environ may carry bytes that are not UTF-8.
    return len(text.encode("utf-8", "surrogateescape"))


def summary(cluster_def: Mapping[str, list[str]]) -> str:
    """``1 ps, 2 workers``: the cluster's jobs and task counts, in words."""
    return ", ".join(_tasks_of(job, len(addrs)) for job, addrs in cluster_def.items())


def _tasks_of(job: str, count: int) -> str:
    """``1 ps``, ``2 workers``, ``1 worker``: a job's task count, in words."""
    plural = "" if count == 1 or job.endswith("s") else "s"
    return f"{count} {job}{plural}"
