"""Where a trivial tfrun job's time goes: a timeline, and optionally py-spy profiles.

    python bench/profile_bringup.py [-w 4] [--reps 5] [--py-spy DIR]

Runs ``tfrun -w N -s 0 --events FILE -- python -c pass`` and reads the time of
each event (its ``ts``), giving the median time from start to: the first task
launched (the launcher's interpreter, imports and backend up), the first and
the last task registered (the agents up), the cluster up, every worker exited,
every task stopped (teardown) and exit (the interpreter's end). With ``--py-spy``
it also records the launcher and its agents with py-spy (``pip install
py-spy``) and prints the functions holding the most samples. A diagnostic for
docs/benchmarks.md, not one of the benchmarks run_all runs.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from benchlib import PYTHON, ROOT, EventStream, JobFailed, bench_env, scratch, tfrun

MARKS = (
    "first task launched",
    "first task registered",
    "last task registered",
    "cluster up",
    "all workers exited",
    "every task stopped",
    "exit",
)


def timeline(workers: int, logs: Path) -> dict[str, float]:
    """Seconds from tfrun's start to each of MARKS, in one run."""
    events = EventStream(logs / "events.jsonl")
    argv = [*tfrun(), "-w", str(workers), "-s", "0", "--log-dir", str(logs), *events.flag]
    argv += ["--", PYTHON, "-c", "pass"]
    started = time.time()  # the clock of the events' ts
    code = subprocess.run(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=bench_env(),
        cwd=ROOT,
        check=False,
    ).returncode
    ended = time.time()
    events.read()
    if code != 0:
        raise JobFailed(f"tfrun exited with status {code}, {events.describe()}")
    registered = events.of("task_registered")
    exited = [e for e in events.of("task_exited") if e["task"].startswith("worker:")]
    found = {
        "first task launched": events.first("task_launched"),
        "first task registered": registered[0] if registered else None,
        "last task registered": registered[-1] if len(registered) >= workers else None,
        "cluster up": events.first("cluster_up"),
        "all workers exited": exited[-1] if len(exited) >= workers else None,
        "every task stopped": events.first("job_stopped"),
    }
    seen = {name: event["ts"] - started for name, event in found.items() if event is not None}
    seen["exit"] = ended - started
    return seen


def py_spy(workers: int, out: Path, logs: str) -> None:
    spy = shutil.which("py-spy", path=str(Path(PYTHON).parent)) or shutil.which("py-spy")
    if spy is None:
        print("py-spy is not installed: pip install py-spy")
        return
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "tfrun.collapsed"
    subprocess.run(
        [
            spy,
            "record",
            "--subprocesses",
            "--rate",
            "2000",
            "--format",
            "raw",
            "--output",
            str(raw),
            "--",
            *tfrun(),
            *("-w", str(workers), "-s", "0", "--log-dir", logs, "--", PYTHON, "-c", "pass"),
        ],
        check=True,
        env=bench_env(),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    # Each line: "process A;process B (A's child);frame;frame;... count". Count
    # samples per kind of process (launcher, agent, task), and within each per
    # first-level import, or else per innermost tfmesos frame.
    per_process: collections.Counter[str] = collections.Counter()
    per_frame: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        frames = stack.split(";")
        processes = [f for f in frames if f.startswith("process ")]
        code = frames[len(processes) :]
        kind = "launcher"
        if len(processes) > 1:
            kind = "agent" if "tfmesos.agent" in processes[-1] else "task"
        per_process[kind] += int(samples)
        if any(f.startswith("_find_and_load ") for f in code):
            first = code.index(next(f for f in code if f.startswith("_find_and_load ")))
            module = next((f for f in code[first:] if f.startswith("<module> (")), "?")
            key = f"import {module.removeprefix('<module> (').split(':')[0]}"
        else:
            ours = [f for f in code if "tfmesos" in f]
            key = ours[-1] if ours else (code[-1] if code else "(starting)")
        per_frame[(kind, key)] += int(samples)
    print(f"py-spy samples at 2000 Hz, by process: {dict(per_process)}")
    for (kind, frame), count in per_frame.most_common(25):
        print(f"  {count:6d}  {kind:8}  {frame}")
    print(f"raw stacks in {raw}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-w", type=int, default=4, help="workers (default 4)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--py-spy", type=Path, default=None, metavar="DIR")
    args = parser.parse_args()
    with scratch("profile") as logs:
        timeline(args.w, logs)  # warm-up
        runs = [timeline(args.w, logs) for _ in range(args.reps)]
        print(f"tfrun -w {args.w} -s 0 -- python -c pass, median of {args.reps}:")
        previous = 0.0
        for name in MARKS:
            values = [r[name] for r in runs if name in r]
            if not values:
                continue
            value = statistics.median(values)
            print(f"  {name:24} {value * 1000:7.1f} ms  (+{(value - previous) * 1000:6.1f} ms)")
            previous = value
        if args.py_spy is not None:
            py_spy(args.w, args.py_spy, str(logs))


if __name__ == "__main__":
    main()
