"""Between-graph replicated MNIST training with parameter servers.

A TensorFlow 2 port (through the ``tf.compat.v1`` graph API) of the classic
TF1 ``mnist_replica`` example: a one-hidden-layer softmax classifier whose
variables live on the parameter servers, trained asynchronously with Adam by
every worker.

Run it through tfrun, which fills in the placeholders for each task::

    tfrun -w 2 -s 1 -- python examples/mnist/mnist_replica.py \\
        --ps_hosts={ps_hosts} --worker_hosts={worker_hosts} \\
        --job_name={job_name} --task_index={task_index}

The ``=`` form keeps an empty ``{ps_hosts}`` (``-s 0``) from swallowing the
next flag; with no parameter servers each worker trains its own copy of the
model, which mainly makes sense with a single worker.

By hand on one machine, one process per task::

    python mnist_replica.py --ps_hosts=localhost:2222 \\
        --worker_hosts=localhost:2223,localhost:2224 --job_name=ps --task_index=0
    python mnist_replica.py --ps_hosts=localhost:2222 \\
        --worker_hosts=localhost:2223,localhost:2224 --job_name=worker --task_index=0
    python mnist_replica.py --ps_hosts=localhost:2222 \\
        --worker_hosts=localhost:2223,localhost:2224 --job_name=worker --task_index=1

With ``--data_dir`` pointing at the MNIST IDX files (optionally gzipped) it
trains on 28x28 MNIST; otherwise on the 8x8 digits in examples/data (the ones
scikit-learn bundles), so nothing is ever downloaded.  Parameter server tasks
never return; the launcher is expected to kill them once the workers have
exited.
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# TF_CPP_MIN_LOG_LEVEL does not reach the oneDNN notice TensorFlow (2.18 and
# later) logs through absl as its libraries load, before it reads its log
# level: "All log messages before absl::InitializeLog() ..." and "oneDNN
# custom operations are on ...", twice. Without oneDNN's CPU kernels there is
# no notice (and the results do not depend on the order of floating-point
# sums); give TF_ENABLE_ONEDNN_OPTS=1 to have them, notice and all.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np
import tensorflow as tf

NUM_CLASSES = 10
VALIDATION_FRACTION = 0.2
SPLIT_SEED = 0

MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "val_images": "t10k-images-idx3-ubyte",
    "val_labels": "t10k-labels-idx1-ubyte",
}

# IDX type codes (third byte of the magic number) to big-endian numpy dtypes.
IDX_DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


@dataclass(frozen=True)
class DataSet:
    """Flattened images scaled to [0, 1] and integer labels."""

    train_images: np.ndarray
    train_labels: np.ndarray
    val_images: np.ndarray
    val_labels: np.ndarray
    image_size: int  # side length in pixels
    name: str


def read_idx(path: Path) -> np.ndarray:
    """Reads an IDX file (as used by MNIST), gzipped or not."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0:2] != b"\x00\x00" or raw[2] not in IDX_DTYPES:
        raise ValueError(f"{path}: not an IDX file")
    dtype = IDX_DTYPES[raw[2]]
    ndim = raw[3]
    header_len = 4 + 4 * ndim
    dims = struct.unpack(f">{ndim}I", raw[4:header_len])
    data = np.frombuffer(raw, dtype=dtype, offset=header_len)
    if data.size != math.prod(dims):
        raise ValueError(f"{path}: expected {math.prod(dims)} items, found {data.size}")
    return data.reshape(dims)


