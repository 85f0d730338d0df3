"""``cgroups/mem`` as the test master models it: measuring a task's memory and
the update that ends a task over its limit (``MemorySubsystemProcess::oomWaited``,
``Slave::sendExecutorTerminatedStatusUpdate``)."""

from __future__ import annotations

import contextlib
import os

from tfmesos.common import procfs
from tfmesos.testing.master.schema import JSON

MEMORY_POLL = 0.5
"""Seconds between two looks at the RSS of a task's processes under ``cgroups/mem``
(a few /proc reads per process of the task)."""

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
MB = 1 << 20


def memory_enforced(isolation: str | None) -> bool:
    """Whether the agent's ``--isolation`` has the isolator that ends a task
    over its memory (``cgroups/mem``; ``posix/mem``, the default, only measures)."""
    return isolation is not None and "cgroups/mem" in {n.strip() for n in isolation.split(",")}


def tree_rss(pid: int) -> int:
    """Bytes resident in ``pid`` and the processes below it (``/proc/PID/statm``)."""
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [p.pid for p in procfs.descendants(pid)]
    total = 0
    for member in pids:
        try:
            with open(f"/proc/{member}/statm", "rb") as statm:
                total += int(statm.read().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return total


def stout_bytes(count: int) -> str:
    """``Bytes`` as stout prints it: the largest unit that loses nothing (``288MB``)."""
    if count == 0:
        return "0B"
    for unit, name in ((1 << 40, "TB"), (1 << 30, "GB"), (MB, "MB"), (1 << 10, "KB")):
        if count % unit == 0:
            return f"{count // unit}{name}"
    return f"{count}B"


def memory_limitation(limit: int, used: int) -> tuple[str, JSON]:
    """The message and ``limitation`` of the update that ends a container over
    its ``limit`` bytes, its processes holding ``used``:
    ``MemorySubsystemProcess::oomWaited`` and
    ``Slave::sendExecutorTerminatedStatusUpdate``. "Requested" is the cgroup's
    limit; "Maximum Used" is the cgroup's peak, which the limit caps (the
    kernel stops the allocation there), so a real agent reports the limit
    itself, and so does this; the limited resource is that peak, in MB. Of
    the cgroup's ``memory.stat`` the double knows two lines, the second what
    it measured."""
    peak = min(used, limit)
    message = (
        f"Memory limit exceeded: Requested: {stout_bytes(limit)} Maximum Used: "
        f"{stout_bytes(peak)}\n\nMEMORY STATISTICS: \n"
        f"hierarchical_memory_limit {limit}\ntotal_rss {used}\n\n"
    )
    resource = {"name": "mem", "type": "SCALAR", "scalar": {"value": peak / MB}}
    return message, {"resources": [resource]}
