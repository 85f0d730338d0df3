"""The smallest fine-grained (in-graph) example: 10 + 32 across a cluster.

Two constants live on the two parameter servers, the addition runs on
worker 1, and the session is opened on worker 0, which routes it all::

    python examples/plus.py                    # TF servers on this machine
    python examples/plus.py zk://mesos:2181/mesos   # or --master ..., on Mesos
    python examples/plus.py --backend slurm         # as one Slurm job

It prints ``42``.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from tfmesos import cluster

JOBS = [{"name": "ps", "num": 2}, {"name": "worker", "num": 2}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("master", nargs="?", help="Mesos master (default: this machine)")
    parser.add_argument("--master", dest="master_opt", metavar="MASTER")
    parser.add_argument(
        "--backend", choices=["local", "mesos", "slurm"], help="where the servers run"
    )
    args = parser.parse_args()

    tf.compat.v1.disable_eager_execution()
    master = args.master_opt or args.master
    with cluster(JOBS, master=master, backend=args.backend, quiet=True) as c:
        with tf.device("/job:ps/task:0"):
            a = tf.constant(10)
        with tf.device("/job:ps/task:1"):
            b = tf.constant(32)
        with tf.device("/job:worker/task:1"):
            total = a + b
        with tf.compat.v1.Session(c.targets["/job:worker/task:0"]) as sess:
            print(sess.run(total), flush=True)


if __name__ == "__main__":
    main()
