"""Where the tasks' forwarded output is written: off the event loop.

The event loop also answers heartbeats and enforces deadlines, so it must never
block on a slow terminal or pipe. Output goes through a buffer to one writer
thread; above ``high_water`` bytes :meth:`ConsoleWriter.writable` makes the
rendezvous readers wait, so TCP back-pressure slows the tasks rather than the
loop. A reader gone (``| head``) drops further output with one warning.
Launcher messages about a task go to stderr through
:meth:`ConsoleWriter.after_written`, so they follow the task's last line.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import io
import logging
import os
import select
import threading
from collections.abc import Callable, Mapping
from typing import BinaryIO, TextIO

__all__ = [
    "HIGH_WATER",
    "ConsoleWriter",
    "binary_stream",
    "colour_prefix",
    "same_destination",
    "use_colour",
]

logger = logging.getLogger("tfmesos")

HIGH_WATER = 1 << 20
"""Bytes buffered for the writer above which the readers of task output wait."""


class ConsoleWriter:
    """Writes byte chunks to ``stream`` in order, from a thread of its own;
    :meth:`write` never blocks. A stream with a file descriptor is written with
    ``os.write``, so the thread never holds the stream's lock and, stuck on a
    stalled terminal, can be left behind at exit (:meth:`abandon`)."""

    def __init__(self, stream: BinaryIO, *, high_water: int = HIGH_WATER) -> None:
        self._stream = stream
        self._high_water = high_water
        self._chunks: collections.deque[bytes | Callable[[], None]] = collections.deque()
        """Output to write, and callbacks to run once what is before them is written."""
        self._buffered = 0
        self._closing = False
        self._broken = False
        self._abandoned = False
        self._released = False
        """Readers no longer wait for room (the job is stopping)."""
        self.written = 0
        """Bytes the stream has taken so far: how a caller tells a stalled
        stream from a slow one."""
        self._idle = False
        """The thread waits for chunks (so a write must wake it)."""
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._room = asyncio.Event()
        self._room.set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: asyncio.Future[None] | None = None
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
            if self._broken or self._closing or self._abandoned:
                return
            if not self._started:
                self._start()
            self._chunks.append(data)
            self._buffered += len(data)
            if self._buffered > self._high_water and not self._released:
                self._room.clear()
            if self._idle:
                self._wakeup.notify()

    def after_written(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the loop once everything written before it is
        out: at once if nothing is waiting; when it is dropped, if it is
        (:meth:`abandon`, a reader gone)."""
        with self._lock:
            queue = (
                self._started
                and bool(self._buffered or self._chunks)
                and not (self._broken or self._abandoned)
            )
            if queue:
                self._chunks.append(callback)
                if self._idle:
                    self._wakeup.notify()
        if not queue:
            callback()

    @property
    def full(self) -> bool:
        """Whether the buffer is above its high-water mark."""
        return self._buffered > self._high_water

    def has_room(self) -> bool:
        """Whether :meth:`writable` would return at once."""
        return self._room.is_set()

    async def writable(self) -> None:
        """Return once the buffer is below its high-water mark (at once,
        after :meth:`release`)."""
        await self._room.wait()

    def release(self) -> None:
        """Let every reader waiting in :meth:`writable` go, now and from now
        on: the job is stopping, and its tasks must hear it whatever the
        terminal does. What is written meanwhile is the caller's to bound."""
        self._released = True
        self._room.set()

    async def aclose(self, stall: float | None = None) -> bool:
        """Write everything accepted so far, without blocking the loop.

        With ``stall``, give up once the stream has taken nothing for that
        many seconds, and say False: the caller then calls :meth:`abandon` for the
        rest or waits on."""
        with self._lock:
            self._closing = True
            if self._idle:
                self._wakeup.notify()
        if self._done is None:
            return True
        while stall is not None:
            before = self.written
            try:
                await asyncio.wait_for(asyncio.shield(self._done), stall)
            except asyncio.TimeoutError:
                if self.written == before:
                    return False
            else:
                return True
        await self._done
        return True

    def abandon(self) -> int:
        """Drop what is unwritten so :meth:`aclose` returns now; return the bytes
        dropped."""
        with self._lock:
            dropped = 0 if self._abandoned else self._buffered
            self._abandoned = True
            callbacks = _callbacks(self._chunks)
            self._chunks.clear()
            self._buffered = 0
            self._wakeup.notify()
        for callback in callbacks:
            callback()
        self._room.set()
        if self._done is not None and not self._done.done():
            self._done.set_result(None)
        return dropped

    def _start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._done = self._loop.create_future()
        with contextlib.suppress(AttributeError, OSError, ValueError):
            self._stream.flush()  # anything written to it before goes first
        self._thread.start()
        self._started = True

    def _run(self) -> None:
        try:
            while self._next_batch():
                pass
        finally:
            self._signal_loop(self._finish)

    def _next_batch(self) -> bool:
        """Write what has queued up; False when there is nothing more to do."""
        with self._lock:
            while not self._chunks and not self._closing and not self._abandoned:
                self._idle = True
                self._wakeup.wait()
            self._idle = False
            if not self._chunks:
                return False
            # Coalesce: one write per wakeup, whatever arrived meanwhile, up
            # to a callback, which runs once what is before it is written.
            parts: list[bytes] = []
            while self._chunks and isinstance(self._chunks[0], bytes):
                parts.append(self._chunks.popleft())  # type: ignore[arg-type]
            due = [] if parts else _callbacks(self._chunks, leading=True)
        if due:
            self._signal_loop(lambda: _run_all(due))
            return not self._abandoned
        batch = b"".join(parts)
        ok = self._write(batch)
        with self._lock:
            if ok:
                self._buffered = max(0, self._buffered - len(batch))
            else:
                self._broken = True
                due = _callbacks(self._chunks)  # nothing they wait for will be written
                self._chunks.clear()
                self._buffered = 0
            wake = not self._room.is_set() and self._buffered <= self._high_water
        if due:
            self._signal_loop(lambda: _run_all(due))
        if wake:
            self._signal_loop(self._open_room)
        return ok and not self._abandoned

    def _took(self, count: int) -> None:
        self.written += count  # one writer thread; readers only compare

    def _signal_loop(self, callback: Callable[[], None]) -> None:
        if self._loop is not None:
            # RuntimeError: the loop closed meanwhile, so nobody waits.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(callback)

    def _open_room(self) -> None:
        # On the loop: writes accepted since the thread looked may have
        # filled the buffer again.
        if self._broken or self._released or self._buffered <= self._high_water:
            self._room.set()

    def _finish(self) -> None:
        self._room.set()
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    def _write(self, batch: bytes) -> bool:
        try:
            fd = self._stream.fileno()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
            fd = None
        try:
            if fd is None:
                self._stream.write(batch)
                self._stream.flush()
                self._took(len(batch))
            else:
                _write_all(fd, batch, lambda: self._abandoned, self._took)
        except Exception as exc:  # a closed pipe, a closed file, a full disk
            logger.warning("cannot write the tasks' output any more (%s); dropping the rest", exc)
            if isinstance(exc, BrokenPipeError):
                _silence(self._stream)
            return False
        return True


