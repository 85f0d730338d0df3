"""The reaper: a helper process that outlives the master's and kills what is left.

The master kills a task's whole tree when it ends, as Mesos does; so that no
task outlives a test whose process died without stopping the master, each
task's process group is told to this helper, which kills the groups still
listed at EOF on its stdin.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from pathlib import Path

from tfmesos.common import procfs
from tfmesos.common.proctree import signal_group, signal_pid

_REAPER_SOURCE = """
import os, shutil, signal, sys
groups = set()
directories = []
for line in sys.stdin:
    line = line.rstrip("\\n")
    if line[:1] == "+":
        groups.add(int(line[1:]))
    elif line[:1] == "-":
        groups.discard(int(line[1:]))
    elif line[:1] == "d":
        directories.append(line[1:])
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
for directory in directories:
    shutil.rmtree(directory, ignore_errors=True)
"""


class Reaper:
    """A helper process told every live task process group. When its stdin
    reaches EOF (the master stopped, or its process died however it died) it
    SIGKILLs the groups still listed, so no task outlives a crashed test run."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-c", _REAPER_SOURCE],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )

    def _send(self, line: str) -> None:
        process = self._process
        if process is None or process.stdin is None:
            return
        try:
            process.stdin.write(line.encode("ascii") + b"\n")
            process.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            self._process = None

    @property
    def pid(self) -> int | None:
        """The reaper's own process ID (None once it is gone)."""
        return self._process.pid if self._process is not None else None

    def track(self, pgid: int) -> None:
        self._send(f"+{pgid}")

    def untrack(self, pgid: int) -> None:
        self._send(f"-{pgid}")

    def remove_on_exit(self, directory: Path) -> None:
        if "\n" not in str(directory):
            self._send(f"d{directory}")

    async def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError, ValueError):
            if process.stdin is not None:
                process.stdin.close()
        deadline = time.monotonic() + 5
        while process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if process.poll() is None:
            process.kill()
            process.wait()


def killpg(pgid: int, sig: int) -> bool:
    """Signal a task's processes; False if its process group no longer exists.
    As Mesos's ``os::killtree`` (groups and sessions): the task's tree, and
    every process in a group or session of one in it, so that the signal
    also reaches what the task moved to other groups of its session, and
    what it started in a session of its own (the agent's command)."""
    for pid in _tree_members(pgid):
        signal_pid(pid, sig)
    return signal_group(pgid, sig)


def _tree_members(leader: int) -> list[int]:
    """Processes in the tree of ``leader`` (a task's first process, which
    leads its session) and in the groups and sessions of those (Linux /proc;
    elsewhere none are found)."""
    try:
        everyone = list(procfs.processes())
        tree = [procfs.stat_of(leader), *procfs.descendants(leader)]
    except OSError:
        return []
    groups = {p.pgrp for p in tree if p is not None} | {leader}
    sessions = {p.session for p in tree if p is not None} | {leader}
    return [p.pid for p in everyone if p.pgrp in groups or p.session in sessions]
