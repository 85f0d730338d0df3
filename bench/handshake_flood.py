"""Benchmark 8: bring-up of a 20-task job while a flood of silent connections holds the rendezvous.

- no flood: ``TFMESOS_NO_FORK_SERVER=1 tfrun -w 20 -s 0 -- python -c pass``
- flood:    the same, while a second process (``flood_rendezvous.py``) holds
  1,500 connections to tfrun's rendezvous open without a word, and opens a
  new one each time one is closed, from the moment the port listens to the
  end of the job.

Bring-up is the time from tfrun's start to its ``cluster_up`` event (the
event's ``ts``, ``tfrun --events``); each job's relaunches (a task refused and
started again: its ``task_relaunched`` events) are counted. Without the fork
server every agent is a new interpreter, so the tasks dial in over a second
or so, with the flood in place. Target: bring-up with the flood within 2x of
bring-up without.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from benchlib import (
    BENCH,
    PYTHON,
    ROOT,
    EventStream,
    JobFailed,
    Result,
    alternate,
    bench_env,
    command_line,
    parse_args,
    scratch,
    tfrun,
)

TASKS = 20
FLOOD = 1500


SMOKE_TASKS = 2
SMOKE_FLOOD = 50
"""With --smoke: the same code path, small enough for the test suite."""


def bring_up(logs: Path, tasks: int, flood: int, relaunches: list[int]) -> float:
    """Seconds from tfrun's start to its cluster up with ``flood`` silent
    connections held (none: 0); the job must exit 0."""
    events = EventStream(logs / "events.jsonl")
    argv = [*tfrun(), "-w", str(tasks), "-s", "0", "--log-dir", str(logs), *events.flag]
    argv += ["--", PYTHON, "-c", "pass"]
    started = time.time()  # the clock of the events' ts
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=bench_env(TFMESOS_NO_FORK_SERVER="1"),
        cwd=ROOT,
    )
    flooder = None
    if flood:
        flooder = subprocess.Popen(
            [PYTHON, str(BENCH / "flood_rendezvous.py"), str(proc.pid), str(flood)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=bench_env(),
        )
    try:
        code = proc.wait()
    finally:
        if flooder is not None:
            flooder.kill()
            flooder.wait()
    events.read()
    up = events.first("cluster_up")
    if code != 0 or up is None:
        raise JobFailed(f"tfrun exited with status {code}, {events.describe()}")
    relaunches.append(len(events.of("task_relaunched")))
    return float(up["ts"]) - started


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], reps=7)
    tasks, flood = (SMOKE_TASKS, SMOKE_FLOOD) if args.smoke else (TASKS, FLOOD)
    result = Result(
        "handshake_flood",
        command_line("handshake_flood.py", args),
        args.quick,
        {
            "reps": args.reps,
            "tasks": tasks,
            "flood": flood,
            "fork_server": False,
            "load_average_1min_before": os.getloadavg()[0],
        },
    )
    relaunched: dict[str, list[int]] = {"no flood": [], "flood": []}
    with scratch("flood") as logs:
        walls = alternate(
            args.reps,
            {
                "no flood": lambda: bring_up(logs, tasks, 0, relaunched["no flood"]),
                "flood": lambda: bring_up(logs, tasks, flood, relaunched["flood"]),
            },
            warmup=args.warmup,
        )
    for name, samples in walls.items():
        result.add(f"bring-up, {tasks} tasks, {name}", "s", samples)
    ratio = result.ratio(
        "flood / no flood", f"bring-up, {tasks} tasks, flood", f"bring-up, {tasks} tasks, no flood"
    )
    result.target(
        "8: bring-up under a handshake flood",
        "\u2264 2\u00d7",
        f"{ratio.value:.2f}\u00d7",
        ratio.value <= 2.0,
    )
    for name, counts in relaunched.items():
        # The warm-up's job counts too: it was refused or not like any other.
        result.note(f"{name}: {sum(counts)} relaunches in {len(counts)} jobs")
    # Other people's work shares this machine's cores: say how busy it was.
    result.note(
        f"1-minute load average: {result.params['load_average_1min_before']:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after"
    )
    result.write(args.results_dir)


if __name__ == "__main__":
    main()