def _callbacks(
    chunks: collections.deque[bytes | Callable[[], None]], *, leading: bool = False
) -> list[Callable[[], None]]:
    """The callbacks among ``chunks``; with ``leading``, those at its front,
    taken off it."""
    if not leading:
        return [c for c in chunks if not isinstance(c, bytes)]
    found = []
    while chunks and not isinstance(chunks[0], bytes):
        found.append(chunks.popleft())
    return found  # type: ignore[return-value]


def _run_all(callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        callback()


def _write_all(
    fd: int, data: bytes, abandoned: Callable[[], bool], took: Callable[[int], None]
) -> None:
    view = memoryview(data)
    while view and not abandoned():
        try:
            written = os.write(fd, view)
        except BlockingIOError:  # someone made the terminal non-blocking
            select.select([], [fd], [], 1.0)
            continue
        took(written)
        view = view[written:]


class TextSink(io.RawIOBase):
    """Bytes into a text stream that has no binary layer (Jupyter's
    ``sys.stderr`` has no ``.buffer``)."""

    def __init__(self, text: TextIO) -> None:
        super().__init__()
        self._text = text

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self._text.write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        self._text.flush()


def binary_stream(stream: TextIO) -> BinaryIO:
    """The binary side of a text stream such as ``sys.stdout``."""
    buffer = getattr(stream, "buffer", None)
    return buffer if buffer is not None else TextSink(stream)  # type: ignore[return-value]


def _silence(stream: BinaryIO) -> None:
    """Point a stream whose reader is gone at /dev/null.

    Otherwise the interpreter's own flush at exit fails again on what the
    stream still holds, and prints a traceback after the job's last word.
    """
    try:
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError, io.UnsupportedOperation):
        return
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


# Colours for the tasks' prefixes: distinct and readable on dark and light
# backgrounds; red is left for failures.
_PALETTE = (36, 35, 33, 34, 32, 96, 95, 93, 94, 92)


def use_colour(stream: object, environ: Mapping[str, str] | None = None) -> bool:
    """Whether to colour what goes to ``stream``, as CPython (3.13) and most
    tools decide it: never with ``NO_COLOR`` set (not empty); always with
    ``FORCE_COLOR`` set (not empty); never for ``TERM=dumb``; else only on a
    terminal."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    if env.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):  # a closed stream
        return False


def colour_prefix(text: str, index: int) -> str:
    """``text`` in the ``index``-th colour of the tasks' palette."""
    return f"\x1b[{_PALETTE[index % len(_PALETTE)]}m{text}\x1b[0m"


def same_destination(first: object, second: object) -> bool:
    """Whether two streams write to the same file, pipe or terminal."""
    try:
        one = os.fstat(first.fileno())  # type: ignore[attr-defined]
        other = os.fstat(second.fileno())  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return False
    return (one.st_dev, one.st_ino) == (other.st_dev, other.st_ino)
