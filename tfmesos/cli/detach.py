"""A run's events kept in its directory, for ``tfrun list`` and the other
job commands (:mod:`tfmesos.cli.jobs`): every run's, attached or detached.

What detaches a job is each backend's store (:mod:`tfmesos.backends.jobs`);
what its launcher runs, :mod:`tfmesos.cli.launch`."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfmesos.backends.rundirjobs import EVENTS, STOP, write_job
from tfmesos.common import rundirs
from tfmesos.launcher.events import Events, open_events

__all__ = ["RunEvents"]


class RunEvents(Events):
    """The job's events, to its run's ``events.jsonl`` (which ``tfrun list``
    and the other commands read) and to ``--events`` where given; the
    verdict of a job ``tfrun stop`` ended says who stopped it and when.

    An attached job's run is the one its first ``job_started`` names, when
    this tfrun made it under the runs' root: ``job.json`` is written then,
    so that ``tfrun list`` shows attached runs too."""

    def __init__(
        self,
        streams: Sequence[Events],
        *,
        run_dir: Path | None = None,
        job: tuple[str, Sequence[str], str] | None = None,
    ) -> None:
        self._streams = list(streams)
        self._run_dir = run_dir
        self._job = job
        """An attached job's backend, argv and name, for its ``job.json``."""
        if run_dir is not None:
            self._streams.insert(0, open_events(run_dir / EVENTS))

    def record(self, obj: dict[str, Any]) -> None:
        if self._job is not None and obj["event"] == "job_started":
            self._adopt(obj.get("log_dir"))
        if obj["event"] == "job_verdict" and obj.get("result") == "interrupted" and self._run_dir:
            with contextlib.suppress(OSError, ValueError):
                stop = json.loads((self._run_dir / STOP).read_text())
                obj = {
                    **obj,
                    "stopped_by": stop.get("stopped_by"),
                    "stopped_at": stop.get("stopped_at"),
                }
        for stream in self._streams:
            stream.record(obj)

    def _adopt(self, log_dir: object) -> None:
        """Keep the attached job's events in its run's directory, once."""
        assert self._job is not None
        backend, argv, name = self._job
        self._job = None
        run = Path(str(log_dir)) if log_dir else None
        if run is None or run not in rundirs.held() or run.parent != rundirs.runs_root():
            return
        try:
            stream = open_events(run / EVENTS)
            write_job(run, backend, argv, name, detached=False)
        except OSError:
            return  # the run's logs are what matter; its listing is a convenience
        self._run_dir = run
        self._streams.insert(0, stream)

    def close(self) -> None:
        for stream in self._streams:
            stream.close()
