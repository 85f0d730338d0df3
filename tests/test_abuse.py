"""Promises kept under abuse (issue 27, points 6-10): a full log disk, a job
no Slurm node can hold, environments no process can have or that would
overwrite the launcher's own variables, a ``%`` in a Slurm ``--log-dir``.

Every test runs real tfrun processes (and real Slurm where it says so).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, JobProcesses, run_tfrun

PY = sys.executable


def one_error_line(stderr: str) -> str:
    """tfrun's one ``tfrun: error:`` line, the only line it printed."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("tfrun: error: "), stderr
    return lines[0]


# -- 8: what no environment can hold --------------------------------------------


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"X": "a\0b"}, r"environment variable 'X': its value holds a NUL byte"),
        ({"X\0Y": "1"}, r"environment variable 'X\\x00Y': its name holds a NUL byte"),
        ({"A=B": "1"}, r"environment variable name 'A=B' is not one an environment can hold"),
        ({"": "1"}, r"environment variable name '' is not one an environment can hold"),
        ({"X": "\ud800"}, r"environment variable 'X': its value holds '\\ud800'"),
    ],
    ids=["nul-in-value", "nul-in-name", "equals-in-name", "empty-name", "lone-surrogate"],
)
def test_an_environment_no_process_can_hold_is_one_line_and_exit_2(
    job_procs: JobProcesses, tmp_path: Path, env: dict[str, str], said: str
) -> None:
    # argv cannot carry a NUL: -e's JSON file can ("\u0000").
    config = tmp_path / "extra.json"
    config.write_text(json.dumps({"env": env}))
    started = time.monotonic()
    result = run_tfrun(
        "-w", "2", "-s", "0", "-e", str(config), "--", "true", env=job_procs.env(), timeout=60
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert re.search(said, one_error_line(result.stderr)), result.stderr
    assert time.monotonic() - started < 30
    assert job_procs.alive() == []


def test_cluster_env_with_a_nul_byte_raises_before_anything_starts(job_procs: JobProcesses) -> None:
    code = (
        "import tfmesos\n"
        "try:\n"
        "    with tfmesos.cluster({'name': 'worker', 'num': 1}, master=None, env={'X': 'a\\0b'}):\n"
        "        print('started')\n"
        "except tfmesos.SpecError as exc:\n"
        "    print('SpecError:', exc)\n"
    )
    result = subprocess.run(
        [PY, "-c", code], capture_output=True, text=True, timeout=60, env=job_procs.env(), cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("SpecError: environment variable 'X': its value holds a NUL")
    assert "started" not in result.stdout
    assert job_procs.alive() == []


# -- 10: the launcher's own variables ----------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["TFMESOS_TASK_ID", "TFMESOS_RESTART", "TFMESOS_SECRET_FD", "TF_CONFIG", "RANK", "MASTER_PORT"],
)
def test_the_launchers_own_variables_cannot_be_set_in_the_jobs_environment(
    job_procs: JobProcesses, tmp_path: Path, name: str
) -> None:
    config = tmp_path / "extra.json"
    config.write_text(json.dumps({"env": {name: "1"}}))
    marker = tmp_path / "ran"
    result = run_tfrun(
        "-w", "2", "-s", "0", "-e", str(config), "--", "touch", str(marker),
        env=job_procs.env(), timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    line = one_error_line(result.stderr)
    assert f"environment variable {name} is set by tfmesos for each task" in line
    assert not marker.exists()
    assert job_procs.alive() == []


def test_a_default_the_user_may_set_still_reaches_every_task(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    config = tmp_path / "extra.json"
    config.write_text(json.dumps({"env": {"OMP_NUM_THREADS": "7", "MY_SETTING": "x y"}}))
    code = "import os; print('got', os.environ['OMP_NUM_THREADS'], os.environ['MY_SETTING'])"
    result = run_tfrun(
        "-w", "2", "-s", "0", "--worker-logs", "*", "-e", str(config), "--", PY, "-c", code,
        env=job_procs.env(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("got 7 x y") == 2, result.stdout
