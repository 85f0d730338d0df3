"""The task's log: the agent's stdout, rotated under a cap where the backend
sets one (:data:`tfmesos.wire.ENV_LOG_MAX`).

Standard library only: the agent imports it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tfmesos import wire

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["TaskLog"]


class TaskLog:
    """The agent's stdout, where everything the task prints is kept (its
    sandbox log on Mesos, its log file locally). Given a file and a cap, the
    file is rotated once it holds half the cap: the file and ``FILE.1``
    together never hold more than the cap, and the newest output is kept."""

    def __init__(self, path: str | None = None, cap: int = 0) -> None:
        self.path = path
        self.half = cap // 2 if path and cap > 1 else 0
        try:
            self.size = os.fstat(1).st_size
        except OSError:
            self.size = 0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> TaskLog:
        cap = environ.get(wire.ENV_LOG_MAX, "")
        return cls(environ.get(wire.ENV_LOG_FILE) or None, int(cap) if cap.isdigit() else 0)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            chunk = view
            if self.half:
                if self.size >= self.half:
                    self._rotate()
                chunk = view[: max(self.half - self.size, 1)]
            written = os.write(1, chunk)
            self.size += written
            view = view[written:]

    def _rotate(self) -> None:
        assert self.path is not None
        try:
            os.replace(self.path, self.path + ".1")
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        except OSError:
            self.half = 0  # cannot rotate (the directory is gone?): write on
            return
        for target in (1, 2):
            os.dup2(fd, target)
        os.close(fd)
        self.size = 0
