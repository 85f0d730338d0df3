"""A :class:`TestMaster` for synchronous code: its event loop runs in a thread."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tfmesos.testing.master.fault_table import with_faults
from tfmesos.testing.master.faults import Faults
from tfmesos.testing.master.master import TestMaster
from tfmesos.testing.master.schema import JSON
from tfmesos.testing.master.state import TERMINAL_STATES, MasterConfig

T = TypeVar("T")

if TYPE_CHECKING:
    # What a type checker sees of the fault methods that with_faults installs
    # (one per entry of faults.FAULTS): the Faults methods' own signatures.
    _FaultMethods = Faults
else:
    _FaultMethods = object


@with_faults(lambda threaded, apply: threaded.call(lambda master: apply(master.faults)))
class ThreadedTestMaster(_FaultMethods):
    """A :class:`TestMaster` on its own event loop in a background thread.

    ``with ThreadedTestMaster(agents=2) as master:`` starts it on a free port of
    127.0.0.1 (keywords as for :class:`MasterConfig`) and stops it on exit,
    killing every task it started. Its methods mirror TestMaster's and are safe
    to call from any thread; :meth:`call` runs any function of the TestMaster on
    its loop.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, config: MasterConfig | None = None, **overrides: Any) -> None:
        self.config = dataclasses.replace(config or MasterConfig(), **overrides)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._master: TestMaster | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def __enter__(self) -> ThreadedTestMaster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> ThreadedTestMaster:
        if self._thread is not None:
            raise RuntimeError("already started")
        self._thread = threading.Thread(target=self._main, name="tfmesos-test-master", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the test master did not start")
        if self._error is not None:
            raise RuntimeError("the test master failed to start") from self._error
        import atexit

        atexit.register(self.stop)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop serving and kill every task; safe to call twice."""
        thread, loop, event = self._thread, self._loop, self._stop_event
        if thread is None or loop is None or event is None:
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(event.set)
        thread.join(timeout)
        self._thread = None
        import atexit

        atexit.unregister(self.stop)

    def _main(self) -> None:
        asyncio.run(self._amain())

    async def _amain(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        master = TestMaster(self.config)
        try:
            await master.start()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            with contextlib.suppress(Exception):
                await master.stop()
            return
        self._master = master
        self._ready.set()
        try:
            await self._stop_event.wait()
        finally:
            await master.stop()

    def call(self, fn: Callable[[TestMaster], T], timeout: float = 30.0) -> T:
        """Run ``fn(master)`` on the master's loop and return its result."""
        loop, master = self._loop, self._master
        if loop is None or master is None:
            raise RuntimeError("the test master is not running")

        async def run() -> T:
            return fn(master)

        return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout)

    @property
    def master(self) -> TestMaster:
        """The TestMaster itself: touch its state only through :meth:`call`."""
        if self._master is None:
            raise RuntimeError("the test master is not running")
        return self._master

    @property
    def url(self) -> str:
        return self.master.url

    @property
    def scheduler_url(self) -> str:
        return self.master.scheduler_url

    @property
    def port(self) -> int:
        return self.master.port

    @property
    def work_dir(self) -> Path:
        return self.master.work_dir

    def add_agent(self, **kwargs: Any) -> str:
        return self.call(lambda m: m.add_agent(**kwargs))

    def clear_calls(self) -> None:
        self.call(lambda m: m.clear_calls())

    def frameworks(self, *, include_completed: bool = False) -> list[JSON]:
        return self.call(lambda m: m.frameworks(include_completed=include_completed))

    def framework(self, framework_id: str) -> JSON:
        return self.call(lambda m: m.framework(framework_id))

    def tasks(self, framework_id: str | None = None) -> list[JSON]:
        return self.call(lambda m: m.tasks(framework_id))

    def task(self, task_id: str, framework_id: str | None = None) -> JSON:
        return self.call(lambda m: m.task(task_id, framework_id))

    def calls(self, call_type: str | None = None) -> list[JSON]:
        return self.call(lambda m: m.calls(call_type))

    def offers(self) -> list[JSON]:
        return self.call(lambda m: m.offers())

    def agents(self) -> list[JSON]:
        return self.call(lambda m: m.agents())

    def events(self, framework_id: str | None = None) -> list[JSON]:
        return self.call(lambda m: m.events(framework_id))

    def state(self) -> JSON:
        return self.call(lambda m: m.state())

    def wait_for(
        self,
        predicate: Callable[[TestMaster], T | None],
        timeout: float = 10.0,
        interval: float = 0.05,
    ) -> T:
        """Poll ``predicate(master)`` (run on the loop) until truthy; return its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.call(predicate)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout}s")
            time.sleep(interval)

    def wait_task_state(self, task_id: str, *states: str, timeout: float = 10.0) -> JSON:
        wanted = set(states) or set(TERMINAL_STATES)

        def check(master: TestMaster) -> JSON | None:
            task = master.master_state.find_task(task_id)
            return task.snapshot() if task is not None and task.state in wanted else None

        return self.wait_for(check, timeout)
