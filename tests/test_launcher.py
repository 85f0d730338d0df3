"""The launcher's rules, through the fake backend (tfmesos.testing.fake): no
process, no socket, each test in milliseconds. One end-to-end test at the
bottom drives the real local backend and agent."""

from __future__ import annotations

import asyncio
import io
import logging
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from tests.conftest import until
from tfmesos import ClusterSpec, ClusterStartError, Job
from tfmesos.backends.base import Launch
from tfmesos.backends.local.backend import LocalBackend
from tfmesos.errors import JobFailedError, ResourceError, TFMesosError
from tfmesos.launcher import MAX_ATTEMPTS, AttemptState, Launcher
from tfmesos.launcher.events import EventRecorder
from tfmesos.launcher.run import run_with_restarts
from tfmesos.rendezvous.protocol import ENV_TASK_ID
from tfmesos.testing.fake import (
    BreaksBackend,
    DiesEarly,
    FakeBackend,
    FakeNetwork,
    FakeRuns,
    Hangs,
    Killed,
    Lost,
    Plan,
    Runs,
)

OK = f"{sys.executable} -c \"print('ran {{job_name}}:{{task_index}}')\""


def spec(**kw: object) -> ClusterSpec:
    jobs = (Job("ps", 1, cmd=OK), Job("worker", 2, cmd=OK))
    return ClusterSpec(jobs, replica=True, **kw)  # type: ignore[arg-type]


async def run_job(launcher: Launcher) -> None:
    try:
        await launcher.start()
        await launcher.wait_for_workers()
    finally:
        await launcher.stop()


def fake(plans: Mapping[str, Plan | Sequence[Plan]] | None = None, **kw: object) -> FakeBackend:
    return FakeBackend(spec(**kw), plans)


# -- before the cluster is up: retried ------------------------------------------


def test_a_task_that_dies_before_the_cluster_is_up_is_relaunched() -> None:
    backend = fake({"worker:1": [DiesEarly()] * (MAX_ATTEMPTS - 1) + [Runs(0, b"hello\n")]})
    out = io.BytesIO()
    launcher = backend.launcher(output=out)
    asyncio.run(run_job(launcher))
    assert backend.attempts == {"ps:0": 1, "worker:0": 1, "worker:1": MAX_ATTEMPTS}
    assert launcher.outcomes() == {
        "ps:0": "stopped by tfrun",
        "worker:0": "exited 0",
        "worker:1": "exited 0",
    }
    assert b"[worker:1] hello\n" in out.getvalue()


def test_a_task_that_keeps_dying_ends_the_start_with_its_name_and_its_last_output() -> None:
    backend = fake({"worker:1": DiesEarly(3, ("no such file: model.ckpt",))})
    with pytest.raises(ClusterStartError, match=r"task worker:1 .*exited with status 3") as caught:
        asyncio.run(run_job(backend.launcher()))
    assert f"failed {MAX_ATTEMPTS} times" in str(caught.value)
    assert caught.value.failure is not None
    assert caught.value.failure.output_tail == ("no such file: model.ckpt",)
    assert backend.attempts["worker:1"] == MAX_ATTEMPTS
    assert backend.closed == 1


