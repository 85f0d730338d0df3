"""Benchmark 6: the launcher's memory with 10, 100 and 500 tasks.

``tfrun -w N -s 0 -Cw 0.01 -Mw 1 -- sleep S`` on the local backend: every task
sleeps a few seconds once the cluster is up. The tfrun process's RSS (and its
thread and file descriptor counts) is sampled with psutil every 50 ms from start
to exit; the agents' memory is taken once, while every task sleeps (0.3 s after
the ``cluster_up`` of tfrun's event stream, ``--events``, whose ``ts`` is also
the start-to-cluster-up time). Target: launcher RSS at most 100 MiB at 500 tasks.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from benchlib import (
    EventStream,
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


def measure(tasks: int, sleep: float, logs: Path) -> Sample:
    events = EventStream(logs / "events.jsonl")
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
        str(logs),
        *events.flag,
        "--",
        f"sleep {sleep}",
    ]
    started = time.time()  # the clock of the events' ts
    proc = spawn(argv)
    launcher = psutil.Process(proc.pid)
    rss = threads = fds = 0
    agents_rss = agents_uss = 0
    up: float | None = None
    while proc.poll() is None:
        if up is None:
            events.read()
            cluster_up = events.first("cluster_up")
            up = None if cluster_up is None else float(cluster_up["ts"])
        with contextlib.suppress(psutil.Error):
            rss = max(rss, launcher.memory_info().rss)
            threads = max(threads, launcher.num_threads())
            fds = max(fds, launcher.num_fds())
            if up is not None and not agents_rss and time.time() > up + 0.3:
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
    wall = time.time() - started
    events.read()
    cluster_up = events.first("cluster_up")
    if proc.returncode != 0 or cluster_up is None:
        raise JobFailed(
            f"tfrun -w {tasks}: exited with status {proc.returncode}, {events.describe()}"
        )
    return Sample(
        rss / MiB,
        threads,
        fds,
        wall,
        cluster_up["ts"] - started,
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
                f"{n} tasks": (lambda n=n: measure(n, sleep, logs))  # type: ignore[misc]
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