def _find_idx(data_dir: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (data_dir / name).is_file():
            return data_dir / name
    return None


def load_mnist(data_dir: Path) -> DataSet | None:
    """Returns MNIST from data_dir, or None if any of the four files is missing."""
    paths = {key: _find_idx(data_dir, stem) for key, stem in MNIST_FILES.items()}
    if any(p is None for p in paths.values()):
        return None
    arrays = {key: read_idx(p) for key, p in paths.items() if p is not None}
    side = arrays["train_images"].shape[1]

    def images(a: np.ndarray) -> np.ndarray:
        return a.reshape(len(a), -1).astype(np.float32) / 255.0

    return DataSet(
        train_images=images(arrays["train_images"]),
        train_labels=arrays["train_labels"].astype(np.int64),
        val_images=images(arrays["val_images"]),
        val_labels=arrays["val_labels"].astype(np.int64),
        image_size=side,
        name=f"MNIST from {data_dir}",
    )


DIGITS = Path(__file__).resolve().parent.parent / "data" / "digits.csv.gz"


def read_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 8x8 digits (examples/data): 1797 x 64 pixels in 0..16, and labels.

    scikit-learn's ``load_digits`` reads the same file; the examples do not
    depend on scikit-learn, because with it installed every
    ``import tensorflow`` imports it, SciPy and all, in every task
    (docs/benchmarks.md, "The first run").
    """
    table = np.loadtxt(DIGITS, delimiter=",")
    return table[:, :-1], table[:, -1].astype(np.int64)


def load_digits_dataset() -> DataSet:
    """The 8x8 digits, split with a fixed seed.

    The seed matters: every worker must agree on which images are held out,
    otherwise one worker would train on another's validation images.
    """
    pixels, targets = read_digits()
    # Pixel values in this data set range over 0..16.
    images = (pixels / 16.0).astype(np.float32)
    labels = targets.astype(np.int64)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(images))
    n_val = int(len(images) * VALIDATION_FRACTION)
    val, train = order[:n_val], order[n_val:]
    return DataSet(
        train_images=images[train],
        train_labels=labels[train],
        val_images=images[val],
        val_labels=labels[val],
        image_size=8,
        name="8x8 digits",
    )


def load_data(data_dir: str | None) -> DataSet:
    if data_dir:
        mnist = load_mnist(Path(data_dir))
        if mnist is not None:
            return mnist
        print(f"no MNIST IDX files in {data_dir}; using the 8x8 digits", flush=True)
    return load_digits_dataset()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ps_hosts", default="", help="comma-separated host:port list")
    parser.add_argument("--worker_hosts", required=True, help="comma-separated host:port list")
    parser.add_argument("--job_name", required=True, choices=("ps", "worker"))
    parser.add_argument(
        "--task_index",
        "--worker_index",  # the name the original tfmesos examples used
        dest="task_index",
        type=int,
        default=0,
        help="index of this task within its job",
    )
    parser.add_argument("--data_dir", default=None, help="directory with MNIST IDX files")
    parser.add_argument("--train_steps", type=int, default=200, help="global steps to train")
    parser.add_argument("--batch_size", type=int, default=100)
    parser.add_argument("--hidden_units", type=int, default=100)
    parser.add_argument("--learning_rate", type=float, default=0.01)
    parser.add_argument(
        "--checkpoint_dir",
        default=None,
        help="where the chief saves checkpoints and every run resumes from the latest: "
        "a directory every task sees (a shared volume, -V), for tfrun --max-restarts",
    )
    parser.add_argument(
        "--save_checkpoint_steps", type=int, default=100, help="global steps between checkpoints"
    )
    return parser.parse_args(argv)


def split_hosts(hosts: str) -> list[str]:
    return [h.strip() for h in hosts.split(",") if h.strip()]


@dataclass(frozen=True)
class Model:
    images: tf.Tensor
    labels: tf.Tensor
    loss: tf.Tensor
    global_step: tf.Variable
    train_op: tf.Tensor  # evaluates to the global step after the update


def build_model(image_pixels: int, hidden_units: int, learning_rate: float) -> Model:
    images = tf.compat.v1.placeholder(tf.float32, [None, image_pixels], name="images")
    labels = tf.compat.v1.placeholder(tf.int64, [None], name="labels")
    global_step = tf.compat.v1.train.get_or_create_global_step()

    # Scaling the initial weights by fan-in keeps the first logits small, so
    # the initial loss sits near ln(10) whatever the image size.
    def weights(fan_in: int, fan_out: int, name: str) -> tf.Variable:
        init = tf.random.truncated_normal([fan_in, fan_out], stddev=1.0 / math.sqrt(fan_in))
        return tf.Variable(init, name=name)

    hid_w = weights(image_pixels, hidden_units, "hid_w")
    hid_b = tf.Variable(tf.zeros([hidden_units]), name="hid_b")
    sm_w = weights(hidden_units, NUM_CLASSES, "sm_w")
    sm_b = tf.Variable(tf.zeros([NUM_CLASSES]), name="sm_b")

    hidden = tf.nn.relu(tf.compat.v1.nn.xw_plus_b(images, hid_w, hid_b))
    logits = tf.compat.v1.nn.xw_plus_b(hidden, sm_w, sm_b)
    # The fused op is numerically safe where log(softmax) is not.
    loss = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    )

    optimizer = tf.compat.v1.train.AdamOptimizer(learning_rate)
    minimize = optimizer.minimize(loss, global_step=global_step)
    # Fetching global_step next to the update op would race with the
    # increment; reading it under a control dependency gives the new value.
    with tf.control_dependencies([minimize]):
        train_op = global_step.read_value()
    return Model(images, labels, loss, global_step, train_op)


def wait_for_chief(target: str, config: tf.compat.v1.ConfigProto, global_step: tf.Variable) -> None:
    """Blocks until the chief has initialised the model and taken a step.

    MonitoredTrainingSession would wait on its own, but it re-checks only every
    30 seconds, which dwarfs a short job.  Waiting for the first step as well
    keeps the chief's initial validation loss free of other workers' updates.
    """
    with tf.compat.v1.Session(target, config=config) as sess:
        while True:
            try:
                if sess.run(global_step) > 0:
                    return
            except (tf.errors.FailedPreconditionError, tf.errors.UnavailableError):
                pass  # variables not initialised yet, or the ps not up yet
            time.sleep(0.2)


def run_ps(server: tf.distribute.Server, task_index: int) -> None:
    print(f"ps {task_index}: serving at {server.target}", flush=True)
    server.join()


def run_worker(
    args: argparse.Namespace, cluster: tf.train.ClusterSpec, server: tf.distribute.Server
) -> None:
    task_index: int = args.task_index
    has_ps = "ps" in cluster.jobs
    # Without parameter servers every worker keeps its own variables, so each
    # must initialise them itself; task 0 still does the reporting.
    is_chief = task_index == 0 or not has_ps
    reports = task_index == 0
    worker_device = f"/job:worker/task:{task_index}"

    role = "standalone (no ps)" if not has_ps else "chief" if is_chief else "not chief"
    data = load_data(args.data_dir)
    print(
        f"worker {task_index}: {data.name}, {data.image_size}x{data.image_size} images, "
        f"{len(data.train_images)} train / {len(data.val_images)} validation, "
        f"{role}",
        flush=True,
    )

    if has_ps:
        device_fn = tf.compat.v1.train.replica_device_setter(
            worker_device=worker_device, cluster=cluster
        )
        # Only talk to the ps tasks and ourselves: otherwise session creation
        # blocks until every worker is up, and a worker that finishes first
        # and exits could fail the sessions of those still training.
        device_filters = ["/job:ps", worker_device]
    else:
        device_fn = worker_device
        device_filters = [worker_device]
    config = tf.compat.v1.ConfigProto(allow_soft_placement=True, device_filters=device_filters)

    with tf.compat.v1.device(device_fn):
        model = build_model(data.image_size**2, args.hidden_units, args.learning_rate)

    if not is_chief:
        print(f"worker {task_index}: waiting for the chief to start", flush=True)
        wait_for_chief(server.target, config, model.global_step)

    val_feed = {model.images: data.val_images, model.labels: data.val_labels}

    def validation_loss(step_context: tf.compat.v1.train.MonitoredSession.StepContext) -> float:
        # The raw session bypasses the hooks, so evaluating does not count as a step.
        return float(step_context.session.run(model.loss, feed_dict=val_feed))

    # Different seeds per worker so the replicas do not feed identical batches.
    rng = np.random.default_rng(1000 + task_index)
    n_train = len(data.train_images)
    report_every = max(1, args.train_steps // 10)
    hooks = [tf.compat.v1.train.StopAtStepHook(last_step=args.train_steps)]

    start = time.monotonic()
    local_step = 0
    global_step = 0
    first_step_at = last_step_at = 0.0
    first_global_step = 0
    with tf.compat.v1.train.MonitoredTrainingSession(
        master=server.target,
        is_chief=is_chief,
        hooks=hooks,
        config=config,
        # The chief restores the latest checkpoint here, if there is one, and
        # saves one every save_checkpoint_steps and at the end.
        checkpoint_dir=args.checkpoint_dir,
        save_checkpoint_steps=args.save_checkpoint_steps if args.checkpoint_dir else None,
        save_checkpoint_secs=None,
        save_summaries_steps=None,
        save_summaries_secs=None,
        log_step_count_steps=0,
    ) as sess:
        if reports:
            begins_at = sess.run_step_fn(
                lambda step_context: int(step_context.session.run(model.global_step))
            )
            print(f"worker {task_index}: training from global step {begins_at}", flush=True)
        if reports:
            initial = sess.run_step_fn(validation_loss)
            print(f"initial validation cross entropy = {initial}", flush=True)
        while not sess.should_stop():
            batch = rng.choice(n_train, size=args.batch_size, replace=False)
            feed = {model.images: data.train_images[batch], model.labels: data.train_labels[batch]}
            global_step, loss = sess.run([model.train_op, model.loss], feed_dict=feed)
            local_step += 1
            last_step_at = time.perf_counter()
            if local_step == 1:
                first_step_at, first_global_step = last_step_at, global_step
            if local_step % report_every == 0:
                print(
                    f"worker {task_index}: local step {local_step}, global step {global_step}, "
                    f"batch loss {loss:.4f}, {time.monotonic() - start:.1f}s",
                    flush=True,
                )
        if reports:
            final = sess.run_step_fn(validation_loss)
            print(f"validation cross entropy = {final}", flush=True)
            # The cluster's training rate, seen from the chief: global steps
            # (every worker's) between its first and its last step.
            elapsed = last_step_at - first_step_at
            steps = global_step - first_global_step
            if elapsed > 0:
                print(
                    f"training: {steps} global steps in {elapsed:.3f} s "
                    f"({steps / elapsed:.1f} steps/s)",
                    flush=True,
                )

    print(
        f"worker {task_index}: done after {local_step} local steps "
        f"(global step {global_step}) in {time.monotonic() - start:.1f}s",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ps_hosts = split_hosts(args.ps_hosts)
    worker_hosts = split_hosts(args.worker_hosts)
    if not worker_hosts:
        sys.exit("--worker_hosts must name at least one worker")
    tasks = len(ps_hosts) if args.job_name == "ps" else len(worker_hosts)
    if not 0 <= args.task_index < tasks:
        sys.exit(f"--task_index {args.task_index} out of range for {tasks} {args.job_name} task(s)")

    tf.compat.v1.disable_eager_execution()
    jobs = {"worker": worker_hosts}
    if ps_hosts:
        jobs["ps"] = ps_hosts
    cluster = tf.train.ClusterSpec(jobs)
    server = tf.distribute.Server(cluster, job_name=args.job_name, task_index=args.task_index)

    if args.job_name == "ps":
        run_ps(server, args.task_index)
    else:
        run_worker(args, cluster, server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
