"""Fine-grained (in-graph) mode, run for real on the local backend (``plus``
on every backend): the examples drive plain TensorFlow gRPC servers that
``tfmesos.cluster`` starts, and every server is gone once the ``with`` block
is left."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from tests.conftest import EVERY_BACKEND, ROOT, JobBackend, JobProcesses
from tfmesos import SpecError, cluster
from tfmesos.finegrained.tfcontext import _all_ours, forget_servers


def run_python(*args: str, procs: JobProcesses, tmp: Path) -> subprocess.CompletedProcess[str]:
    # TMPDIR: the local backend keeps each task's log in a fresh temporary
    # directory; keep those out of the real /tmp.
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=procs.env(TMPDIR=str(tmp)),
        timeout=300,
        cwd=ROOT,
    )


def run_example(path: str, procs: JobProcesses, tmp: Path, *args: str) -> str:
    result = run_python(path, *args, procs=procs, tmp=tmp)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert procs.wait_gone(5) == []
    return result.stdout


def number(name: str, text: str) -> float:
    match = re.search(rf"^{name} = ([0-9.eE+-]+)$", text, re.MULTILINE)
    assert match, f"no '{name} = ' line in:\n{text}"
    return float(match.group(1))


@pytest.mark.parametrize("job_backend", EVERY_BACKEND, indirect=True)
def test_plus_adds_across_the_cluster(
    job_backend: JobBackend, job_procs: JobProcesses, tmp_path: Path
) -> None:
    stdout = run_example("examples/plus.py", job_procs, tmp_path, *job_backend.cluster_flags)
    assert stdout.splitlines() == ["42"]
    job_backend.assert_left_nothing()


def test_mnist_trains_in_graph_on_two_workers(job_procs: JobProcesses, tmp_path: Path) -> None:
    stdout = run_example("examples/mnist/mnist.py", job_procs, tmp_path, "--steps", "300")
    assert number("accuracy", stdout) > 0.5
    # Both worker threads took training steps.
    match = re.search(r"steps per worker: \[(\d+), (\d+)\]", stdout)
    assert match and min(int(n) for n in match.groups()) > 0, stdout


def test_matrix_factorization_lowers_the_loss(job_procs: JobProcesses, tmp_path: Path) -> None:
    stdout = run_example(
        "examples/matrix_factorization.py", job_procs, tmp_path, "--iterations", "20"
    )
    first, final = number("first loss", stdout), number("final loss", stdout)
    assert final < first / 2, (first, final)


def test_ps_strategy_trains_with_the_program_as_coordinator(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    stdout = run_example("examples/ps_strategy.py", job_procs, tmp_path, "--epochs", "3")
    first, final = number("first loss", stdout), number("final loss", stdout)
    assert final < first, (first, final)


# TF's ParameterServerStrategy with the servers of a cluster() block, as the
# TF docs write it: the model and its tf.functions live until the program
# ends, after the block stopped the servers.
PS_PROGRAM = """
import tensorflow as tf
from tfmesos import cluster

with cluster([{"name": "ps", "num": 2}, {"name": "worker", "num": 2}], quiet=True) as c:
    strategy = tf.distribute.experimental.ParameterServerStrategy(c.cluster_resolver())
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        weights = [tf.Variable(float(i)) for i in range(4)]

    def make_step(k):
        @tf.function
        def step():
            for w in weights:
                w.assign_add(1.0)
            return weights[0].read_value() + k

        return step

    steps = [make_step(k) for k in range(20)]
    results = [coordinator.schedule(step) for step in steps]
    coordinator.join()
    print("steps", len([r.fetch() for r in results]), flush=True)
print("after the block", flush=True)
"""


def test_a_ps_strategy_program_exits_without_remote_function_noise(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    # TF's C++ errors shown (TF_CPP_MIN_LOG_LEVEL 2 hides INFO and WARNING only).
    result = subprocess.run(
        [sys.executable, "-c", PS_PROGRAM],
        capture_output=True,
        text=True,
        env=job_procs.env(TMPDIR=str(tmp_path), TF_CPP_MIN_LOG_LEVEL="2"),
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.splitlines() == ["steps 20", "after the block"], result.stdout
    assert "Failed to remove function remotely" not in result.stderr, result.stderr[-3000:]
    assert "Connection refused" not in result.stderr, result.stderr[-3000:]
    assert job_procs.wait_gone(5) == []


def test_only_the_blocks_servers_are_taken_out_of_tensorflows_context() -> None:
    job = SimpleNamespace
    ours = {"h:1", "h:2", "h:3"}
    server_def = SimpleNamespace(job_name="chief")
    assert _all_ours(job(name="ps", tasks={0: "h:1", 1: "h:2"}), ours, server_def)
    # The program's own job, a job elsewhere or partly elsewhere, an empty one: kept.
    assert not _all_ours(job(name="chief", tasks={0: "h:3"}), ours, server_def)
    assert not _all_ours(job(name="worker", tasks={0: "h:3", 1: "x:1"}), ours, server_def)
    assert not _all_ours(job(name="evaluator", tasks={}), ours, server_def)


def test_without_tensorflow_imported_nothing_is_done(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    assert forget_servers({"ps": ["h:1"]}) is False
    assert "tensorflow" not in sys.modules


def test_an_exception_in_the_block_propagates_and_stops_the_servers(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    script = textwrap.dedent(
        """
        import psutil
        from tfmesos import cluster

        with cluster([{"name": "ps", "num": 1}, {"name": "worker", "num": 1}], quiet=True) as c:
            print(sorted(c.targets), len(psutil.Process().children(recursive=True)), flush=True)
            raise RuntimeError("boom in the block")
        """
    )
    result = run_python("-c", script, procs=job_procs, tmp=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    # The servers were up when the block raised.
    targets, running = result.stdout.rsplit(maxsplit=1)
    assert targets == "['/job:ps/task:0', '/job:worker/task:0']", result.stdout
    assert int(running) >= 2, result.stdout
    assert result.stderr.rstrip().endswith("RuntimeError: boom in the block"), result.stderr
    assert job_procs.wait_gone(5) == []


def test_a_bad_job_raises_spec_error_before_anything_starts() -> None:
    with (
        pytest.raises(SpecError, match="num"),
        cluster([{"name": "ps", "num": 1}, {"name": "w", "num": -1}]),
    ):
        pytest.fail("the block ran")
    assert psutil.Process().children(recursive=True) == []
    assert not any(t.name == "tfmesos-launcher" for t in threading.enumerate())


def test_a_server_that_dies_before_it_serves_is_a_start_error(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    program = textwrap.dedent(
        """
        import tfmesos
        try:
            with tfmesos.cluster(
                [{"name": "ps", "num": 1}, {"name": "worker", "num": 1}],
                extra_config={"initializer": "echo preparing; exit 3"},
            ) as c:
                print("the block ran")
        except tfmesos.ClusterStartError as exc:
            print("ClusterStartError:", exc)
        """
    )
    result = run_python("-c", program, procs=job_procs, tmp=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the block ran" not in result.stdout
    assert "ClusterStartError: task " in result.stdout
    assert "its TensorFlow server died before it accepted connections" in result.stdout
    assert job_procs.wait_gone(5) == []
