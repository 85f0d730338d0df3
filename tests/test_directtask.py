"""A local task the launcher runs itself (tfmesos.backends.local.directtask): it
says to the launcher what its agent would, in the same order. The launcher's
side is a recorder here; the commands are real processes (e2e), the rest
starts none (unit)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tfmesos.backends.base import InProcessRendezvous
from tfmesos.backends.local.directtask import DirectTask
from tfmesos.rendezvous.reports import Exited, Output, Registered, RendezvousEvent


class Launcher:
    """The launcher's side of an in-process rendezvous, recorded."""

    def __init__(self, held: bool = False) -> None:
        self.events: list[RendezvousEvent] = []
        self.ends: list[int] = []
        self.held = held
        self.room: asyncio.Event | None = None
        self.waited = 0

    def rendezvous(self) -> InProcessRendezvous:
        return InProcessRendezvous(lambda _: True, self.events.append, self._flow, self._held)

    def _held(self, task_id: str) -> bool:
        return self.held

    async def _flow(self, task_id: str) -> None:
        self.waited += 1
        assert self.room is not None
        await self.room.wait()

    def task(self, tmp_path: Path) -> DirectTask:
        log = tmp_path / "task.log"
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        return DirectTask(
            "worker.0.1.abcd",
            host="127.0.0.1",
            port=20001,
            environ=dict(os.environ),
            log_fd=fd,
            log_path=str(log),
            log_max=0,
            rendezvous=self.rendezvous(),
            sweeper=None,
            on_end=lambda _, status, __: self.ends.append(status),
        )

    def kinds(self) -> list[str]:
        return [type(e).__name__ for e in self.events]

    def connection(self) -> Any:
        registered = self.events[0]
        assert isinstance(registered, Registered)
        assert registered.addr == "127.0.0.1:20001"
        return registered.connection


def cluster(cmd: str) -> dict[str, Any]:
    return {
        "type": "cluster",
        "job_name": "worker",
        "task_index": 0,
        "run_id": "r",
        "restart": 0,
        "max_restarts": 0,
        "cluster_def": {"worker": ["127.0.0.1:20001"]},
        "cmd": cmd,
        "cwd": None,
        "env": {},
        "extra_config": {},
        "server": {"cpus": 1},
    }


@pytest.mark.unit
@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("stop", "the launcher stopped this task: the job is ending"),
        ("close", "the launcher went away before the cluster was up"),
    ],
)
def test_stopped_before_the_cluster_it_ends_as_its_agent_does(
    tmp_path: Path, how: str, says: str
) -> None:
    async def run() -> Launcher:
        launcher = Launcher()
        task = launcher.task(tmp_path)
        task.begin()
        connection = launcher.connection()
        if how == "stop":
            connection.send({"type": "stop", "reason": "the job is ending"})
        else:
            connection.close()
        assert task.ended.done()
        return launcher

    launcher = asyncio.run(run())
    assert launcher.kinds() == ["Registered", "Disconnected"]
    assert launcher.ends == [1]
    assert (tmp_path / "task.log").read_text() == f"[tfmesos agent] {says}\n"


@pytest.mark.e2e
def test_a_stop_right_behind_the_cluster_stops_the_command_as_it_starts(tmp_path: Path) -> None:
    async def run() -> Launcher:
        launcher = Launcher()
        task = launcher.task(tmp_path)
        task.begin()
        connection = launcher.connection()
        connection.send(cluster("sleep 60"))
        connection.send({"type": "stop", "reason": "the job is ending"})
        assert await asyncio.wait_for(task.ended, 30) == 128 + signal.SIGTERM
        return launcher

    launcher = asyncio.run(run())
    assert launcher.kinds() == ["Registered", "Exited", "Disconnected"]
    exited = launcher.events[1]
    assert isinstance(exited, Exited)
    assert (exited.code, exited.signal) == (128 + signal.SIGTERM, signal.SIGTERM)
    assert launcher.ends == [143]


@pytest.mark.e2e
def test_output_waits_for_the_launcher_and_none_is_lost(tmp_path: Path) -> None:
    # The launcher is behind (a slow terminal): the task's pipe is not read
    # until it catches up; then every line comes, in order, and in the log.
    lines = 2000
    code = f"import sys\nfor i in range({lines}): print('line', i, 'x' * 200)\n"

    async def run() -> Launcher:
        launcher = Launcher(held=True)
        launcher.room = asyncio.Event()
        task = launcher.task(tmp_path)
        task.begin()
        launcher.connection().send(cluster(f'{sys.executable} -c "{code}"'))
        while launcher.waited == 0:
            await asyncio.sleep(0.01)
        # Held: the command is blocked on its full pipe, and has not ended.
        await asyncio.sleep(0.5)
        assert not task.ended.done()
        launcher.held = False
        launcher.room.set()
        assert await asyncio.wait_for(task.ended, 30) == 0
        return launcher

    launcher = asyncio.run(run())
    output = b"".join(e.data for e in launcher.events if isinstance(e, Output))
    expected = "".join(f"line {i} {'x' * 200}\n" for i in range(lines)).encode()
    assert output == expected
    assert (tmp_path / "task.log").read_bytes() == expected
    assert launcher.kinds()[-2:] == ["Exited", "Disconnected"]
    assert launcher.waited == 1


@pytest.mark.unit
def test_a_command_that_cannot_be_made_ends_the_task_with_its_traceback_in_its_log(
    tmp_path: Path,
) -> None:
    # An agent dies of it, its traceback in its log, status 1; the launcher
    # running the task goes on, and the task ends as the agent's would.
    async def run() -> Launcher:
        launcher = Launcher()
        task = launcher.task(tmp_path)
        task.begin()
        launcher.connection().send(cluster("echo {no_such_placeholder}"))
        assert await asyncio.wait_for(task.ended, 30) == 1
        return launcher

    launcher = asyncio.run(run())
    assert launcher.ends == [1]
    log = (tmp_path / "task.log").read_text()
    assert "KeyError: 'unknown placeholder {no_such_placeholder}" in log, log
    assert "[tfmesos agent] cannot start the command" in log
