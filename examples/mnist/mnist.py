"""In-graph replicated digit classification on a fine-grained tfmesos cluster.

The model's variables live on the parameter servers. Each worker gets its own
copy of the forward pass and training op, pinned to it, and one Python thread
per worker drives that copy through a session on the worker's own target; all
of them update the shared variables asynchronously::

    python examples/mnist/mnist.py                   # servers on this machine
    python examples/mnist/mnist.py -w 2 -s 1 zk://mesos:2181/mesos
    python examples/mnist/mnist.py --master zk://mesos:2181/mesos --worker-gpus 1

The data is the 8x8 digits in examples/data (a small MNIST, the ones
scikit-learn bundles), so nothing is downloaded. After a fixed number of steps it prints ``accuracy = ...`` on
held-out digits.
"""

from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from tfmesos import cluster

v1 = tf.compat.v1
CLASSES = 10
HIDDEN = 32
SEED = 0
DIGITS = Path(__file__).resolve().parent.parent / "data" / "digits.csv.gz"
TEST_FRACTION = 0.25


def load_digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The 8x8 digits as train and test images (pixels scaled to [0, 1]) and
    labels, split with a fixed seed."""
    table = np.loadtxt(DIGITS, delimiter=",")
    images, labels = (table[:, :-1] / 16.0).astype(np.float32), table[:, -1].astype(np.int64)
    order = np.random.default_rng(SEED).permutation(len(images))
    test, train = np.split(order, [int(len(order) * TEST_FRACTION)])
    return images[train], images[test], labels[train], labels[test]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("master", nargs="?", help="Mesos master (default: this machine)")
    parser.add_argument("--master", dest="master_opt", metavar="MASTER")
    parser.add_argument("-w", "--nworker", type=int, default=2)
    parser.add_argument("-s", "--nserver", type=int, default=1)
    parser.add_argument("-Gw", "--worker-gpus", type=int, default=0)
    parser.add_argument("--steps", type=int, default=400, help="training steps in all")
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--learning-rate", type=float, default=0.2)
    args = parser.parse_args()

    x_train, x_test, y_train, y_test = load_digits()

    v1.disable_eager_execution()
    graph = tf.Graph()
    with graph.as_default():
        with graph.device(v1.train.replica_device_setter(ps_tasks=args.nserver)):
            init = v1.initializers.random_normal(stddev=0.1, seed=SEED)
            w1 = v1.get_variable("w1", [x_train.shape[1], HIDDEN], initializer=init)
            b1 = v1.get_variable("b1", [HIDDEN], initializer=v1.initializers.zeros())
            w2 = v1.get_variable("w2", [HIDDEN, CLASSES], initializer=init)
            b2 = v1.get_variable("b2", [CLASSES], initializer=v1.initializers.zeros())
            global_step = v1.train.create_global_step()

        def tower(device: str) -> tuple[tuple[tf.Tensor, tf.Tensor], tf.Tensor, tf.Tensor]:
            """Inputs, logits and mean loss of one copy of the model on ``device``."""
            with tf.device(device):
                x = v1.placeholder(tf.float32, [None, x_train.shape[1]])
                y = v1.placeholder(tf.int64, [None])
                logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
                )
                return (x, y), logits, loss

        towers = []
        for i in range(args.nworker):
            inputs, _, loss = tower(f"/job:worker/task:{i}")
            with tf.device(f"/job:worker/task:{i}"):
                opt = v1.train.GradientDescentOptimizer(args.learning_rate)
                towers.append((inputs, opt.minimize(loss, global_step=global_step)))
        (x_eval, y_eval), logits, _ = tower("/job:worker/task:0")
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y_eval), tf.float32))
        init_op = v1.global_variables_initializer()

    jobs = [
        {"name": "ps", "num": args.nserver},
        {"name": "worker", "num": args.nworker, "gpus": args.worker_gpus},
    ]
    config = v1.ConfigProto(allow_soft_placement=True)
    with cluster(jobs, master=args.master_opt or args.master) as c:
        errors: list[BaseException] = []
        runs = [0] * args.nworker

        def train(i: int) -> None:
            (x, y), train_op = towers[i]
            rng = np.random.default_rng(SEED + i)
            try:
                with v1.Session(c.targets[f"/job:worker/task:{i}"], graph, config) as sess:
                    step = 0
                    while step < args.steps and not errors:
                        batch = rng.choice(len(x_train), args.batch_size, replace=False)
                        _, step = sess.run(
                            [train_op, global_step], {x: x_train[batch], y: y_train[batch]}
                        )
                        runs[i] += 1
            except BaseException as error:
                errors.append(error)

        with v1.Session(c.targets["/job:worker/task:0"], graph, config) as sess:
            sess.run(init_op)
            threads = [threading.Thread(target=train, args=(i,)) for i in range(args.nworker)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            if errors:
                raise errors[0]
            steps = sess.run(global_step)
            result = sess.run(accuracy, {x_eval: x_test, y_eval: y_test})
    print(f"trained {steps} steps; steps per worker: {runs}")
    print(f"accuracy = {result}")


if __name__ == "__main__":
    main()
