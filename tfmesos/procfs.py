"""Reading Linux's process table (``/proc/PID/stat``). Standard library only:
the agent uses it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NamedTuple

__all__ = ["ProcessStat", "processes"]


class ProcessStat(NamedTuple):
    pid: int
    state: str
    """One letter: R running, S sleeping, Z zombie, ..."""
    pgrp: int
    session: int


def processes() -> Iterator[ProcessStat]:
    """Every process this one can see; raises OSError where there is no /proc."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                # pid (comm) state ppid pgrp session ...; comm may hold spaces
                # and ')', so split after its last ')'.
                fields = stat.read().rsplit(b")", 1)[1].split()
            yield ProcessStat(int(entry), fields[0].decode(), int(fields[2]), int(fields[3]))
        except (OSError, IndexError, ValueError):  # gone meanwhile, or unreadable
            continue
