"""What tfrun and its helpers say, word for word where users read it (#27)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, JobProcesses, guide_section, run_tfrun


def test_cluster_up_counts_tasks_in_words(job_procs: JobProcesses) -> None:
    for args, said in (
        (["-w", "2", "-s", "1"], "cluster up: 1 ps, 2 workers"),
        (["-w", "1", "-s", "2"], "cluster up: 2 ps, 1 worker"),
        (["-w", "3"], "cluster up: 3 workers"),
    ):
        result = run_tfrun(*args, "--", "true", env=job_procs.env())
        assert result.returncode == 0, result.stderr
        (line,) = [line for line in result.stderr.splitlines() if "cluster up" in line]
        assert line == f"[tfrun] {said}"


def test_the_test_master_says_once_that_it_listens(job_procs: JobProcesses) -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "tfmesos.testing.master", "--port", "0", "--agents", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=job_procs.env(),
    ) as master:  # its pipe closed and the master reaped at the end
        try:
            assert master.stdout is not None
            said = []
            # Its own line, with the agents and the work directory, comes after
            # everything the master logs while it starts.
            for line in master.stdout:
                said.append(line)
                if "work dir" in line:
                    break
        finally:
            master.terminate()
            try:
                master.wait(30)
            except subprocess.TimeoutExpired:
                master.kill()
    assert [line for line in said if "listening on" in line] == [said[-1]], said


_NO_REGISTRY = (
    "Error: initializing source docker://python:3.11-slim-bookworm: pinging container "
    'registry registry-1.docker.io: Get "https://registry-1.docker.io/v2/": dial tcp: '
    "lookup registry-1.docker.io: no such host"
)


@pytest.mark.e2e
def test_a_build_without_a_registry_names_base_local(tmp_path: Path) -> None:
    # podman as it answers on a machine that reaches no registry: it has no
    # image, and pulling one (or building on one) fails to resolve the host.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    podman = bin_dir / "podman"
    podman.write_text(
        "#!/bin/sh\n"
        'for word in "$@"; do case "$word" in\n'
        "  inspect) exit 1 ;;\n"
        "  tag) exit 0 ;;\n"
        f"  pull|build) echo '{_NO_REGISTRY}' >&2; exit 125 ;;\n"
        "esac; done\n"
        "exit 0\n"
    )
    podman.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("TFMESOS_IMAGE_BASE", None)
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build-image"), "cpu", "--engine", "podman"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode != 0
    assert result.stdout == ""
    last = result.stderr.strip().splitlines()[-1]
    assert "no such host" in last and "--base local" in last, result.stderr


_WHO = """
import os

def proc(pid):
    comm = open(f"/proc/{pid}/comm").read().strip()
    args = open(f"/proc/{pid}/cmdline").read().replace("\\0", " ")
    parent = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    return comm, args, parent

agent, args, forks = proc(os.getppid())
print("agent", agent, "|", args)
print("parent", proc(forks)[0])
"""


def test_agents_are_named_as_the_readme_says(job_procs: JobProcesses, tmp_path: Path) -> None:
    who = tmp_path / "who.py"
    who.write_text(_WHO)
    # A plain task is run by tfrun itself: its parent is tfrun.
    result = run_tfrun("-w", "1", "--", sys.executable, str(who), env=job_procs.env())
    assert result.returncode == 0, result.stderr
    agent = result.stdout.splitlines()[0]
    assert " -m tfmesos.cli -w 1 -- " in agent, agent
    # With agents (TFMESOS_LOCAL_AGENTS, and for any task that needs one),
    # ps -o comm, top and pgrep show their names; ps -ef the fork server's line.
    result = run_tfrun(
        "-w", "1", "--", sys.executable, str(who), env=job_procs.env(TFMESOS_LOCAL_AGENTS="1")
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    agent, parent = result.stdout.splitlines()
    assert agent.startswith("[worker:0] agent tfmesos-agent | "), agent
    assert " -S -c " in agent and "from tfmesos.agent.forkserver import main" in agent
    assert parent == "[worker:0] parent tfmesos-forks"
    result = run_tfrun(
        "-w", "1", "--", sys.executable, str(who),
        env=job_procs.env(TFMESOS_NO_FORK_SERVER="1"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    agent = result.stdout.splitlines()[0]
    assert "tfmesos-agent" not in agent and "from tfmesos.agent.main import main" in agent, agent


def test_sizes_are_said_in_one_way() -> None:
    from tfmesos.common.resources import format_mib

    assert [format_mib(m) for m in (512, 1024, 1536, 8191, 8192, 1e8, 1e9)] == [
        "512 MiB",
        "1 GiB",
        "1.5 GiB",
        "7.999 GiB",
        "8 GiB",
        "95.4 TiB",
        "954 TiB",
    ]


def test_a_mesos_job_too_big_says_its_sizes_as_the_local_check_does(
    master: Any, job_procs: JobProcesses
) -> None:
    result = run_tfrun(
        "-m", master.url, "-w", "2", "-Mw", "1000000000", "--", "true",
        env=job_procs.env(),
    )  # fmt: skip
    # No agent could ever hold worker:1: refused at once (tests/test_mesos_never_fits.py).
    assert result.returncode == 2, result.stderr
    # The chief, beside tfrun, is warned about in the local check's words,
    # without telling a Mesos job to run on Mesos.
    (warning,) = [line for line in result.stderr.splitlines() if "running it anyway" in line]
    assert "asks for 954 TiB of memory, and this machine has " in warning, warning
    assert "Mesos cluster (-m)" not in warning and "run tfrun on a machine with more" in warning
    # What the remote worker needs, in the same units.
    assert "worker:1 needs cpus 1, mem 954 TiB, 1 port" in result.stderr, result.stderr
    assert "e+" not in result.stderr
    assert job_procs.wait_gone(10) == []


def _readme_row(variable: str) -> str:
    table = guide_section("docs/pytorch-jax.md", "PyTorch jobs")
    (row,) = [line for line in table.splitlines() if line.startswith(f"| `{variable}`")]
    return row


_ELASTIC = """
import os, sys
env = os.environ
if env["TFMESOS_RESTART"] == "0":  # the first run fails, saying nothing
    sys.exit(3 if env["RANK"] == "1" else 0)
print(env["TORCHELASTIC_RESTART_COUNT"], env["TORCHELASTIC_MAX_RESTARTS"],
      repr(env.get("CUDA_VISIBLE_DEVICES")))
"""


def test_the_readmes_pytorch_table_says_what_a_restarted_task_gets(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    script = tmp_path / "elastic.py"
    script.write_text(_ELASTIC)
    result = run_tfrun(
        "-w", "2", "--max-restarts", "2", "--worker-logs", "*", "--", sys.executable, str(script),
        env=job_procs.env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # The second run, after one restart, of at most two; no GPU asked, none seen.
    assert sorted(result.stdout.splitlines()) == ["[worker:0] 1 2 ''", "[worker:1] 1 2 ''"]
    row = _readme_row("TORCHELASTIC_RESTART_COUNT")
    assert "--max-restarts" in row and "TFMESOS_RESTART" in row and "0 and 0" not in row, row
    row = _readme_row("CUDA_VISIBLE_DEVICES")
    assert '`""`' in row and "torchrun leaves it" in row, row
