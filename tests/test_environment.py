"""The job's environment (``-e``, ``cluster(env=...)``) and initializer:
what no process can hold is refused in one line before anything starts, and
the launcher's own variables cannot be overwritten."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, JobProcesses, one_error_line, run_tfrun

PY = sys.executable


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"X": "a\0b"}, r"environment variable 'X': its value holds a NUL byte"),
        ({"X\0Y": "1"}, r"environment variable 'X\\x00Y': its name holds a NUL byte"),
        ({"A=B": "1"}, r"environment variable name 'A=B' is not one an environment can hold"),
        ({"": "1"}, r"environment variable name '' is not one an environment can hold"),
        ({"X": "\ud800"}, r"environment variable 'X': its value holds '\\ud800'"),
        ({"A-B": "1"}, r"environment variable name 'A-B' is not one /bin/sh passes on"),
        ({"1X": "1"}, r"environment variable name '1X' is not one /bin/sh passes on"),
        ({"\u00c4": "1"}, r"environment variable name '\u00c4' is not one /bin/sh passes on"),
        (
            {"BIG": "a" * 200_000},
            r"environment variable BIG is 200004 bytes as NAME=VALUE; one "
            r"variable can be at most 131071 bytes",
        ),
    ],
    ids=[
        "nul-in-value",
        "nul-in-name",
        "equals-in-name",
        "empty-name",
        "lone-surrogate",
        "dash-in-name",
        "digit-first",
        "not-ascii",
        "over-max-arg-strlen",
    ],
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


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({"initializer": "echo a\0b"}, r"the initializer holds a NUL byte \(\\0\)"),
        ({"finalizer": "echo a\0b"}, r"the finalizer holds a NUL byte \(\\0\)"),
        ({"initializer": "echo \ud800"}, r"the initializer holds '\\ud800', .* \(not UTF-8\)"),
    ],
)
def test_an_initializer_no_process_can_run_is_one_line_and_exit_2(
    job_procs: JobProcesses, tmp_path: Path, config: dict[str, str], said: str
) -> None:
    # Before: a traceback in each task (ValueError: embedded null byte) and
    # exit 1, or tfrun's own traceback (UnicodeEncodeError) for the surrogate.
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps(config))
    result = run_tfrun(
        "-w", "2", "-e", str(extra), "--", "true", env=job_procs.env(), timeout=60
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert re.search(said, one_error_line(result.stderr)), result.stderr
    assert job_procs.alive() == []


def test_cluster_initializer_with_a_nul_byte_raises_before_anything_starts(
    job_procs: JobProcesses,
) -> None:
    code = (
        "import tfmesos\n"
        "try:\n"
        "    with tfmesos.cluster({'name': 'worker', 'num': 1}, master=None,\n"
        "                         extra_config={'initializer': 'a\\0b'}):\n"
        "        print('started')\n"
        "except tfmesos.SpecError as exc:\n"
        "    print('SpecError:', exc)\n"
    )
    result = subprocess.run(
        [PY, "-c", code], capture_output=True, text=True, timeout=60, env=job_procs.env(), cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("SpecError: the initializer holds a NUL byte"), result.stdout
    assert "started" not in result.stdout
    assert job_procs.alive() == []


# -- 10: the launcher's own variables ----------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "TFMESOS_TASK_ID",
        "TFMESOS_RESTART",
        "TFMESOS_SECRET_FD",
        "TF_CONFIG",
        "RANK",
        "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES",
    ],
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
