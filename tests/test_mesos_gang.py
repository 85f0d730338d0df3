"""Gang placement: a job's remote tasks are launched together or not at all.

Mesos's allocator hands a cluster's agents out in turn, to the framework with
the lowest dominant share first (``src/master/allocator/mesos/hierarchical.cpp``;
the test master orders frameworks the same way), so two jobs started together
on two agents get one agent each. A job that launched on each offer as it came
would then hold half of what it needs while the other job held the rest, both
waiting for ever: the deadlock Kubeflow needs Volcano's gang scheduling to
avoid. tfrun holds offers until the whole job fits, and gives them back after
a bounded hold, so one job runs and then the other.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MESOS_KINDS, JobProcesses, popen_tfrun, run_tfrun
from tests.jobevents import JobEvents
from tests.mesos_clusters import MesosUnderTest, open_cluster
from tfmesos.backends.mesos.pacing import LAUNCHES_PER_AGENT
from tfmesos.testing.real_mesos import AgentSpec

# Worker 0 runs beside tfrun; workers 1 and 2 need one CPU each, remotely.
JOB = ("-w", "3", "-s", "0", "-Cw", "1", "-Mw", "256", "--timeout", "90", "--", "sleep", "2")
ONE_CPU_AGENTS = (
    AgentSpec("cpus:1;mem:1024;ports:[32500-32549]"),
    AgentSpec("cpus:1;mem:1024;ports:[32550-32599]"),
)
"""A cluster that fits exactly one such job: two agents with one CPU each, on
ports no other test's agents offer. A task takes its offer's first free port,
and 31000 is the first that every test master and real Mesos agent here
offers: a concurrent test's task holding it fails a task given it ('already
in use'), as tests/test_mesos_order.py found (here a worker:2 on real Mesos
failed once so, by all signs; its sandbox was gone before it could be read)."""


@pytest.fixture(params=MESOS_KINDS)
def two_agents(
    request: pytest.FixtureRequest,
    job_procs: JobProcesses,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[MesosUnderTest]:
    with open_cluster(
        request.param, job_procs, monkeypatch, tmp_path / "mesos", ONE_CPU_AGENTS
    ) as cluster:
        yield cluster


@pytest.fixture(params=MESOS_KINDS)
def agents_later(
    request: pytest.FixtureRequest,
    job_procs: JobProcesses,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[MesosUnderTest]:
    """A master with no agents yet: the test adds them once both jobs subscribed."""
    with open_cluster(request.param, job_procs, monkeypatch, tmp_path / "mesos", ()) as cluster:
        yield cluster


def _busy_interval(framework: dict[str, Any]) -> tuple[float, float]:
    """From its first task's first status to its last task's last, as the
    master's /state has them."""
    tasks = framework["tasks"] + framework["completed_tasks"]
    assert tasks, f"framework {framework['id']} launched no task"
    for task in tasks:
        assert task["state"] in ("TASK_FINISHED", "TASK_KILLED"), task
    starts = [t["statuses"][0]["timestamp"] for t in tasks]
    ends = [t["statuses"][-1]["timestamp"] for t in tasks]
    return min(starts), max(ends)


def test_two_jobs_started_together_on_a_cluster_that_fits_one_both_finish_one_after_the_other(
    agents_later: MesosUnderTest, job_procs: JobProcesses
) -> None:
    master = agents_later
    env = job_procs.env()
    names = ("gang-a", "gang-b")
    # Ended, their pipes closed, when the test ends, however it ends.
    jobs = [popen_tfrun("-m", master.url, "-n", name, *JOB, env=env) for name in names]
    events = {name: job.events for name, job in zip(names, jobs, strict=True)}
    # Both jobs have every remote task waiting for offers (worker:2 is handed
    # to the backend last) before the cluster has any agent.
    for name, job in zip(names, jobs, strict=True):
        events[name].wait_for("task_launched", job, where=lambda e: e["task"] == "worker:2")
    # Together: the allocator offers the two agents one to each job (the
    # lower share first), each holding half of what it needs.
    master.add_agents(*ONE_CPU_AGENTS)
    said = [job.communicate(timeout=300)[1] for job in jobs]
    for name, stderr in zip(names, said, strict=True):
        assert events[name].verdict()["result"] == "succeeded", stderr
        # Each task ran once: a relaunch would leave a failed task on the master.
        exits = [(e["task"], e["attempt"], e["reason"]) for e in events[name].of("task_exited")]
        assert events[name].of("task_relaunched") == [], exits
    assert not job_procs.wait_gone(10)

    state = master.state()
    assert state["frameworks"] == []
    frameworks = state["completed_frameworks"]
    assert len(frameworks) == 2
    intervals = sorted(_busy_interval(f) for f in frameworks)
    # Neither ever had tasks on the cluster while the other did: each ran
    # whole, one after the other.
    (_, first_end), (second_start, _) = intervals
    assert first_end <= second_start, f"the jobs' tasks overlapped: {intervals}"
    for framework in frameworks:
        assert len(framework["tasks"] + framework["completed_tasks"]) == 2


