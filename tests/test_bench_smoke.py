"""The benchmarks still run: ``bench/run_all.py --smoke`` exits 0 and writes its results.

``--smoke`` runs each benchmark once at its smallest sizes: its imports, its
arguments, every contender's code path and its results' shape, not a
measurement. No timing is checked here; docs/benchmarks.md holds the figures. Where an
optional tool is missing (torch for the torchrun column, matplotlib for the
plot) the benchmark must say so in its results rather than leave a silent gap.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e  # every test here starts processes


def _benchmarks() -> tuple[tuple[str, ...], tuple[str, ...]]:
    spec = importlib.util.spec_from_file_location("run_all", ROOT / "bench" / "run_all.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.BENCHMARKS), tuple(module.SLOW)


ALL, SLOW = _benchmarks()
BENCHMARKS = tuple(name for name in ALL if name not in SLOW)
"""What the smoke test runs; the slow ones have a heavy test each."""


def test_run_all_smoke_writes_every_result(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "run_all.py"),
            "--smoke",
            "--results-dir",
            str(tmp_path),
            "--only",
            *BENCHMARKS,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=540,  # a hang guard, under the suite's 600 s
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    for name in BENCHMARKS:
        data = json.loads((tmp_path / f"{name}.json").read_text())
        assert data["benchmark"] == name
        assert data["quick"] is True
        if name == "torch_ddp" and any(n.startswith("skipped: ") for n in data["notes"]):
            # No torch here: the reason is on record, and nothing was measured.
            assert importlib.util.find_spec("torch") is None, data["notes"]
            assert all("skipped" in t["value"] for t in data["targets"])
            continue
        assert data["rows"], name
        assert all(t["met"] is None for t in data["targets"]), "a quick run judges no target"
        assert all(row["samples"] for row in data["rows"]), name
        assert (tmp_path / f"{name}.md").read_text().startswith(f"### {name}")

    trivial = json.loads((tmp_path / "bringup_trivial.json").read_text())
    torchrun = [t for t in trivial["targets"] if "torchrun" in t["name"]]
    assert len(torchrun) == 1
    if any("torchrun skipped" in note for note in trivial["notes"]):  # the reason is on record
        assert "skipped" in torchrun[0]["value"]
    else:
        assert any("torchrun" in row["name"] for row in trivial["rows"])

    scale = json.loads((tmp_path / "bringup_scale.json").read_text())
    if importlib.util.find_spec("matplotlib") is not None:
        assert scale["extra"]["plot"] == "bringup_scale.png"
        assert (tmp_path / "bringup_scale.png").stat().st_size > 0
    else:
        assert scale["extra"]["plot"] is None
        assert any("matplotlib" in note for note in scale["notes"])


@pytest.mark.heavy
def test_restart_resume_quick_resumes_every_job_from_a_checkpoint(tmp_path: Path) -> None:
    # One repetition of its three contenders: three MNIST jobs, each crashed once.
    assert "restart_resume" in SLOW
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "restart_resume.py"),
            "--quick",
            "--results-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=540,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    data = json.loads((tmp_path / "restart_resume.json").read_text())
    assert data["quick"] is True
    assert data["rows"]
    assert all(row["samples"] for row in data["rows"])
    for runs in data["extra"]["checkpoint_at_kill_and_resumed_from"].values():
        assert [resumed >= killed > 0 for killed, resumed in runs] == [True]
