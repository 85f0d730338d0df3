"""Run by scripts/gpu-check inside each worker: which GPUs does this task see,
and does TensorFlow place its ops on them? Prints one JSON line."""

from __future__ import annotations

import json
import os
import subprocess

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

gpus = tf.config.list_physical_devices("GPU")
with tf.device("/GPU:0" if gpus else "/CPU:0"):
    a = tf.random.uniform((1024, 1024))
    product = tf.matmul(a, a)
uuids = []
visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
if visible:
    out = subprocess.run(
        ["nvidia-smi", f"--id={visible}", "--query-gpu=uuid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    uuids = [line.strip() for line in out.splitlines() if line.strip()]
print(
    "GPU-PROBE "
    + json.dumps(
        {
            "task": f"{os.environ['TFMESOS_JOB_NAME']}:{os.environ['TFMESOS_TASK_INDEX']}",
            "cuda_visible_devices": visible,
            "tf_gpus": len(gpus),
            "uuids": uuids,
            "op_device": product.device,
        }
    ),
    flush=True,
)
