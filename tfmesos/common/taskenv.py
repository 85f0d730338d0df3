"""What a task is told about its cluster: placeholders and environment.

Standard library only: the in-task agent imports this module, and so does the
launcher when it validates a command before anything starts. Keeping both on
one function is what makes the two agree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

__all__ = [
    "CLUSTER_VARIABLES",
    "ENV_RESTART",
    "OWN_PREFIX",
    "PLACEHOLDERS",
    "ClusterDef",
    "default_environment",
    "fill_placeholders",
    "first_index",
    "launchers_own",
    "placeholder_values",
    "placeholders_in",
    "process_cluster",
    "process_tf_config",
    "processes_of",
    "rank_environment",
    "ranks",
    "task_environment",
]

ClusterDef = Mapping[str, Sequence[str]]
"""Job name to the ``host:port`` of each of its tasks, in task order."""

PLACEHOLDERS = ("ps_hosts", "worker_hosts", "job_name", "task_index", "chief_hosts")

ENV_RESTART = "TFMESOS_RESTART"
"""Which run of the job a task belongs to: 0, then 1 after the first restart
(``tfrun --max-restarts``)."""

OWN_PREFIX = "TFMESOS_"
"""Every variable named so is tfmesos's own: the agent's settings
(:mod:`tfmesos.rendezvous.protocol`), the task's id, the original's ``TFMESOS_*``."""
CLUSTER_VARIABLES = (
    "TF_CONFIG",
    "RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_NAME",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "JAX_COORDINATOR_ADDRESS",
    "JAX_NUM_PROCESSES",
    "JAX_PROCESS_ID",
)
"""What :func:`task_environment` derives from the cluster definition, besides
the ``TFMESOS_*`` ones: each task's place in the job and where rank 0 listens
(``MASTER_PORT`` is the port rank 0's backend gave it: another may be taken,
or not offered)."""


GPU_VARIABLE = "CUDA_VISIBLE_DEVICES"
"""The GPUs a task was given (the local backend sets it for each task, "" for
none; a Mesos agent's isolator gives the container its own). Set in the job's
environment it would hand every task the same GPUs, whatever it was given;
which of this machine's GPUs tfrun hands out is the user's to say in tfrun's
own environment (read by :mod:`tfmesos.common.resources`)."""


def launchers_own(name: str) -> bool:
    """Whether the launcher sets ``name`` for every task itself, so that a
    job's environment (``-e``, ``cluster(env=...)``) may not: every
    ``TFMESOS_*`` name, :data:`CLUSTER_VARIABLES` and :data:`GPU_VARIABLE`. A task's defaults
    (:func:`default_environment`) and ``PYTHONUNBUFFERED`` (always 1) are
    not refused: the former are the user's to set, the latter harmless."""
    return name.startswith(OWN_PREFIX) or name in CLUSTER_VARIABLES or name == GPU_VARIABLE


# `{name}` is a placeholder and `{{name}}` a literal `{name}`. Every other brace
# (a dict in `python -c "..."`, a shell `${x}`, a lone `}}`) is left alone, which
# str.format, used by the original, would have refused or mangled. Compiled
# (and kept by re's cache) only once a command holds a brace: most hold none.
_TOKEN = r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}|(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}"


def placeholders_in(command: str) -> list[str]:
    """The placeholder names a command uses, in order of appearance."""
    if "{" not in command:
        return []
    return [m.group(2) for m in re.finditer(_TOKEN, command) if m.group(2)]


def fill_placeholders(command: str, values: Mapping[str, str]) -> str:
    """Replace each ``{name}`` by ``values[name]``; an unknown name is a ``KeyError``."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(1):
            return "{" + match.group(1) + "}"
        name = match.group(2)
        if name not in values:
            known = ", ".join(f"{{{n}}}" for n in values)
            raise KeyError(f"unknown placeholder {{{name}}} (known: {known})")
        return values[name]

    if "{" not in command:
        return command
    return re.sub(_TOKEN, substitute, command)


MULTIPLIED_JOB = "worker"
"""The job whose tasks run ``--nproc-per-task`` processes each; every other
job's tasks (``chief``, ``ps``, ``evaluator``) run one."""


def processes_of(job_name: str, nproc: int) -> int:
    """How many processes a task of ``job_name`` runs in a job of ``nproc``
    processes per task: ``nproc`` for a worker, 1 for any other."""
    return nproc if job_name == MULTIPLIED_JOB else 1


def _plus(address: str, offset: int) -> str:
    host, _, port = address.rpartition(":")
    return f"{host}:{int(port) + offset}"


