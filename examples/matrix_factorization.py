"""Non-negative matrix factorization on a fine-grained tfmesos cluster.

Factors a synthetic non-negative matrix ``V`` (of low rank, fixed seed) as
``W @ H`` with Lee and Seung's multiplicative updates, which keep both factors
non-negative and never raise the loss ``||V - W @ H||^2``. ``W`` lives on
``/job:ps/task:0`` and ``H`` on ``/job:ps/task:1``; worker 0 computes the update
of ``H``, worker 1 that of ``W``, and the loss::

    python examples/matrix_factorization.py                 # servers on this machine
    python examples/matrix_factorization.py zk://mesos:2181/mesos

It prints ``loss = ...`` as it goes, then ``first loss = ...`` and
``final loss = ...``.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from tfmesos import cluster

v1 = tf.compat.v1
EPSILON = 1e-9  # keeps the multiplicative updates clear of 0 / 0
JOBS = [{"name": "ps", "num": 2}, {"name": "worker", "num": 2}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("master", nargs="?", help="Mesos master (default: this machine)")
    parser.add_argument("--master", dest="master_opt", metavar="MASTER")
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--cols", type=int, default=200)
    parser.add_argument("--rank", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=50)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    matrix = (rng.random((args.rows, args.rank)) @ rng.random((args.rank, args.cols))).astype(
        np.float32
    )
    scale = np.sqrt(matrix.mean() / args.rank)

    v1.disable_eager_execution()
    with tf.device("/job:ps/task:0"):
        w = tf.Variable(rng.uniform(0, 2 * scale, (args.rows, args.rank)), dtype=tf.float32)
    with tf.device("/job:ps/task:1"):
        h = tf.Variable(rng.uniform(0, 2 * scale, (args.rank, args.cols)), dtype=tf.float32)

    with tf.device("/job:worker/task:0"):
        v = tf.constant(matrix)
        update_h = h.assign(
            h
            * tf.matmul(w, v, transpose_a=True)
            / (tf.matmul(tf.matmul(w, w, transpose_a=True), h) + EPSILON)
        )
    with tf.device("/job:worker/task:1"):
        v = tf.constant(matrix)
        update_w = w.assign(
            w
            * tf.matmul(v, h, transpose_b=True)
            / (tf.matmul(w, tf.matmul(h, h, transpose_b=True)) + EPSILON)
        )
        loss = tf.reduce_sum(tf.square(v - tf.matmul(w, h)))

    losses: list[float] = []
    with (
        cluster(JOBS, master=args.master_opt or args.master) as c,
        v1.Session(c.targets["/job:worker/task:0"]) as sess,
    ):
        sess.run(v1.global_variables_initializer())
        losses.append(float(sess.run(loss)))
        print(f"iteration 0: loss = {losses[-1]}", flush=True)
        for i in range(1, args.iterations + 1):
            sess.run(update_h)  # W's update uses the new H
            sess.run(update_w)
            losses.append(float(sess.run(loss)))
            if i % 10 == 0 or i == args.iterations:
                print(f"iteration {i}: loss = {losses[-1]}", flush=True)
    print(f"first loss = {losses[0]}")
    print(f"final loss = {losses[-1]}")


if __name__ == "__main__":
    main()
