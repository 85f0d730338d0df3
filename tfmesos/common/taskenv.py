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
    "launchers_own",
    "placeholder_values",
    "placeholders_in",
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
(:mod:`tfmesos.wire`), the task's id, the original's ``TFMESOS_*``."""
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


class _Cluster:
    """What every task's environment takes from the cluster definition,
    worked out once per definition: a launcher that runs its local tasks
    itself fills in every task's, and each of these is a walk over every
    task (docs/benchmarks.md, "The fixed cost")."""

    __slots__ = ("chief_hosts", "cluster_json", "key", "order", "ps_hosts", "rank", "worker_hosts")

    def __init__(self, cluster: ClusterDef, key: tuple[tuple[str, tuple[str, ...]], ...]) -> None:
        self.key = key
        self.ps_hosts = ",".join(cluster.get("ps", ()))
        self.worker_hosts = ",".join(cluster.get("worker", ()))
        self.chief_hosts = ",".join(cluster.get("chief", ()))
        # TF2 strategies reject a job with no tasks, so empty jobs are left out.
        self.cluster_json = json.dumps(
            {name: list(addrs) for name, addrs in cluster.items() if addrs}, separators=(",", ":")
        )
        self.order = ranks(cluster)
        self.rank = {task: rank for rank, task in enumerate(self.order)}


_last: _Cluster | None = None


def _cluster(cluster: ClusterDef) -> _Cluster:
    """The cluster's parts, kept for the last definition seen."""
    global _last
    key = tuple((name, tuple(addrs)) for name, addrs in cluster.items())
    if _last is None or _last.key != key:
        _last = _Cluster(cluster, key)
    return _last


def placeholder_values(cluster: ClusterDef, job_name: str, task_index: int) -> dict[str, str]:
    parts = _cluster(cluster)
    return {
        "ps_hosts": parts.ps_hosts,
        "worker_hosts": parts.worker_hosts,
        "job_name": job_name,
        "task_index": str(task_index),
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
    needs (:func:`rank_environment`)."""
    parts = _cluster(cluster)
    # json.dumps({"cluster": ..., "task": {"type": ..., "index": ...}}), its
    # cluster part made once.
    task = json.dumps({"type": job_name, "index": task_index}, separators=(",", ":"))
    env = {
        "TFMESOS_PS_HOSTS": parts.ps_hosts,
        "TFMESOS_WORKER_HOSTS": parts.worker_hosts,
        "TFMESOS_JOB_NAME": job_name,
        "TFMESOS_TASK_INDEX": str(task_index),
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

    Every task is a rank (:func:`ranks`), and every task is what torchrun
    calls a node that runs one process: ``LOCAL_RANK`` is 0 and
    ``GROUP_RANK`` is the rank, so ``RANK = GROUP_RANK * LOCAL_WORLD_SIZE +
    LOCAL_RANK`` holds as under torchrun, wherever the backend placed each
    task. A task sees only the GPUs it was given (``CUDA_VISIBLE_DEVICES``),
    so ``torch.cuda.set_device(LOCAL_RANK)`` picks its own: torchrun's
    ``--virtual-local-rank``.

    ``nproc``: each task runs that many processes (``tfrun
    --nproc-per-task``), a node of torchrun's ``--nproc_per_node``:
    ``LOCAL_WORLD_SIZE`` is ``nproc``, ``WORLD_SIZE`` and the role's size
    are ``nproc`` times the tasks', and ``RANK``, ``ROLE_RANK`` and
    ``JAX_PROCESS_ID`` are the task's local rank 0's, which each process
    adds its ``LOCAL_RANK`` to (:func:`tfmesos.agent.nproc.process_environment`).
    Its processes share the task's GPUs, as torchrun's do.

    Rank 0 hosts torch's TCP store at ``MASTER_ADDR:MASTER_PORT`` and JAX's
    coordinator at ``JAX_COORDINATOR_ADDRESS``: both are rank 0's own
    address, the port its backend gave it (from the offer, on Mesos), which
    nothing else in such a job binds.
    """
    parts = _cluster(cluster)
    order = parts.order
    if not order:
        return {}
    rank = parts.rank.get((job_name, task_index))
    if rank is None:
        if job_name == "evaluator":
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
