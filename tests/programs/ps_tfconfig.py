"""One program for every task of a TF2 ParameterServerStrategy job, deployed
as TensorFlow documents it: each task reads ``TF_CONFIG``; a ``worker`` or a
``ps`` serves (``tf.distribute.Server(...).join()``, which never returns: the
launcher must stop it), and the ``chief`` is the coordinator, which schedules
the training steps on the workers, the variables on the ps tasks.

It fits ``y = 3x - 1`` by gradient descent, a few steps, and the chief prints
the weights it ended with and exits 0 (``--fail-with N``: N instead).

``--cluster``: the same coordinator, run alone, is the ``chief`` job of a
``tfmesos.cluster()`` whose servers are the workers and ps tasks.
"""

from __future__ import annotations

import argparse
import os
import sys

import tensorflow as tf


def serve(resolver: tf.distribute.cluster_resolver.ClusterResolver) -> int:
    # Set before the server starts, as TF's tutorial does: a call to a task
    # that is gone fails at once rather than retrying for ever.
    os.environ["GRPC_FAIL_FAST"] = "use_caller"
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    print(f"{resolver.task_type}:{resolver.task_id} serving at {server.target}", flush=True)
    server.join()
    return 0


def coordinate(resolver: tf.distribute.cluster_resolver.ClusterResolver, steps: int) -> None:
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        weight = tf.Variable(0.0, name="weight")
        bias = tf.Variable(0.0, name="bias")
    x = tf.constant([-1.0, 0.0, 1.0, 2.0])
    y = 3.0 * x - 1.0

    @tf.function  # type: ignore[untyped-decorator]
    def step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((weight * x + bias - y) ** 2)
        d_weight, d_bias = tape.gradient(loss, [weight, bias])
        weight.assign_sub(0.1 * d_weight)
        bias.assign_sub(0.1 * d_bias)
        return loss

    losses = [coordinator.schedule(step) for _ in range(steps)]
    coordinator.join()
    last = losses[-1].fetch()
    workers = len(resolver.cluster_spec().as_dict().get("worker", ()))
    print(
        f"trained {steps} steps on {workers} workers: weight={weight.numpy():.3f} "
        f"bias={bias.numpy():.3f} loss={last:.4f}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--fail-with", type=int, default=0)
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--events")
    args = parser.parse_args()
    if args.cluster:
        import tfmesos

        jobs = [{"name": "chief", "num": 1}, {"name": "worker", "num": 2}, {"name": "ps", "num": 1}]
        with tfmesos.cluster(jobs, quiet=True, events=args.events) as c:
            print(f"chief target {c.targets['/job:chief/task:0']}", flush=True)
            coordinate(c.cluster_resolver(), args.steps)
        return 0
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        return serve(resolver)
    if resolver.task_type != "chief":
        print(f"no part for a task of type {resolver.task_type!r}", file=sys.stderr)
        return 2
    coordinate(resolver, args.steps)
    status: int = args.fail_with
    return status


if __name__ == "__main__":
    sys.exit(main())
