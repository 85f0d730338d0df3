"""Where the tasks' forwarded output is written: off the event loop.

The launcher's event loop also answers Mesos heartbeats, notices failures and
enforces deadlines, so it must never sit in a blocking ``write`` to a terminal
or pipe that is slower than the job's output (a paused terminal, ``| less``).
Output goes through a buffer to one writer thread. The buffer is bounded
without blocking the loop: above ``high_water`` bytes, :meth:`ConsoleWriter.writable`
makes the rendezvous readers wait, TCP then slows the agents and their pipes
slow the tasks, while everything else on the loop goes on.

If the reader goes away (``tfrun ... | head``), the job is not killed for it:
further output is dropped and one warning says so.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import threading
from typing import BinaryIO

__all__ = ["HIGH_WATER", "ConsoleWriter"]

logger = logging.getLogger("tfmesos")

HIGH_WATER = 1 << 20
"""Bytes buffered for the writer above which the readers of task output wait."""


class ConsoleWriter:
    """Writes byte chunks to ``stream`` in order, from a thread of its own.

    :meth:`write` never blocks. :meth:`writable` is awaited on the event loop
    that created the writer; :meth:`close` writes what is left and returns
    when it is all out (or the stream is gone).
    """

    def __init__(self, stream: BinaryIO, *, high_water: int = HIGH_WATER) -> None:
        self._stream = stream
        self._high_water = high_water
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._closing = False
        self._broken = False
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._room = asyncio.Event()
        self._room.set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="tfmesos-console", daemon=True)
        self._started = False

    @property
    def buffered(self) -> int:
        """Bytes accepted and not yet written."""
        return self._buffered

    def write(self, data: bytes) -> None:
        if not data:
            return
        with self._lock:
            if self._broken or self._closing:
                return
            if not self._started:
                self._loop = asyncio.get_running_loop()
                self._thread.start()
                self._started = True
            self._chunks.append(data)
            self._buffered += len(data)
            if self._buffered > self._high_water:
                self._room.clear()
            self._wakeup.notify()

    async def writable(self) -> None:
        """Return once the buffer is below its high-water mark."""
        await self._room.wait()

    def close(self) -> None:
        """Write everything accepted so far, then stop the thread. Blocks."""
        with self._lock:
            self._closing = True
            self._wakeup.notify()
        if self._started:
            self._thread.join()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._chunks and not self._closing:
                    self._wakeup.wait()
                if not self._chunks:
                    return
                # Coalesce: one write per wakeup, whatever arrived meanwhile.
                batch = b"".join(self._chunks)
                self._chunks.clear()
            ok = self._write(batch)
            with self._lock:
                self._buffered = 0 if not ok else self._buffered - len(batch)
                if not ok:
                    self._broken = True
                    self._chunks.clear()
                wake = not self._room.is_set() and self._buffered <= self._high_water
            if wake and self._loop is not None:
                # RuntimeError: the loop closed meanwhile, so nobody waits.
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(self._open_room)
            if not ok:
                return

    def _open_room(self) -> None:
        # On the loop: writes accepted since the thread looked may have
        # filled the buffer again.
        if self._broken or self._buffered <= self._high_water:
            self._room.set()

    def _write(self, batch: bytes) -> bool:
        try:
            self._stream.write(batch)
            self._stream.flush()
        except Exception as exc:  # a closed pipe, a closed file, a full disk
            logger.warning("cannot write the tasks' output any more (%s); dropping the rest", exc)
            if isinstance(exc, BrokenPipeError):
                _silence(self._stream)
            return False
        return True


def _silence(stream: BinaryIO) -> None:
    """Point a stream whose reader is gone at /dev/null.

    Otherwise the interpreter's own flush at exit fails again on what the
    stream still holds, and prints a traceback after the job's last word.
    """
    try:
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError):
        return
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)
