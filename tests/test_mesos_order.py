"""Calls reach the master in the order the framework decided them, on a slow network.

Mesos's master applies calls in the order they arrive (``Master::Http::scheduler``
takes each request as it comes, ``src/master/master.cpp`` applies it), and its
scheduler library sends them on one pipelined connection
(``src/scheduler/scheduler.cpp``), so a call decided later cannot overtake one
decided earlier. A client that sends calls concurrently lets the network
reorder them: a REVIVE that overtakes a SUPPRESS leaves the role suppressed; a
DECLINE that lands after a REVIVE filters its agent for as long as it asked.
Either way a job waiting for offers may never get one.

The test master holds each call on its way (``call_delay``, ``delay_calls``),
as a loaded network would; a job whose worker needs one relaunch (its first
launch fails) must still come up, every time.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import JobProcesses, marked_master, run_tfrun
from tests.jobevents import JobEvents
from tfmesos.testing.master import ThreadedTestMaster

RUNS = 20
JOB = ("-w", "2", "-s", "1", "--", "true")
# The job's own bound: a job left without offers ends with an error, not a hang.
UP_WITHIN = ("--timeout", "30")
PORTS = "32100-32399"
"""The agents' ports: no other test's, and outside the local backend's
(below 31000) and the kernel's ephemeral range (from 32768). A task is given
its offer's first free port, so on the default 31000-32000 this job took
31000 and 31001, as did the tasks of every other test master and real Mesos
agent on this machine: a concurrent test's task holding 31000 (an mnist ps,
for a minute) failed this job's task there ("port 31000 on 127.0.0.1 is
already in use", exit 1), and each relaunch was given 31000 again until the
job gave up (exit 124), or came up after more relaunches than the one
injected: 1 to 7 jobs in 20, in runs on a machine shared with other tests."""


@pytest.fixture
def delayed_master(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[ThreadedTestMaster, int]]:
    """One master for every run: each call held a random 0-300 ms on its way."""
    seed = random.randrange(2**32)
    with marked_master(
        job_procs,
        monkeypatch,
        agents=2,
        cpus=4,
        mem=8192,
        ports=PORTS,
        call_delay=(0.0, 0.3),
        call_delay_seed=seed,
    ) as master:
        yield master, seed


def run_job_needing_a_relaunch(
    master: ThreadedTestMaster, job_procs: JobProcesses, events: JobEvents, name: str = "order"
) -> str | None:
    """Run the job once, worker:1's first launch failing; why it did not come up, or None.

    ``name`` (the framework's, and the start of every task's name) keeps the
    injected failure to this run: one a run never launched stays behind.
    ``events`` is where the run's events go, one file a run."""
    master.fail_next_launch(rf"^{name} /job:worker/task:1$", count=1)
    result = run_tfrun(
        "-m", master.url, "-n", name, *events.flag, *UP_WITHIN, *JOB, env=job_procs.env()
    )
    left = job_procs.wait_gone(10)
    happened = events.all()
    # Each problem names what the job did, so that a failure says why.
    if not happened or happened[-1]["event"] != "job_verdict":
        return f"exit {result.returncode}, no verdict: {[e['event'] for e in happened]}"
    verdict = happened[-1]
    if verdict["exit_status"] != 0 or result.returncode != 0:
        exits = [(e["task"], e["attempt"], e["reason"]) for e in events.of("task_exited")]
        return f"{verdict['result']} (exit {result.returncode}): {verdict['message']}; {exits}"
    if left:
        return f"left running: {[p.cmdline() for p in left]}"
    relaunched = [(e["task"], e["attempt"]) for e in events.of("task_relaunched")]
    if relaunched != [("worker:1", 2)]:
        exits = [(e["task"], e["attempt"], e["reason"]) for e in events.of("task_exited")]
        return f"relaunched {relaunched}, not worker:1 once; the exits: {exits}"
    return None


def test_a_job_needing_a_relaunch_comes_up_20_in_20_with_every_call_delayed_at_random(
    delayed_master: tuple[ThreadedTestMaster, int], job_procs: JobProcesses, tmp_path: Path
) -> None:
    master, seed = delayed_master
    failed = {}
    for run in range(RUNS):
        name = f"order-{run}"
        events = JobEvents(tmp_path / f"{name}.jsonl")
        problem = run_job_needing_a_relaunch(master, job_procs, events, name)
        if problem is not None:
            failed[run] = problem
    came_up = RUNS - len(failed)
    assert not failed, f"{came_up} of {RUNS} came up (call_delay_seed={seed}): {failed}"
    # The calls were held, and every framework was torn down.
    assert sum(1 for call in master.calls() if call["delay"] > 0) > RUNS
    assert master.frameworks() == []


def test_a_revive_sent_while_a_decline_is_on_its_way_does_not_overtake_it(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The reported failure, made certain: the first offers come before the job
    has tasks to place, and are declined for long (nothing waits for them); the
    DECLINEs are held on their way while the tasks arrive and the job asks for
    offers again. A REVIVE that overtakes them clears filters not yet set, and
    the DECLINEs then filter every agent for an hour. Sent in order, the REVIVE
    lands after the DECLINEs and clears their filters. Three agents: the job's
    two remote tasks spread over two, so the third's offer is one declined."""
    with marked_master(job_procs, monkeypatch, agents=3, cpus=4, mem=8192, ports=PORTS) as master:
        master.delay_calls("DECLINE", 1.0)
        problem = run_job_needing_a_relaunch(
            master, job_procs, JobEvents(tmp_path / "events.jsonl")
        )
        assert problem is None, problem
        applied = [c["type"] for c in master.calls() if c["type"] in ("DECLINE", "REVIVE")]
        first_revive = applied.index("REVIVE")
        assert "DECLINE" in applied[:first_revive], applied
