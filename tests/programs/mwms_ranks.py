"""One program for every process of a TF2 MultiWorkerMirroredStrategy job
run with ``tfrun -w W --nproc-per-task N``: each process reads ``TF_CONFIG``
through ``TFConfigClusterResolver``, as TensorFlow's documents deploy it, and
all-reduces its own task index across the collective.

Each of the W*N processes is a TensorFlow worker of its own: the sum is
0 + 1 + ... + (W*N - 1) only where every process took part once, under its
own index (read from the file ``TFMESOS_CLUSTER_FILE`` names, with
``tfrun --cluster-file``). A process also says how many workers it sees, its index and
``RANK``, and the address it serves at.
"""

from __future__ import annotations

import os
import sys

import tensorflow as tf


def main() -> int:
    if "TF_CONFIG" not in os.environ:  # tfrun --cluster-file: the process's own file
        with open(os.environ["TFMESOS_CLUSTER_FILE"]) as file:
            os.environ["TF_CONFIG"] = file.read()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    index = resolver.task_id

    @tf.function  # type: ignore[untyped-decorator]
    def own_index() -> tf.Tensor:
        context = tf.distribute.get_replica_context()
        return context.all_reduce("sum", tf.constant(float(index)))

    total = strategy.experimental_local_results(strategy.run(own_index))[0].numpy()
    workers = resolver.cluster_spec().job_tasks("worker")
    print(
        f"{resolver.task_type}:{index} of {len(workers)} at {workers[index]} "
        f"rank={os.environ.get('RANK')} replicas={strategy.num_replicas_in_sync} "
        f"sum={total:g}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
