"""``jax.distributed.initialize()`` with no arguments, as the JAX docs write
it, in a tfrun task: tfmesos's JAX cluster environment (tfmesos/agent/jaxcluster.py),
brought into every Python of a task by ``tfmesos-jax.pth`` and
tfmesos/agent/jaxhook.py, and into no other Python.

The end-to-end tests run their Pythons in an environment of their own whose
site-packages holds the checkout's ``tfmesos-jax.pth`` and names the test
environment's site-packages (as a path, whose ``.pth`` files Python does not
run): what ``pip install`` of tfmesos gives, wherever the tests run, whatever
tfmesos is installed there. The heavy test checks that ``pip install .`` and
``pip install -e .`` do install the file.
"""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sysconfig
import venv
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, JobProcesses, install_in_new_venv, run_tfrun
from tests.mesos_clusters import MesosUnderTest

PTH = ROOT / "tfmesos" / "tfmesos-jax.pth"

# The JAX docs' multi-process program: initialize() with no arguments, then a
# computation across the processes (every process's index, gathered by all).
PROGRAM = """\
import jax
import numpy as np
from jax.experimental import multihost_utils

jax.distributed.initialize()
index, count = jax.process_index(), jax.process_count()
everyone = multihost_utils.process_allgather(np.array([index]))
print(f"process {index} of {count}; gathered {everyone.reshape(-1).tolist()}", flush=True)
jax.distributed.shutdown()
"""

TFRUN_VARIABLES = {
    "TFMESOS_DISTRIBUTED": "1",
    "JAX_COORDINATOR_ADDRESS": "node7:4567",
    "JAX_NUM_PROCESSES": "6",
    "JAX_PROCESS_ID": "5",
}


def _needs_jax() -> None:
    pytest.importorskip("jax", reason="jax is a test extra: pip install -e '.[test]'")


# -- the cluster environment -------------------------------------------------


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Any:
    _needs_jax()
    from tfmesos.agent.jaxcluster import TFMesosCluster

    for name in [*TFRUN_VARIABLES, "LOCAL_RANK", "LOCAL_WORLD_SIZE"]:
        monkeypatch.delenv(name, raising=False)
    return TFMesosCluster


def test_present_only_with_every_variable_tfrun_sets(
    cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not cluster.is_env_present()
    for name, value in TFRUN_VARIABLES.items():
        monkeypatch.setenv(name, value)
    assert cluster.is_env_present()
    # JAX_* by hand, outside tfrun, are not a tfrun task.
    monkeypatch.delenv("TFMESOS_DISTRIBUTED")
    assert not cluster.is_env_present()


def test_the_values_are_tfruns(cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in TFRUN_VARIABLES.items():
        monkeypatch.setenv(name, value)
    assert cluster.get_process_count() == 6
    assert cluster.get_process_id() == 5
    assert cluster.get_coordinator_address(None, None) == "node7:4567"
    assert cluster.get_coordinator_address(None, "999") == "node7:999"  # JAX_COORDINATOR_PORT
    # One process per task: it keeps every GPU its task was given.
    assert cluster.get_local_process_id() is None
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert cluster.get_local_process_id() is None
    # Several: each the device of its local rank.
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert cluster.get_local_process_id() == 3


def test_jax_asks_it_before_its_own_detectors(
    cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jax._src import clusters

    # A tfrun task on the Slurm backend is a job step of one task.
    slurm_step = {
        "SLURM_JOB_ID": "42",
        "SLURM_STEP_NODELIST": "node1",
        "SLURM_NTASKS": "1",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
    }
    for name, value in {**slurm_step, **TFRUN_VARIABLES}.items():
        monkeypatch.setenv(name, value)
    assert clusters.SlurmCluster.is_env_present()
    assert clusters.ClusterEnv._cluster_types[0] is cluster
    found = clusters.ClusterEnv.auto_detect_unset_distributed_params(
        None, None, None, None, None, 300
    )
    assert found == ("node7:4567", 6, 5, None)
    assert cluster.name == "tfmesos"


# -- the .pth file and the hook ------------------------------------------------


def _site_packages(prefix: Path) -> Path:
    return Path(sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)}))


@pytest.fixture(scope="module")
def python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python whose site-packages is as ``pip install`` of tfmesos leaves
    it: ``tfmesos-jax.pth``, and (as paths) the test environment's packages."""
    prefix = tmp_path_factory.mktemp("jax-site") / "venv"
    venv.create(prefix, with_pip=False, symlinks=True)
    here = _site_packages(prefix)
    shutil.copy(PTH, here / PTH.name)
    # The checkout's tfmesos first, as the tests' own; a name that sorts
    # before tfmesos-jax.pth (Python runs them in that order), as site-packages
    # itself comes before its .pth files.
    (here / "00-the-tests-packages.pth").write_text(
        "".join(f"{path}\n" for path in [ROOT, *site.getsitepackages()])
    )
    return prefix / "bin" / "python"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TFRUN_VARIABLES}
    env.update(extra)
    return env


LOADED = (
    "import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in ('tfmesos', 'jax')))"
)


