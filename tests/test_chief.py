"""TensorFlow's chief and evaluator: ``tfrun --chief``, ``tfrun --evaluator``,
and ``cluster()`` with a ``chief`` job.

Each TF_CONFIG shape TensorFlow's strategies document is expressible:
MultiWorkerMirrored without a chief (worker 0 is it) and with one,
ParameterServerStrategy with a coordinator chief, and a side-car evaluator,
which is in no cluster list. The end-to-end runs are of a program written as
TF's documents deploy one (tests/programs/ps_tfconfig.py): one program, every task
reads TF_CONFIG, the ps and worker tasks block in ``server.join()``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import JobProcesses, run_tfrun
from tests.jobevents import JobEvents
from tests.mesos_clusters import MesosUnderTest
from tfmesos.cli.parser import parse_args
from tfmesos.common.taskenv import placeholder_values, task_environment
from tfmesos.launcher.policy import Action, Phase, TaskView, on_task_end
from tfmesos.launcher.verdict import ends

PY = sys.executable
PROGRAM = str(Path(__file__).parent / "programs" / "ps_tfconfig.py")

CHIEF, W0, W1, PS0, EVAL = "c:1", "w:2", "w:3", "p:4", "e:5"


def _tf_config(cluster: dict[str, list[str]], job: str, index: int) -> dict[str, object]:
    return json.loads(task_environment(cluster, job, index)["TF_CONFIG"])  # type: ignore[no-any-return]


# -- the TF_CONFIG shapes and ranks (unit) --------------------------------------


def test_multi_worker_mirrored_without_a_chief_has_worker_0_as_rank_0() -> None:
    cluster = {"ps": [], "worker": [W0, W1]}
    assert _tf_config(cluster, "worker", 1) == {
        "cluster": {"worker": [W0, W1]},
        "task": {"type": "worker", "index": 1},
    }
    env = task_environment(cluster, "worker", 0)
    assert (env["RANK"], env["MASTER_ADDR"], env["MASTER_PORT"]) == ("0", "w", "2")
    assert "TFMESOS_CHIEF_HOSTS" not in env
    assert placeholder_values(cluster, "worker", 0)["chief_hosts"] == ""


def test_multi_worker_mirrored_with_a_chief_makes_the_chief_rank_0() -> None:
    cluster = {"chief": [CHIEF], "ps": [], "worker": [W0, W1]}
    assert _tf_config(cluster, "chief", 0) == {
        "cluster": {"chief": [CHIEF], "worker": [W0, W1]},
        "task": {"type": "chief", "index": 0},
    }
    chief = task_environment(cluster, "chief", 0)
    assert (chief["RANK"], chief["WORLD_SIZE"], chief["ROLE_NAME"]) == ("0", "3", "chief")
    assert (chief["ROLE_RANK"], chief["ROLE_WORLD_SIZE"]) == ("0", "1")
    worker = task_environment(cluster, "worker", 1)
    # torch's store and JAX's coordinator are the chief's: rank 0's address.
    assert (worker["RANK"], worker["GROUP_RANK"], worker["JAX_PROCESS_ID"]) == ("2", "2", "2")
    assert (worker["MASTER_ADDR"], worker["MASTER_PORT"]) == ("c", "1")
    assert worker["JAX_COORDINATOR_ADDRESS"] == CHIEF
    assert worker["TFMESOS_CHIEF_HOSTS"] == CHIEF
    assert placeholder_values(cluster, "worker", 1)["chief_hosts"] == CHIEF


def test_parameter_server_strategy_with_a_coordinator_chief() -> None:
    cluster = {"chief": [CHIEF], "ps": [PS0], "worker": [W0, W1]}
    for job, index in (("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)):
        assert _tf_config(cluster, job, index) == {
            "cluster": {"chief": [CHIEF], "ps": [PS0], "worker": [W0, W1]},
            "task": {"type": job, "index": index},
        }
    ranks = {job: task_environment(cluster, job, 0)["RANK"] for job in ("chief", "worker", "ps")}
    assert ranks == {"chief": "0", "worker": "1", "ps": "3"}


def test_a_side_car_evaluator_is_in_no_cluster_list_and_has_no_rank() -> None:
    # What the launcher sends every task, the evaluator included: it is left
    # out of the cluster definition (tfmesos.launcher.message.cluster_def_of).
    cluster = {"chief": [CHIEF], "ps": [PS0], "worker": [W0, W1]}
    env = task_environment(cluster, "evaluator", 0)
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"chief": [CHIEF], "ps": [PS0], "worker": [W0, W1]},
        "task": {"type": "evaluator", "index": 0},
    }
    assert (env["TFMESOS_JOB_NAME"], env["TFMESOS_TASK_INDEX"]) == ("evaluator", "0")
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "LOCAL_RANK", "JAX_PROCESS_ID"):
        assert name not in env, name
    assert placeholder_values(cluster, "evaluator", 0)["job_name"] == "evaluator"


def test_the_flags_make_the_chief_and_evaluator_jobs() -> None:
    _, spec = parse_args(["--chief", "--evaluator", "-w", "2", "-s", "1", "-Gw", "0", "--", "x"])
    assert [(j.name, j.num) for j in spec.jobs] == [
        ("chief", 1),
        ("ps", 1),
        ("worker", 2),
        ("evaluator", 1),
    ]
    assert spec.ending_job == "chief"
    chief, *_ = spec.tasks()
    assert spec.is_chief(chief) and chief.name == "chief:0"
    assert not any(spec.is_chief(t) for t in spec.tasks()[1:])
    # The chief's and the evaluator's output is shown; no worker's unless asked.
    assert spec.forward_logs == frozenset({"chief:0", "evaluator:0"})
    _, spec = parse_args(["--chief", "-w", "2", "--worker-logs", "1", "--", "x"])
    assert spec.forward_logs == frozenset({"chief:0", "worker:1"})
    _, spec = parse_args(["--chief", "-w", "2", "--worker-logs", "none", "--", "x"])
    assert spec.forward_logs == frozenset()
    _, spec = parse_args(["-w", "2", "--", "x"])  # as before: worker 0 is the chief
    assert spec.ending_job == "worker" and spec.forward_logs == frozenset({"worker:0"})
    assert spec.is_chief(spec.tasks()[0])


def test_the_chief_takes_the_workers_resources_unless_given_its_own() -> None:
    argv = ["--chief", "-w", "1", "-Cw", "3", "-Mw", "2048", "-Gw", "1"]
    _, spec = parse_args([*argv, "--evaluator", "--", "x"])
    chief, evaluator = spec.jobs[0], spec.jobs[-1]
    assert (chief.cpus, chief.mem, chief.gpus) == (3, 2048, 1)
    assert (evaluator.cpus, evaluator.mem, evaluator.gpus) == (3, 2048, 1)
    _, spec = parse_args([*argv, "-Cc", "0.5", "-Mc", "512", "-Gc", "0", "--", "x"])
    chief = spec.jobs[0]
    assert (chief.cpus, chief.mem, chief.gpus) == (0.5, 512, 0)


def test_a_chief_alone_is_a_job_and_its_flags_need_it(capsys: pytest.CaptureFixture[str]) -> None:
    _, spec = parse_args(["--chief", "-w", "0", "--", "x"])
    assert [t.name for t in spec.tasks()] == ["chief:0"]
    for argv in (["-w", "0", "--", "x"], ["-w", "1", "-Gc", "1", "--", "x"]):
        with pytest.raises(SystemExit) as exited:
            parse_args(argv)
        assert exited.value.code == 2
    assert "--chief-gpus is for the chief: give --chief too" in capsys.readouterr().err


def test_an_evaluators_failure_once_the_cluster_is_up_does_not_end_the_job() -> None:
    view = TaskView(phase=Phase.RUNNING, current=True, attempt=1, replica=True, side=True)
    assert on_task_end(view, 1) is Action.CARRY_ON
    assert on_task_end(view, 0) is Action.FINISH
    # Before the cluster is up it is relaunched as any task is.
    starting = TaskView(phase=Phase.STARTING, current=True, attempt=1, replica=True, side=True)
    assert on_task_end(starting, 1) is Action.RELAUNCH


def test_the_verdict_names_the_chief_first() -> None:
    outcomes = {
        "ps:0": "stopped by tfrun",
        "worker:0": "stopped by tfrun",
        "chief:0": "exited 0",
        "evaluator:0": "failed",
    }
    assert ends(outcomes) == (
        "chief:0 exited 0; worker:0 stopped by tfrun; ps:0 stopped by tfrun; evaluator:0 failed"
    )


def test_cluster_refuses_an_evaluator_job_and_a_second_chief() -> None:
    import tfmesos
    from tfmesos.errors import SpecError

    for jobs, said in (
        ([{"name": "worker", "num": 1}, {"name": "evaluator", "num": 1}], "tfrun --evaluator"),
        ([{"name": "worker", "num": 1}, {"name": "chief", "num": 2}], "at most one task"),
    ):
        with pytest.raises(SpecError, match=said), tfmesos.cluster(jobs):
            raise AssertionError("started")


# -- whole jobs (e2e) -------------------------------------------------------------


def test_a_tf_config_ps_job_with_a_chief_runs_to_its_end(
    job_procs: JobProcesses, job_events: JobEvents
) -> None:
    """The ParameterServerStrategy deployment that hung without a chief (every
    task blocked in ``server.join()``): the chief coordinates, and its exit
    ends the job; the servers are stopped, which is no failure."""
    result = run_tfrun(
        *job_events.flag, "--chief", "-w", "3", "-s", "2", "--", PY, PROGRAM, env=job_procs.env()
    )
    assert result.returncode == 0, result.stderr
    assert "[chief:0] trained 20 steps on 3 workers" in result.stdout, result.stdout
    up = job_events.of("cluster_up")[0]["cluster"]
    assert list(up) == ["chief", "ps", "worker"] and len(up["worker"]) == 3
    verdict = job_events.verdict()
    assert verdict["result"] == "succeeded", verdict
    (stopped,) = job_events.of("job_stopped")
    assert stopped["outcomes"] == {
        "chief:0": "exited 0",
        **{f"ps:{i}": "stopped by tfrun" for i in range(2)},
        **{f"worker:{i}": "stopped by tfrun" for i in range(3)},
    }
    assert "the chief finished; stopping the rest of the job" in result.stderr
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_multi_worker_mirrored_with_a_chief_and_an_evaluator_as_tf_reads_them(
    job_procs: JobProcesses, job_events: JobEvents
) -> None:
    """TF itself takes the shapes: the chief is a member of the collective
    (three ones sum to 3) and the one that saves; the evaluator's
    TFConfigClusterResolver sees no evaluator job, and its end is no one's."""
    program = str(Path(__file__).parent / "programs" / "mwms_tfconfig.py")
    argv = [*job_events.flag, "--chief", "--evaluator", "-w", "2", "--", PY, program]
    result = run_tfrun(*argv, env=job_procs.env())
    assert result.returncode == 0, result.stderr
    assert "[chief:0] chief:0 saves=True sum=3" in result.stdout, result.stdout
    assert "[evaluator:0] evaluator:0 sees the jobs ['chief', 'worker']" in result.stdout
    outcomes = job_events.of("job_stopped")[0]["outcomes"]
    assert outcomes["chief:0"] == "exited 0" and "failed" not in outcomes.values(), outcomes
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


