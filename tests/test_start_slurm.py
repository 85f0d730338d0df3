"""``scripts/start-slurm --wait-for-node`` against Slurm's commands as they
answer for a node whose killed slurmd left a job completing (#27).

The commands are stand-ins on ``PATH`` (``sinfo``, ``squeue``, ``scontrol``):
the machine's own Slurm, which other tests use, is left alone. The job's
``slurmstepd`` is a real process of that name, so the script's look for one
is the real one.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, wait_until

pytestmark = pytest.mark.e2e  # every test here starts processes

JOB = "4242"

_SINFO = """#!/bin/sh
case "$*" in
  *-N*) cat "$FAKE/state" ;;
  *) echo "debug 1 $(cat "$FAKE/state") 8 CPUs 1000 MiB" ;;
esac
"""
_SQUEUE = """#!/bin/sh
echo "$*" >>"$FAKE/squeue-calls"
case "$*" in
  *"-t CG"*) cat "$FAKE/completing" ;;
esac
"""
_SCONTROL = """#!/bin/sh
echo "$*" >>"$FAKE/scontrol-calls"
case "$*" in
  *State=DOWN*) echo down >"$FAKE/state" ;;
  *State=RESUME*) if [ "$(cat "$FAKE/state")" = down ]; then echo idle >"$FAKE/state"; : >"$FAKE/completing"; fi ;;
esac
"""


def _fake_slurm(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("sinfo", _SINFO), ("squeue", _SQUEUE), ("scontrol", _SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "state").write_text("completing\n")
    (tmp_path / "completing").write_text(f"{JOB}\n")
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE": str(tmp_path)}


def test_a_job_a_killed_slurmd_left_completing_is_cleared_once_its_processes_are_gone(
    tmp_path: Path,
) -> None:
    env = _fake_slurm(tmp_path)
    # The job's step, still running: the script must wait for it.
    # Each reaped, and the script's pipes closed, at the end of its block.
    with (
        subprocess.Popen(["bash", "-c", f'exec -a "slurmstepd: [{JOB}.batch]" sleep 60']) as stepd,
        subprocess.Popen(
            [str(ROOT / "scripts" / "start-slurm"), "--wait-for-node"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as script,
    ):
        try:
            calls = tmp_path / "squeue-calls"
            # It has looked at the completing job twice, and left it alone.
            wait_until(
                lambda: calls.exists() and calls.read_text().count("-t CG") >= 2,
                "the script looked at the completing job twice",
                30,
            )
            assert not (tmp_path / "scontrol-calls").exists()
            assert script.poll() is None
            stepd.kill()
            stepd.wait()
            out, err = script.communicate(timeout=30)
        finally:
            stepd.kill()
            script.kill()
    assert script.returncode == 0, err
    assert f"clearing job {JOB}, left completing on " in err
    assert (tmp_path / "scontrol-calls").read_text().splitlines() == [
        f"update NodeName={os.uname().nodename.split('.')[0]} State=DOWN "
        "Reason=start-slurm: jobs left completing",
        f"update NodeName={os.uname().nodename.split('.')[0]} State=RESUME",
    ]
    assert out.startswith("Slurm is up: debug 1 idle")
