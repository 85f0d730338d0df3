"""The events that come in to the launcher, in the order they came: what the
rendezvous, the backends and the loop's own timers put, taken off one at a
time by :meth:`Inbox.pump` for the loop (:mod:`tfmesos.launcher.loop`) to
handle. It owns the queue and nothing of the job's."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tfmesos.backends.base import BackendFailed, TaskEnded, TaskPlaced
from tfmesos.rendezvous.reports import RendezvousEvent

__all__ = ["PROGRESS_INTERVAL", "Event", "Inbox", "Tick"]

PROGRESS_INTERVAL = 15.0
"""While nothing comes in, how often the pump says how the job is doing."""


@dataclass(frozen=True, slots=True)
class Tick:
    """Wakes the loop to re-check one task's grace deadline."""

    task_id: str


Event = RendezvousEvent | TaskPlaced | TaskEnded | BackendFailed | Tick
"""What the loop takes off its queue: every backend event but
:class:`~tfmesos.backends.base.BackendAttached`, which changes nothing and is
said at once."""


class Inbox:
    """The queue of events, and the pump that hands them out one at a time."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._put_back: collections.deque[Event] = collections.deque()
        """Events taken off the queue when the pump was cancelled (:meth:`_next`)."""

    def put(self, event: Event) -> None:
        self._queue.put_nowait(event)

    def put_later(self, delay: float, event: Event) -> None:
        """Put ``event`` in ``delay`` seconds."""
        asyncio.get_running_loop().call_later(delay, self._queue.put_nowait, event)

    async def pump(
        self,
        done: Callable[[], bool],
        timeout: float | None,
        on_timeout: Callable[[], None] | None,
        *,
        handle: Callable[[Event], Awaitable[None]],
        progress: Callable[[], None],
    ) -> None:
        """``handle`` each event until ``done()``; after ``timeout`` seconds
        (None: none), call ``on_timeout`` and return. ``progress`` is called
        every ``PROGRESS_INTERVAL`` seconds that nothing comes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        next_progress = time.monotonic() + PROGRESS_INTERVAL
        while not done():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                if on_timeout is not None:
                    on_timeout()
                return
            wait = next_progress - now if deadline is None else min(deadline, next_progress) - now
            event = await self._next(max(wait, 0.0))
            if event is None:
                if time.monotonic() >= next_progress:
                    progress()
                    next_progress = time.monotonic() + PROGRESS_INTERVAL
                continue
            await handle(event)

    async def _next(self, timeout: float) -> Event | None:
        """The next event, or None after ``timeout`` seconds. Not
        ``asyncio.wait_for``: on Python 3.10 and 3.11 it returns the event
        and drops the caller's cancellation when both come on one turn of the
        loop, and a Ctrl-C (run.py cancels the job) would be lost."""
        if self._put_back:
            return self._put_back.popleft()
        if not self._queue.empty():
            return self._queue.get_nowait()
        getter = asyncio.ensure_future(self._queue.get())
        try:
            await asyncio.wait({getter}, timeout=timeout)
        except asyncio.CancelledError:
            if getter.done() and not getter.cancelled():
                # Taken off the queue as the caller was cancelled: the pump
                # that stops the job handles it first.
                self._put_back.append(getter.result())
            getter.cancel()
            raise
        if getter.done():
            return getter.result()
        getter.cancel()
        return None
