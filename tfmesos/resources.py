"""What this machine has: CPUs, memory and GPUs, for the local backend's checks."""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["MachineResources", "machine_resources"]


@dataclass(frozen=True)
class MachineResources:
    cpus: int
    mem_mib: float
    gpus: tuple[str, ...]
    """Identifiers of the GPUs tasks may use (indices or UUIDs)."""


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _mem_mib() -> float:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 20)


def _gpus() -> tuple[str, ...]:
    # Only what the user has not hidden from us; GPU discovery with NVML comes
    # with GPU support on the local backend.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return tuple(v for v in visible.split(",") if v.strip() and v.strip() != "-1")
    return ()


def machine_resources() -> MachineResources:
    return MachineResources(cpus=_cpus(), mem_mib=_mem_mib(), gpus=_gpus())
