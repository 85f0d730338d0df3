"""The cluster message: what each task is sent once every task has registered
(its command, its place, the cluster's definition), and its size check."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tfmesos import wire
from tfmesos.errors import ClusterStartError
from tfmesos.launcher.attempts import Attempt
from tfmesos.spec import EVALUATOR_JOB, ClusterSpec

__all__ = ["check_size", "cluster_def_of", "cluster_message", "summary"]


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
        "type": "cluster",
        "job_name": task.spec.job_name,
        "task_index": task.spec.index,
        "run_id": run_id,
        "restart": restart,
        "max_restarts": spec.max_restarts,
        "nproc": spec.nproc,
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


def check_size(sealed: dict[str, Any]) -> None:
    """Refuse a sealed message over the rendezvous's frame. The spec's check
    allowed for the addresses; this is the real message (the same size for
    every task, give or take)."""
    size = len(wire.encode_json(sealed)) - 5
    if size > wire.MAX_FRAME:
        raise ClusterStartError(
            f"the message each task receives would be {size} bytes, more than "
            f"the rendezvous's 1 MiB ({wire.MAX_FRAME} bytes): shorten the command "
            "or its environment"
        )


def summary(cluster_def: Mapping[str, list[str]]) -> str:
    """``1 ps, 2 workers``: the cluster's jobs and task counts, in words."""
    return ", ".join(_tasks_of(job, len(addrs)) for job, addrs in cluster_def.items())


def _tasks_of(job: str, count: int) -> str:
    """``1 ps``, ``2 workers``, ``1 worker``: a job's task count, in words."""
    plural = "" if count == 1 or job.endswith("s") else "s"
    return f"{count} {job}{plural}"
