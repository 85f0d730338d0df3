"""The test master: its parts composed around one state, started and stopped.

Each part models a piece of the Mesos master or agent (each module's docstring
names its sources); ``docs/test-master.md`` lists every behaviour, where it
comes from and what is left out. :class:`TestMaster` builds them around one
:class:`~tfmesos.testing.master.state.MasterState`, serves them over HTTP, and
offers inspection and fault injection as methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import shutil
import signal
import socket
import struct
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web

from tfmesos.testing.master.allocator import Allocator
from tfmesos.testing.master.executor import TaskRunner
from tfmesos.testing.master.fault_table import with_faults
from tfmesos.testing.master.faults import Faults
from tfmesos.testing.master.http import HttpApi
from tfmesos.testing.master.inspection import Inspector
from tfmesos.testing.master.operations import Operations
from tfmesos.testing.master.reaper import Reaper
from tfmesos.testing.master.resources import Ranges
from tfmesos.testing.master.schema import JSON
from tfmesos.testing.master.state import (
    MESOS_VERSION,
    SCHEDULER_PATH,
    TERMINAL_STATES,
    MasterConfig,
    MasterState,
    now,
    resolve,
)
from tfmesos.testing.master.subscriptions import Subscriptions
from tfmesos.testing.master.updates import StatusUpdates

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _packed_ip(address: str) -> int:
    """``MasterInfo.ip``: the IPv4 address packed in network order, read as a uint32."""
    try:
        return int(struct.unpack("<I", socket.inet_aton(address))[0])
    except OSError:
        return 0


if TYPE_CHECKING:
    # What a type checker sees of the fault methods that with_faults installs
    # (one per entry of faults.FAULTS): the Faults methods' own signatures.
    _FaultMethods = Faults
else:
    _FaultMethods = object


@with_faults(lambda master, apply: apply(master.faults))
class TestMaster(_FaultMethods):
    """A Mesos master (and its agents) in this process, serving the v1 scheduler API.

    Use ``async with TestMaster(agents=2, cpus=2) as master:``; ``master.url`` is
    its base URL (``http://127.0.0.1:PORT``), the scheduler endpoint is
    ``master.url + "/api/v1/scheduler"``. Keywords are the fields of
    :class:`MasterConfig`. All methods must be called on the master's event loop
    (use :class:`ThreadedTestMaster` from other threads).
    """

    __test__ = False  # not a pytest test class

    def __init__(self, config: MasterConfig | None = None, **overrides: Any) -> None:
        state = MasterState(dataclasses.replace(config or MasterConfig(), **overrides))
        self.master_state = state
        self.allocator = Allocator(state)
        self.updates = StatusUpdates(state)
        self.runner = TaskRunner(state, self.updates)
        self.faults = Faults(state, self.allocator, self.updates, self.runner)
        self.subscriptions = Subscriptions(state, self.allocator, self.updates, self.runner)
        self.operations = Operations(state, self.allocator, self.updates, self.runner, self.faults)
        self.inspector = Inspector(state, self.allocator)
        self.http = HttpApi(
            state,
            allocator=self.allocator,
            updates=self.updates,
            runner=self.runner,
            subscriptions=self.subscriptions,
            operations=self.operations,
            faults=self.faults,
            inspector=self.inspector,
        )
        self._app_runner: web.AppRunner | None = None
        self._allocation_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ life

    async def __aenter__(self) -> TestMaster:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> TestMaster:
        """Create the agents and start serving. Returns self."""
        state = self.master_state
        config = state.config
        state.loop = asyncio.get_running_loop()
        made: Path | None = None
        """The first folder this start made, removed if it fails."""
        if config.work_dir is None:
            state.work_dir_path = made = Path(tempfile.mkdtemp(prefix="tfmesos-test-master-"))
            # As an agent's work_dir: every task's user can reach its own sandbox.
            state.work_dir_path.chmod(0o755)
            state.own_work_dir = True
        else:
            state.work_dir_path = Path(config.work_dir)
            if not state.work_dir_path.exists():
                made = state.work_dir_path
                while not made.parent.exists():
                    made = made.parent
            state.work_dir_path.mkdir(parents=True, exist_ok=True)
        try:
            await self._serve()
        except BaseException:
            # A port already taken, say: leave nothing behind (no reaper, no
            # empty work directory), as if it had never started.
            if self._app_runner is not None:
                await self._app_runner.cleanup()
                self._app_runner = None
            if self.runner.reaper is not None:
                await self.runner.reaper.close()
                self.runner.reaper = None
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
            raise
        return self

    async def _serve(self) -> None:
        """Start the reaper, the agents and the HTTP server."""
        state = self.master_state
        config = state.config
        assert state.work_dir_path is not None
        if config.kill_on_orphan:
            self.runner.reaper = Reaper()
            if state.own_work_dir and not config.keep_work_dir:
                self.runner.reaper.remove_on_exit(state.work_dir_path)
        self.allocator.create_agents()

        self._app_runner = web.AppRunner(
            self.http.application(),
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=2.0,
        )
        await self._app_runner.setup()
        site = web.TCPSite(self._app_runner, config.ip, config.port, reuse_address=True)
        await site.start()
        state.port = int(self._app_runner.addresses[0][1])
        state.started_at = now()
        state.master_info = self._make_master_info()
        self._allocation_task = state.spawn(self.allocator.run())
        logger.debug("test master %s listening on %s", state.master_id, self.url)

    async def stop(self) -> None:
        """Close every stream, kill every task's process group, stop serving."""
        state = self.master_state
        runner = self.runner
        if state.stopping:
            return
        state.stopping = True
        if self._allocation_task is not None:
            self._allocation_task.cancel()
        for framework in list(state.frameworks_by_id.values()):
            if framework.subscription is not None:
                framework.subscription.close()
            if framework.failover_timer is not None:
                framework.failover_timer.cancel()
        for offer in list(state.offers_by_id.values()):
            self.allocator.remove_offer(offer)
        tasks = [task for fw in state.all_frameworks() for task in state.framework_tasks(fw)]
        for task in tasks:
            runner.finalize(task)
            if task.pid is not None:
                runner.signal_group(task.pid, signal.SIGKILL)
        waiters = [task.process.wait() for task in tasks if task.process is not None]
        if waiters:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), 10)
        for pgid in list(runner.live_groups):
            runner.sweep(pgid)
        for task in tasks:
            if task.kill_timer is not None:
                task.kill_timer.cancel()
        for background in list(state.background):
            background.cancel()
        if state.background:
            await asyncio.gather(*state.background, return_exceptions=True)
        if self._app_runner is not None:
            await self._app_runner.cleanup()
        if runner.reaper is not None:
            await runner.reaper.close()
        if (
            state.own_work_dir
            and not state.config.keep_work_dir
            and state.work_dir_path is not None
        ):
            shutil.rmtree(state.work_dir_path, ignore_errors=True)

    @property
    def config(self) -> MasterConfig:
        return self.master_state.config

    @property
    def master_id(self) -> str:
        return self.master_state.master_id

    @property
    def master_info(self) -> JSON:
        return self.master_state.master_info

    @property
    def port(self) -> int:
        return self.master_state.port

    @property
    def url(self) -> str:
        """``http://IP:PORT``: add ``/api/v1/scheduler`` for the scheduler endpoint."""
        return self.master_state.url

    @property
    def scheduler_url(self) -> str:
        return self.url + SCHEDULER_PATH

    @property
    def work_dir(self) -> Path:
        return self.master_state.work_dir

    def _make_master_info(self) -> JSON:
        state = self.master_state
        hostname = state.config.hostname
        ip = resolve(hostname, state.config.ip)
        return {
            "id": state.master_id,
            "ip": _packed_ip(ip),
            "port": state.port,
            "pid": f"master@{ip}:{state.port}",
            "hostname": hostname,
            "version": MESOS_VERSION,
            "address": {"hostname": hostname, "ip": ip, "port": state.port},
            "capabilities": [
                {"type": "AGENT_UPDATE"},
                {"type": "AGENT_DRAINING"},
                {"type": "QUOTA_V2"},
            ],
        }

    # ------------------------------------------------- agents and faults

    def add_agent(
        self,
        *,
        hostname: str | None = None,
        cpus: float | None = None,
        mem: float | None = None,
        disk: float | None = None,
        gpus: int | None = None,
        ports: Ranges | str | None = None,
        attributes: Mapping[str, str | float] | None = None,
    ) -> str:
        """Register one more agent (defaults from the config); returns its agent ID."""
        return self.allocator.add_agent(
            hostname=hostname,
            cpus=cpus,
            mem=mem,
            disk=disk,
            gpus=gpus,
            ports=ports,
            attributes=attributes,
        )

    def helper_pids(self) -> list[int]:
        """Processes of the master's own (its reaper), not of any task."""
        reaper = self.runner.reaper
        pid = reaper.pid if reaper is not None else None
        return [pid] if pid is not None else []

    def clear_calls(self) -> None:
        self.master_state.received_calls.clear()

    # ------------------------------------------------------------ inspection

    def frameworks(self, *, include_completed: bool = False) -> list[JSON]:
        return self.inspector.frameworks(include_completed=include_completed)

    def framework(self, framework_id: str) -> JSON:
        return self.inspector.framework(framework_id)

    def tasks(self, framework_id: str | None = None) -> list[JSON]:
        """Every task this master launched (known, unreachable and completed)."""
        return self.inspector.tasks(framework_id)

    def task(self, task_id: str, framework_id: str | None = None) -> JSON:
        return self.inspector.task(task_id, framework_id)

    def calls(self, call_type: str | None = None) -> list[JSON]:
        """Requests to /api/v1/scheduler in arrival order: type, body, status, stream ID."""
        return self.inspector.calls(call_type)

    def offers(self) -> list[JSON]:
        """The outstanding offers, as they were sent."""
        return self.inspector.offers()

    def agents(self) -> list[JSON]:
        return self.inspector.agents()

    def events(self, framework_id: str | None = None) -> list[JSON]:
        """Events sent to frameworks (HEARTBEATs left out), oldest first."""
        return self.inspector.events(framework_id)

    def state(self) -> JSON:
        return self.inspector.snapshot()

    def mesos_state(self) -> JSON:
        """A small subset of the master's ``/state`` JSON."""
        return self.inspector.mesos_state()

    async def wait_for(
        self, predicate: Callable[[], T | None], timeout: float = 10.0, interval: float = 0.02
    ) -> T:
        """Poll ``predicate`` on the loop until it returns something truthy; return it."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout}s")
            await asyncio.sleep(interval)

    async def wait_task_state(self, task_id: str, *states: str, timeout: float = 10.0) -> JSON:
        """Wait until the task's latest state is one of ``states`` (any terminal one if none)."""
        wanted = set(states) or set(TERMINAL_STATES)

        def check() -> JSON | None:
            task = self.master_state.find_task(task_id)
            return task.snapshot() if task is not None and task.state in wanted else None

        return await self.wait_for(check, timeout)
