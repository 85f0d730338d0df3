"""The sweeper: ends a local job's tasks should the launcher die outright.

The local backend runs plain commands as its own children with no parent-death
signal; this one process per job stands in. It reads lines on stdin:

* ``carries NAME=VALUE``: the environment entry a task's processes carry,
* ``group PGID``: a command's process group,
* ``done PGID``: that group is over,
* ``stray PID START``: a process that left its group, with its start time,
* ``bye``: the launcher ends normally.

Stdin ending without ``bye`` means the launcher is gone: the groups, the strays
and every process carrying a task id of the job are SIGKILLed until none is
left. Standard library only.
"""

from __future__ import annotations

import os
import time

from tfmesos.common import procfs
from tfmesos.common.procenv import with_any_environment

__all__ = ["main"]

SIGKILL = 9
"""``signal.SIGKILL``, on every system Linux runs on: the ``signal`` module
imports ``enum``, a third of this program's start."""
SWEEP_ROUNDS = 200
"""At most this many rounds of SIGKILL for what carries a task id (what one
round kills, a process forked meanwhile, the next gets)."""


def main() -> int:
    groups: set[int] = set()
    marks: set[bytes] = set()
    strays: dict[int, int] = {}
    pending = b""
    while True:
        try:
            data = os.read(0, 1 << 16)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            break
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            key, _, value = line.decode("utf-8", "replace").partition(" ")
            if key == "bye":
                return 0
            if key == "carries":
                marks.add(value.encode())
            elif key == "group" and value.isdigit():
                groups.add(int(value))
            elif key == "done" and value.isdigit():
                groups.discard(int(value))
            elif key == "stray":
                pid, _, started = value.partition(" ")
                if pid.isdigit() and started.isdigit():
                    strays[int(pid)] = int(started)
    sweep(groups, marks, strays)
    return 0


def sweep(groups: set[int], marks: set[bytes], strays: dict[int, int] | None = None) -> None:
    """SIGKILL the groups (and the sessions of the same number: a command
    leads both) and what is below their members, the strays that
    are still the processes named (``{pid: start}``), then what carries one
    of ``marks`` in its environment, until none is left."""
    below: list[int] = []
    if groups:
        # Found before any is killed: once a parent dies, what it left is
        # handed to init, and nothing links it to the job any more.
        try:
            # A command leads its session too (tfmesos.agent.supervisor):
            # what moved to another group of it is found as well.
            members = [p.pid for p in procfs.processes() if p.pgrp in groups or p.session in groups]
            for pid in members:
                below.append(pid)  # in the group, or only in the session
                below.extend(p.pid for p in procfs.descendants(pid))
        except OSError:  # no /proc, or no children lists: the groups and marks only
            pass
    for pgid in groups:
        _kill(-pgid)
    for pid in below:
        _kill(pid)
    for pid, started in (strays or {}).items():
        if procfs.start_time(pid) == started:
            _kill(pid)
    if not marks:
        return
    me = os.getpid()
    for _ in range(SWEEP_ROUNDS):
        try:
            found = [pid for pid in with_any_environment(marks) if pid != me]
        except OSError:  # no /proc
            return
        if not found:
            return
        for pid in found:
            _kill(pid)
        time.sleep(0.01)


def _kill(pid: int) -> None:
    """SIGKILL a process (a group, negative); one gone or not ours is passed over."""
    try:
        os.kill(pid, SIGKILL)
    except OSError:
        return
