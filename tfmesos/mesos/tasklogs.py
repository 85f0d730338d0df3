"""The remote tasks' output, kept on the launcher's machine.

A Mesos task's output also lives in its sandbox, but sandboxes are garbage
collected: what reaches the launcher is written as it comes to
``worker.1.log`` in the run's directory, so that the directory tfrun names
holds every task's output whatever the backend. Logs are capped and rotated
as the local backend's are (``TFMESOS_TASK_LOG_MAX``); a log that cannot be
written (a full disk) is given up on with one warning, and the job goes on."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from tfmesos.common.pathtext import shown_path
from tfmesos.common.tasklog import log_name

__all__ = ["TaskLogs"]

logger = logging.getLogger("tfmesos")


class _Log:
    def __init__(self, path: Path, half: int) -> None:
        self.path = path
        self.half = half
        self.fd = -1
        self.size = 0
        self.broken = False

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self.fd < 0:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                self.size = os.fstat(self.fd).st_size
            chunk = view
            if self.half:
                if self.size >= self.half:
                    self.rotate()
                chunk = view[: max(self.half - self.size, 1)]
            written = os.write(self.fd, chunk)
            self.size += written
            view = view[written:]

    def rotate(self) -> None:
        self.close()
        os.replace(self.path, f"{self.path}.1")
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        self.size = 0

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class TaskLogs:
    """``worker.1.log`` (:func:`tfmesos.common.tasklog.log_name`) in ``directory`` for each task whose output is handed
    to :meth:`write`; ``cap`` bytes at most for each (0: no cap)."""

    def __init__(self, directory: Path, cap: int = 0) -> None:
        self.directory = directory
        self._half = cap // 2 if cap > 1 else 0
        self._logs: dict[str, _Log] = {}
        self.lost: list[str] = []
        """The tasks whose output could not all be kept (each said once)."""

    def path(self, task_id: str) -> Path:
        return self.directory / log_name(task_id)

    def write(self, task_id: str, data: bytes, name: str = "") -> None:
        """Keep ``data``, the output of task ``task_id`` (``name`` in what is
        said of it: ``worker:1``)."""
        log = self._logs.get(task_id)
        if log is None:
            log = self._logs[task_id] = _Log(self.path(task_id), self._half)
        if log.broken:
            return
        try:
            log.write(data)
        except OSError as exc:
            log.broken = True
            log.close()
            self.lost.append(name or task_id)
            logger.warning(
                "cannot keep the output of task %s in %s (%s): the rest of it is only in its "
                "sandbox",
                name or task_id,
                shown_path(log.path),
                exc.strerror or exc,
            )
            return
        if name and f"[{name}.".encode() in data:
            self._by_process(task_id, name, data)

    def _by_process(self, task_id: str, name: str, data: bytes) -> None:
        """A task of several processes (``--nproc-per-task``): each line of
        its process K (``[worker:1.K] ...``) is kept in
        ``worker.1.local-rank-K.log`` too, without its name, as the local
        backend keeps them."""
        prefix = re.compile(rb"^\[" + re.escape(name.encode()) + rb"\.(\d+)\] ", re.M)
        pieces: dict[str, list[bytes]] = {}
        for line in data.splitlines(keepends=True):
            match = prefix.match(line)
            if match:
                pieces.setdefault(match.group(1).decode(), []).append(line[match.end() :])
        for rank, lines in pieces.items():
            key = f"{task_id}.local-rank-{rank}"
            log = self._logs.get(key)
            if log is None:
                own = log_name(task_id).removesuffix(".log") + f".local-rank-{rank}.log"
                log = self._logs[key] = _Log(self.directory / own, self._half)
            if log.broken:
                continue
            try:
                log.write(b"".join(lines))
            except OSError:
                # Said of the task's own log, which has these lines too.
                log.broken = True
                log.close()

    def close(self) -> None:
        for log in self._logs.values():
            log.close()
