"""tfrun's event stream (``--events FILE``) as the tests read it.

Tests learn what a job did (came up, a task exited, a relaunch, the verdict)
from these JSON lines, never from tfrun's prose, so that a reworded message
breaks only the test that checks that message's wording.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["JobEvents"]

Event = dict[str, Any]

POLL = 0.05
"""How often :meth:`JobEvents.wait_for` looks at the file again: the
launcher flushes each event as it happens, so a new line is there to see."""


class JobEvents:
    """The events one tfrun writes to ``path``, read as they are written."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def flag(self) -> tuple[str, str]:
        """tfrun's arguments that write the events here."""
        return ("--events", str(self.path))

    def all(self) -> list[Event]:
        """Every whole line written so far (a line being written is left)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        lines = text.split("\n")[:-1]  # the part after the last newline is unfinished
        return [json.loads(line) for line in lines if line]

    def of(self, name: str) -> list[Event]:
        return [e for e in self.all() if e["event"] == name]

    def names(self) -> list[str]:
        return [e["event"] for e in self.all()]

    def verdict(self) -> Event:
        """The job's verdict, which must be the last event."""
        events = self.all()
        assert events and events[-1]["event"] == "job_verdict", f"no verdict last: {events}"
        return events[-1]

    def exited(self) -> dict[str, Event]:
        """Each task's last ``task_exited`` event, by task name."""
        return {e["task"]: e for e in self.of("task_exited")}

    def wait_for(
        self,
        name: str,
        proc: subprocess.Popen[Any] | None = None,
        *,
        where: Callable[[Event], bool] = lambda e: True,
        timeout: float = 120,
    ) -> Event:
        """The first event called ``name`` that ``where`` accepts, once written.

        Fails at once when ``proc`` (the tfrun writing the file) ends without
        it; ``timeout`` only guards against a hang.
        """
        deadline = time.monotonic() + timeout
        while True:
            ended = proc is not None and proc.poll() is not None
            found = [e for e in self.of(name) if where(e)]
            if found:
                return found[0]
            if ended:
                raise AssertionError(f"tfrun exited without {name!r}; its events: {self.names()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {name!r} within {timeout} s; the events: {self.names()}")
            time.sleep(POLL)
