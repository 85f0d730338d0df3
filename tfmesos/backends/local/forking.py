"""The launcher's end of the fork server (:mod:`tfmesos.agent.forkserver`).

Requests go down the server's stdin and replies come up its stdout, both
through asyncio pipe transports: no thread, and a request never blocks the
loop even when the pipe is full.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfmesos.backends.local import forkstart
from tfmesos.backends.local.forkstart import OWN_PROCESS_GROUP
from tfmesos.common.proctree import signal_group, wait_for_exit

__all__ = ["OWN_PROCESS_GROUP", "AgentProcess", "ForkServer", "ForkServerGone", "exit_status"]

logger = logging.getLogger("tfmesos")

START_TIMEOUT = 10.0
"""How long the server may take to fork an agent (it takes milliseconds)."""
ORPHAN_GRACE = 8.0
"""How long an agent whose fork server died gets to stop its command."""


async def exit_status(proc: subprocess.Popen[bytes]) -> int:
    """Wait for ``proc`` without a thread where a pidfd allows (see
    :func:`tfmesos.common.proctree.wait_for_exit`), else in one."""
    if await wait_for_exit(proc.pid) is None:
        return await asyncio.to_thread(proc.wait)
    return proc.wait()


class ForkServerGone(RuntimeError):
    """The fork server is not running (any more); start agents another way."""


class AgentProcess:
    """An agent, however it was started: its pid (also its process group)."""

    __slots__ = ("exited", "pid")

    def __init__(self, pid: int, exited: asyncio.Future[int]) -> None:
        self.pid = pid
        self.exited = exited
        """Resolves to its exit status as ``Popen.returncode`` gives it."""


class _Replies(asyncio.Protocol):
    def __init__(self, server: ForkServer) -> None:
        self._server = server
        self._pending = b""

    def data_received(self, data: bytes) -> None:
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            try:
                reply = json.loads(line) if line.strip() else None
            except ValueError:
                logger.warning("the fork server said something unreadable: %r", line[:200])
                continue
            if isinstance(reply, dict):
                self._server._on_reply(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server._on_gone()


class ForkServer:
    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._requests: asyncio.WriteTransport | None = None
        self._replies: asyncio.ReadTransport | None = None
        self._starting: dict[str, asyncio.Future[AgentProcess]] = {}
        self._running: dict[int, asyncio.Future[int]] = {}
        self._ready: asyncio.Future[None] | None = None
        self._orphans: set[asyncio.Future[None]] = set()
        self.alive = False

    async def start(self) -> None:
        # The one tfrun started before its imports, if there is one
        # (tfmesos.backends.local.forkstart), else a new one.
        self._proc = forkstart.take() or forkstart.popen()
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._replies, _ = await loop.connect_read_pipe(lambda: _Replies(self), self._proc.stdout)
        self._requests, _ = await loop.connect_write_pipe(asyncio.Protocol, self._proc.stdin)
        self.alive = True
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), START_TIMEOUT)
        except (asyncio.TimeoutError, ForkServerGone):
            self.alive = False
            self._proc.kill()
            await self.close()
            raise ForkServerGone("the fork server did not start") from None

    async def spawn(
        self, task_id: str, env: Mapping[str, str], cwd: str | None, log: Path
    ) -> AgentProcess:
        """Fork an agent; raise :class:`ForkServerGone` if the server cannot."""
        if not self.alive or self._requests is None:
            raise ForkServerGone("the fork server is not running")
        started: asyncio.Future[AgentProcess] = asyncio.get_running_loop().create_future()
        self._starting[task_id] = started
        request = {"task_id": task_id, "env": dict(env), "cwd": cwd, "log": str(log)}
        self._requests.write((json.dumps(request) + "\n").encode())
        try:
            return await asyncio.wait_for(started, START_TIMEOUT)
        except asyncio.TimeoutError:
            # Not trusted again: an agent it forks later would be a second
            # one for a task that is started another way meanwhile.
            self.alive = False
            raise ForkServerGone("the fork server did not answer") from None
        finally:
            self._starting.pop(task_id, None)

    def _on_reply(self, reply: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        if "ready" in reply:
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
        elif "started" in reply:
            # The exit's future exists before anyone can miss the exit: the
            # server reports a child's start before its end.
            pid = int(reply["pid"])
            started = self._starting.get(str(reply["started"]))
            if started is None or started.done():
                # Too late: the task was started another way. This one goes.
                signal_group(pid, signal.SIGKILL)
                return
            exited: asyncio.Future[int] = loop.create_future()
            self._running[pid] = exited
            started.set_result(AgentProcess(pid, exited))
        elif "failed" in reply:
            started = self._starting.get(str(reply["failed"]))
            if started is not None and not started.done():
                started.set_exception(ForkServerGone(f"fork failed: {reply.get('error')}"))
        elif "exited" in reply:
            done = self._running.pop(int(reply["exited"]), None)
            if done is not None and not done.done():
                done.set_result(int(reply["status"]))

    def _on_gone(self) -> None:
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(ForkServerGone("the fork server exited"))
        if not self.alive:
            return
        self.alive = False
        for started in self._starting.values():
            if not started.done():
                started.set_exception(ForkServerGone("the fork server exited"))
        if self._running:
            # Its agents were signalled as it died (their parent-death
            # signal, SIGTERM), and stop their commands as for any stop;
            # their own exit status is lost with the server.
            logger.warning("the agents' fork server exited; its %d agents stop", len(self._running))
        for pid, exited in self._running.items():
            watch = asyncio.ensure_future(_watch_orphan(pid, exited))
            self._orphans.add(watch)
            watch.add_done_callback(self._orphans.discard)
        self._running.clear()

    async def close(self) -> None:
        if self._requests is not None:
            self._requests.close()  # the server ends when its stdin does
        if self._replies is not None:
            # Closed through its transport, never under it: a descriptor
            # closed behind asyncio's back is reused by the next pipe (the
            # next run's fork server), and the old transport's late cleanup
            # then unregisters the new one's reader.
            self._replies.close()
        proc = self._proc
        if proc is None:
            return
        try:
            await asyncio.wait_for(exit_status(proc), 5.0)
        except asyncio.TimeoutError:
            proc.kill()
            await exit_status(proc)


async def _watch_orphan(pid: int, exited: asyncio.Future[int]) -> None:
    """Wait for an agent whose fork server died, without being its parent:
    SIGTERM (it may not have had its parent-death signal yet), then SIGKILL
    if it is not gone within ``ORPHAN_GRACE``. Its status is unknown; it is
    reported as killed."""
    signal_group(pid, signal.SIGTERM)
    gone = await wait_for_exit(pid, ORPHAN_GRACE)
    if gone is None:
        # No pidfd: nothing shows it go, so it gets only a moment.
        await asyncio.sleep(0.1)
    if not gone:
        signal_group(pid, signal.SIGKILL)
    if not exited.done():
        exited.set_result(-signal.SIGTERM)