SERVE = 'if [ "$TFMESOS_JOB_NAME" = {who} ]; then exit {status}; fi; exec sleep 600'


@pytest.mark.parametrize(
    ("who", "status"),
    [("chief", 3), ("worker", 4)],
    ids=["the chief's exit status", "a worker failing first"],
)
def test_the_chiefs_exit_status_is_the_jobs_and_a_worker_failing_first_fails_it(
    who: str, status: int, job_procs: JobProcesses, job_events: JobEvents
) -> None:
    command = SERVE.format(who=who, status=status)
    result = run_tfrun(
        *job_events.flag, "--chief", "-w", "2", "-s", "1", "--", command, env=job_procs.env()
    )
    assert result.returncode == status, result.stderr
    failed = f"{who}:0"
    assert f"job failed: task {failed} on 127.0.0.1 exited with status {status}" in result.stderr
    verdict = job_events.verdict()
    assert (verdict["result"], verdict["exit_status"]) == ("failed", status)
    assert job_events.exited()[failed]["action"] == "fail job"
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_a_chief_that_fails_restarts_the_job_with_max_restarts(
    job_procs: JobProcesses, job_events: JobEvents
) -> None:
    # The chief exits 3 in the first run (TFMESOS_RESTART=0), 0 in the second.
    command = SERVE.format(who="chief", status="$((3 - 3 * TFMESOS_RESTART))")
    argv = [*job_events.flag, "--chief", "-w", "1", "-s", "1", "--max-restarts", "1"]
    result = run_tfrun(*argv, "--", command, env=job_procs.env())
    assert result.returncode == 0, result.stderr
    (restart,) = job_events.of("job_restart")
    assert restart["cause"] == "task chief:0 on 127.0.0.1 exited with status 3", restart
    assert job_events.verdict()["result"] == "succeeded"
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


