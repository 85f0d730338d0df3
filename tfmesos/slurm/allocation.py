"""A detached Slurm job is one Slurm job: its launcher inside its allocation.

``tfrun --detach --backend slurm`` sbatches one allocation for the whole job
(:func:`sbatch_argv`): a slot for the launcher beside the chief and one for
each other task. The launcher, told it is inside (:data:`ENV_ALLOCATION`),
sbatches nothing and runs each round's job script itself, its ``srun``
steps in this allocation. Every slot has the largest shape asked for, not a
heterogeneous job's parts: Slurm puts those on distinct nodes, so on a
cluster of fewer nodes the job would never start.

Standard library and :mod:`tfmesos.slurm.commands` only."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from tfmesos.slurm import commands
from tfmesos.slurm.commands import Shape
from tfmesos.spec import ClusterSpec, TaskSpec

__all__ = ["ENV_ALLOCATION", "LAUNCHER_MEM", "Allocation", "inside", "sbatch_argv"]

ENV_ALLOCATION = "TFMESOS_SLURM_ALLOCATION"
"""Set for the launcher a detached Slurm job's batch script runs: the shape
of the allocation's slots (JSON)."""
LAUNCHER_MEM = 512
"""MiB for a detached job's launcher, besides its chief's, in their slot."""


@dataclass(frozen=True)
class Allocation:
    """The Slurm job this launcher runs in."""

    job_id: str
    slot: Shape
    """What each of its slots holds: a task's step asks for no more."""
    nodes: str
    """Its nodes, as Slurm names them (``SLURM_JOB_NODELIST``)."""

    def fits(self, shape: Shape) -> bool:
        return (
            shape.cpus <= self.slot.cpus
            and shape.cpus * shape.mem_per_cpu <= self.slot.cpus * self.slot.mem_per_cpu
            and shape.gpus <= self.slot.gpus
        )


_INSIDE: list[Allocation | None] = []


def inside() -> Allocation | None:
    """The allocation this launcher runs in, where a detached job's batch
    script said so (:data:`ENV_ALLOCATION`, taken out of the environment the
    first time, so that no task inherits it); None for any other tfrun."""
    if not _INSIDE:
        given = os.environ.pop(ENV_ALLOCATION, None)
        _INSIDE.append(_parse(given) if given else None)
    return _INSIDE[0]


def _parse(given: str) -> Allocation:
    cpus, mem_per_cpu, gpus = json.loads(given)["slot"]
    return Allocation(
        os.environ.get("SLURM_JOB_ID", ""),
        Shape(int(cpus), int(mem_per_cpu), int(gpus)),
        os.environ.get("SLURM_JOB_NODELIST", ""),
    )


def launcher_shape(chief: TaskSpec | None) -> Shape:
    """The launcher's part: the chief's CPUs, GPUs and memory, and
    :data:`LAUNCHER_MEM` more (the memory asked per CPU, as for a task)."""
    cpus = max(1, math.ceil(chief.cpus - 1e-9)) if chief is not None else 1
    mem = (chief.mem if chief is not None else 0) + LAUNCHER_MEM
    return Shape(cpus, max(1, math.ceil(mem / cpus - 1e-9)), chief.gpus if chief else 0)


def slots(spec: ClusterSpec) -> tuple[Shape, int]:
    """The allocation's slots: their one shape (the largest asked for), and
    how many (the launcher's, and one for each other task)."""
    tasks = spec.tasks()
    chief = next((task for task in tasks if spec.is_chief(task)), None)
    shapes = [launcher_shape(chief)] + [Shape.of(task) for task in tasks if task is not chief]
    cpus = max(shape.cpus for shape in shapes)
    mem = max(shape.cpus * shape.mem_per_cpu for shape in shapes)
    slot = Shape(cpus, max(1, math.ceil(mem / cpus)), max(shape.gpus for shape in shapes))
    return slot, len(shapes)


def sbatch_argv(
    spec: ClusterSpec, *, output: str, cwd: str, options: Mapping[str, object]
) -> tuple[list[str], str]:
    """``sbatch`` for the whole detached job (its script comes on stdin),
    and :data:`ENV_ALLOCATION`'s value for the launcher in it."""
    slot, count = slots(spec)
    argv = commands.sbatch_argv(
        [(slot, count)],
        name=" ".join(spec.name.split())[:100] or "tfrun",
        output=output,
        cwd=cwd,
        options=options,
    )
    return argv, json.dumps({"slot": [slot.cpus, slot.mem_per_cpu, slot.gpus]})