def process_cluster(cluster: ClusterDef, nproc: int) -> dict[str, list[str]]:
    """The cluster as TensorFlow sees it, one address a process: with
    ``--nproc-per-task N`` each worker task holds N consecutive ports from
    its own (its backend gave it the block), and its local rank ``L`` is
    the worker at ``port + L``, of index ``task_index * N + L``: the order
    of ``RANK``. Other jobs' tasks are one process, at their one address."""
    return {
        name: [
            _plus(address, local) for address in addrs for local in range(processes_of(name, nproc))
        ]
        for name, addrs in cluster.items()
    }


class _Cluster:
    """What every task's environment takes from the cluster definition,
    worked out once per definition: a launcher that runs its local tasks
    itself fills in every task's, and each of these is a walk over every
    task (docs/benchmarks.md, "The fixed cost")."""

    __slots__ = (
        "chief_hosts",
        "cluster_json",
        "key",
        "order",
        "ps_hosts",
        "rank",
        "worker_hosts",
    )

    def __init__(self, cluster: ClusterDef, key: tuple[object, ...], nproc: int) -> None:
        self.key = key
        # Ranks count tasks: each task's processes add their local rank.
        # With several processes a task, torchrun's arithmetic (RANK =
        # GROUP_RANK * N + LOCAL_RANK) holds only among tasks of N
        # processes: the workers'.
        self.order = ranks(cluster)
        if nproc > 1:
            self.order = [task for task in self.order if task[0] == MULTIPLIED_JOB]
        self.rank = {task: rank for rank, task in enumerate(self.order)}
        processes = process_cluster(cluster, nproc) if nproc > 1 else cluster
        self.ps_hosts = ",".join(processes.get("ps", ()))
        self.worker_hosts = ",".join(processes.get("worker", ()))
        self.chief_hosts = ",".join(processes.get("chief", ()))
        # TF2 strategies reject a job with no tasks, so empty jobs are left out.
        self.cluster_json = json.dumps(
            {name: list(addrs) for name, addrs in processes.items() if addrs},
            separators=(",", ":"),
        )


_last: _Cluster | None = None


def _cluster(cluster: ClusterDef, nproc: int = 1) -> _Cluster:
    """The cluster's parts, kept for the last definition seen."""
    global _last
    key = (nproc, *((name, tuple(addrs)) for name, addrs in cluster.items()))
    if _last is None or _last.key != key:
        _last = _Cluster(cluster, key, nproc)
    return _last


def first_index(job_name: str, task_index: int, nproc: int = 1) -> int:
    """The TensorFlow task index of the task's local rank 0: its task index
    times its processes, each of which adds its local rank
    (:func:`tfmesos.agent.nproc.process_environment`)."""
    return task_index * processes_of(job_name, nproc)


def placeholder_values(
    cluster: ClusterDef, job_name: str, task_index: int, nproc: int = 1
) -> dict[str, str]:
    """What ``{worker_hosts}`` and its kin stand for in a task's command:
    with ``nproc``, every process's address, and ``{task_index}`` the
    task's local rank 0's (:func:`first_index`)."""
    parts = _cluster(cluster, nproc)
    return {
        "ps_hosts": parts.ps_hosts,
        "worker_hosts": parts.worker_hosts,
        "job_name": job_name,
        "task_index": str(first_index(job_name, task_index, nproc)),
        "chief_hosts": parts.chief_hosts,
    }


def task_environment(
    cluster: ClusterDef,
    job_name: str,
    task_index: int,
    *,
    run_id: str = "",
    restart: int = 0,
    max_restarts: int = 0,
    nproc: int = 1,
) -> dict[str, str]:
    """The variables every task gets: the original's ``TFMESOS_*``, TF2's
    ``TF_CONFIG``, and what torchrun gives and ``jax.distributed.initialize()``
    needs (:func:`rank_environment`).

    ``nproc``: the job's processes per task (``--nproc-per-task``): a
    worker task's processes are each a TensorFlow worker of their own
    (:func:`process_cluster`); the index here is the task's local rank 0's,
    to which each process adds its local rank."""
    parts = _cluster(cluster, nproc)
    index = first_index(job_name, task_index, nproc)
    # json.dumps({"cluster": ..., "task": {"type": ..., "index": ...}}), its
    # cluster part made once.
    task = json.dumps({"type": job_name, "index": index}, separators=(",", ":"))
    env = {
        "TFMESOS_PS_HOSTS": parts.ps_hosts,
        "TFMESOS_WORKER_HOSTS": parts.worker_hosts,
        "TFMESOS_JOB_NAME": job_name,
        "TFMESOS_TASK_INDEX": str(index),
        "TFMESOS_DISTRIBUTED": "1",
        "TF_CONFIG": f'{{"cluster":{parts.cluster_json},"task":{task}}}',
        # Output goes through a pipe; without this Python would hold it back in
        # 8 KiB blocks and a crash would lose the last lines.
        "PYTHONUNBUFFERED": "1",
    }
    if parts.chief_hosts:  # tfrun --chief
        env["TFMESOS_CHIEF_HOSTS"] = parts.chief_hosts
    env.update(
        rank_environment(
            cluster,
            job_name,
            task_index,
            run_id=run_id,
            restart=restart,
            max_restarts=max_restarts,
            nproc=nproc,
        )
    )
    return env


