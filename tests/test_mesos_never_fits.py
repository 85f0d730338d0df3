"""A job that no agent registered with the master could ever hold (issue 40,
item 12): it ends within seconds, exit 2, in one line naming the task, what
it needs and the agent that comes nearest, as the Slurm backend refuses a job
Slurm will never run; before, it waited for offers forever unless --timeout
was given, saying "needs cpus 16 ... largest offer cpus 4" every 15 s.

Whether an agent could ever hold a task comes from the master's agent list
(the operator API's GET_AGENTS): each agent's total resources, those reserved
for another role left out. Run on the test master and on real Mesos, whose
agents (``real_mesos.DEFAULT_AGENTS``) have 4 CPUs, 8 GiB and no GPU each,
and one reserved for the role "ml".
"""

from __future__ import annotations

import re
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import JobProcesses, marked_master, popen_tfrun, run_tfrun
from tests.jobevents import JobEvents
from tests.mesos_clusters import MesosUnderTest, open_cluster
from tfmesos.mesos.agents import AgentTotal, agent_totals, never_held, never_held_together
from tfmesos.spec import TaskSpec
from tfmesos.testing.real_mesos import AgentSpec

PY = sys.executable
PS_ONLY = ("-w", "1", "-s", "1")
"""One task on Mesos (ps:0); the chief, worker:0, runs beside tfrun."""


def _refusal(stderr: str) -> str:
    """The one error line tfrun said."""
    errors = [line for line in stderr.splitlines() if line.startswith("tfrun: error:")]
    assert len(errors) == 1, stderr
    return errors[0]


