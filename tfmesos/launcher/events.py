"""The job's event stream: one JSON object per line for each thing the
launcher decides or sees (``tfrun --events FILE``, ``cluster(events=...)``).

Every object has ``v`` (the schema version, :data:`SCHEMA_VERSION`), ``ts``
(seconds since the epoch, a float), ``event`` (its name, one of
:data:`EVENTS`) and, where it is about one task, ``task`` (``worker:1``). The
launcher emits through one seam, :class:`Events`: :class:`EventWriter`
writes lines, flushed as each event happens; :class:`EventRecorder` keeps
them in memory (for tests); :data:`NO_EVENTS` drops them. The schema is in
the README ("The event stream").

What changes the schema version: a field removed or renamed, or one whose
type or meaning changes, or an event that is no longer written where it
was. That breaks a consumer written to the old schema. A new event, or a
new field on an event, does not: a consumer skips event names and fields it
does not know (the README asks it to), so they come with ``v`` unchanged.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import IO, Any

__all__ = [
    "EVENTS",
    "NO_EVENTS",
    "SCHEMA_VERSION",
    "EventRecorder",
    "EventWriter",
    "Events",
    "open_events",
]

SCHEMA_VERSION = 1
"""Changed only by what breaks a consumer of the old schema (see above)."""

EVENTS = frozenset(
    {
        "job_started",
        "backend_attached",
        "task_launched",
        "task_placed",
        "task_registered",
        "cluster_up",
        "task_ready",
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


class Events:
    """Where the launcher's events go. This one drops them; a subclass
    writes or keeps them (:meth:`record`)."""

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
    """Writes each event as one line of JSON to ``stream``, flushed at once
    (a reader tailing the file sees each as it happens). Thread-safe:
    ``cluster()`` emits from its loop's thread and from the caller's."""

    def __init__(self, stream: IO[str], *, owned: bool = False) -> None:
        self._stream = stream
        self._owned = owned
        self._lock = threading.Lock()

    def record(self, obj: dict[str, Any]) -> None:
        line = json.dumps(obj, separators=(",", ":"), default=str) + "\n"
        with self._lock:
            if self._stream.closed:
                return
            self._stream.write(line)
            self._stream.flush()

    def close(self) -> None:
        if self._owned:
            with self._lock:
                self._stream.close()


def open_events(where: str | os.PathLike[str] | IO[str]) -> EventWriter:
    """An :class:`EventWriter` to ``where``: a path (created or truncated,
    closed by :meth:`EventWriter.close`) or an open text file (left open).
    Raises :class:`OSError` if the path cannot be opened."""
    if isinstance(where, str | os.PathLike):
        return EventWriter(open(where, "w", encoding="utf-8"), owned=True)
    return EventWriter(where)
