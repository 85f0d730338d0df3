"""Benchmark 9: the task image, built.

Building the CPU image (``scripts/build-image cpu --base local``, podman with
runc) on this machine: the local Debian base (mmdebstrap, then ``podman
import``), every layer anew (``--no-cache``: TensorFlow from the pip index
this machine is configured with), after a change to tfmesos (a copy of the
checkout with one comment more: only the tfmesos layer is built again), and
an image already built (reused by its name).

It also timed an MNIST job in the image through the test master until its
image emulation went (issue 39, docs/test-master.md): a job in the image runs
on real Mesos (tests/test_real_mesos_images.py), not measured here.

Needs podman (and runc, mmdebstrap) and root. Not in ``run_all.py``: a cold
build takes minutes. ``--quick`` measures only the build of an image already
built.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import PYTHON, ROOT, Result, command_line, parse_args

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
    result.write(args.results_dir)


if __name__ == "__main__":
    main()
