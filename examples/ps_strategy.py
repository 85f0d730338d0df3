"""TF2 ParameterServerStrategy on a fine-grained tfmesos cluster.

tfmesos starts plain TensorFlow servers for the parameter servers and the
workers; this program is the coordinator. The model's variables live on the
parameter servers and each training step, a ``tf.function``, is scheduled by
``ClusterCoordinator`` onto whichever worker is free, reading that worker's
own copy of the dataset::

    python examples/ps_strategy.py                    # servers on this machine
    python examples/ps_strategy.py --master zk://mesos:2181/mesos

A worker whose server dies is started again at its address, up to
``--max-restarts`` times (3 by default): ``ClusterCoordinator`` hands the dead
worker's steps to the others meanwhile, and takes it back when it answers
again. A ps is not relaunched: the variables die with it.

The data is the 8x8 digits in examples/data (the ones scikit-learn bundles),
so nothing is downloaded. It
prints the mean loss of every epoch, then ``first loss = ...`` and
``final loss = ...``.
"""

from __future__ import annotations

import argparse
import gc
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from tfmesos import cluster

SEED = 0
DIGITS = Path(__file__).resolve().parent / "data" / "digits.csv.gz"


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 8x8 digits: pixels scaled to [0, 1], and labels."""
    table = np.loadtxt(DIGITS, delimiter=",")
    return (table[:, :-1] / 16.0).astype(np.float32), table[:, -1].astype(np.int64)


class Classifier(tf.Module):
    """A one-hidden-layer classifier; its variables are placed on the ps."""

    def __init__(self, inputs: int, hidden: int, classes: int) -> None:
        super().__init__()
        init = tf.random_normal_initializer(stddev=0.1, seed=SEED)
        self.w1 = tf.Variable(init([inputs, hidden]), name="w1")
        self.b1 = tf.Variable(tf.zeros([hidden]), name="b1")
        self.w2 = tf.Variable(init([hidden, classes]), name="w2")
        self.b2 = tf.Variable(tf.zeros([classes]), name="b2")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return tf.nn.relu(x @ self.w1 + self.b1) @ self.w2 + self.b2


def train(
    resolver: tf.distribute.cluster_resolver.ClusterResolver, args: argparse.Namespace
) -> list[float]:
    """Train with this process as coordinator; returns the mean loss per epoch."""
    images, labels = load_digits()
    # Connects this process to the cluster as its "chief" (the coordinator).
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = Classifier(images.shape[1], 32, 10)

    def dataset_fn() -> tf.data.Dataset:
        return (
            tf.data.Dataset.from_tensor_slices((images, labels))
            .shuffle(len(images), seed=SEED)
            .repeat()
            .batch(args.batch_size)
        )

    per_worker_iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def train_step(iterator: tf.data.Iterator) -> tf.Tensor:
        def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, model(x)))
            grads = tape.gradient(loss, model.trainable_variables)
            for var, grad in zip(model.trainable_variables, grads, strict=True):
                var.assign_sub(args.learning_rate * grad)
            return loss

        x, y = next(iterator)
        return strategy.run(replica_step, args=(x, y))

    losses: list[float] = []
    for epoch in range(1, args.epochs + 1):
        results = [
            coordinator.schedule(train_step, args=(per_worker_iterator,)) for _ in range(args.steps)
        ]
        coordinator.join()
        losses.append(float(np.mean([r.fetch() for r in results])))
        print(f"epoch {epoch}: loss = {losses[-1]:.4f}", flush=True)
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("master", nargs="?", help="Mesos master (default: this machine)")
    parser.add_argument("--master", dest="master_opt", metavar="MASTER")
    parser.add_argument("-s", "--nserver", type=int, default=2)
    parser.add_argument("-w", "--nworker", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20, help="steps per epoch")
    parser.add_argument("--batch-size", type=int, default=64)
    # Asynchronous updates from two workers: 0.5 sometimes stalled, 0.2 converges steadily.
    parser.add_argument("--learning-rate", type=float, default=0.2)
    parser.add_argument(
        "--max-restarts", type=int, default=3, help="relaunches of dead workers, in all"
    )
    parser.add_argument(
        "--events", metavar="FILE", help="write the job's events to FILE, as tfrun --events"
    )
    args = parser.parse_args()

    jobs = [{"name": "ps", "num": args.nserver}, {"name": "worker", "num": args.nworker}]
    master = args.master_opt or args.master
    with cluster(jobs, master=master, max_restarts=args.max_restarts, events=args.events) as c:
        losses = train(c.cluster_resolver(), args)
        # Free the coordinator, its remote functions and iterators while the
        # servers still run: should a worker be coming back, it waits until
        # it is back (and it does not hang the exit waiting).
        gc.collect()
    print(f"first loss = {losses[0]}")
    print(f"final loss = {losses[-1]}")


if __name__ == "__main__":
    main()
