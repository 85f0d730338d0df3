"""Where a trivial tfrun job's time goes: a timeline, and optionally py-spy profiles.

    python bench/profile_bringup.py [-w 4] [--reps 5] [--py-spy DIR]

Runs ``tfrun -v -w N -s 0 -- python -c pass`` and stamps each line tfrun logs
as it arrives, giving the median time from start to: the first log line (the
launcher's interpreter and imports done), each task registered (the agents up),
the cluster up, every worker finished, and exit (teardown). With ``--py-spy``
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

from benchlib import PYTHON, ROOT, JobFailed, bench_env, scratch, tfrun

MARKS = (
    ("first log line", b"[tfrun]"),
    ("first task registered", b"registered at"),
    ("cluster up", b"cluster up"),
    ("all workers finished", b"all workers finished"),
)


def timeline(workers: int, logs: str) -> dict[str, float]:
    argv = [*tfrun(), "-v", "-w", str(workers), "-s", "0", "--log-dir", logs]
    argv += ["--", PYTHON, "-c", "pass"]
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=bench_env(),
        cwd=ROOT,
    )
    assert proc.stderr is not None
    seen: dict[str, float] = {}
    registered = 0
    for line in proc.stderr:
        now = time.perf_counter() - started
        for name, mark in MARKS:
            if mark in line and name not in seen:
                seen[name] = now
        if b"registered at" in line:
            registered += 1
            if registered == workers:
                seen["last task registered"] = now
    if proc.wait() != 0:
        raise JobFailed(f"tfrun exited with status {proc.returncode}")
    seen["exit"] = time.perf_counter() - started
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
        timeline(args.w, str(logs))  # warm-up
        runs = [timeline(args.w, str(logs)) for _ in range(args.reps)]
        names = [m for m, _ in MARKS[:2]] + ["last task registered"]
        names += [m for m, _ in MARKS[2:]] + ["exit"]
        print(f"tfrun -w {args.w} -s 0 -- python -c pass, median of {args.reps}:")
        previous = 0.0
        for name in names:
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
