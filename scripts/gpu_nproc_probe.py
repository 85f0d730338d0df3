"""Run by scripts/gpu-check in each process of one task of several
(``tfrun --nproc-per-task N -Gw N``): which GPUs the process sees, which one
it takes by its ``LOCAL_RANK`` (``torch.cuda.set_device``, as a script
written for torchrun does), and whether an all_reduce across the task's
processes (NCCL on GPUs, gloo without) gives the exact sum. Prints one JSON
line.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
import torch.distributed as dist


def main() -> None:
    local = int(os.environ["LOCAL_RANK"])
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    count = torch.cuda.device_count()
    report: dict[str, Any] = {
        "task": f"{os.environ['TFMESOS_JOB_NAME']}:{os.environ['TFMESOS_TASK_INDEX']}",
        "local_rank": local,
        "rank": rank,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "gpus_seen": count,
        "uuid": None,
    }
    device = torch.device("cpu")
    if count:
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        properties = torch.cuda.get_device_properties(local)
        report["uuid"] = str(getattr(properties, "uuid", "")) or None
        report["device_name"] = properties.name
    backend = "nccl" if count else "gloo"
    dist.init_process_group(backend)
    values = torch.full((4,), float(rank + 1), device=device)
    dist.all_reduce(values)
    report["backend"] = backend
    report["all_reduce"] = values.cpu().tolist()
    report["all_reduce_ok"] = report["all_reduce"] == [world * (world + 1) / 2] * 4
    dist.destroy_process_group()
    print("GPU-NPROC " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