@pytest.mark.parametrize(
    ("flags", "need"),
    [
        (("-Cs", "16"), "cpus 16, mem 1 GiB, 1 port"),
        (("-Ms", "20480"), "cpus 1, mem 20 GiB, 1 port"),
        (("-Gs", "1"), "cpus 1, mem 1 GiB, gpus 1, 1 port"),
    ],
    ids=["cpus", "mem", "gpus"],
)
def test_a_task_no_agent_can_ever_hold_ends_the_job_at_once(
    flags: tuple[str, str],
    need: str,
    mesos: MesosUnderTest,
    job_procs: JobProcesses,
    tmp_path: Path,
) -> None:
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "-m", mesos.url, *events.flag, *PS_ONLY, *flags, "--", "true",
        env=job_procs.env(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    verdict = events.verdict()
    assert verdict["exit_status"] == 2 and verdict["result"] == "refused", verdict
    assert "ps:0" not in {e["task"] for e in events.of("task_placed")}
    line = _refusal(result.stderr)
    # The line's wording: the task, what it needs, the agent nearest to it.
    assert line.startswith(
        f"tfrun: error: the mesos backend failed: ps:0 needs {need}, more than any of the "
    ), line
    assert "agents registered with the Mesos master could ever offer (role '*')" in line, line
    assert re.search(r"the largest, on 127\.0\.0\.1, has cpus 4, mem 8 GiB, \d+ ports;", line), line
    # Not the periodic progress line: the job ended before the first one.
    assert "largest offer seen" not in result.stderr, result.stderr
    assert mesos.torn_down(), mesos.state()["frameworks"]
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_a_task_that_an_agent_can_hold_still_runs(
    mesos: MesosUnderTest, job_procs: JobProcesses, tmp_path: Path
) -> None:
    """The largest task an agent holds (with room for its executor) runs."""
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun(
        "-m", mesos.url, *events.flag, *PS_ONLY, "-Cs", "3", "-Ms", "6144", "--", "true",
        env=job_procs.env(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert events.verdict()["result"] == "succeeded", result.stderr
    assert {e["task"] for e in events.of("task_placed")} == {"ps:0", "worker:0"}
    assert mesos.torn_down()
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_resources_reserved_for_another_role_are_not_counted(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Real Mesos (the test master reserves nothing): an agent of 8 CPUs
    reserved for "ml" and one of 2 unreserved. A task of 4 CPUs in the role
    "*" could never be held (the 8 are never offered to it), and is refused
    naming the 2; in the role "ml" it runs."""
    agents = [
        AgentSpec("cpus(ml):8;mem(ml):4096;ports(ml):[32420-32429]"),
        AgentSpec("cpus:2;mem:4096;ports:[32430-32439]"),
    ]
    with open_cluster("real-mesos", job_procs, monkeypatch, tmp_path / "mesos", agents) as mesos:
        assert mesos.real is not None
        mesos.real.wait_agents(2)
        refused = run_tfrun(
            "-m", mesos.url, *PS_ONLY, "-Cs", "4", "--", "true", env=job_procs.env(), timeout=120
        )  # fmt: skip
        assert refused.returncode == 2, refused.stderr
        line = _refusal(refused.stderr)
        assert "ps:0 needs cpus 4, mem 1 GiB, 1 port, more than any of the 2 agents" in line
        assert "(role '*'): the largest, on 127.0.0.1, has cpus 2, mem 4 GiB, 10 ports" in line
        ran = run_tfrun(
            "-m", mesos.url, "-r", "ml", *PS_ONLY, "-Cs", "4", "--", "true",
            env=job_procs.env(), timeout=120,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert mesos.torn_down()
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_with_no_agent_yet_the_first_to_register_decides(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No agent has registered when the job starts: whether one could ever
    hold the task is not known, and tfrun asks again until one registers,
    which here is too small: the job ends then, exit 2."""
    with marked_master(job_procs, monkeypatch, agents=0) as master:
        proc = popen_tfrun(
            "-m", master.url, *PS_ONLY, "-Cs", "16", "--", "true", env=job_procs.env()
        )
        proc.events.wait_for("backend_attached", proc)
        assert proc.poll() is None, proc.said()
        master.call(lambda m: m.add_agent(cpus=4, mem=8192, ports="31000-31499"))
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    line = _refusal(err)
    assert "ps:0 needs cpus 16, mem 1 GiB, 1 port, more than the one agent registered" in line
    assert "has cpus 4, mem 8 GiB, 500 ports" in line, line
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_where_it_cannot_be_known_the_wait_and_timeout_are_said_once(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The master refuses its agent list (as an authenticating master may
    refuse a principal without the right to see it): whether an agent could
    ever hold the task is not known, so the job waits, as it did; with the
    first progress line it says, once, how long it has waited, why it cannot
    tell, and that --timeout exists. The progress line goes on alone."""
    with marked_master(job_procs, monkeypatch, agents=2, cpus=4, mem=8192) as master:
        master.fail_next_call("GET_AGENTS", count=100, status=403, message="Forbidden")
        proc = popen_tfrun(
            "-m", master.url, *PS_ONLY, "-Cs", "16", "--", "true", env=job_procs.env()
        )
        # Two progress lines: the note comes with the first, and only then.
        deadline = time.monotonic() + 120
        while proc.said().count("waiting for 1 of 2 tasks to register") < 2:
            assert proc.poll() is None, proc.said()
            assert time.monotonic() < deadline, proc.said()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert master.frameworks() == [], "the framework was left behind"
    notes = [line for line in err.splitlines() if "--timeout" in line]
    assert len(notes) == 1, err
    assert re.search(
        r"Mesos: ps:0 has waited \d+s for an offer that holds it; whether any agent could ever "
        r"hold it is not known \(the master refused its agent list: 403 Forbidden\)\. tfrun waits "
        r"for as long as it takes: give --timeout SECONDS to give up instead",
        notes[0],
    ), notes[0]
    # The periodic line is still there, each time.
    assert err.count("the largest offer seen was cpus 4") == 2, err
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def _resource(
    name: str, value: float, role: str | None = None, **extra: object
) -> dict[str, object]:
    resource: dict[str, object] = {"name": name, "type": "SCALAR", "scalar": {"value": value}}
    if role is not None:
        resource["role"] = role
        resource["reservations"] = [{"type": "STATIC", "role": role}]
    resource.update(extra)
    return resource


PORTS = {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": 1, "end": 10}]}}


def test_what_an_agent_could_ever_offer_follows_reservations_and_roles() -> None:
    """Unreserved resources count for every role; reserved ones for their role,
    its sub-roles (a reservation for "eng" is offered to "eng/web") and, with
    refined reservations, the last (most refined) role only. The agent list
    without total_resources falls back on agent_info's."""
    answer = {
        "get_agents": {
            "agents": [
                {
                    "agent_info": {"hostname": "a1"},
                    "total_resources": [
                        _resource("cpus", 2),
                        _resource("cpus", 8, "eng"),
                        _resource("mem", 4096),
                        PORTS,
                    ],
                },
                {
                    "agent_info": {
                        "hostname": "a2",
                        "resources": [
                            _resource("gpus", 2),
                            _resource("cpus", 4),
                            _resource("mem", 1024),
                            PORTS,
                        ],
                    }
                },
                {
                    "agent_info": {"hostname": "a3"},
                    "total_resources": [
                        _resource(
                            "cpus",
                            16,
                            "eng/web",
                            reservations=[
                                {"type": "STATIC", "role": "eng"},
                                {"type": "DYNAMIC", "role": "eng/web"},
                            ],
                        ),
                        _resource("mem", 4096),
                    ],
                },
            ]
        }
    }
    star = agent_totals(answer, ["*"])
    assert star == [
        AgentTotal("a1", cpus=2, mem=4096, ports=10),
        AgentTotal("a2", cpus=4, mem=1024, gpus=2, ports=10),
        AgentTotal("a3", mem=4096),
    ]
    assert agent_totals(answer, ["eng/web"])[0].cpus == 10  # the parent's reservation
    assert agent_totals(answer, ["eng/web"])[2].cpus == 16
    assert agent_totals(answer, ["eng"])[2].cpus == 0  # refined for eng/web only
    six = TaskSpec("worker", 1, 6.0, 1024.0, 0, None)
    assert never_held(six, agent_totals(answer, ["eng"]), ["eng"]) is None
    refusal = never_held(six, star, ["*"])
    assert refusal == (
        "worker:1 needs cpus 6, mem 1 GiB, 1 port, more than any of the 3 agents registered "
        "with the Mesos master could ever offer (role '*'): the largest, on a2, has cpus 4, "
        "mem 1 GiB, gpus 2, 10 ports; ask for less, or use a cluster with larger agents"
    ), refusal
    # No port at all: a3 holds the CPUs and memory, and still never the task.
    small = TaskSpec("ps", 0, 1.0, 1024.0, 0, None)
    assert never_held(small, [star[2]], ["*"]) is not None
    assert never_held(small, star, ["*"]) is None


@pytest.mark.unit
def test_among_agents_that_come_as_near_the_largest_is_named() -> None:
    # No agent has a GPU: each comes as near as any. Before: the first
    # listed was named, on real Mesos at times the agent whose every
    # resource is reserved for another role ("has cpus 0, mem 0 MiB").
    task = TaskSpec("ps", 0, 1.0, 1024.0, 1, None)
    agents = [AgentTotal("reserved"), AgentTotal("big", cpus=4, mem=8192, ports=500)]
    said = never_held(task, agents, ["*"])
    assert said is not None and "the largest, on big, has cpus 4, mem 8 GiB" in said, said


def _workers(count: int, cpus: float, mem: float = 1024) -> list[TaskSpec]:
    return [TaskSpec("worker", i, cpus, mem, 0, None) for i in range(1, count + 1)]


def test_a_job_whose_tasks_never_fit_at_once_is_told_apart_from_one_that_might() -> None:
    two = [AgentTotal("a", 4, 8192, 0, 100), AgentTotal("b", 4, 8192, 0, 100)]
    # The issue's: -w 5 -Cw 3 on two agents of 4 CPUs, four tasks on Mesos.
    said = never_held_together(_workers(4, 3), two)
    assert said is not None
    assert "the job's 4 tasks of cpus 3" in said and "hold at most 2 of them" in said
    assert never_held_together(_workers(2, 3), two) is None
    assert never_held_together(_workers(4, 2), two) is None  # two a piece
    # Mixed shapes that no one count refuses, but the total does.
    mixed = [*_workers(3, 2), TaskSpec("ps", 0, 3, 1024, 0, None)]
    said = never_held_together(mixed, two)
    assert said is not None and "need cpus 9 at once" in said and "(8)" in said
    # What might fit is never refused: 3 + 1 and 2 + 2 CPUs fill both agents.
    fits = [TaskSpec("ps", 0, 3, 1024, 0, None), *_workers(3, 1)]
    assert never_held_together(fits, two) is None


def test_a_job_whose_tasks_never_fit_at_once_ends_at_once_or_waits_when_asked(
    mesos: MesosUnderTest, job_procs: JobProcesses, tmp_path: Path
) -> None:
    """The issue's: ``-w 5 -Cw 3`` on agents of 4 CPUs, each task fitting
    one, four never fitting at once. Before: it waited for ever (until
    ``--timeout``), saying an agent could hold it once it had room."""
    events = JobEvents(tmp_path / "events.jsonl")
    job = ("-m", mesos.url, "-w", "5", "-Cw", "3", "--", "true")
    result = run_tfrun(*events.flag, *job, env=job_procs.env(), timeout=120)
    assert result.returncode == 2, result.stderr
    line = _refusal(result.stderr)
    assert (
        "the job's 4 tasks of cpus 3, mem 1 GiB, 1 port (worker:1, ...) never fit at once" in line
    )
    assert re.search(r"the \d agents registered with the Mesos master hold at most 2 of them", line)
    assert "(--wait-for-agents waits for more agents)" in line
    assert events.verdict()["result"] == "refused"
    assert not events.of("task_placed"), events.of("task_placed")
    waited = run_tfrun(
        "--wait-for-agents", "--timeout", "8", *job, env=job_procs.env(), timeout=120
    )
    assert waited.returncode == 124, waited.stderr
    assert waited.stderr.count("never fit at once") == 1, waited.stderr  # said once, not every look
    assert "waiting for more agents (--wait-for-agents)" in waited.stderr
    assert mesos.torn_down(), mesos.state()["frameworks"]