@pytest.mark.e2e
def test_a_python_outside_tfrun_imports_nothing_of_tfmesos(python: Path) -> None:
    result = subprocess.run(
        [str(python), "-c", LOADED], capture_output=True, text=True, env=_env(), check=True
    )
    assert result.stdout.strip() == "[]"
    assert result.stderr == ""


@pytest.mark.e2e
def test_a_python_in_a_task_imports_the_hook_and_jax_only_when_it_does(python: Path) -> None:
    result = subprocess.run(
        [str(python), "-c", LOADED],
        capture_output=True,
        text=True,
        env=_env(**TFRUN_VARIABLES),
        check=True,
    )
    # The package and the agent's, whose __init__ holds only a docstring.
    assert result.stdout.strip() == "['tfmesos', 'tfmesos.agent', 'tfmesos.agent.jaxhook']"
    assert result.stderr == ""


def _one_process(python: Path, **env: str) -> subprocess.CompletedProcess[str]:
    _needs_jax()
    program = (
        "import jax; jax.distributed.initialize(); "
        "print(jax.process_index(), jax.process_count()); jax.distributed.shutdown()"
    )
    return subprocess.run(
        [str(python), "-c", program], capture_output=True, text=True, env=_env(**env), timeout=120
    )


@pytest.mark.e2e
def test_without_tfrun_initialize_says_what_jax_says(python: Path) -> None:
    result = _one_process(python)
    assert result.returncode == 1
    assert "ValueError: coordinator_address should be defined." in result.stderr


@pytest.mark.e2e
def test_a_task_of_one_initializes_with_no_arguments(python: Path) -> None:
    from tfmesos.testing.real_mesos import free_port

    variables = {**TFRUN_VARIABLES, "JAX_NUM_PROCESSES": "1", "JAX_PROCESS_ID": "0"}
    variables["JAX_COORDINATOR_ADDRESS"] = f"127.0.0.1:{free_port()}"
    result = _one_process(python, **variables)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["0", "1"]


# -- whole jobs ---------------------------------------------------------------


def _check_job(result: subprocess.CompletedProcess[str], workers: int) -> None:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    found = dict(re.findall(r"^\[worker:(\d+)\] (process .*)$", result.stdout, re.M))
    everyone = list(range(workers))
    assert found == {
        str(i): f"process {i} of {workers}; gathered {everyone}" for i in range(workers)
    }, result.stdout[-3000:]


@pytest.fixture
def program(tmp_path: Path) -> str:
    path = tmp_path / "jax_docs.py"
    path.write_text(PROGRAM)
    return str(path)


def test_two_workers_locally(python: Path, program: str, job_procs: JobProcesses) -> None:
    _needs_jax()
    result = run_tfrun(
        *("-w", "2", "-s", "0", "--worker-logs", "*", "--", str(python), program),
        env=job_procs.env(**_env()),
    )
    _check_job(result, 2)
    assert job_procs.wait_gone(5) == []


def test_three_workers_on_mesos(
    python: Path, program: str, mesos: MesosUnderTest, job_procs: JobProcesses
) -> None:
    _needs_jax()
    result = run_tfrun(
        *("-m", mesos.url, "-w", "3", "-s", "0", "--worker-logs", "*", "--"),
        *(str(python), program),
        env=job_procs.env(**_env()),
        timeout=120,
    )
    _check_job(result, 3)
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


@pytest.mark.usefixtures("slurm")
def test_three_workers_on_slurm_where_jax_would_see_steps_of_one(
    python: Path, program: str, job_procs: JobProcesses
) -> None:
    _needs_jax()
    result = run_tfrun(
        *("--backend", "slurm", "-w", "3", "-s", "0", "--worker-logs", "*", "--"),
        *(str(python), program),
        env=job_procs.env(**_env()),
        timeout=120,  # without tfmesos's environment first, the job hangs
    )
    _check_job(result, 3)
    assert job_procs.wait_gone(15) == []


# -- the install ----------------------------------------------------------------


@pytest.mark.heavy
@pytest.mark.parametrize("editable", [False, True], ids=["wheel", "editable"])
def test_pip_install_puts_the_pth_file_in_site_packages(tmp_path: Path, editable: bool) -> None:
    """``pip install .`` (a wheel) and ``pip install -e .`` (CI's), in a fresh
    environment, from a copy of what an install is made of."""
    python, _ = install_in_new_venv(tmp_path, editable=editable)
    installed = _site_packages(tmp_path / "venv") / PTH.name
    assert installed.read_text() == PTH.read_text()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", *TFRUN_VARIABLES)}
    for variables, loaded in (
        ({}, "[]"),
        (TFRUN_VARIABLES, "['tfmesos', 'tfmesos.agent', 'tfmesos.agent.jaxhook']"),
    ):
        result = subprocess.run(
            [python, "-c", LOADED],
            capture_output=True,
            text=True,
            env={**env, **variables},
            cwd=tmp_path,  # not the checkout: the installed package
        )
        assert (result.stdout.strip(), result.stderr) == (loaded, "")
