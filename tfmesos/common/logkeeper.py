"""A capped log fed through a pipe: ``bootstrap_command`` runs :func:`main`
with the pipe's read end as its standard input and the log's path as its
one argument, and it writes what comes to the log, rotated and capped as
every task's log is (``TFMESOS_TASK_LOG_MAX``), until every writer has
closed the pipe. A detached local job's launcher writes its console
through one, so that the run's ``console.log`` keeps to the cap its task
logs keep to. Standard library only."""

from __future__ import annotations

import os
import signal
import sys

from tfmesos.common.rundirs import task_log_max
from tfmesos.common.tasklog import TaskLog

__all__ = ["main"]

_CHUNK = 1 << 16


def main() -> int:
    # The signals a stop sends are the writers' to act on: the keeper stays
    # to keep their last words, and ends when they have all gone.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    path = sys.argv[1]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    log = TaskLog(path, task_log_max(), fds=(fd,))
    while data := os.read(0, _CHUNK):
        log.write(data)
    return 0
