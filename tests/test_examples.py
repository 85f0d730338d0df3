"""The examples, run for real through ``tfrun`` on the local backend: real
TensorFlow processes talking gRPC to each other."""

from __future__ import annotations

import ast
import re
import sys

import numpy as np

from tests.conftest import ROOT, JobProcesses, run_tfrun


def _number(pattern: str, text: str) -> float:
    match = re.search(pattern + r" = ([0-9.eE+-]+)", text)
    assert match, f"no '{pattern}' in:\n{text}"
    return float(match.group(1))


def test_mnist_replica_trains_with_ps_and_two_workers(job_procs: JobProcesses) -> None:
    result = run_tfrun(
        "-w",
        "2",
        "-s",
        "1",
        "--worker-logs",
        "*",
        "--",
        sys.executable,
        "examples/mnist/mnist_replica.py",
        "--ps_hosts",
        "{ps_hosts}",
        "--worker_hosts",
        "{worker_hosts}",
        "--job_name",
        "{job_name}",
        "--task_index",
        "{task_index}",
        env=job_procs.env(),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    initial = _number(r"\[worker:0\] initial validation cross entropy", result.stdout)
    final = _number(r"\[worker:0\] validation cross entropy", result.stdout)
    assert final < initial / 4, (initial, final)
    # Both workers took part in training.
    assert "[worker:1]" in result.stdout
    # Quiet, as the README's first job should be: no TensorFlow start-up
    # lines from any task (issue 40, item 16: "WARNING: All log messages
    # before absl::InitializeLog() ...", "I0000 ... oneDNN custom operations").
    noise = [line for line in result.stdout.splitlines() + result.stderr.splitlines()
             if "absl::InitializeLog" in line or re.search(r"\] [IWE]\d{4} ", line)]  # fmt: skip
    assert noise == [], noise
    assert "task worker:1 finished" in result.stderr
    assert job_procs.wait_gone(5) == []


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