def test_a_job_that_can_never_fit_launches_nothing_and_says_why(
    two_agents: MesosUnderTest, job_procs: JobProcesses, tmp_path: Path
) -> None:
    # Three remote tasks of one CPU each: every one fits an agent, the job
    # does not fit the cluster. Without --wait-for-agents that ends it at
    # once (tests/test_mesos_never_fits.py); with it, the hold says why at
    # the timeout.
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "--wait-for-agents",
        "-m",
        two_agents.url,
        "-n",
        "too-big",
        *events.flag,
        "-w",
        "4",
        "-s",
        "0",
        "-Mw",
        "256",
        "--timeout",
        "12",
        "--",
        "true",
        env=job_procs.env(),
    )
    verdict = events.verdict()
    assert (verdict["result"], verdict["exit_status"]) == ("never up", 124), result.stderr
    assert "task_placed" not in events.names(), events.names()
    assert not two_agents.tasks(), "a part of a job that could never run was launched"
    # The diagnosis's wording, as the user reads it: why, in the user's units.
    assert "did not come up within 12s" in result.stderr, result.stderr
    assert "fit 2 of the 3 tasks waiting" in result.stderr, result.stderr
    assert "cpus 3, mem 768 MiB, 3 ports together" in result.stderr, result.stderr
    assert not job_procs.wait_gone(10)


FIVE_AGENTS = tuple(
    AgentSpec(f"cpus:4;mem:2048;ports:[{32600 + 20 * i}-{32619 + 20 * i}]") for i in range(5)
)
"""Five agents, each with room for every task of the job below, on ports no
other test's agents offer."""


@pytest.fixture(params=MESOS_KINDS)
def five_agents(
    request: pytest.FixtureRequest,
    job_procs: JobProcesses,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[MesosUnderTest]:
    with open_cluster(
        request.param, job_procs, monkeypatch, tmp_path / "mesos", FIVE_AGENTS
    ) as cluster:
        yield cluster


def test_a_job_spreads_over_the_agents_with_room_and_packs_onto_one_when_asked(
    five_agents: MesosUnderTest, job_procs: JobProcesses
) -> None:
    # Ten remote tasks (worker 0 runs beside tfrun), each fitting any agent.
    job = ("-w", "11", "-s", "0", "-Cw", "0.1", "-Mw", "64", "--timeout", "90", "--", "true")
    for placement in ("spread", "pack"):
        result = run_tfrun(
            "-m",
            five_agents.url,
            "-n",
            f"placed-{placement}",
            "--placement",
            placement,
            *job,
            env=job_procs.env(),
        )
        assert result.returncode == 0, result.stderr
        framework = five_agents.framework(f"placed-{placement}")
        tasks = framework["tasks"] + framework["completed_tasks"]
        per_agent = sorted(Counter(t["slave_id"] for t in tasks).values())
        expected = [2, 2, 2, 2, 2] if placement == "spread" else [10]
        assert per_agent == expected, (placement, per_agent)
    assert not job_procs.wait_gone(10)


def test_an_agent_given_more_than_its_launch_slots_starts_them_in_waves(
    five_agents: MesosUnderTest, job_procs: JobProcesses
) -> None:
    # Twenty remote tasks packed onto one agent: LAUNCHES_PER_AGENT (16) are
    # launched at once, the other four on the agent's next offer once the
    # first have started. On real Mesos: that the next offer comes and the
    # job completes.
    result = run_tfrun(
        *("-m", five_agents.url, "-n", "waves", "--placement", "pack"),
        *("-w", "21", "-s", "0", "-Cw", "0.1", "-Mw", "64", "--timeout", "90", "--", "true"),
        env=job_procs.env(),
    )
    assert result.returncode == 0, result.stderr
    framework = five_agents.framework("waves")
    tasks = framework["tasks"] + framework["completed_tasks"]
    assert sorted(Counter(t["slave_id"] for t in tasks).values()) == [20]
    if five_agents.double is not None:
        accepts = [
            c["body"]["accept"] for c in five_agents.double.calls("ACCEPT") if c["status"] == 202
        ]
        launched = [len(a["operations"][0]["launch"]["task_infos"]) for a in accepts]
        assert launched == [LAUNCHES_PER_AGENT, 20 - LAUNCHES_PER_AGENT], launched
        assert accepts[0]["filters"]["refuse_seconds"] == 0  # its room straight back
    assert not job_procs.wait_gone(10)
