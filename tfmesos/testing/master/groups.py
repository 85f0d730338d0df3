"""A task's process group, as the agent holds it: signals, SIGSTOP/SIGCONT for
partitions, the container of an image task (its signals go through ``podman``),
and the sweep that kills whatever is left when a task ends (the posix
launcher's ``os::killtree``; Mesos destroys the container)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time

from tfmesos.testing.master.images import Podman
from tfmesos.testing.master.reaper import Reaper, killpg
from tfmesos.testing.master.state import MasterState

logger = logging.getLogger(__name__)

REMOVE = ("rm", "--force", "--time", "0", "--ignore")
"""``podman rm`` of a container that is to go now, running or not."""


class ProcessGroups:
    """The live process groups of the agent's tasks and their containers."""

    def __init__(self, state: MasterState) -> None:
        self.state = state
        self.live_groups: set[int] = set()
        """Process groups of tasks that may still have processes."""
        self.reaper: Reaper | None = None
        self.frozen: set[int] = set()
        """Process groups stopped (SIGSTOP) by a partition that cuts their tasks off."""
        self.containers: dict[int, str] = {}
        """The container of each image task's process group (``podman run``'s)."""
        self._podman: Podman | bool | None = False
        """Found on the first image task (False: not looked for yet)."""
        self._container_calls: dict[str, asyncio.Task[None]] = {}
        """The latest podman command sent to each container (they run in order)."""

    def podman(self) -> Podman | None:
        """The container runtime for image tasks, or None where podman is missing."""
        if self._podman is False:
            self._podman = Podman.find()
        return self._podman if isinstance(self._podman, Podman) else None

    def signal_group(self, pgid: int | None, sig: int) -> None:
        """Signal a task's process group, only while it may still have processes."""
        if pgid is not None and pgid in self.live_groups:
            self._signal(pgid, sig)
            if pgid in self.frozen:
                # Stopped processes see the signal once they run again: destroying
                # a container reaches its processes whatever they are doing.
                self.thaw(pgid)

    def freeze(self, pgid: int | None) -> None:
        """Stop a task's processes (SIGSTOP) until :meth:`thaw` or a signal to kill them."""
        if pgid is not None and pgid in self.live_groups and pgid not in self.frozen:
            self.frozen.add(pgid)
            self._signal(pgid, signal.SIGSTOP)

    def thaw(self, pgid: int | None) -> None:
        if pgid is not None and pgid in self.frozen:
            self.frozen.discard(pgid)
            self._signal(pgid, signal.SIGCONT)

    def _signal(self, pgid: int, sig: int) -> None:
        """A process group's signal; a container's goes to the container (its
        ``podman run`` would pass on only some, and outlive none)."""
        name = self.containers.get(pgid)
        if name is None:
            killpg(pgid, sig)
        elif sig == signal.SIGSTOP:
            self._container_call(name, pgid, "pause")
        elif sig == signal.SIGCONT:
            self._container_call(name, pgid, "unpause")
        else:
            self._container_call(name, pgid, "kill", "--signal", str(int(sig)))

    def _container_call(self, name: str, pgid: int | None, *args: str) -> None:
        """Run ``podman ARGS NAME`` after the container's previous call. While its
        ``podman run`` lives (``pgid``) a refused call is tried again: the
        container may not exist yet."""
        podman = self.podman()
        if podman is None or self.state.loop is None:
            return
        previous = self._container_calls.get(name)

        async def call() -> None:
            if previous is not None:
                with contextlib.suppress(Exception):
                    await previous
            deadline = time.monotonic() + 15.0
            while True:
                process = await asyncio.create_subprocess_exec(
                    *podman.command(*args, name),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.DEVNULL,
                )
                if await process.wait() == 0 or pgid not in self.live_groups:
                    return
                if time.monotonic() > deadline:
                    logger.warning("podman %s %s kept failing", " ".join(args), name)
                    return
                await asyncio.sleep(0.2)

        job = self.state.loop.create_task(call())
        self._container_calls[name] = job

        def done(finished: asyncio.Task[None]) -> None:
            if self._container_calls.get(name) is finished:
                del self._container_calls[name]

        job.add_done_callback(done)

    async def drain_containers(self) -> None:
        """Wait for the podman commands still running (the master stops)."""
        while self._container_calls:
            await asyncio.gather(*list(self._container_calls.values()), return_exceptions=True)

    def sweep(self, pgid: int) -> None:
        """Kill whatever is left in a task's process group (Mesos destroys the container)."""
        if pgid in self.live_groups:
            killpg(pgid, signal.SIGKILL)
            self.live_groups.discard(pgid)
            self.frozen.discard(pgid)
            if self.reaper is not None:
                self.reaper.untrack(pgid)
        name = self.containers.pop(pgid, None)
        if name is not None:
            # Its `podman run` is gone: remove the container, whatever is left of it.
            self._container_call(name, None, *REMOVE)
            job = self._container_calls.get(name)
            if self.reaper is not None and job is not None:
                reaper = self.reaper
                job.add_done_callback(lambda _: reaper.forget_container(name))
