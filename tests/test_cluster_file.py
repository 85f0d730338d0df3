"""A cluster too large for a task's environment (issue 40, item 8).

Linux takes at most 128 KiB in one environment string or argument
(``MAX_ARG_STRLEN``), and ``TF_CONFIG`` and ``TFMESOS_WORKER_HOSTS`` list
every task's address: 520 tasks on 253-character host names are past it. Such
a job is refused before any task's command starts; ``--cluster-file`` puts
the definition in a file each task reads instead (tfmesos.common.clusterfile)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import JobProcesses, marked_master, run_tfrun
from tests.jobevents import JobEvents
from tests.test_launcher import run_job
from tfmesos import ClusterSpec, Job
from tfmesos.agent.supervisor import task_command
from tfmesos.common.clusterfile import ENV_CLUSTER_FILE, tf_config
from tfmesos.errors import SpecError
from tfmesos.spec import MAX_COMMAND_LINE
from tfmesos.testing.fake import FakeBackend

LONGEST_NAME = "h" * 253
"""The longest host name DNS allows (the issue's agents had such names)."""


def too_many(length: int) -> int:
    """Tasks whose ``host:port`` addresses of ``length`` characters, joined
    with commas as in ``TFMESOS_WORKER_HOSTS``, pass Linux's limit."""
    return MAX_COMMAND_LINE // (length + 1) + 1


def told(backend: FakeBackend) -> list[dict[str, Any]]:
    """Every cluster message the launcher sent any task."""
    names = dict.fromkeys(task.launch.task.name for task in backend.tasks.values())
    return [m for name in names for m in backend.sent(name) if m["type"] == "cluster"]


def fake_job(tasks: int, cmd: str = "true", **kw: Any) -> FakeBackend:
    spec = ClusterSpec((Job("worker", tasks, cmd=cmd),), replica=True, **kw)
    return FakeBackend(spec, host=LONGEST_NAME)


# -- the launcher's check, through the fake backend -----------------------------


def test_the_issues_cluster_is_refused_before_any_task_is_told_to_start() -> None:
    backend = fake_job(520)  # the fake's tasks register at HOST:1
    with pytest.raises(SpecError) as refused:
        asyncio.run(run_job(backend.launcher()))
    said = str(refused.value)
    assert "\n" not in said
    addresses = [f"{LONGEST_NAME}:1"] * 520
    config = {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": 519}}
    tf_config_size = len("TF_CONFIG=") + len(json.dumps(config, separators=(",", ":")))
    hosts_size = len("TFMESOS_WORKER_HOSTS=") + len(",".join(addresses))
    assert f"TF_CONFIG {tf_config_size:,} bytes" in said, said
    assert f"TFMESOS_WORKER_HOSTS {hosts_size:,} bytes" in said, said
    assert "520 tasks" in said and "--cluster-file" in said and ENV_CLUSTER_FILE in said
    assert told(backend) == []  # no task was told to run its command
    assert backend.closed == 1  # and the backend let go of the cluster


def test_a_cluster_just_within_the_limit_starts() -> None:
    # 500 addresses of 255 characters: TF_CONFIG is 129,544 bytes.
    backend = fake_job(500)
    asyncio.run(run_job(backend.launcher()))
    assert len(told(backend)) == 500


def test_with_cluster_file_the_cluster_goes_to_every_task() -> None:
    backend = fake_job(520, cluster_file=True)
    asyncio.run(run_job(backend.launcher()))
    messages = told(backend)
    assert len(messages) == 520
    assert all(m["cluster_file"] is True for m in messages)
    assert len(messages[0]["cluster_def"]["worker"]) == 520


@pytest.mark.parametrize("cluster_file", [False, True])
def test_a_command_line_too_long_with_its_hosts_is_refused_even_with_the_file(
    cluster_file: bool,
) -> None:
    backend = fake_job(520, cmd="python train.py --hosts {worker_hosts}", cluster_file=cluster_file)
    with pytest.raises(SpecError) as refused:
        asyncio.run(run_job(backend.launcher()))
    said = str(refused.value)
    assert "command line" in said and "{worker_hosts}" in said and ENV_CLUSTER_FILE in said
    assert told(backend) == []


# -- the task's side: the agent writes the file, readers take it ----------------


def cluster_message(**kw: Any) -> dict[str, Any]:
    return {
        "type": "cluster",
        "job_name": "worker",
        "task_index": 1,
        "cluster_def": {"worker": ["a:1", "b:2"], "ps": ["c:3"]},
        "cmd": "true",
        "env": {},
        **kw,
    }


def test_the_agent_writes_tf_config_to_a_file_beside_the_tasks_log(tmp_path: Path) -> None:
    log = tmp_path / "worker.1.1.abcd.log"
    environ = {"PATH": os.environ["PATH"], "TFMESOS_AGENT_LOG_FILE": str(log)}
    _, plain = task_command(cluster_message(), environ)
    _, env = task_command(cluster_message(cluster_file=True), environ)
    path = Path(env[ENV_CLUSTER_FILE])
    assert path == tmp_path / "worker.1.1.abcd.cluster.json"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.read_text() == plain["TF_CONFIG"]
    assert json.loads(path.read_text())["task"] == {"type": "worker", "index": 1}
    for name in ("TF_CONFIG", "TFMESOS_WORKER_HOSTS", "TFMESOS_PS_HOSTS"):
        assert name not in env
    assert env["RANK"] == plain["RANK"]
    # What tfmesos's own readers (tfmesos.agent.tfserver) take.
    assert tf_config(env) == plain["TF_CONFIG"] == tf_config(plain)


def test_in_a_mesos_sandbox_the_file_is_in_the_sandbox(tmp_path: Path) -> None:
    environ = {"PATH": os.environ["PATH"], "MESOS_SANDBOX": str(tmp_path)}
    _, env = task_command(cluster_message(cluster_file=True, cmd=None), environ)
    assert env[ENV_CLUSTER_FILE] == str(tmp_path / "cluster.json")
    assert json.loads(tf_config(env))["cluster"]["ps"] == ["c:3"]


# -- end to end: tfrun on Mesos agents with long host names ---------------------

HOST = ".".join(["a" * 59] * 50)
"""A host name of 2,999 characters (no label over 63): no DNS name is so long,
but Mesos takes an agent's ``--hostname`` as given, and with it a job of
tens of tasks, not hundreds, passes Linux's real limit."""
WORKERS = too_many(len(HOST) + len(":31000")) + 1
"""Worker 0 runs beside tfrun, at this machine's name: every other is on the agent."""
MARKS = "touch {marks}/{{job_name}}.{{task_index}}"


def long_named_master(job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch) -> Any:
    return marked_master(
        job_procs,
        monkeypatch,
        agents=1,
        cpus=WORKERS,
        mem=64 * WORKERS,
        agent_hostnames=[HOST],
    )


def tfrun_on(master: Any, events: JobEvents, *args: str, env: dict[str, str]) -> Any:
    small = ("-Cw", "0.1", "-Mw", "32", "--timeout", "120")
    return run_tfrun("-m", master.url, *events.flag, *small, *args, env=env, timeout=240)


def test_on_mesos_a_cluster_too_large_is_refused_and_runs_nothing(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    events = JobEvents(tmp_path / "events.jsonl")
    with long_named_master(job_procs, monkeypatch) as master:
        result = tfrun_on(
            master,
            events,
            "-w",
            str(WORKERS),
            "--",
            MARKS.format(marks=marks),
            env=job_procs.env(),
        )
        assert result.returncode == 2, result.stderr
        errors = [line for line in result.stderr.splitlines() if line.startswith("tfrun: error")]
        assert len(errors) == 1 and "TFMESOS_WORKER_HOSTS" in errors[0], result.stderr
        assert "--cluster-file" in errors[0]
        assert "Traceback" not in result.stderr
        verdict = events.verdict()
        assert (verdict["result"], verdict["exit_status"]) == ("refused", 2)
        assert len(events.of("task_launched")) == WORKERS  # placed, registered, never run
        assert sorted(os.listdir(marks)) == []
        # The framework is torn down, and no task's process is left.
        master.wait_for(lambda m: not m.frameworks())  # torn down
    assert job_procs.wait_gone(30) == []


READ = (
    "import json, os, sys; "
    "assert 'TF_CONFIG' not in os.environ and 'TFMESOS_WORKER_HOSTS' not in os.environ; "
    f"os.environ['TF_CONFIG'] = open(os.environ['{ENV_CLUSTER_FILE}']).read(); "
    "config = json.loads(os.environ['TF_CONFIG']); "
    "open(sys.argv[1], 'w').write(json.dumps(config))"
)


def test_on_mesos_with_cluster_file_the_job_runs_and_reads_the_file(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen = tmp_path / "seen.json"
    events = JobEvents(tmp_path / "events.jsonl")
    # Worker 1, on the long-named agent, reads the file; the rest only run.
    command = (
        f'if [ {{task_index}} = 1 ]; then exec {sys.executable} -c "{READ}" {seen}; fi; '
        "echo {task_index} >/dev/null"
    )
    with long_named_master(job_procs, monkeypatch) as master:
        result = tfrun_on(
            master, events, "-w", str(WORKERS), "--cluster-file", "--", command, env=job_procs.env()
        )
        assert result.returncode == 0, result.stderr
        assert events.verdict()["result"] == "succeeded"
        master.wait_for(lambda m: not m.frameworks())  # torn down
    config = json.loads(seen.read_text())
    assert config["task"] == {"type": "worker", "index": 1}
    workers = config["cluster"]["worker"]
    assert len(workers) == WORKERS and workers[1].startswith(HOST + ":")
    assert len(",".join(workers)) > MAX_COMMAND_LINE


# -- fine-grained mode: the servers read the file -------------------------------

SERVERS = """
import json, psutil
from tfmesos import cluster

with cluster([{"name": "ps", "num": 1}, {"name": "worker", "num": 1}], quiet=True,
             cluster_file=True) as c:
    for proc in psutil.Process().children(recursive=True):
        if "tfmesos.agent.tfserver" in " ".join(proc.cmdline()):
            env = proc.environ()
            print(json.dumps([env.get("TF_CONFIG"), env.get("TFMESOS_WORKER_HOSTS"),
                              open(env["TFMESOS_CLUSTER_FILE"]).read()]), flush=True)
    print(sorted(c.targets), flush=True)
"""


def test_fine_grained_servers_take_the_cluster_from_the_file(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    from tests.test_finegrained import run_python

    result = run_python("-c", SERVERS, procs=job_procs, tmp=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    *servers, targets = result.stdout.splitlines()
    assert targets == "['/job:ps/task:0', '/job:worker/task:0']"
    assert len(servers) == 2
    for line in servers:
        tf_config, hosts, in_file = json.loads(line)
        assert tf_config is None and hosts is None  # in the file, not the environment
        assert sorted(json.loads(in_file)["cluster"]) == ["ps", "worker"]
    assert job_procs.wait_gone(5) == []
