"""The sweeper: ends a local job's tasks should the launcher die outright.

The local backend runs a plain task's command itself, as the launcher's own
child (:mod:`tfmesos.backends.local.directtask`), with nothing between the fork and
the exec: no parent-death signal is asked for in the child. This process
stands in for it, once per job rather than once per command. It reads what the
launcher tells it on its stdin, one line at a time:

* ``carries NAME=VALUE``: a task of the job, by the entry every one of its
  processes carries in its environment (``TFMESOS_TASK_ID=...``),
* ``group PGID``: a command's process group, from its start,
* ``done PGID``: that group is over (its leader is about to be reaped),
* ``stray PID START``: a process a task hid from its group and its mark
  (``setsid env -i helper &``), handed to the launcher, and when it started,
* ``bye``: the launcher ends normally; nothing to do.

Its stdin ending without ``bye`` means the launcher is gone (SIGKILL, the OOM
killer): every group still held is SIGKILLed with everything below its
members (a helper in a session of its own whose parent is still there), the
strays, then every process that carries one of the job's task ids in its
environment, until none is left.

Standard library only (no ``tfmesos.wire``: the launcher spells the entries
out): it costs each local job one bare interpreter start.
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
    """SIGKILL the groups and what is below their members, the strays that
    are still the processes named (``{pid: start}``), then what carries one
    of ``marks`` in its environment, until none is left."""
    below: list[int] = []
    if groups:
        # Found before any is killed: once a parent dies, what it left is
        # handed to init, and nothing links it to the job any more.
        try:
            members = [p.pid for p in procfs.processes() if p.pgrp in groups]
            for pid in members:
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
