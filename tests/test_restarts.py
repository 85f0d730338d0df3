"""`tfrun --max-restarts N`: a job whose task fails or is lost after the cluster
is up is stopped and started again, whole, up to N times.

Each run is a new job: a new rendezvous, new placements (on Mesos, a new
framework), ``TFMESOS_RESTART`` in every task's environment. The training
examples resume from their last checkpoint, so a crash costs the steps since
then, not the run.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, JobProcesses, run_tfrun, start_tfrun
from tests.jobevents import JobEvents
from tests.mesos_clusters import MesosUnderTest
from tfmesos.testing.master import ThreadedTestMaster

pytestmark = pytest.mark.e2e  # every test here starts processes

PY = sys.executable


# -- the rule, with shell commands ---------------------------------------------


def test_a_task_failing_once_is_restarted_with_the_whole_job(
    job_procs: JobProcesses, job_events: JobEvents, tmp_path: Path
) -> None:
    restart_once(None, job_procs, job_events, tmp_path)


def test_a_task_failing_once_is_restarted_with_the_whole_job_on_mesos(
    mesos: MesosUnderTest, job_procs: JobProcesses, job_events: JobEvents, tmp_path: Path
) -> None:
    restart_once(mesos, job_procs, job_events, tmp_path)


def restart_once(
    cluster: MesosUnderTest | None, job_procs: JobProcesses, events: JobEvents, tmp_path: Path
) -> None:
    marker = tmp_path / "crashed"
    # worker:1 fails the first time only; every task says which run it is in.
    command = (
        f'echo "run $TFMESOS_RESTART $TORCHELASTIC_RESTART_COUNT/$TORCHELASTIC_MAX_RESTARTS"; '
        f"if [ {{task_index}} = 1 ] && [ ! -e {marker} ]; then touch {marker}; exit 3; fi"
    )
    result = run_tfrun(
        *(("-m", cluster.url) if cluster is not None else ()),
        *events.flag,
        "-w",
        "2",
        "-s",
        "1",
        "--max-restarts",
        "1",
        "--",
        command,
        env=job_procs.env(),
    )
    assert result.returncode == 0, result.stderr
    [restart] = events.of("job_restart")
    assert (restart["restart"], restart["max_restarts"]) == (1, 1)
    failed = [e for e in events.of("task_exited") if e["exit_code"] == 3]
    assert [(e["task"], e["action"]) for e in failed] == [("worker:1", "fail job")]
    assert events.all().index(failed[0]) < events.all().index(restart)
    assert [e["restart"] for e in events.of("cluster_up")] == [0, 1]
    assert events.verdict()["exit_status"] == 0
    # The chief's output: one line per run (torchrun's two numbers alike).
    assert result.stdout.splitlines() == ["[worker:0] run 0 0/1", "[worker:0] run 1 1/1"]
    # Each task's log, each run's, by a name known beforehand (no random part).
    run_dir = Path(events.of("job_started")[0]["log_dir"])
    logs = {p.name: p.read_text() for p in run_dir.glob("*.log")}
    for task in ("ps.0", "worker.0", "worker.1"):
        assert logs[f"{task}.log"].startswith("run 0 0/1\n"), logs
        assert logs[f"{task}.restart-1.log"].startswith("run 1 1/1\n"), logs
    assert not job_procs.wait_gone(10)
    if cluster is not None:
        # A new framework per run; every one torn down.
        state = cluster.state()
        assert len(state["completed_frameworks"]) == 2
        assert state["frameworks"] == []


def test_when_restarts_run_out_the_verdict_names_every_runs_cause(
    job_procs: JobProcesses, job_events: JobEvents
) -> None:
    result = run_tfrun(
        *job_events.flag,
        "-w",
        "2",
        "-s",
        "0",
        "--max-restarts",
        "2",
        "--",
        "if [ {task_index} = 1 ]; then exit $((TFMESOS_RESTART + 3)); fi; sleep 100",
        env=job_procs.env(),
    )
    # The last run's failure decides, as without restarts.
    assert result.returncode == 5, result.stderr
    assert [e["restart"] for e in job_events.of("job_restart")] == [1, 2]
    failures = [e["exit_code"] for e in job_events.of("task_exited") if e["action"] == "fail job"]
    assert failures == [3, 4, 5]
    assert job_events.verdict()["exit_status"] == 5
    # The wording a user sees (the one check of a restarted job's verdict).
    verdict = result.stderr[result.stderr.index("job failed:") :]
    assert "task worker:1 on 127.0.0.1 exited with status 5" in verdict
    assert "this was run 3, after 2 restarts; before it:" in verdict
    assert "  run 1: task worker:1 on 127.0.0.1 exited with status 3" in verdict
    assert "  run 2: task worker:1 on 127.0.0.1 exited with status 4" in verdict
    assert not job_procs.wait_gone(10)


def test_a_cluster_that_never_comes_up_is_not_restarted(
    master: ThreadedTestMaster, job_procs: JobProcesses, job_events: JobEvents
) -> None:
    # The start has its own rules (three attempts per task, --timeout); a
    # restart would only repeat them. Each worker fits an agent of 4 CPUs,
    # but the two agents hold two of the three together.
    result = run_tfrun(
        "-m", master.url, *job_events.flag,
        "-w", "4", "-s", "0", "-Cw", "4", "--timeout", "3", "--wait-for-agents",
        "--max-restarts", "3", "--", "true",
        env=job_procs.env(),
    )  # fmt: skip
    assert result.returncode == 124, result.stderr  # the cluster never came up
    assert job_events.of("job_restart") == []
    verdict = job_events.verdict()
    assert (verdict["result"], verdict["exit_status"]) == ("never up", 124), verdict
    assert len(master.frameworks(include_completed=True)) == 1


def test_a_lost_agent_restarts_the_job_on_mesos(
    mesos: MesosUnderTest, job_procs: JobProcesses
) -> None:
    # The first run's tasks wait for ever; the second's end at once.
    proc, _ = start_tfrun(
        "-m",
        mesos.url,
        "-w",
        "1",
        "-s",
        "1",
        "--max-restarts",
        "1",
        "--",
        'if [ "$TFMESOS_RESTART" = 0 ]; then sleep 120; fi',
        env=job_procs.env(),
    )
    agent_id = mesos.kill_agent_of("/job:ps/task:0")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    events = proc.events
    # As in test_mesos_jobs' lost agent: the checkpointed task is unreachable,
    # with no exit status; the job starts again.
    lost = next(e for e in events.of("task_exited") if e["task"] == "ps:0")
    assert (lost["exit_code"], lost["action"]) == (None, "fail job"), lost
    assert re.search("TASK_UNREACHABLE|AGENT_LOST", lost["reason"]), lost
    [restart] = events.of("job_restart")
    assert (restart["restart"], restart["max_restarts"]) == (1, 1)
    assert events.all().index(lost) < events.all().index(restart)
    assert events.verdict()["exit_status"] == 0
    mesos.end_orphans_of(agent_id, job_procs)
    assert not job_procs.wait_gone(30)


def test_restarts_are_checked_before_anything_starts() -> None:
    result = run_tfrun("-w", "1", "-s", "0", "--max-restarts", "-1", "--", "true")
    assert result.returncode == 2
    assert "--max-restarts" in result.stderr
    result = run_tfrun("-w", "1", "-s", "0", "--max-restarts", "100000", "--", "true")
    assert result.returncode == 2
    assert "--max-restarts must be a whole number from 0 to 1000, not '100000'" in result.stderr


# -- training resumes from its checkpoint --------------------------------------


def mnist(checkpoint_dir: Path) -> tuple[str, ...]:
    return (
        PY, "examples/mnist/mnist_replica.py",
        "--ps_hosts", "{ps_hosts}", "--worker_hosts", "{worker_hosts}",
        "--job_name", "{job_name}", "--task_index", "{task_index}",
        "--train_steps", "300", "--save_checkpoint_steps", "50",
        "--checkpoint_dir", str(checkpoint_dir),
    )  # fmt: skip


def on(backend: ThreadedTestMaster | None) -> tuple[str, ...]:
    return ("-m", backend.url) if backend is not None else ()


def final_step(stdout: str) -> int:
    found = re.findall(
        r"\[worker:0\] worker 0: done after \d+ local steps \(global step (\d+)\)", stdout
    )
    assert len(found) == 1, stdout
    return int(found[0])


@pytest.mark.heavy
@pytest.mark.parametrize("backend", ["local", "mesos"])
def test_a_worker_crashing_mid_training_resumes_from_its_checkpoint(
    backend: str,
    request: pytest.FixtureRequest,
    job_procs: JobProcesses,
    job_events: JobEvents,
    tmp_path: Path,
) -> None:
    cluster = request.getfixturevalue("master") if backend == "mesos" else None
    job = (*on(cluster), "-w", "1", "-s", "1", "--max-restarts", "1", "--")
    whole = run_tfrun(*job, *mnist(tmp_path / "uninterrupted"), env=job_procs.env())
    assert whole.returncode == 0, whole.stderr
    assert "[worker:0] worker 0: training from global step 0" in whole.stdout

    # The chief is killed once a checkpoint past step 0 is on disk.
    crash = (
        PY,
        str(ROOT / "tests" / "programs" / "crash_after_checkpoint.py"),
        str(tmp_path / "crashed"),
    )
    crashed = run_tfrun(
        *job_events.flag,
        *job,
        *crash,
        str(tmp_path / "checkpoints"),
        "--",
        *mnist(tmp_path / "checkpoints"),
        env=job_procs.env(),
    )
    assert crashed.returncode == 0, crashed.stderr
    # Every task runs the crash wrapper: the first to see the checkpoint
    # exits 1, which starts the job again.
    assert len(job_events.of("job_restart")) == 1
    failed = [e for e in job_events.of("task_exited") if e["action"] == "fail job"]
    assert [e["exit_code"] for e in failed] == [1], job_events.of("task_exited")
    starts = [int(s) for s in re.findall(r"training from global step (\d+)", crashed.stdout)]
    # Run 1 began at 0; run 2 at the checkpoint the crash came after, not at 0.
    assert starts[0] == 0 and len(starts) == 2, crashed.stdout
    killed_after = int(re.findall(r"\d+", (tmp_path / "crashed").read_text())[0])
    assert starts[1] >= killed_after > 0, crashed.stdout
    assert final_step(crashed.stdout) == final_step(whole.stdout) == 300
    assert not job_procs.wait_gone(10)