def ranks(cluster: ClusterDef) -> list[tuple[str, int]]:
    """Every task of the cluster as ``(job, index)``, in rank order: the
    chief first (``tfrun --chief``), then the workers, so that the chief, or
    worker 0 where there is none, is rank 0, then every other job (the ps
    tasks, in a tfrun job) in the cluster definition's order. An evaluator
    is in no cluster list, and so has no rank."""
    first = ("chief", "worker")
    jobs = [*first, *(name for name in cluster if name not in first)]
    return [(job, index) for job in jobs for index in range(len(cluster.get(job, ())))]


def _host(address: str) -> str:
    return address.rpartition(":")[0].strip("[]")


def rank_environment(
    cluster: ClusterDef,
    job_name: str,
    task_index: int,
    *,
    run_id: str = "",
    restart: int = 0,
    max_restarts: int = 0,
    nproc: int = 1,
) -> dict[str, str]:
    """What torchrun gives each process it starts, and what a multi-process
    JAX program passes to ``jax.distributed.initialize()``.

    Each task is what torchrun calls a node (:func:`ranks`): ``GROUP_RANK`` is
    its rank and ``RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK`` holds
    wherever the task was placed. With ``nproc`` processes per task (workers
    only), the ranks are the task's local rank 0's, which each process offsets
    by its ``LOCAL_RANK`` (:func:`tfmesos.agent.nproc.process_environment`).
    Rank 0's own address and port serve torch's store and JAX's coordinator."""
    parts = _cluster(cluster, nproc)
    order = parts.order
    if not order:
        return {}
    rank = parts.rank.get((job_name, task_index))
    if rank is None:
        if job_name == "evaluator" or processes_of(job_name, nproc) != nproc:
            # TF's side-car evaluator is in no cluster list (TF_CONFIG), and
            # takes no part in the collective: no rank, no world, no master.
            return {}
        rank = order.index((job_name, task_index))  # not in the cluster: its ValueError
    first_job, first_index = order[0]
    master = cluster[first_job][first_index]
    size = str(len(order) * nproc)
    return {
        # torch.distributed's env:// initialisation reads these four.
        "RANK": str(rank * nproc),
        "WORLD_SIZE": size,
        "MASTER_ADDR": _host(master),
        "MASTER_PORT": master.rpartition(":")[2],
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": str(rank),
        "GROUP_WORLD_SIZE": str(len(order)),
        "ROLE_NAME": job_name,
        "ROLE_RANK": str(task_index * nproc),
        "ROLE_WORLD_SIZE": str(len(cluster[job_name]) * nproc),
        # No agent hosts a store: rank 0 starts its own (torch's
        # _create_c10d_store), as it does outside torchrun.
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        # tfrun --max-restarts restarts the whole job, as torchrun restarts
        # its worker group: the same two numbers.
        "TORCHELASTIC_RESTART_COUNT": str(restart),
        "TORCHELASTIC_MAX_RESTARTS": str(max_restarts),
        # torch.distributed.is_torchelastic_launched() looks for this one.
        "TORCHELASTIC_RUN_ID": run_id or "none",
        # JAX reads the coordinator's address itself; the count and the id
        # from a cluster environment: tfmesos's (tfmesos/agent/jaxcluster.py) reads
        # these two.
        "JAX_COORDINATOR_ADDRESS": master,
        "JAX_NUM_PROCESSES": size,
        "JAX_PROCESS_ID": str(rank * nproc),
    }


def process_tf_config(text: str, local_rank: int) -> str:
    """A worker task's ``TF_CONFIG`` (its local rank 0's, as
    :func:`task_environment` makes it) for its process of ``local_rank``:
    the same cluster, the task index grown by the local rank. Left as it is
    where it is not JSON of that shape (the user's own)."""
    if not local_rank:
        return text
    try:
        config = json.loads(text)
        config["task"]["index"] = int(config["task"]["index"]) + local_rank
    except (ValueError, TypeError, KeyError):
        return text
    return json.dumps(config, separators=(",", ":"))


def default_environment(cpus: float) -> dict[str, str]:
    """Variables a task gets unless its environment already sets them.

    ``OMP_NUM_THREADS``: the task's CPUs, whole and at least 1. torchrun sets
    1 for several processes on a machine; a task asked for its CPUs, and a
    thread pool as large as the host would fight the other tasks for them
    (or Mesos's CPU limit)."""
    return {
        "OMP_NUM_THREADS": str(max(1, int(cpus))),
        # As torchrun: a failed NCCL collective ends the process, not hangs it.
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    }
