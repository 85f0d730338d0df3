"""The examples, run for real through ``tfrun``: real TensorFlow processes
talking gRPC to each other, on the local backend (MNIST replica on every
backend)."""

from __future__ import annotations

import ast
import re
import sys

import numpy as np
import pytest

from tests.conftest import EVERY_BACKEND, ROOT, JobBackend, JobProcesses, run_tfrun
from tests.jobevents import JobEvents


def _number(pattern: str, text: str) -> float:
    match = re.search(pattern + r" = ([0-9.eE+-]+)", text)
    assert match, f"no '{pattern}' in:\n{text}"
    return float(match.group(1))


@pytest.mark.parametrize("job_backend", EVERY_BACKEND, indirect=True)
def test_mnist_replica_trains_with_ps_and_two_workers(
    job_backend: JobBackend, job_procs: JobProcesses, job_events: JobEvents
) -> None:
    result = run_tfrun(
        *job_backend.flags, *job_events.flag, "-w", "2", "-s", "1", "--worker-logs", "*", "--",
        sys.executable, "examples/mnist/mnist_replica.py", "--ps_hosts", "{ps_hosts}",
        "--worker_hosts", "{worker_hosts}", "--job_name", "{job_name}",
        "--task_index", "{task_index}",
        env=job_procs.env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    initial = _number(r"\[worker:0\] initial validation cross entropy", result.stdout)
    final = _number(r"\[worker:0\] validation cross entropy", result.stdout)
    assert final < initial / 4, (initial, final)
    # Both workers took part in training.
    assert "[worker:1]" in result.stdout
    worker_1 = job_events.exited()["worker:1"]
    assert (worker_1["exit_code"], worker_1["action"]) == (0, "finish"), worker_1
    # Quiet, as the README's first job should be: no TensorFlow start-up
    # lines from any task (issue 40, item 16: "WARNING: All log messages
    # before absl::InitializeLog() ...", "I0000 ... oneDNN custom operations").
    noise = [line for line in result.stdout.splitlines() + result.stderr.splitlines()
             if "absl::InitializeLog" in line or re.search(r"\] [IWE]\d{4} ", line)]  # fmt: skip
    assert noise == [], noise
    assert "task worker:1 finished" in result.stderr
    job_backend.assert_left_nothing(job_events, finished=True)
    assert job_procs.wait_gone(10) == []


def test_keras_multi_worker_trains_from_tf_config(job_procs: JobProcesses) -> None:
    result = run_tfrun(
        "-w",
        "2",
        "-s",
        "0",
        "--",
        sys.executable,
        "examples/keras_multi_worker.py",
        env=job_procs.env(),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    first = _number(r"\[worker:0\] first loss", result.stdout)
    final = _number(r"\[worker:0\] final loss", result.stdout)
    assert final < first / 2, (first, final)
    assert job_procs.wait_gone(5) == []


def test_the_examples_data_is_the_8x8_digits_and_needs_no_scikit_learn() -> None:
    # With scikit-learn installed, every `import tensorflow` imports it (Keras
    # does, for its wrappers): the examples ship the digits instead, and no
    # extra pulls scikit-learn in (docs/benchmarks.md, "The first run").
    table = np.loadtxt(ROOT / "examples" / "data" / "digits.csv.gz", delimiter=",")
    assert table.shape == (1797, 65)
    assert table[:, :-1].min() == 0 and table[:, :-1].max() == 16
    assert sorted(set(table[:, -1].astype(int))) == list(range(10))
    for path in (ROOT / "examples").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n.split(".")[0] == "sklearn" for n in names), path
    lines = (ROOT / "pyproject.toml").read_text().splitlines()
    assert "scikit-learn" not in "\n".join(line.split("#", 1)[0] for line in lines)
