"""The job's event stream (``tfrun --events FILE``, ``cluster(events=...)``): one
JSON object per line, each with ``v`` (:data:`SCHEMA_VERSION`), ``ts``,
``event`` (one of :data:`EVENTS`) and, for a task, ``task``. The schema is in
docs/running.md ("The event stream").

The version changes only when a field is removed, renamed or changes meaning,
or an event stops being written; new events and fields do not change it, since
consumers skip what they do not know.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from tfmesos.backends.jobstate import SCHEMA_VERSION

__all__ = [
    "EVENTS",
    "NO_EVENTS",
    "SCHEMA_VERSION",
    "EventRecorder",
    "EventWriter",
    "Events",
    "open_events",
]

logger = logging.getLogger(__name__)

EVENTS = frozenset(
    {
        "job_started",
        "backend_attached",
        "task_launched",
        "task_placed",
        "task_registered",
        "cluster_up",
        "task_ready",
        "task_unheard",
        "task_heard",
        "task_drained",
        "task_exited",
        "task_relaunched",
        "job_restart",
        "job_stopping",
        "job_stopped",
        "job_verdict",
    }
)
"""Every event's name. A new one keeps :data:`SCHEMA_VERSION` (see above:
consumers skip the names they do not know); one removed is a new version."""


MAX_PENDING = 10_000
"""The most events waiting for a reader that lags; past it, new events are
dropped and counted (the verdict is never dropped)."""
CLOSE_GRACE = 5.0
"""Seconds the job's end waits for its last events to be written."""


class Events:
    """Where the launcher's events go: dropped here; subclasses write or keep
    them."""

    verdict_written = False
    """Whether the job's verdict (``job_verdict``, the last event) is out."""

    def emit(self, event: str, **fields: Any) -> None:
        if event not in EVENTS:
            raise ValueError(f"unknown event {event!r}")
        if event == "job_verdict":
            if self.verdict_written:
                return  # the first verdict is the job's; a later one restates it
            self.verdict_written = True
        self.record({"v": SCHEMA_VERSION, "ts": time.time(), "event": event, **fields})

    def record(self, obj: dict[str, Any]) -> None:
        """Keep or write one event."""

    def close(self) -> None:
        """Release what the events are written to."""


NO_EVENTS = Events()


class EventRecorder(Events):
    """Keeps every event in :attr:`records`, in order."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def record(self, obj: dict[str, Any]) -> None:
        self.records.append(obj)

    def names(self) -> list[str]:
        return [r["event"] for r in self.records]

    def of(self, event: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["event"] == event]


class EventWriter(Events):
    """Writes each event as a flushed line of JSON to ``stream`` from a thread of
    its own, so the job never waits on the reader. Past :data:`MAX_PENDING`
    waiting events the newest are dropped and counted (``events_dropped``); a
    stream that cannot be written is given up with one warning. Thread-safe."""

    def __init__(
        self,
        stream: IO[str] | None,
        *,
        owned: bool = False,
        name: str = "",
        open_later: Callable[[], IO[str]] | None = None,
    ) -> None:
        self._stream = stream
        self._open_later = open_later
        """Opens the stream in the writer's thread, where opening it waits
        (a FIFO no reader has opened yet): the job does not wait for it."""
        self._owned = owned
        self._name = name or getattr(stream, "name", "the event stream")
        self._pending: collections.deque[str] = collections.deque()
        self._changed = threading.Condition()
        self._writing = False
        self._closing = False
        self.dropped = 0
        """Events not written: dropped while the reader lagged, or after the
        stream was given up."""
        self.failed: str | None = None
        """Why the stream was given up, once it was."""
        self._thread = threading.Thread(target=self._write_all, name="tfmesos-events", daemon=True)
        self._thread.start()

    def record(self, obj: dict[str, Any]) -> None:
        verdict = obj["event"] == "job_verdict"
        with self._changed:
            if self.failed is not None or self._closing:
                self.dropped += 1
                return
            if len(self._pending) >= MAX_PENDING and not verdict:
                self.dropped += 1
                return
            if verdict and self.dropped:
                obj = {**obj, "events_dropped": self.dropped}
            self._pending.append(json.dumps(obj, separators=(",", ":"), default=str) + "\n")
            self._changed.notify_all()

    def _write_all(self) -> None:
        while True:
            with self._changed:
                while not self._pending and not self._closing:
                    self._changed.wait()
                if not self._pending:
                    return
                line = self._pending.popleft()
                self._writing = True
            try:
                if self._stream is None:
                    assert self._open_later is not None
                    self._stream = self._open_later()
                self._stream.write(line)
                self._stream.flush()
            except (OSError, ValueError) as exc:  # ValueError: a stream closed under us
                self._give_up(exc)
                return
            finally:
                with self._changed:
                    self._writing = False
                    self._changed.notify_all()

    def _give_up(self, exc: BaseException) -> None:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        with self._changed:
            self.failed = reason
            self.dropped += 1 + len(self._pending)  # the line being written, and the rest
            self._pending.clear()
            self._changed.notify_all()
        logger.warning(
            "--events: cannot write %s (%s): the event stream is given up, the job goes on",
            self._name,
            reason,
        )

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every event so far is written; False if ``timeout`` passed
        first."""
        with self._changed:
            return self._changed.wait_for(
                lambda: (not self._pending and not self._writing) or self.failed is not None,
                timeout,
            )

    def close(self) -> None:
        """Write what is pending, waiting at most :data:`CLOSE_GRACE` seconds
        for a reader that lags, then stop. What could not be written in that
        time is said in one warning."""
        drained = self.drain(CLOSE_GRACE)
        with self._changed:
            self._closing = True
            unwritten = len(self._pending) + self._writing
            self.dropped += len(self._pending)
            self._pending.clear()
            blocked = self._writing
            self._changed.notify_all()
        if not drained:
            logger.warning(
                "--events: %s's reader took nothing for %g s: %d events not written",
                self._name,
                CLOSE_GRACE,
                unwritten,
            )
        # A write blocked on a reader that never reads keeps its thread (a
        # daemon, ended with the process), and the stream stays open under
        # it: closing a file while another thread writes to it would wait on
        # that write.
        if not blocked:
            self._thread.join()
        if self._owned and self._stream is not None and not self._thread.is_alive():
            with contextlib.suppress(OSError):  # what could not be flushed was said above
                self._stream.close()


def open_events(where: str | os.PathLike[str] | IO[str]) -> EventWriter:
    """An :class:`EventWriter` to ``where``: a path (created or truncated,
    closed by :meth:`EventWriter.close`) or an open text file (left open).
    Raises :class:`OSError` if the path cannot be opened."""
    if not isinstance(where, str | os.PathLike):
        return EventWriter(where)
    path = os.fspath(where)
    try:
        # Private, as every log of the job: 0600 for a file it creates.
        # Not waiting: a FIFO that no reader has opened yet says so (ENXIO).
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            raise

        def open_later() -> IO[str]:
            return open(path, "w", encoding="utf-8")  # waits for the FIFO's reader

        return EventWriter(None, owned=True, name=path, open_later=open_later)
    os.set_blocking(fd, True)
    return EventWriter(os.fdopen(fd, "w", encoding="utf-8"), owned=True, name=path)
