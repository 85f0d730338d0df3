"""The supervision loop, driven in-process through the real local backend with
faults injected at the backend boundary."""

from __future__ import annotations

import asyncio
import io
import sys
from collections import Counter

import pytest

from tfmesos import ClusterSpec, ClusterStartError, Job
from tfmesos.backends.base import EventSink, Launch
from tfmesos.backends.local import LocalBackend
from tfmesos.launcher import MAX_ATTEMPTS, Launcher
from tfmesos.wire import ENV_TASK_ID

OK = f"{sys.executable} -c \"print('ran {{job_name}}:{{task_index}}')\""


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


class SilentBackend(LocalBackend):
    """Accepts launches and never starts anything."""

    async def start(self, sink: EventSink) -> None:
        await super().start(sink)

    async def launch(self, launch: Launch) -> None:
        return None


def spec(**kw: object) -> ClusterSpec:
    jobs = (Job("ps", 1, cmd=OK), Job("worker", 2, cmd=OK))
    return ClusterSpec(jobs, replica=True, **kw)  # type: ignore[arg-type]


async def run_job(launcher: Launcher) -> None:
    try:
        await launcher.start()
        await launcher.wait_for_workers()
    finally:
        await launcher.stop()


def test_a_task_that_dies_before_the_cluster_is_up_is_relaunched() -> None:
    job = spec()
    backend = FlakyBackend(job, "worker:1", failures=MAX_ATTEMPTS - 1)
    out = io.BytesIO()
    asyncio.run(run_job(Launcher(job, backend, output=out)))
    assert backend.attempts == {"ps:0": 1, "worker:0": 1, "worker:1": MAX_ATTEMPTS}
    assert b"[worker:0] ran worker:0\n" in out.getvalue()


def test_a_task_that_keeps_dying_ends_the_start_with_its_name() -> None:
    job = spec()
    backend = FlakyBackend(job, "worker:1", failures=MAX_ATTEMPTS)
    with pytest.raises(ClusterStartError, match=r"task worker:1 .*exited with status 1") as caught:
        asyncio.run(run_job(Launcher(job, backend, output=io.BytesIO())))
    assert f"failed {MAX_ATTEMPTS} times" in str(caught.value)
    assert caught.value.failure is not None
    assert any("TFMESOS_TASK_ID is not set" in line for line in caught.value.failure.output_tail)
    assert backend.attempts["worker:1"] == MAX_ATTEMPTS


def test_a_start_that_hangs_ends_at_the_timeout_naming_who_is_missing() -> None:
    job = spec(start_timeout=1.0)
    with pytest.raises(
        ClusterStartError, match=r"not up after 1s: still waiting for ps:0, worker:0, worker:1"
    ):
        asyncio.run(run_job(Launcher(job, SilentBackend(job), output=io.BytesIO())))


def test_each_ended_task_is_woken_once_for_its_grace() -> None:
    # Tasks whose end the backend reports while their connections are still
    # open each wait DISCONNECT_GRACE for their last output: one wake-up
    # each. (A first version woke every waiting task on any wake-up and
    # re-armed them all: 1,023 wake-ups for 10 tasks ending 0.1 s apart.)
    from tfmesos.backends.base import TaskEnded
    from tfmesos.launcher import Phase, TaskState, _Task, _Tick

    count = 10
    woken: list[str] = []

    class CountingQueue(asyncio.Queue):  # type: ignore[type-arg]
        def put_nowait(self, item: object) -> None:
            if isinstance(item, _Tick):
                woken.append(item.task_id)
            super().put_nowait(item)

    class OpenConnection:
        closed = False

        def close(self) -> None:
            self.closed = True

        def send(self, message: object) -> None:
            pass

    async def scenario() -> None:
        job = ClusterSpec((Job("worker", count, cmd="true"),), replica=True)
        launcher = Launcher(job, LocalBackend(job), output=io.BytesIO())
        launcher._events = CountingQueue()
        launcher._phase = Phase.RUNNING
        for index, task_spec in enumerate(job.tasks()):
            task = _Task(task_spec, f"t{index}", 1, b"", False, TaskState.RUNNING)
            task.connection = OpenConnection()  # type: ignore[assignment]
            launcher._tasks[task.task_id] = task
            launcher._current[task_spec.name] = task
        loop = asyncio.get_running_loop()
        for index in range(count):
            ended = TaskEnded(f"t{index}", "exited", 0, "exited with status 0", "h", ())
            loop.call_later(index * 0.1, launcher._events.put_nowait, ended)
        await launcher._pump(launcher._workers_done, 30, None)
        assert all(t.state is TaskState.FINISHED for t in launcher._tasks.values())

    asyncio.run(scenario())
    assert sorted(woken) == sorted(f"t{index}" for index in range(count))


def test_a_backend_failure_while_stopping_does_not_replace_the_verdict() -> None:
    from tfmesos.backends.base import BackendFailed
    from tfmesos.errors import TFMesosError
    from tfmesos.launcher import Phase

    job = spec()
    launcher = Launcher(job, LocalBackend(job), output=io.BytesIO())
    launcher._phase = Phase.RUNNING
    with pytest.raises(TFMesosError, match="the local backend failed: master lost"):
        launcher._handle(BackendFailed("master lost"))
    launcher._phase = Phase.STOPPING
    launcher._handle(BackendFailed("master lost"))  # logged; teardown goes on


def test_the_relaunch_warning_is_not_glued_to_the_tasks_output(
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = spec()
    backend = FlakyBackend(job, "worker:1", failures=1)
    caplog.set_level("WARNING", logger="tfmesos")
    asyncio.run(run_job(Launcher(job, backend, output=io.BytesIO())))
    warnings = [r.getMessage() for r in caplog.records if "relaunching" in r.getMessage()]
    assert len(warnings) == 1, warnings
    first, *tail = warnings[0].splitlines()
    assert "before the cluster was up; relaunching it (attempt 2 of 3)" in first, warnings[0]
    assert tail and all(line.startswith("  | ") for line in tail), warnings[0]