EVALUATE = """
import json, os, pathlib, sys, time
out = pathlib.Path(sys.argv[1])
job = os.environ["TFMESOS_JOB_NAME"]
seen = {k: os.environ.get(k) for k in ("TF_CONFIG", "RANK", "WORLD_SIZE", "MASTER_ADDR")}
(out / job).write_text(json.dumps(seen))
if job == "evaluator":
    sys.exit(5)  # fails: said, and the job goes on without it
if job == "worker" and os.environ["TFMESOS_TASK_INDEX"] == "0":
    # The job's end: worker 0 outlives the evaluator's end by waiting for it.
    events = pathlib.Path(sys.argv[2])
    while '"event":"task_exited","task":"evaluator:0"' not in events.read_text():
        time.sleep(0.05)
"""


def test_an_evaluator_is_in_no_cluster_list_and_its_end_does_not_end_the_job(
    job_procs: JobProcesses, job_events: JobEvents, tmp_path: Path
) -> None:
    argv = [*job_events.flag, "--evaluator", "-w", "2", "-s", "0", "--", PY, "-c", EVALUATE]
    result = run_tfrun(*argv, str(tmp_path), str(job_events.path), env=job_procs.env())
    assert result.returncode == 0, result.stderr
    seen = json.loads((tmp_path / "evaluator").read_text())
    worker = json.loads((tmp_path / "worker").read_text())
    tf_config = json.loads(seen["TF_CONFIG"])
    assert tf_config["task"] == {"type": "evaluator", "index": 0}
    assert tf_config["cluster"] == json.loads(worker["TF_CONFIG"])["cluster"]
    assert list(tf_config["cluster"]) == ["worker"]
    (registered,) = [e for e in job_events.of("task_registered") if e["task"] == "evaluator:0"]
    assert registered["addr"] not in tf_config["cluster"]["worker"]
    assert (seen["RANK"], seen["WORLD_SIZE"], seen["MASTER_ADDR"]) == (None, None, None)
    assert worker["WORLD_SIZE"] == "2"
    exited = job_events.exited()
    assert (exited["evaluator:0"]["exit_code"], exited["evaluator:0"]["action"]) == (5, "carry on")
    assert exited["worker:0"]["action"] == "finish"
    assert job_events.verdict()["result"] == "succeeded"
    assert "task evaluator:0 on 127.0.0.1 exited with status 5: the job goes on" in result.stderr
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_cluster_takes_a_chief_job_the_program_itself(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    """``cluster()`` with a ``chief`` job: no server is started for it, its
    address is this machine's and in every server's cluster, and the
    resolver makes the program TF's coordinator there."""
    events = JobEvents(tmp_path / "events.jsonl")
    result = subprocess_run([PROGRAM, "--cluster", "--events", str(events.path)], job_procs)
    assert result.returncode == 0, result.stderr
    assert "trained 20 steps on 2 workers" in result.stdout, result.stdout + result.stderr
    up = events.of("cluster_up")[0]["cluster"]
    assert list(up) == ["chief", "worker", "ps"], up
    assert f"chief target grpc://{up['chief'][0]}" in result.stdout
    assert "chief:0" not in {e["task"] for e in events.of("task_launched")}
    assert events.verdict()["exit_status"] == 0
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def subprocess_run(argv: list[str], job_procs: JobProcesses) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, *argv], capture_output=True, text=True, env=job_procs.env(), timeout=300
    )


