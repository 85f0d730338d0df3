"""The benchmarks still run: ``bench/run_all.py --smoke`` exits 0 and writes its results.

``--smoke`` runs each benchmark once at its smallest sizes: its imports, its
arguments, every contender's code path and its results' shape, not a
measurement. No timing is checked here; docs/benchmarks.md holds the figures. Where an
optional tool is missing (torch for the torchrun column, matplotlib for the
plot) the benchmark must say so in its results rather than leave a silent gap.

Also here: the reader of tfrun's event stream the benchmarks share
(``benchlib.EventStream``), from which they learn what a job did.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT

# The benchmarks' shared module, as they import it. Last on the path: no
# other module of bench/ (images.py, noop.py...) hides one of the same name.
sys.path.append(str(ROOT / "bench"))
from benchlib import EventStream


def _line(event: str, ts: float, **fields: object) -> str:
    return json.dumps({"v": 1, "ts": ts, "event": event, **fields}) + "\n"


def test_event_stream_reads_each_whole_line_once_as_it_is_written(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(_line("job_verdict", 1.0, result="failed", message="an earlier run's"))
    events = EventStream(path)
    assert not path.exists(), "an earlier run's file is not read as this run's"
    assert events.read() == []  # tfrun has not opened it yet
    up = _line("cluster_up", 2.0, cluster={"worker": ["h:1"]}, restart=0)
    with path.open("w") as file:
        file.write(_line("task_registered", 1.5, task="worker:0") + up[:10])
        file.flush()
        assert [e["event"] for e in events.read()] == ["task_registered"]
        assert events.read() == []  # half a line waits for its newline
        file.write(up[10:] + _line("task_relaunched", 2.5, task="worker:0"))
        file.flush()
        assert [e["event"] for e in events.read()] == ["cluster_up", "task_relaunched"]
    assert [e["event"] for e in events.events] == [
        "task_registered",
        "cluster_up",
        "task_relaunched",
    ]
    cluster_up = events.first("cluster_up")
    assert cluster_up is not None
    assert cluster_up["ts"] == 2.0
    assert len(events.of("task_relaunched")) == 1
    assert events.first("job_verdict") is None
    assert events.describe() == (
        "no verdict; its events: task_registered, cluster_up, task_relaunched"
    )
    assert events.flag == ["--events", str(path)]


def test_event_stream_describes_the_verdict(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    events = EventStream(path)
    assert events.describe() == "no verdict; its events: none"
    path.write_text(_line("job_verdict", 3.0, exit_status=3, result="failed", message="job failed"))
    events.read()
    assert events.describe() == "its verdict: failed: job failed"


@pytest.mark.e2e
def test_event_stream_follows_a_process_until_it_has_exited(tmp_path: Path) -> None:
    # Written a line at a time, the last just before the writer exits: every
    # one is yielded, in order, and the following ends with the writer.
    path = tmp_path / "events.jsonl"
    events = EventStream(path)
    writer = textwrap.dedent(
        f"""
        import json, sys, time
        with open({str(path)!r}, "w") as file:
            for name in ["task_launched", "cluster_up", "job_verdict"]:
                time.sleep(0.05)
                file.write(json.dumps({{"v": 1, "ts": time.time(), "event": name}}) + "\\n")
                file.flush()
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", writer])
    try:
        names = [event["event"] for event in events.follow(proc)]
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == 0
    assert names == ["task_launched", "cluster_up", "job_verdict"]


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


@pytest.mark.e2e
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
