"""Synchronous multi-worker Keras training with MultiWorkerMirroredStrategy.

Every worker holds a full copy of a small dense classifier; gradients are
all-reduced between workers each step.  The cluster comes from the
``TF_CONFIG`` environment variable, which tfrun sets for every task, so the
command needs no placeholders::

    tfrun -w 2 -s 0 -- python examples/keras_multi_worker.py --epochs 3

(``-s 0``: this strategy has no use for parameter servers and refuses a
cluster that lists any.)  Without ``TF_CONFIG`` it simply trains on this
machine.  To run two workers by hand, start one process per worker with
matching clusters::

    TF_CONFIG='{"cluster": {"worker": ["localhost:20001", "localhost:20002"]},
                "task": {"type": "worker", "index": 0}}' \\
        python examples/keras_multi_worker.py
    # ... and the same with "index": 1 in a second shell.

The data is the 8x8 digits in examples/data (the ones scikit-learn bundles),
so nothing is downloaded.
The model, loss and optimizer are Keras; the training step is written out
rather than left to ``model.fit`` (see ``train_step`` for why).  Every worker
prints one line per epoch with the mean training loss; worker 0 (or a "chief"
task, if the cluster has one) is the chief and also prints the summary lines
``first loss = ...`` and ``final loss = ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

NUM_CLASSES = 10
SEED = 0
DIGITS = Path(__file__).resolve().parent / "data" / "digits.csv.gz"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=64, help="examples per worker per step")
    parser.add_argument("--learning_rate", type=float, default=0.01)
    parser.add_argument(
        "--checkpoint_dir",
        default=None,
        help="where the model is saved after every epoch and a run resumes from: "
        "a directory every task sees (a shared volume, -V), for tfrun --max-restarts",
    )
    return parser.parse_args(argv)


def cluster_role() -> tuple[str, int, int, bool]:
    """(task type, task index, number of workers, is chief) from TF_CONFIG."""
    tf_config: dict[str, Any] = json.loads(os.environ.get("TF_CONFIG") or "{}")
    cluster: dict[str, list[str]] = tf_config.get("cluster", {})
    task: dict[str, Any] = tf_config.get("task", {})
    task_type = str(task.get("type", "worker"))
    task_index = int(task.get("index", 0))
    # A "chief" task, when present, trains as well.
    num_workers = max(1, len(cluster.get("worker", [])) + len(cluster.get("chief", [])))
    if "chief" in cluster:
        is_chief = task_type == "chief"
    else:
        is_chief = task_type == "worker" and task_index == 0
    return task_type, task_index, num_workers, is_chief


def load_data() -> tuple[np.ndarray, np.ndarray]:
    table = np.loadtxt(DIGITS, delimiter=",")
    # Pixel values in this data set range over 0..16.
    return (table[:, :-1] / 16.0).astype(np.float32), table[:, -1].astype(np.int64)


def make_dataset(images: np.ndarray, labels: np.ndarray, global_batch: int) -> tf.data.Dataset:
    # Every worker builds the same pipeline with the same shuffle seed; DATA
    # sharding then hands each worker a disjoint part of every global batch.
    # (The default AUTO policy would try to shard by file, find none, and
    # warn before falling back to this.)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return (
        tf.data.Dataset.from_tensor_slices((images, labels))
        .shuffle(len(images), seed=SEED)
        .repeat()
        # Equal, full batches keep the workers' collective ops in lockstep.
        .batch(global_batch, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
        .with_options(options)
    )


def build_model(input_dim: int) -> tf.keras.Model:
    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(input_dim,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(NUM_CLASSES),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    task_type, task_index, num_workers, is_chief = cluster_role()
    # The strategy must exist before any other TensorFlow op runs: it starts
    # this task's server and fixes the collective setup.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    print(
        f"{task_type} {task_index}: {num_workers} worker(s), "
        f"{strategy.num_replicas_in_sync} replica(s) in sync{', chief' if is_chief else ''}",
        flush=True,
    )

    images, labels = load_data()
    global_batch = args.batch_size * num_workers
    steps_per_epoch = max(1, len(images) // global_batch)
    dist_dataset = strategy.experimental_distribute_dataset(
        make_dataset(images, labels, global_batch)
    )

    # Repeatable runs; the strategy itself copies worker 0's initial weights.
    tf.keras.utils.set_random_seed(SEED)
    with strategy.scope():
        model = build_model(images.shape[1])
        optimizer = tf.keras.optimizers.Adam(args.learning_rate)
    # Per-example losses, averaged over the *global* batch below, so that
    # summing the replicas' gradients gives the gradient of the global mean.
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        # The optimizer all-reduces the gradients across workers.
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    # model.fit is not used: Keras 3 fails on MultiWorkerMirroredStrategy
    # before the first step (keras-team/keras#20585), while a hand-written
    # step works with Keras 3 and with legacy tf_keras alike.
    @tf.function
    def train_step(iterator: Any) -> tf.Tensor:
        x, y = next(iterator)
        per_replica = strategy.run(replica_step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    iterator = iter(dist_dataset)
    losses: list[float] = []
    done = tf.Variable(0, dtype=tf.int64, trainable=False, name="epochs_done")
    manager = None
    if args.checkpoint_dir:
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epochs_done=done)
        # Every worker takes part in saving (the variables are mirrored by
        # collectives), but only the chief's copy is kept: the others write
        # to a directory of their own, as TensorFlow's multi-worker guide does.
        own = os.path.join(args.checkpoint_dir, "" if is_chief else f"worker-{task_index}")
        manager = tf.train.CheckpointManager(checkpoint, own, max_to_keep=1)
        latest = tf.train.latest_checkpoint(args.checkpoint_dir)
        if latest:
            checkpoint.restore(latest)
            print(f"{task_type} {task_index}: resumed after epoch {int(done.numpy())}", flush=True)
    start = time.monotonic()
    for epoch in range(int(done.numpy()) + 1, args.epochs + 1):
        epoch_start = time.monotonic()
        total = 0.0
        for _ in range(steps_per_epoch):
            total += float(train_step(iterator))
        losses.append(total / steps_per_epoch)
        print(
            f"Epoch {epoch}/{args.epochs}: {steps_per_epoch} steps, loss {losses[-1]:.4f}, "
            f"{time.monotonic() - epoch_start:.1f}s",
            flush=True,
        )
        if manager is not None:
            done.assign(epoch)
            manager.save(checkpoint_number=epoch)
    print(f"{task_type} {task_index}: trained in {time.monotonic() - start:.1f}s", flush=True)
    if is_chief and losses:
        print(f"first loss = {losses[0]}", flush=True)
        print(f"final loss = {losses[-1]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