@pytest.mark.parametrize("mesos", ["real-mesos"], indirect=True)
def test_a_tf_config_ps_job_with_a_chief_runs_on_real_mesos(
    mesos: MesosUnderTest, job_procs: JobProcesses, job_events: JobEvents
) -> None:
    """The same program on real Mesos: the chief beside tfrun, the workers
    and the ps task from offers; every server stopped once the chief is done."""
    argv = ["-m", mesos.url, *job_events.flag, "--chief", "-w", "2", "-s", "1"]
    result = run_tfrun(*argv, "--", PY, PROGRAM, env=job_procs.env())
    assert result.returncode == 0, result.stderr + mesos.logs()
    assert "[chief:0] trained 20 steps on 2 workers" in result.stdout, result.stdout
    placed = {e["task"]: e["backend"] for e in job_events.of("task_placed")}
    assert placed == {"chief:0": "local", "ps:0": "mesos", "worker:0": "mesos", "worker:1": "mesos"}
    assert job_events.of("job_stopped")[0]["outcomes"] == {
        "chief:0": "exited 0",
        "ps:0": "stopped by tfrun",
        "worker:0": "stopped by tfrun",
        "worker:1": "stopped by tfrun",
    }
    assert mesos.torn_down()
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_a_job_whose_one_task_is_the_chief_says_nothing_runs_on_the_cluster(
    master: Any, job_procs: JobProcesses
) -> None:
    """torchrun's one node, ``-w 1 --nproc-per-task 2`` on Mesos (issue 46):
    the one task is the chief, beside tfrun. Before: it ran with no word
    that nothing was placed on Mesos."""
    result = run_tfrun(
        *("-m", master.url, "-w", "1", "--nproc-per-task", "2", "--", "true"),
        env=job_procs.env(),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "the job's one task, worker:0, is its chief, which runs here beside tfrun: nothing "
        "runs on Mesos; give -w 2 or more"
    ) in result.stderr
