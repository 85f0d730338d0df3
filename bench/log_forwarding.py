"""Benchmark 5: how fast task output reaches the terminal through tfrun, and how far a
slow reader lets a task run ahead.

Throughput. ``bench/emit_lines.py`` prints LINES lines of 100 bytes as fast as
it can, from 1 task or split over 8 tasks, and the output goes to /dev/null, to
a file, or to a pipe that this script reads. Through tfrun
(``tfrun -w N -s 0 --worker-logs '*' -- python bench/emit_lines.py ...``) every
line travels task -> pipe -> agent -> TCP -> launcher -> stdout, gets a
``[worker:i] `` prefix and is also written to the task's log file; directly,
the same emitters write to the same sink (8 at once from one ``sh``). Each is
run with LINES lines and with none; the rate is LINES over the difference of
the median wall times (the start and stop of the job taken off), and also over
the whole wall time (a floor). The launcher's own CPU time (user + system of
the tfrun process alone, read while it is a zombie) and the whole job's are
recorded too. Target: at least 200,000 lines/s from one task.

Back-pressure. The same one-task job, read through a pipe by a reader that
takes 4 KiB every 5 ms (about 0.8 MB/s) for a few seconds: the emitter records
how many bytes it has written, the reader how many of them it has seen (from
the numbers in the lines), and the difference is what is in flight between
them. Its maximum is the bound the design promises (pipe + agent read + socket
buffers + launcher read + stdout pipe); directly it is the pipe alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import psutil
from benchlib import (
    BENCH,
    PYTHON,
    ROOT,
    JobFailed,
    MiB,
    Result,
    Summary,
    alternate,
    bench_env,
    command_line,
    fmt,
    median,
    parse_args,
    scratch,
    tfrun,
)

SIZE = 100
EMIT = str(BENCH / "emit_lines.py")
SEQ = re.compile(rb"L(\d{9}):")


@dataclass
class Run:
    wall: float
    launcher_cpu: float
    job_cpu: float
    lines_seen: int | None


def argv_for(
    mode: str, tasks: int, lines: int, logs: Path, progress: Path | None = None
) -> list[str]:
    per_task = lines // tasks
    emit = [PYTHON, EMIT, str(per_task), "--size", str(SIZE)]
    if progress is not None:
        emit += ["--progress", str(progress)]
    if mode == "tfrun":
        return [
            *tfrun(),
            "-w",
            str(tasks),
            "-s",
            "0",
            "--worker-logs",
            "*",
            "--log-dir",
            str(logs),
            "--",
            *emit,
        ]
    if tasks == 1:
        return emit
    quoted = " ".join(f"'{a}'" for a in emit)
    return ["sh", "-c", " ".join([f"{quoted} &"] * tasks) + " wait"]


def _count_lines(stream: BinaryIO, box: list[int]) -> None:
    lines = 0
    while chunk := stream.read1(1 << 20):  # type: ignore[attr-defined]
        lines += chunk.count(b"\n")
    box.append(lines)


def run_once(argv: list[str], sink: str, scratch_dir: Path) -> Run:
    out: Any
    if sink == "devnull":
        out = subprocess.DEVNULL
    elif sink == "file":
        out = open(scratch_dir / "out.txt", "wb")  # noqa: SIM115 - closed below
    else:
        out = subprocess.PIPE
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdout=out,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=bench_env(),
        cwd=ROOT,
    )
    counted: list[int] = []
    reader = None
    if sink == "pipe":
        assert proc.stdout is not None
        reader = threading.Thread(target=_count_lines, args=(proc.stdout, counted))
        reader.start()
    # Wait for the exit without reaping, so that the launcher's own CPU time can
    # still be read from its zombie; then reap it for the whole job's.
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    if reader is not None:
        reader.join()
    wall = time.perf_counter() - started
    times = psutil.Process(proc.pid).cpu_times()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.stdout is not None:
        proc.stdout.close()
    if sink == "file":
        out.close()
    if proc.returncode != 0:
        raise JobFailed(f"{' '.join(argv)[:200]} exited with status {proc.returncode}")
    return Run(
        wall,
        times.user + times.system,
        usage.ru_utime + usage.ru_stime,
        counted[0] if counted else None,
    )


@dataclass
class Flight:
    max_in_flight: int
    launcher_rss_max: int
    written_at_end: int
    samples: list[tuple[float, int]]


def slow_reader(argv: list[str], progress: Path, seconds: float) -> Flight:
    """Read the job's stdout slowly for ``seconds``, then fast to the end."""
    progress.write_bytes(b"\0" * 8)
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=bench_env(),
        cwd=ROOT,
    )
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    launcher = psutil.Process(proc.pid)
    carry = b""
    seen = 0
    max_in_flight = rss_max = 0
    samples: list[tuple[float, int]] = []
    started = time.perf_counter()
    written = 0
    with open(progress, "rb") as prog:
        while (now := time.perf_counter() - started) < seconds:
            data = os.read(fd, 4096)
            if not data:
                break
            carry += data
            cut = carry.rfind(b"\n")
            if cut >= 0:
                last = carry[carry.rfind(b"\n", 0, cut) + 1 : cut]
                match = SEQ.search(last)
                if match:
                    seen = (int(match.group(1)) + 1) * SIZE
                carry = carry[cut + 1 :]
            (written,) = struct.unpack(">Q", os.pread(prog.fileno(), 8, 0))
            if seen:
                max_in_flight = max(max_in_flight, written - seen)
                samples.append((round(now, 3), written - seen))
            if len(samples) % 20 == 0:
                with contextlib.suppress(psutil.Error):
                    rss_max = max(rss_max, launcher.memory_info().rss)
            time.sleep(0.005)
    while os.read(fd, 1 << 20):
        pass
    proc.stdout.close()
    if proc.wait() != 0:
        raise JobFailed(f"{' '.join(argv)[:200]} exited with status {proc.returncode}")
    return Flight(max_in_flight, rss_max, written, samples[:: max(1, len(samples) // 200)])


CONFIGS = [
    (mode, tasks, sink)
    for tasks in (1, 8)
    for sink in ("devnull", "file", "pipe")
    for mode in ("tfrun", "direct")
]
"""Each contender: who forwards (tfrun, or the shell directly), how many tasks, to what."""

Rates = dict[tuple[str, int, str], float]


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], reps=5)
    lines = 2_000 if args.smoke else 100_000 if args.quick else 2_000_000
    slow_seconds = 0.3 if args.smoke else 1.5 if args.quick else 4.0
    slow_lines = 2_000 if args.smoke else 200_000 if args.quick else 2_000_000
    result = Result(
        "log_forwarding",
        command_line("log_forwarding.py", args),
        args.quick,
        {
            "reps": args.reps,
            "lines": lines,
            "line_bytes": SIZE,
            "slow_reader_seconds": slow_seconds,
            "slow_reader_lines": slow_lines,
        },
    )
    with scratch("logs") as work:
        logs = work / "logs"
        contenders = {
            f"{mode} {tasks} {sink} {n}": _contender(mode, tasks, sink, n, logs, work)
            for mode, tasks, sink in CONFIGS
            for n in (lines, 0)
        }
        runs = alternate(args.reps, contenders, warmup=args.warmup)
        flights = {
            mode: found[0]
            for mode, found in alternate(
                1,
                {
                    mode: _slow_contender(
                        mode, slow_lines, logs, work / f"progress-{mode}", slow_seconds
                    )
                    for mode in ("tfrun", "direct")
                },
            ).items()
        }
    rates = _add_throughput(result, runs, lines)
    _add_slow_reader(result, flights)
    _add_targets(result, rates, flights, slow_lines)
    result.summary_md = _summary(result, rates, flights)
    result.write(args.results_dir)


def _contender(
    mode: str, tasks: int, sink: str, n: int, logs: Path, work: Path
) -> Callable[[], Run]:
    return lambda: run_once(argv_for(mode, tasks, n, logs), sink, work)


def _slow_contender(
    mode: str, n: int, logs: Path, progress: Path, seconds: float
) -> Callable[[], Flight]:
    return lambda: slow_reader(argv_for(mode, 1, n, logs, progress), progress, seconds)


def _label(tasks: int, sink: str) -> str:
    return f"{tasks} task{'s' if tasks > 1 else ''}, to {sink}"


def _add_throughput(result: Result, runs: dict[str, list[Run]], lines: int) -> Rates:
    """Each contender's wall, rates and CPU; return its lines/s with start and stop taken off."""
    rates: Rates = {}
    for mode, tasks, sink in CONFIGS:
        full, empty = runs[f"{mode} {tasks} {sink} {lines}"], runs[f"{mode} {tasks} {sink} 0"]
        label = f"{mode}, {_label(tasks, sink)}"
        if sink == "pipe":
            for run in full:
                if run.lines_seen != lines // tasks * tasks:
                    raise JobFailed(f"{label}: the reader saw {run.lines_seen} lines of {lines}")
        marginal = median([r.wall for r in full]) - median([r.wall for r in empty])
        rate = lines / marginal if marginal > 0 else float("inf")
        rates[(mode, tasks, sink)] = rate
        result.add(f"{label}: wall, {lines:,} lines", "s", [r.wall for r in full])
        result.add(f"{label}: wall, no lines", "s", [r.wall for r in empty])
        result.add(f"{label}: lines/s, whole wall", "lines/s", [lines / r.wall for r in full])
        result.add(
            f"{label}: MB/s, whole wall", "MB/s", [lines * SIZE / 1e6 / r.wall for r in full]
        )
        if mode == "tfrun":
            result.add(f"{label}: launcher CPU", "s", [r.launcher_cpu for r in full])
        result.add(f"{label}: whole job CPU", "s", [r.job_cpu for r in full])
        result.extra[f"{label}: lines/s, start and stop taken off"] = rate
        result.extra[f"{label}: MB/s, start and stop taken off"] = rate * SIZE / 1e6
    for _, tasks, sink in CONFIGS[::2]:
        result.ratio(
            f"wall tfrun / direct, {_label(tasks, sink)}",
            f"tfrun, {_label(tasks, sink)}: wall, {lines:,} lines",
            f"direct, {_label(tasks, sink)}: wall, {lines:,} lines",
        )
    return rates


def _add_slow_reader(result: Result, flights: dict[str, Flight]) -> None:
    for mode, flight in flights.items():
        result.extra[f"slow reader, {mode}"] = {
            "max_in_flight_bytes": flight.max_in_flight,
            "launcher_rss_max_bytes": flight.launcher_rss_max,
            "written_when_slow_phase_ended": flight.written_at_end,
            "samples_s_bytes": flight.samples,
        }
        result.add(
            f"slow reader, {mode}: most bytes in flight", "KiB", [flight.max_in_flight / 1024]
        )
    result.add(
        "slow reader, tfrun: launcher RSS (max)",
        "MiB",
        [flights["tfrun"].launcher_rss_max / MiB],
    )


def _add_targets(result: Result, rates: Rates, flights: dict[str, Flight], slow_lines: int) -> None:
    sinks = ("devnull", "file", "pipe")
    floor = min(
        result.row(f"tfrun, 1 task, to {sink}: lines/s, whole wall").median for sink in sinks
    )
    worst = min(rates[("tfrun", 1, sink)] for sink in sinks)
    result.target(
        "5: lines/s from one task",
        "\u2265 200,000 lines/s",
        f"{fmt(floor, 'lines/s')} over the whole wall, slowest sink "
        f"({fmt(worst, 'lines/s')} with start and stop taken off)",
        floor >= 200_000,
    )
    result.target(
        "5: slow reader, bounded",
        "bounded buffer",
        f"at most {flights['tfrun'].max_in_flight / MiB:.2f} MiB in flight through tfrun "
        f"({flights['direct'].max_in_flight / 1024:.0f} KiB directly)",
        # Held back: the task could not write all its output while the reader was slow.
        flights["tfrun"].written_at_end < slow_lines * SIZE,
    )


def _mlines(value: float) -> str:
    return f"{value / 1e6:.2f}" if 0 < value < float("inf") else "n/a (run too short)"


def _summary(result: Result, rates: Rates, flights: dict[str, Flight]) -> str:
    table = [
        "| tasks | sink | tfrun: M lines/s, whole wall, median (min\u2013max) | direct "
        "| tfrun: M lines/s, start and stop taken off (MB/s) | direct | launcher CPU "
        "| whole job CPU, tfrun / direct |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for _, tasks, sink in CONFIGS[::2]:
        table.append(_summary_row(result, rates, tasks, sink))
    tfrun_flight, direct_flight = flights["tfrun"], flights["direct"]
    table += [
        "",
        "| slow reader (0.8 MB/s) | most bytes in flight | launcher RSS meanwhile |",
        "|---|---:|---:|",
        f"| through tfrun | {tfrun_flight.max_in_flight / MiB:.2f} MiB | "
        f"{tfrun_flight.launcher_rss_max / MiB:.1f} MiB |",
        f"| directly (a pipe) | {direct_flight.max_in_flight / 1024:.0f} KiB | \u2013 |",
    ]
    return "\n".join(table)


def _summary_row(result: Result, rates: Rates, tasks: int, sink: str) -> str:
    label = _label(tasks, sink)

    def row(mode: str, what: str) -> Summary:
        return result.row(f"{mode}, {label}: {what}")

    whole = row("tfrun", "lines/s, whole wall")
    marginal = rates[("tfrun", tasks, sink)]
    return (
        f"| {tasks} | {sink} | {_mlines(whole.median)} "
        f"({_mlines(whole.min)}\u2013{_mlines(whole.max)}) | "
        f"{_mlines(row('direct', 'lines/s, whole wall').median)} | "
        f"{_mlines(marginal)}"
        + (f" ({marginal * SIZE / 1e6:.0f})" if 0 < marginal < float("inf") else "")
        + " | "
        f"{_mlines(rates[('direct', tasks, sink)])} | "
        f"{fmt(row('tfrun', 'launcher CPU').median, 's')} | "
        f"{fmt(row('tfrun', 'whole job CPU').median, 's')} / "
        f"{fmt(row('direct', 'whole job CPU').median, 's')} |"
    )


if __name__ == "__main__":
    main()
