"""A cross-process JAX collective: every process adds its part with ``psum``.

Run it as several processes, one per task::

    tfrun -w 3 -s 0 -- python examples/jax_psum.py

``jax.distributed.initialize()`` reads the coordinator's address (process 0's
host and port) from ``JAX_COORDINATOR_ADDRESS``; the number of processes and
this process's id it detects under the cluster managers it knows (Slurm, Open
MPI, Kubernetes, Cloud TPU) and, with tfmesos installed, in a tfrun task, where
no arguments are needed. The script passes them from ``JAX_NUM_PROCESSES`` and
``JAX_PROCESS_ID`` so that it runs by hand too. tfrun sets all three in every
task; by hand, start one process per id with the same address and count::

    JAX_COORDINATOR_ADDRESS=localhost:12345 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=0 \\
        python examples/jax_psum.py
    # ... and the same with JAX_PROCESS_ID=1 in a second shell.

Process ``p`` holds ``(p + 1) * [1, 2, 3, 4]`` on each of its devices; a
``psum`` over every device of every process gives each of them the sum, which
the script checks exactly (integers) and prints as ``psum = [...]``. It runs on
CPUs (the cross-process collectives are gloo's) as on GPUs. Without the
variables it runs as a single process.
"""

from __future__ import annotations

import os
import sys

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


def main() -> int:
    if "JAX_NUM_PROCESSES" in os.environ:
        jax.distributed.initialize(
            num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
            process_id=int(os.environ["JAX_PROCESS_ID"]),
        )
    process, count = jax.process_index(), jax.process_count()
    local = jax.local_device_count()
    print(
        f"process {process} of {count}: {local} of {jax.device_count()} "
        f"{jax.default_backend()} devices here",
        flush=True,
    )

    # One row per device, across every process: this process fills its own.
    mesh = Mesh(np.array(jax.devices()), ("d",))
    rows = np.tile(np.arange(1, 5, dtype=np.int32) * (process + 1), (local, 1))
    spread = jax.make_array_from_process_local_data(NamedSharding(mesh, P("d")), rows)

    def add(block: jax.Array) -> jax.Array:
        return jax.lax.psum(block, "d")

    summed = jax.jit(jax.shard_map(add, mesh=mesh, in_specs=P("d"), out_specs=P()))(spread)
    result = np.asarray(summed.addressable_data(0)).reshape(-1).tolist()
    # Each process holds `local` rows; this assumes every process has as many
    # devices as this one (as tfrun's identical tasks do).
    expected = [local * count * (count + 1) // 2 * k for k in range(1, 5)]
    print(f"psum = {result}", flush=True)
    if result != expected:
        print(f"expected {expected}", file=sys.stderr, flush=True)
        return 1
    if count > 1:
        jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
