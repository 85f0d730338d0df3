"""Benchmark 6: the launcher's memory with 10, 100 and 500 tasks.

``tfrun -w N -s 0 -Cw 0.01 -Mw 1 -- sleep S`` on the local backend: every task
sleeps a few seconds once the cluster is up. The tfrun process's RSS (and its
thread and file descriptor counts) is sampled with psutil every 50 ms from start
to exit; the agents' memory is taken once, while every task sleeps. Target:
launcher RSS at most 100 MiB at 500 tasks.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from dataclasses import dataclass

import psutil
from benchlib import (
    JobFailed,
    MiB,
    Result,
    alternate,
    command_line,
    parse_args,
    scratch,
    spawn,
    tfrun,
)


@dataclass
class Sample:
    rss: float
    threads: int
    fds: int
    wall: float
    cluster_up: float
    agents_rss: float
    agents_uss: float


def _watch_stderr(proc: subprocess.Popen[bytes], started: float, box: dict[str, float]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        if b"cluster up" in line and "up" not in box:
            box["up"] = time.perf_counter() - started
    proc.stderr.close()


def measure(tasks: int, sleep: float, logs: str) -> Sample:
    argv = [
        *tfrun(),
        "-w",
        str(tasks),
        "-s",
        "0",
        "-Cw",
        "0.01",
        "-Mw",
        "1",
        "--log-dir",
        logs,
        "--",
        f"sleep {sleep}",
    ]
    started = time.perf_counter()
    proc = spawn(argv, stderr=subprocess.PIPE)
    box: dict[str, float] = {}
    watcher = threading.Thread(target=_watch_stderr, args=(proc, started, box))
    watcher.start()
    launcher = psutil.Process(proc.pid)
    rss = threads = fds = 0
    agents_rss = agents_uss = 0
    while proc.poll() is None:
        with contextlib.suppress(psutil.Error):
            rss = max(rss, launcher.memory_info().rss)
            threads = max(threads, launcher.num_threads())
            fds = max(fds, launcher.num_fds())
            if "up" in box and not agents_rss and time.perf_counter() - started > box["up"] + 0.3:
                # Once, while every task sleeps: what the agents (and the fork
                # server they come from, if any) hold between them; not the
                # tasks' own `sleep`s.
                for child in launcher.children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        if child.name() == "sleep":
                            continue
                        info = child.memory_full_info()
                        agents_rss += info.rss
                        agents_uss += info.uss
        time.sleep(0.05)
    watcher.join()
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise JobFailed(f"tfrun -w {tasks}: exited with status {proc.returncode}")
    return Sample(
        rss / MiB,
        threads,
        fds,
        wall,
        box.get("up", float("nan")),
        agents_rss / MiB,
        agents_uss / MiB,
    )


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], reps=3)
    sizes = [2] if args.smoke else [10, 50] if args.quick else [10, 100, 500]
    sleep = 2.0 if args.quick else 3.0
    result = Result(
        "launcher_memory",
        command_line("launcher_memory.py", args),
        args.quick,
        {"reps": args.reps, "tasks": sizes, "sleep_s": sleep},
    )
    with scratch("memory") as logs:
        samples = alternate(
            args.reps,
            {
                f"{n} tasks": (lambda n=n: measure(n, sleep, str(logs)))  # type: ignore[misc]
                for n in sizes
            },
            warmup=args.warmup,
        )
    for n in sizes:
        runs = samples[f"{n} tasks"]
        result.add(f"launcher RSS (peak), {n} tasks", "MiB", [s.rss for s in runs])
    for n in sizes:
        runs = samples[f"{n} tasks"]
        result.add(f"launcher threads (peak), {n} tasks", "", [s.threads for s in runs])
        result.add(f"launcher open fds (peak), {n} tasks", "", [s.fds for s in runs])
        result.add(f"start to cluster up, {n} tasks", "s", [s.cluster_up for s in runs])
        result.add(f"wall time, {n} tasks", "s", [s.wall for s in runs])
        result.add(f"all agents' RSS, {n} tasks", "MiB", [s.agents_rss for s in runs])
        result.add(f"all agents' USS, {n} tasks", "MiB", [s.agents_uss for s in runs])
    largest = sizes[-1]
    rss = result.row(f"launcher RSS (peak), {largest} tasks").median
    if largest == 500:
        result.target(
            "6: launcher RSS at 500 tasks", "\u2264 100 MiB", f"{rss:.1f} MiB", rss <= 100
        )
    else:
        result.target(
            "6: launcher RSS at 500 tasks",
            "\u2264 100 MiB",
            f"quick run: {largest} tasks only ({rss:.1f} MiB)",
            None,
        )
    result.write(args.results_dir)


if __name__ == "__main__":
    main()
