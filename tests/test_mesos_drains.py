"""The operator drains an agent under a running job (issue 45): Mesos's
``DRAIN_AGENT`` kills the agent's tasks (``TASK_KILLED``, reason
``REASON_AGENT_DRAINING``). tfrun names the drain in its console, its
events (``task_drained``) and its verdict, not a crashed task; a job that may
restart moves to agents that are not draining, and the move does not spend
its ``--max-restarts``. Real Mesos only: the drain is Mesos's own.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import JobProcesses, Tfrun, popen_tfrun, py, wait_until
from tests.mesos_clusters import open_cluster
from tfmesos.mesos.agents import agent_totals, all_draining
from tfmesos.spec import TaskSpec
from tfmesos.testing.real_mesos import AgentSpec, RealMesos

# Three alike agents: a drained one leaves two for the job to move to.
AGENTS = tuple(
    AgentSpec(f"cpus:4;mem:4096;ports:[{first}-{first + 99}]") for first in (31000, 31100, 31200)
)

# Run 0 waits for the drain; run 1's worker:1 fails once; run 2 succeeds.
PROGRAM = (
    "import os, sys, time\n"
    "run, me = int(os.environ['TFMESOS_RESTART']), os.environ['TFMESOS_TASK_INDEX']\n"
    "print('run', run, 'task', me, flush=True)\n"
    "if run == 0:\n"
    "    time.sleep(3600)\n"
    "sys.exit(3 if run == 1 and me == '1' else 0)\n"
)


def drain(real: RealMesos, agent_id: str) -> None:
    """The operator API's ``DRAIN_AGENT`` of ``agent_id``."""
    call = {"type": "DRAIN_AGENT", "drain_agent": {"agent_id": {"value": agent_id}}}
    request = urllib.request.Request(
        real.url + "/api/v1",
        data=json.dumps(call).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200


def agent_of(real: RealMesos, task: str) -> str | None:
    """The agent the master says runs ``task`` (``worker.1``), if running."""
    for framework in real.state()["frameworks"]:
        for placed in framework["tasks"]:
            if placed["id"].startswith(f"{task}.") and placed["state"] == "TASK_RUNNING":
                return str(placed["slave_id"])
    return None


def start(real: RealMesos, job_procs: JobProcesses, restarts: int) -> Tfrun:
    return popen_tfrun(
        *("-m", real.url, "-w", "2", "-s", "0", "--max-restarts", str(restarts)),
        *("--", *py(PROGRAM)),
        env=job_procs.env(),
    )


def drain_worker_1(real: RealMesos, tfrun: Tfrun) -> str:
    wait_until(lambda: tfrun.events.of("cluster_up"), "the cluster up", 120, explain=tfrun.said)
    agent = wait_until(lambda: agent_of(real, "worker.1"), "worker:1 running", explain=tfrun.said)
    assert agent is not None
    drain(real, agent)
    return agent


def test_a_drained_agent_moves_the_job_without_spending_its_restarts(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With ``--max-restarts 1``: the drain moves the job (restart 1, not
    counted), run 1's failure spends the one restart, run 2 succeeds.
    Before: the drain read as worker:1 killed by SIGTERM, spent the restart,
    and run 1's failure ended the job (exit 3)."""
    with open_cluster("real", job_procs, monkeypatch, tmp_path / "mesos", AGENTS) as cluster:
        real = cluster.real
        assert real is not None
        tfrun = start(real, job_procs, restarts=1)
        drained = drain_worker_1(real, tfrun)
        _, said = tfrun.communicate(timeout=300)
        assert tfrun.returncode == 0, said
        assert "the operator is draining its agent (Mesos DRAIN_AGENT)" in said, said
        assert "not counted against --max-restarts 1" in said, said
        [event] = tfrun.events.of("task_drained")
        assert (event["task"], event["action"]) == ("worker:1", "DRAIN_AGENT")
        restarts = tfrun.events.of("job_restart")
        assert [(r["restart"], r["counted"]) for r in restarts] == [(1, False), (2, True)]
        assert "being drained by the operator" in restarts[0]["cause"]
        # No run after the drain placed anything on the drained agent.
        placed = [
            t["slave_id"]
            for f in real.state()["completed_frameworks"]
            for t in f["completed_tasks"]
            if t["id"].startswith("worker.1.")
        ]
        assert placed.count(drained) == 1, placed


def test_a_drain_of_a_job_that_may_not_restart_is_named_in_its_verdict(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without restarts the job ends, and says why: the operator's drain,
    not a task that crashed. Before: ``killed by SIGTERM (its agent was sent
    SIGTERM)``, with no word of the drain."""
    with open_cluster("real", job_procs, monkeypatch, tmp_path / "mesos", AGENTS) as cluster:
        real = cluster.real
        assert real is not None
        tfrun = start(real, job_procs, restarts=0)
        drain_worker_1(real, tfrun)
        _, said = tfrun.communicate(timeout=300)
        assert tfrun.returncode != 0, said
        verdict = [line for line in said.splitlines() if "job failed" in line]
        assert verdict and "its agent is being drained by the operator (DRAIN_AGENT)" in verdict[0]
        assert tfrun.events.of("task_drained"), said


def test_a_job_with_every_agent_draining_says_it_waits_for_one_that_is_not(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Before: ``no offer received yet`` every 15 s, never why."""
    one = (AGENTS[0],)
    with open_cluster("real", job_procs, monkeypatch, tmp_path / "mesos", one) as cluster:
        real = cluster.real
        assert real is not None
        [agent] = real.state()["slaves"]
        drain(real, agent["id"])
        tfrun = popen_tfrun(
            *("-m", real.url, "-w", "2", "--timeout", "20", "--", *py("print('never')")),
            env=job_procs.env(),
        )
        _, said = tfrun.communicate(timeout=120)
        assert tfrun.returncode == 124, said
        assert "every agent that could hold it is being drained by the operator (" in said, said
        assert "tfrun waits for one that is not" in said


def test_the_agents_drain_states_are_read_from_the_masters_list() -> None:
    def agent(host: str, drain: str | None) -> dict[str, Any]:
        resources = [
            {"name": "cpus", "type": "SCALAR", "scalar": {"value": 4}},
            {"name": "mem", "type": "SCALAR", "scalar": {"value": 4096}},
            {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": 1, "end": 9}]}},
        ]
        found: dict[str, Any] = {"agent_info": {"hostname": host}, "total_resources": resources}
        if drain is not None:
            found["drain_info"] = {"state": drain}
        return found

    def answer(*agents: dict[str, Any]) -> dict[str, Any]:
        return {"get_agents": {"agents": list(agents)}}

    task = TaskSpec("worker", 1, cpus=1, mem=1024, gpus=0, cmd=None)
    both = agent_totals(answer(agent("a", "DRAINING"), agent("b", "DRAINED")), ["*"])
    assert [a.draining for a in both] == ["DRAINING", "DRAINED"]
    said = all_draining(task, both)
    assert said is not None and "(a DRAINING, b DRAINED)" in said
    one_up = agent_totals(answer(agent("a", "DRAINING"), agent("b", None)), ["*"])
    assert all_draining(task, one_up) is None
    big = TaskSpec("worker", 1, cpus=64, mem=1024, gpus=0, cmd=None)
    assert all_draining(big, both) is None  # none could hold it: another story
