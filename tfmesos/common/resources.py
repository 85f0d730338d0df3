"""What this machine has: CPUs, memory and GPUs, for the local backend's checks."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

__all__ = [
    "MAX_LOCAL_TASKS",
    "GpuAllocator",
    "MachineResources",
    "format_mib",
    "local_task_limit",
    "machine_resources",
]

MAX_LOCAL_TASKS = 4096
"""The most tasks the local backend runs in one job, whatever the machine's
limits: each is an agent and a command, a port of the launcher's range, and
two of its descriptors."""


def format_mib(mib: float) -> str:
    """A size in MiB as every message of tfmesos says one: ``512 MiB``, ``8 GiB``,
    ``7.999 GiB`` (to a thousandth, so sizes a few MiB apart read differently),
    ``954 TiB``."""
    for unit, size in (("PiB", 1024.0**3), ("TiB", 1024.0**2)):
        if mib >= size:
            value = mib / size
            return f"{value:.3g} {unit}" if value < 1000 else f"{value:,.0f} {unit}"
    if mib >= 1024:
        return f"{mib / 1024:.3f}".rstrip("0").rstrip(".") + " GiB"
    return f"{mib:g} MiB"


@dataclass(frozen=True, slots=True)
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
    """The GPUs this process may hand out, as CUDA_VISIBLE_DEVICES entries.

    ``CUDA_VISIBLE_DEVICES``, when set, is the user's word: only those. Else
    NVML (the ``nvidia-ml-py`` package) if it is installed, else ``nvidia-smi``,
    else none.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [v.strip() for v in visible.split(",")]
        # CUDA stops at the first invalid entry; -1 is the usual "none".
        usable: list[str] = []
        for entry in entries:
            if not entry or entry == "-1":
                break
            usable.append(entry)
        return tuple(usable)
    return _nvml_gpus() or _nvidia_smi_gpus()


def _nvml_gpus() -> tuple[str, ...]:
    try:
        import pynvml  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return ()
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver: NVML raises its own error types
        return ()
    try:
        return tuple(str(i) for i in range(pynvml.nvmlDeviceGetCount()))
    finally:
        pynvml.nvmlShutdown()


def _nvidia_smi_gpus() -> tuple[str, ...]:
    import shutil  # here: a job that asks for no GPU never looks (~3 ms with bz2 and lzma)

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(line.strip() for line in out.splitlines() if line.strip().isdigit())


def local_task_limit(tasks: int, nproc: int = 1) -> str | None:
    """Why this machine cannot run ``tasks`` tasks of ``nproc`` processes at once,
    or None: checks the fixed cap, this user's process limit and the descriptor
    limits the launcher and each runner can raise themselves to."""
    if tasks > MAX_LOCAL_TASKS:
        return (
            f"the local backend runs at most {MAX_LOCAL_TASKS} tasks in one job, not {tasks}: "
            "run it on a cluster (-m MASTER for Mesos, --backend slurm) for more"
        )
    try:
        import resource
    except ImportError:  # not on a POSIX system
        return None
    allowed = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    processes = (1 + max(nproc, 1)) * tasks + 2
    if allowed != resource.RLIM_INFINITY and processes > allowed:
        each = "an agent and a command" if nproc == 1 else f"a runner and {nproc} processes"
        return (
            f"{tasks} tasks need at least {processes} processes ({each} each), more than "
            f"this user's process limit (RLIMIT_NPROC, ulimit -u) of {allowed}"
        )
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    descriptors = 2 * tasks + 64
    if nofile != resource.RLIM_INFINITY and descriptors > nofile:
        return (
            f"{tasks} tasks need about {descriptors} open files in tfrun, more than this "
            f"machine allows it (RLIMIT_NOFILE, ulimit -Hn) of {nofile}"
        )
    runner = 3 * nproc + 16  # each process's output pipe, its log, a pidfd
    if nproc > 1 and nofile != resource.RLIM_INFINITY and runner > nofile:
        return (
            f"--nproc-per-task {nproc} needs about {runner} open files in each task's runner, "
            f"more than this machine allows it (RLIMIT_NOFILE, ulimit -Hn) of {nofile}"
        )
    return None


def machine_resources(*, gpus: bool = True) -> MachineResources:
    """What this machine has; ``gpus=False`` skips the GPU probe, which can take a
    second."""
    return MachineResources(cpus=_cpus(), mem_mib=_mem_mib(), gpus=_gpus() if gpus else ())


class GpuAllocator:
    """Hands each task GPUs of its own: two tasks never share one."""

    def __init__(self, gpus: tuple[str, ...]) -> None:
        self._free = list(gpus)
        self.total = len(gpus)

    @property
    def free(self) -> int:
        return len(self._free)

    def allocate(self, count: int) -> list[str]:
        if count > len(self._free):
            raise RuntimeError(f"{count} GPUs asked, {len(self._free)} free")
        taken, self._free = self._free[:count], self._free[count:]
        return taken

    def release(self, gpus: list[str]) -> None:
        self._free.extend(g for g in gpus if g not in self._free)
