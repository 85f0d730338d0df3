"""Run by scripts/gpu-check inside each task: which GPUs does this task see,
and does its framework run a matmul on one? Prints one JSON line.

The framework is ``GPU_CHECK_FRAMEWORK`` (tensorflow, torch or jax), chosen by
scripts/gpu-check. tfmesos's GPU allocation is the same for all three (it sets
``CUDA_VISIBLE_DEVICES``); TensorFlow is the one tfmesos is for, the others
serve on machines where no GPU build of TensorFlow can be installed.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def tensorflow_probe() -> dict[str, Any]:
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    with tf.device("/GPU:0" if gpus else "/CPU:0"):
        a = tf.random.uniform((1024, 1024))
        product = tf.matmul(a, a)
    with tf.device("/CPU:0"):
        expected = tf.matmul(a, a)
    error = float(tf.reduce_max(tf.abs(product - expected)) / tf.reduce_max(tf.abs(expected)))
    return {
        "framework": f"tensorflow {tf.__version__}",
        "gpus_seen": len(gpus),
        "op_device": product.device,
        "on_gpu": "GPU:0" in product.device,
        "relative_error": error,
    }


def torch_probe() -> dict[str, Any]:
    import torch

    count = torch.cuda.device_count()
    device = torch.device("cuda:0" if count else "cpu")
    a = torch.rand(1024, 1024)
    product = a.to(device) @ a.to(device)
    expected = a.double() @ a.double()
    error = float((product.cpu().double() - expected).abs().max() / expected.abs().max())
    return {
        "framework": f"torch {torch.__version__}",
        "gpus_seen": count,
        "op_device": f"{product.device} ({torch.cuda.get_device_name(0)})" if count else "cpu",
        "on_gpu": product.device.type == "cuda",
        "relative_error": error,
    }


def jax_probe() -> dict[str, Any]:
    import jax
    import numpy as np

    gpus = [d for d in jax.devices() if d.platform == "gpu"]  # the default backend first
    a = jax.random.uniform(jax.random.PRNGKey(0), (1024, 1024))
    product = a @ a
    device = next(iter(product.devices()))
    reference = np.asarray(a, dtype=np.float64)
    expected = reference @ reference
    error = float(np.abs(np.asarray(product, dtype=np.float64) - expected).max() / expected.max())
    return {
        "framework": f"jax {jax.__version__}",
        "gpus_seen": len(gpus),
        "op_device": str(device),
        "on_gpu": device.platform == "gpu",
        "relative_error": error,
    }


PROBES = {"tensorflow": tensorflow_probe, "torch": torch_probe, "jax": jax_probe}


def uuids_of(visible: str) -> list[str]:
    if not visible:
        return []
    out = subprocess.run(
        ["nvidia-smi", f"--id={visible}", "--query-gpu=uuid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def main() -> None:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    report: dict[str, Any] = {
        "task": f"{os.environ['TFMESOS_JOB_NAME']}:{os.environ['TFMESOS_TASK_INDEX']}",
        "cuda_visible_devices": visible,
        "uuids": uuids_of(visible or ""),
    }
    report.update(PROBES[os.environ.get("GPU_CHECK_FRAMEWORK", "tensorflow")]())
    print("GPU-PROBE " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
