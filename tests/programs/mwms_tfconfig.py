"""One program for every task of a TF2 MultiWorkerMirroredStrategy job with a
chief, and a side-car evaluator, as TensorFlow's documents deploy them: each
task reads ``TF_CONFIG`` through ``TFConfigClusterResolver``.

The chief and the workers sum a 1 each across the collective (the chief is
one of its members, the one that saves); the evaluator, in no cluster list,
says what it sees of the cluster and exits.
"""

from __future__ import annotations

import sys

import tensorflow as tf


def main() -> int:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type == "evaluator":
        jobs = sorted(resolver.cluster_spec().jobs)
        print(f"evaluator:{resolver.task_id} sees the jobs {jobs}", flush=True)
        return 0
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)

    @tf.function  # type: ignore[untyped-decorator]
    def one() -> tf.Tensor:
        context = tf.distribute.get_replica_context()
        return context.all_reduce("sum", tf.constant(1.0))

    total = strategy.experimental_local_results(strategy.run(one))[0].numpy()
    print(
        f"{resolver.task_type}:{resolver.task_id} saves={strategy.extended.should_checkpoint} "
        f"sum={total:g}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
