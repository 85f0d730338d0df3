"""Benchmark 9: the task image, built and run.

A. Building the CPU image (``scripts/build-image cpu --base local``, podman
   with runc) on this machine: the local Debian base (mmdebstrap, then
   ``podman import``), every layer anew (``--no-cache``: TensorFlow from the
   pip index this machine is configured with), after a change to tfmesos (a
   copy of the checkout with one comment more: only the tfmesos layer is
   built again), and an image already built (reused by its name).
B. The MNIST replica job (1 ps, 2 workers, ``examples/mnist/mnist_replica.py``
   on scikit-learn's digits written as MNIST IDX files) through the test
   master, start to exit: ps:0 and worker:1 as processes on this host, in the
   image with the Mesos containerizer (``--image``), and with the Docker one
   (``-C DOCKER``); worker 0, the chief, runs beside tfrun in all three. The
   three alternate, as every benchmark here does.

Needs podman (and runc, mmdebstrap) and root. Not in ``run_all.py``: a cold
build takes minutes. ``--quick`` measures only the build of an image already
built and one run of each job.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchlib import (
    PYTHON,
    ROOT,
    Result,
    alternate,
    bench_env,
    command_line,
    parse_args,
    start_test_master,
    tfrun,
)

SCRATCH_BASE = "localhost/tfmesos-bench-base:scratch"


def local_base(work: Path) -> float:
    """What ``build-image --base local`` does the first time, into a tag of its own."""
    tar = work / "rootfs.tar"
    started = time.perf_counter()
    subprocess.run(
        [
            "mmdebstrap",
            "--variant=minbase",
            "--include=python3,python3-venv,ca-certificates",
            "bookworm",
            str(tar),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    subprocess.run(["podman", "import", str(tar), SCRATCH_BASE], check=True, capture_output=True)
    seconds = time.perf_counter() - started
    subprocess.run(["podman", "rmi", SCRATCH_BASE], check=False, capture_output=True)
    tar.unlink()
    return seconds


def build(*extra: str, root: Path = ROOT) -> tuple[float, str]:
    argv = [PYTHON, str(root / "scripts" / "build-image"), "cpu", "--base", "local", *extra]
    started = time.perf_counter()
    out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True).stdout
    return time.perf_counter() - started, out.strip().splitlines()[-1]


def changed_checkout(work: Path) -> Path:
    """A copy of what the image is built from, with tfmesos changed by a comment."""
    copy = work / "checkout"
    for name in ("docker", "scripts", "tfmesos"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", ".dockerignore"):
        shutil.copy(ROOT / name, copy / name)
    init = copy / "tfmesos" / "__init__.py"
    init.write_text(init.read_text() + f"# changed at {time.time()}\n")
    return copy


def write_idx(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(n).to_bytes(4, "big") for n in array.shape
    )
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def job_volume(work: Path) -> Path:
    """The example and scikit-learn's digits as MNIST IDX files (the image has
    no scikit-learn), for -V at the same path in every task."""
    from sklearn.datasets import load_digits

    vol = work / "vol"
    (vol / "data").mkdir(parents=True)
    vol.chmod(0o755)
    shutil.copy(ROOT / "examples" / "mnist" / "mnist_replica.py", vol / "mnist_replica.py")
    digits = load_digits()
    images = (digits.images * (255 / 16)).round().astype(np.uint8)
    n_val = len(images) // 5
    write_idx(vol / "data" / "train-images-idx3-ubyte", images[n_val:])
    write_idx(vol / "data" / "train-labels-idx1-ubyte", digits.target[n_val:])
    write_idx(vol / "data" / "t10k-images-idx3-ubyte", images[:n_val])
    write_idx(vol / "data" / "t10k-labels-idx1-ubyte", digits.target[:n_val])
    return vol


def start_master() -> tuple[subprocess.Popen[bytes], str]:
    # The agents' environment is their tasks' (--inherit-env), in a container
    # under the image's: a PYTHONPYCACHEPREFIX naming a folder of this host
    # would make every container compile TensorFlow's modules afresh (a job
    # took 115-137 s so, against 53 s).
    env = bench_env()
    env.pop("PYTHONPYCACHEPREFIX")
    return start_test_master(
        *("--agents", "2", "--cpus", "4", "--mem", "8192", "--inherit-env"),
        *("--ports", "41000-41999"),
        env=env,
    )


def job(url: str, vol: Path, image: str | None, *extra: str) -> float:
    argv = [*tfrun(), "-m", url]
    if image is not None:
        argv += ["--image", image, *extra, "-V", f"{vol}:{vol}:ro"]
    argv += ["-w", "2", "-s", "1", "--", "python3", str(vol / "mnist_replica.py")]
    argv += ["--ps_hosts={ps_hosts}", "--worker_hosts={worker_hosts}"]
    argv += ["--job_name={job_name}", "--task_index={task_index}", f"--data_dir={vol / 'data'}"]
    env = bench_env(PATH=f"{Path(PYTHON).parent}:/usr/local/bin:/usr/bin:/bin")
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - started
    if proc.returncode != 0 or "validation cross entropy" not in proc.stdout:
        raise RuntimeError(f"the job failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return wall


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], reps=3)
    if shutil.which("podman") is None:
        sys.exit("bench/images.py needs podman (apt-get install podman runc mmdebstrap)")
    result = Result("images", command_line("images.py", args), args.quick, {"reps": args.reps})
    with tempfile.TemporaryDirectory(prefix="tfmesos-bench-images-") as tmp:
        work = Path(tmp)
        if not args.quick:
            result.add("local Debian base (mmdebstrap, podman import)", "s", [local_base(work)])
            cold, image = build("--no-cache")
            result.add("image, every layer anew", "s", [cold])
            changed, name = build(root=changed_checkout(work))
            result.add("image after a change to tfmesos", "s", [changed])
            subprocess.run(["podman", "untag", name, name], check=False, capture_output=True)
        built = [build() for _ in range(max(args.reps, 1))]
        image = built[-1][1]
        result.add("image already built (reused by name)", "s", [b[0] for b in built])
        size = subprocess.run(
            ["podman", "image", "inspect", "--format", "{{.Size}}", image],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        result.note(f"{image}: {int(size) / 1e9:.2f} GB")
        vol = job_volume(work)
        master, url = start_master()
        try:
            runs = alternate(
                args.reps,
                {
                    "host": functools.partial(job, url, vol, None),
                    "image, Mesos containerizer": functools.partial(job, url, vol, image),
                    "image, Docker containerizer": functools.partial(
                        job, url, vol, image, "-C", "DOCKER"
                    ),
                },
                warmup=False,
            )
        finally:
            master.terminate()
            master.wait(timeout=60)
        for name, samples in runs.items():
            result.add(f"mnist replica job, ps:0 and worker:1 on the {name}", "s", samples)
        for name in ("image, Mesos containerizer", "image, Docker containerizer"):
            result.ratio(
                f"{name} / host",
                f"mnist replica job, ps:0 and worker:1 on the {name}",
                "mnist replica job, ps:0 and worker:1 on the host",
            )
    result.note(
        "podman --runtime runc, host network; every container run starts the image's "
        "Python and imports TensorFlow from the container's overlay filesystem"
    )
    result.note(
        "the test master runs without the benchmarks' PYTHONPYCACHEPREFIX: with the "
        "Mesos containerizer a task gets the agent's environment under the image's, and "
        "a bytecode cache folder of this host makes each container compile TensorFlow "
        "afresh (115-137 s a job, measured once)"
    )
    result.write(args.results_dir)


if __name__ == "__main__":
    main()
