"""Reading Linux's process table (``/proc/PID/stat``). Standard library only:
the agent uses it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NamedTuple

from tfmesos.common.procenv import with_any_environment

__all__ = [
    "ProcessStat",
    "children",
    "descendants",
    "processes",
    "start_time",
    "stat_of",
    "with_any_environment",
    "with_environment",
]


class ProcessStat(NamedTuple):
    pid: int
    state: str
    """One letter: R running, S sleeping, Z zombie, ..."""
    pgrp: int
    session: int


def processes() -> Iterator[ProcessStat]:
    """Every process this one can see; raises OSError where there is no /proc."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = stat_of(int(entry))
            if stat is not None:  # gone meanwhile, or unreadable
                yield stat


def stat_of(pid: int) -> ProcessStat | None:
    """One process's entry, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return ProcessStat(pid, fields[0].decode(), int(fields[2]), int(fields[3]))
    except (OSError, IndexError, ValueError):
        return None


def start_time(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``stat``'s field 22):
    with the pid, names one process, whatever reuses the number later. None
    if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s children; OSError where the kernel does not list
    them."""
    found: list[int] = []
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{thread}/children") as listed:
                found.extend(map(int, listed.read().split()))
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{thread}"):
                continue  # the thread ended meanwhile
            raise
    return found


def with_environment(name: str, value: str) -> list[int]:
    """The pids of the processes whose environment, as they started with it,
    holds ``name=value``: those this process may read (its user's). Raises
    OSError where there is no /proc."""
    return with_any_environment({f"{name}={value}".encode()})


def descendants(pid: int) -> Iterator[ProcessStat]:
    """The processes below ``pid`` (its children, theirs, ...), from
    ``/proc/PID/task/TID/children``: as cheap as the tree is small, whatever
    else runs on the machine. Raises OSError where the kernel does not list
    children."""
    seen = {pid}
    pending = [pid]
    while pending:
        parent = pending.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except FileNotFoundError:  # gone meanwhile
            continue
        for thread in threads:
            try:
                with open(f"/proc/{parent}/task/{thread}/children") as children:
                    listed = children.read().split()
            except FileNotFoundError:
                if parent == pid:
                    raise  # no such file on this kernel at all
                continue
            for child in map(int, listed):
                if child not in seen:
                    seen.add(child)
                    pending.append(child)
                    stat = stat_of(child)
                    if stat is not None:
                        yield stat
