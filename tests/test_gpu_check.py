"""scripts/gpu-check on a machine without GPUs: it must run the whole check and
fail it, for the right reasons, rather than pass or break.

``nvidia-smi`` is replaced by a script that answers the queries gpu-check and
tfmesos make as nvidia-smi does on a one-GPU host, so tfrun hands the worker
GPU 0; TensorFlow in the task then finds no GPU, which the check must catch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import ROOT, JobProcesses

FAKE_NVIDIA_SMI = """#!/bin/sh
case "$*" in
  "--query-gpu=index --format=csv,noheader") echo 0 ;;
  "--query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader")
    echo "0, NVIDIA H200, GPU-0d1c2b3a-0000-4000-8000-000000000000, 580.159.03, 143771 MiB" ;;
  "--id=0 --query-gpu=uuid --format=csv,noheader") echo GPU-0d1c2b3a-0000-4000-8000-000000000000 ;;
  *) echo "Invalid combination of input arguments: $*" >&2; exit 2 ;;
esac
"""


def failed_gpu_check(env: dict[str, str], out: Path) -> tuple[dict[str, Any], str]:
    """Run scripts/gpu-check, which must fail here: its summary and stdout."""
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    summary: dict[str, Any] = json.loads((out / "gpu-check.json").read_text())
    return summary, result.stdout


def test_gpu_check_fails_where_the_gpu_is_not_really_there(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI)
    smi.chmod(0o755)
    env = job_procs.env(
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        PYTHON=sys.executable,
        GPU_CHECK_OUT=str(tmp_path),
    )
    summary, said = failed_gpu_check(env, tmp_path)
    assert summary["ok"] is False
    assert summary["problems"] == [
        "worker:0 sees 0 GPUs (['GPU-0d1c2b3a-0000-4000-8000-000000000000'])",
        "worker:0 ran its matmul on /job:localhost/replica:0/task:0/device:CPU:0",
    ]
    by_task = {t["task"]: t for t in summary["tasks"]}
    assert by_task["worker:0"]["cuda_visible_devices"] == "0"
    assert by_task["ps:0"]["cuda_visible_devices"] == ""
    assert by_task["worker:0"]["relative_error"] < 1e-2  # the matmul itself ran right
    assert summary["over_ask"]["status"] == 2  # bad usage, before anything starts
    assert "gpu-check: FAILED" in said
    assert job_procs.wait_gone(5) == []


TWO_GPU_NVIDIA_SMI = """#!/bin/sh
case "$*" in
  "--query-gpu=index --format=csv,noheader") echo 0; echo 1 ;;
  "--query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader")
    echo "0, NVIDIA H200, GPU-0d1c2b3a-0000-4000-8000-000000000000, 580.159.03, 143771 MiB"
    echo "1, NVIDIA H200, GPU-0d1c2b3a-0000-4000-8000-000000000001, 580.159.03, 143771 MiB" ;;
  "--id=0 --query-gpu=uuid --format=csv,noheader") echo GPU-0d1c2b3a-0000-4000-8000-000000000000 ;;
  "--id=1 --query-gpu=uuid --format=csv,noheader") echo GPU-0d1c2b3a-0000-4000-8000-000000000001 ;;
  *) echo "Invalid combination of input arguments: $*" >&2; exit 2 ;;
esac
"""


def test_gpu_check_runs_one_process_per_gpu_in_one_task(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    """With two GPUs, the check's --nproc-per-task part runs: one task, two
    processes, each given both GPUs (as torchrun gives them) and an
    all_reduce; without real GPUs it fails for that reason alone."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(TWO_GPU_NVIDIA_SMI)
    smi.chmod(0o755)
    env = job_procs.env(
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        PYTHON=sys.executable,
        GPU_CHECK_OUT=str(tmp_path),
        GPU_CHECK_FRAMEWORK="torch",
    )
    summary, _ = failed_gpu_check(env, tmp_path)
    processes = summary["nproc_per_task"]["processes"]
    assert [p["local_rank"] for p in processes] == [0, 1]
    assert {p["cuda_visible_devices"] for p in processes} == {"0,1"}
    assert all(p["all_reduce_ok"] for p in processes)
    assert "local rank 0 sees 0 GPUs, not the task's 2" in summary["problems"]
    assert job_procs.wait_gone(5) == []
