"""tfmesos's JAX cluster environment: what ``jax.distributed.initialize()`` with
no arguments finds in a tfrun task.

Importing this module registers :class:`TFMesosCluster` with JAX and puts it
first among JAX's detectors, because a tfrun task may look like a cluster JAX
knows and be wrong for it: on Slurm each task is a one-task job step, which
JAX's Slurm detector would take for a job of one process. Imported by
:mod:`tfmesos.agent.jaxhook` when the program imports JAX.
"""

from __future__ import annotations

import os

from jax._src.clusters import ClusterEnv

__all__ = ["TFMesosCluster"]

_NEEDED = ("TFMESOS_DISTRIBUTED", "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


class TFMesosCluster(ClusterEnv):  # type: ignore[no-untyped-call]
    """A tfrun task, read from tfrun's variables; also
    ``cluster_detection_method="tfmesos"``."""

    name: str = "tfmesos"

    @classmethod
    def is_env_present(cls) -> bool:
        return all(name in os.environ for name in _NEEDED)

    @classmethod
    def get_coordinator_address(
        cls, timeout_secs: int | None, override_coordinator_port: str | None
    ) -> str:
        address = os.environ["JAX_COORDINATOR_ADDRESS"]
        if override_coordinator_port:
            address = f"{address.rpartition(':')[0]}:{override_coordinator_port}"
        return address

    @classmethod
    def get_process_count(cls) -> int:
        return int(os.environ["JAX_NUM_PROCESSES"])

    @classmethod
    def get_process_id(cls) -> int:
        return int(os.environ["JAX_PROCESS_ID"])

    @classmethod
    def get_local_process_id(cls) -> int | None:
        """JAX gives a process with a local id only the device of that index
        (``local_device_ids``). A task that runs one process gave it its own
        GPUs already (``CUDA_VISIBLE_DEVICES``), and it keeps all of them:
        None. Of several processes in one task, each takes the device of its
        ``LOCAL_RANK``, as under Slurm's ``SLURM_LOCALID``."""
        if int(os.environ.get("LOCAL_WORLD_SIZE", "1")) <= 1:
            return None
        return int(os.environ["LOCAL_RANK"])


def _first() -> None:
    """JAX tries its detectors in the order they were defined and takes the
    first present; tfmesos's goes before them (see the module's docstring)."""
    detectors = getattr(ClusterEnv, "_cluster_types", None)
    if isinstance(detectors, list) and TFMesosCluster in detectors:
        detectors.remove(TFMesosCluster)
        detectors.insert(0, TFMesosCluster)


_first()