def test_the_relaunch_warning_is_not_glued_to_the_tasks_output(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend = fake({"worker:1": [DiesEarly(1, ("line one", "line two")), Runs()]})
    caplog.set_level("WARNING", logger="tfmesos")
    asyncio.run(run_job(backend.launcher()))
    warnings = [r.getMessage() for r in caplog.records if "relaunching" in r.getMessage()]
    assert len(warnings) == 1, warnings
    first, *tail = warnings[0].splitlines()
    assert "before the cluster was up; relaunching it (attempt 2 of 3)" in first, warnings[0]
    assert tail == ["  | line one", "  | line two"], warnings[0]


def test_a_start_that_hangs_ends_at_the_timeout_naming_who_is_missing() -> None:
    backend = fake({"ps:0": Hangs(), "worker:1": Hangs()}, start_timeout=0.05)
    with pytest.raises(
        ClusterStartError,
        match=r"did not come up within 0.05s: still waiting for ps:0, worker:1 \(2 never started\)",
    ):
        asyncio.run(run_job(backend.launcher()))
    # Never registered: the launcher kills them through the backend.
    assert sorted(backend.killed) == ["ps:0", "worker:1"]
    assert backend.closed == 1


# -- after the cluster is up: one failure ends the job ---------------------------


def test_a_task_that_fails_after_the_cluster_is_up_ends_the_job_at_once() -> None:
    backend = fake({"worker:1": Runs(7), "worker:0": Runs(None)})
    with pytest.raises(JobFailedError, match=r"task worker:1 .*exited with status 7") as caught:
        asyncio.run(run_job(backend.launcher()))
    assert caught.value.exit_code == 7
    assert backend.attempts == {"ps:0": 1, "worker:0": 1, "worker:1": 1}  # never relaunched
    # The others are told to stop, and the backend is released.
    assert backend.sent("ps:0")[-1] == {"type": "stop", "reason": "the job is ending"}
    assert backend.sent("worker:0")[-1]["type"] == "stop"
    assert backend.closed == 1


def test_the_fake_backends_launcher_sends_its_events_where_the_test_says() -> None:
    backend = fake({"worker:1": Runs(7), "worker:0": Runs(None)})
    events = EventRecorder()
    with pytest.raises(JobFailedError):
        asyncio.run(run_job(backend.launcher(events=events)))
    [failed] = [e for e in events.of("task_exited") if e["task"] == "worker:1"]
    assert failed["exit_code"] == 7 and failed["action"] == "fail job"
    assert events.names().index("cluster_up") < events.names().index("job_stopped")


def test_a_replica_that_exits_0_has_done_its_part_and_the_job_waits_for_the_workers() -> None:
    backend = fake({"ps:0": Runs(0), "worker:1": Runs(0)})
    launcher = backend.launcher()
    asyncio.run(run_job(launcher))
    assert launcher.outcomes() == {n: "exited 0" for n in ("ps:0", "worker:0", "worker:1")}


def test_a_fine_grained_server_that_exits_0_while_the_cluster_runs_fails_the_job() -> None:
    job = ClusterSpec((Job("ps", 1), Job("worker", 1)))
    backend = FakeBackend(job, {"ps:0": Runs(None), "worker:0": Runs(0)})
    launcher = backend.launcher()

    async def scenario() -> None:
        try:
            await launcher.start()
            await launcher.watch()
        finally:
            await launcher.stop()

    with pytest.raises(
        JobFailedError, match=r"task worker:0 .*exited while the cluster was running"
    ):
        asyncio.run(scenario())
    assert backend.closed == 1


def test_a_task_lost_with_its_machine_ends_the_job_with_the_backends_word() -> None:
    backend = fake({"worker:1": Lost("agent a7 gone"), "worker:0": Runs(None)})
    with pytest.raises(JobFailedError, match="task worker:1 on fake-host ended in state lost"):
        asyncio.run(run_job(backend.launcher()))
    assert backend.closed == 1


class ExplainingBackend(FakeBackend):
    """A backend whose word on a SIGKILLed command names why (Mesos)."""

    kill_reason_timeout = 0.5


class SlowlyExplainingBackend(FakeBackend):
    """One whose word may take longer than ``DISCONNECT_GRACE`` (real Mesos
    destroying a container on a loaded host)."""

    kill_reason_timeout = 3.0


@pytest.mark.parametrize(
    ("backend_type", "plan", "reason"),
    [
        # The backend's word right behind the task's report: it is said.
        (
            ExplainingBackend,
            Killed("killed for exceeding its memory limit", 0.1),
            "ended in state TASK_FAILED",
        ),
        # Waited for as long as its backend says its word may take: the
        # fixed 2 s wait before missed Mesos's word in three CI runs.
        (
            SlowlyExplainingBackend,
            Killed("killed for exceeding its memory limit", 2.5),
            "ended in state TASK_FAILED",
        ),
        # No word within the wait: the task's own report.
        (ExplainingBackend, Killed(after=None), "killed by SIGKILL"),
        # ... which says when the kernel's OOM killer did it.
        (
            ExplainingBackend,
            Killed(after=None, out_of_memory=True),
            "killed by SIGKILL by the kernel's OOM killer, over its memory cgroup's limit",
        ),
        # Its word says no more than the signal: the task's own report.
        (ExplainingBackend, Killed("Command terminated", 0.1, limited=False), "killed by SIGKILL"),
        # A backend that has nothing to add is not waited for.
        (FakeBackend, Killed("never said", 0.1), "killed by SIGKILL"),
    ],
    ids=[
        "explained",
        "explained-slowly",
        "never-explained",
        "never-explained-out-of-memory",
        "said-no-more",
        "not-waited-for",
    ],
)
def test_a_sigkilled_command_is_explained_by_its_backend_where_it_can(
    backend_type: type[FakeBackend], plan: Plan, reason: str
) -> None:
    # Seen on real Mesos under load: a command over its memory limit was
    # reported SIGKILLed by its agent before the agent's TASK_FAILED came,
    # and the job said "killed by SIGKILL" and tore the framework down.
    backend = backend_type(spec(), {"worker:1": plan, "worker:0": Runs(None)})
    events = EventRecorder()
    with pytest.raises(JobFailedError):
        asyncio.run(run_job(backend.launcher(events=events)))
    [killed] = [e for e in events.of("task_exited") if e["task"] == "worker:1"]
    assert killed["reason"].startswith(reason), killed
    assert killed["action"] == "fail job"


def test_a_backend_that_fails_ends_the_job_and_is_still_released() -> None:
    backend = fake({"worker:1": BreaksBackend("master gone for good"), "worker:0": Runs(None)})
    with pytest.raises(TFMesosError, match="the fake backend failed: master gone for good"):
        asyncio.run(run_job(backend.launcher()))
    assert backend.closed == 1


def test_each_task_gets_the_cluster_with_every_address() -> None:
    backend = fake()
    launcher = backend.launcher()
    asyncio.run(run_job(launcher))
    cluster = backend.sent("worker:1")[0]
    assert cluster["type"] == "cluster"
    assert (cluster["job_name"], cluster["task_index"]) == ("worker", 1)
    assert cluster["cluster_def"] == {"ps": ["fake-host:1"], "worker": ["fake-host:1"] * 2}
    assert launcher.outcomes()["worker:0"] == "exited 0"


# -- teardown on every path -------------------------------------------------------


@pytest.mark.parametrize(
    ("plans", "error"),
    [
        ({}, None),
        ({"worker:1": DiesEarly()}, ClusterStartError),
        ({"worker:1": Runs(2), "worker:0": Runs(None)}, JobFailedError),
        ({"worker:1": BreaksBackend(), "worker:0": Runs(None)}, TFMesosError),
    ],
    ids=["success", "never-up", "task-failed", "backend-failed"],
)
def test_every_way_out_releases_the_backend_and_leaves_no_task_running(
    plans: dict[str, Plan], error: type[Exception] | None
) -> None:
    backend = fake(plans)
    launcher = backend.launcher()
    if error is None:
        asyncio.run(run_job(launcher))
    else:
        with pytest.raises(error):
            asyncio.run(run_job(launcher))
    assert backend.closed == 1
    assert backend.network.server is not None and backend.network.server.closed
    assert _live(launcher) == []
    assert all(task.ended for task in backend.tasks.values())


def test_a_caller_that_cancels_the_job_still_gets_every_task_stopped() -> None:
    backend = fake({"worker:0": Runs(None), "worker:1": Runs(None)})
    launcher = backend.launcher()

    async def scenario() -> None:
        job = asyncio.create_task(run_job(launcher))
        await until(lambda: launcher.cluster_def != {}, "the cluster up", poll=0)
        # Cancelled on the very turn the tasks' next events come in: on
        # Python 3.10/3.11 asyncio.wait_for dropped such a cancellation, and
        # the job (a Ctrl-C, in run.py) went on.
        job.cancel()
        await until(job.done, "the cancelled job done", poll=0)
        assert job.cancelled()

    asyncio.run(scenario())
    assert backend.closed == 1
    assert set(launcher.outcomes().values()) == {"stopped by tfrun"}


def test_a_backend_that_cannot_start_is_released() -> None:
    backend = FakeBackend(spec(), start_error=TFMesosError("no master answers"))
    with pytest.raises(TFMesosError, match="no master answers"):
        asyncio.run(run_job(backend.launcher()))
    assert backend.closed == 1
    assert backend.launched == []


def test_a_job_the_backend_refuses_starts_nothing() -> None:
    backend = FakeBackend(spec(), refuse="task worker:0 asks for 9 GPUs")
    with pytest.raises(ResourceError, match="9 GPUs"):
        asyncio.run(run_job(backend.launcher()))
    assert not backend.started and backend.launched == [] and backend.closed == 0


# -- the chief beside the launcher ------------------------------------------------


def test_the_chief_runs_on_the_chief_backend_and_the_rest_on_the_other() -> None:
    job = spec()
    network = FakeNetwork()
    remote = FakeBackend(job, network=network, host="remote")
    chief = FakeBackend(job, network=network, host="here")
    launcher = remote.launcher(chief_backend=chief)
    asyncio.run(run_job(launcher))
    assert (chief.checked, chief.launched) == (["worker:0"], ["worker:0"])
    assert (remote.checked, remote.launched) == (["ps:0", "worker:1"], ["ps:0", "worker:1"])
    assert launcher.cluster_def["worker"] == ["here:1", "remote:1"]
    assert (chief.closed, remote.closed) == (1, 1)


def test_without_replica_mode_no_task_is_the_chief() -> None:
    job = ClusterSpec((Job("worker", 2),))
    network = FakeNetwork()
    remote = FakeBackend(job, {"worker:0": Runs(None), "worker:1": Runs(None)}, network=network)
    chief = FakeBackend(job, network=network)

    async def scenario() -> None:
        launcher = remote.launcher(chief_backend=chief)
        try:
            await launcher.start()
        finally:
            await launcher.stop()

    asyncio.run(scenario())
    assert chief.launched == [] and remote.launched == ["worker:0", "worker:1"]


# -- restarts (run.py's --max-restarts loop) ---------------------------------------


def test_a_job_that_fails_once_up_is_run_again_and_its_second_run_decides() -> None:
    job = spec(max_restarts=2)
    runs = FakeRuns(job, [{"worker:1": Runs(3)}])
    status = asyncio.run(run_with_restarts(job, runs.make, 0.0))
    assert status == 0
    assert len(runs.backends) == 2
    assert all(b.closed == 1 for b in runs.backends)
    # Each run's tasks know which run they are in.
    assert [b.sent("worker:0")[0]["restart"] for b in runs.backends] == [0, 1]


def test_restarts_end_with_the_last_runs_failure() -> None:
    job = spec(max_restarts=1)
    failing: dict[str, Plan | list[Plan]] = {"worker:1": Runs(3), "worker:0": Runs(None)}
    runs = FakeRuns(job, [failing, failing, failing])
    assert asyncio.run(run_with_restarts(job, runs.make, 0.0)) == 3
    assert len(runs.backends) == 2


def test_a_cluster_that_never_comes_up_is_not_restarted() -> None:
    job = spec(max_restarts=2)
    runs = FakeRuns(job, [{"worker:1": DiesEarly()}])
    assert asyncio.run(run_with_restarts(job, runs.make, 0.0)) == 124
    assert len(runs.backends) == 1 and runs.backends[0].closed == 1


# -- one grace wake-up per ended task ----------------------------------------------


def test_each_ended_task_is_woken_once_for_its_grace() -> None:
    # Tasks whose end the backend reports while their connections are still
    # open each wait DISCONNECT_GRACE for their last output: one wake-up
    # each. (A first version woke every waiting task on any wake-up and
    # re-armed them all: 1,023 wake-ups for 10 tasks ending 0.1 s apart.)
    from tfmesos.backends.base import TaskEnded
    from tfmesos.launcher.loop import Tick

    count = 10
    woken: list[str] = []

    async def scenario() -> dict[str, str]:
        loop = asyncio.get_running_loop()
        call_later = loop.call_later

        def counting(delay: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
            woken.extend(arg.task_id for arg in args if isinstance(arg, Tick))
            return call_later(delay, callback, *args, **kwargs)

        loop.call_later = counting  # type: ignore[method-assign,assignment]
        job = ClusterSpec((Job("worker", count, cmd="true"),), replica=True)
        # Each runs until its backend says it ended: its connection stays open.
        backend = FakeBackend(job, {t.name: Runs(None) for t in job.tasks()})
        launcher = backend.launcher()
        try:
            await launcher.start()
            for index, task_id in enumerate(backend.tasks):
                ended = TaskEnded(task_id, "exited", 0, "exited with status 0", "h", ())
                loop.call_later(index * 0.1, backend.report, ended)
            await asyncio.wait_for(launcher.wait_for_workers(), 30)
        finally:
            await launcher.stop()
        return launcher.outcomes()

    outcomes = asyncio.run(scenario())
    assert set(outcomes.values()) == {"exited 0"}, outcomes
    assert sorted(woken) == sorted(set(woken)) and len(woken) == count


def _live(launcher: Launcher) -> list[str]:
    """The tasks not over yet, by name (their outcome is their state)."""
    live = {state.value for state in AttemptState if not state.over}
    return [name for name, outcome in launcher.outcomes().items() if outcome in live]


# -- end to end: the real local backend and agent ----------------------------------


class FlakyBackend(LocalBackend):
    """Breaks the first ``failures`` attempts of one task: its agent starts
    without a task id, so it dies before it can register."""

    def __init__(self, spec: ClusterSpec, victim: str, failures: int) -> None:
        super().__init__(spec)
        self.victim = victim
        self.failures = failures
        self.attempts: Counter[str] = Counter()

    async def launch(self, launch: Launch) -> None:
        self.attempts[launch.task.name] += 1
        if launch.task.name == self.victim and self.attempts[launch.task.name] <= self.failures:
            env = {k: v for k, v in launch.env.items() if k != ENV_TASK_ID}
            launch = Launch(launch.task_id, launch.task, env)
        await super().launch(launch)


@pytest.mark.e2e
def test_a_real_agent_that_dies_before_it_registers_is_relaunched_with_its_log_as_the_reason(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TFMESOS_LOCAL_AGENTS", "1")  # an agent per task, not tfrun itself
    # What the fake backend scripts, for real: the agent dies, the local
    # backend reports its end with its log's last lines, the launcher
    # relaunches it, and the job's output comes through the real rendezvous.
    job = spec()
    backend = FlakyBackend(job, "worker:1", failures=1)
    out = io.BytesIO()
    caplog.set_level(logging.WARNING, logger="tfmesos")
    asyncio.run(run_job(Launcher(job, backend, output=out)))
    assert backend.attempts == {"ps:0": 1, "worker:0": 1, "worker:1": 2}
    assert b"[worker:0] ran worker:0\n" in out.getvalue()
    assert "TFMESOS_TASK_ID is not set" in caplog.text
