"""What tfrun and its helpers say, word for word where users read it (#27)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, JobProcesses, run_tfrun


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
    master = subprocess.Popen(
        [sys.executable, "-m", "tfmesos.testing.master", "--port", "0", "--agents", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=job_procs.env(),
    )
    try:
        assert master.stdout is not None
        said = []
        # Its own line, with the agents and the work directory, comes after
        # everything the master logs while it starts.
        for line in master.stdout:
            said.append(line)
            if "work dir" in line:
                break
        assert [line for line in said if "listening on" in line] == [said[-1]], said
    finally:
        master.terminate()
        master.wait(30)
