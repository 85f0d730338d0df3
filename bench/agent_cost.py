"""Benchmark 3: what the in-task agent costs each task, in start latency and memory.

Start latency: from the moment tfrun launches a task's agent to the moment the
task's command starts. tfrun's ``task_launched`` event (``--events``) stamps
the launch on the wall clock (its ``ts``); the command is ``date +%s%N``,
which prints the wall-clock time it started, and tfrun forwards it. With one task (``tfrun -w 1 -s 0``) nothing else is waited for, so the gap
is the agent's start: the launcher forking it, the interpreter and its imports,
the rendezvous handshake, and the agent starting the command. The same
``sh -c 'date +%s%N'`` started straight from Python is the baseline, taken off.

Memory: the agent's resident set (RSS, and USS: the pages no other process
shares), sampled with psutil every 20 ms while the task runs ``sleep``.

For comparison: the original TFMesos imported TensorFlow in every task;
``python -c "import tensorflow"`` is timed here, with its peak RSS.

Targets: at most 50 ms and 20 MiB.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from benchlib import (
    PYTHON,
    ROOT,
    EventStream,
    JobFailed,
    MiB,
    Result,
    alternate,
    bench_env,
    command_line,
    parse_args,
    scratch,
    spawn,
    tfrun,
    timed,
)

STAMP = re.compile(rb"\[worker:0\] (\d{16,})\s*$")


def agent_latency(logs: str) -> float:
    """Seconds from tfrun's launch of the task (its ``task_launched`` event)
    to the command's start."""
    events = EventStream(Path(logs) / "events.jsonl")
    argv = [*tfrun(), *events.flag, "-w", "1", "-s", "0", "--log-dir", logs, "--", "date +%s%N"]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=bench_env(),
        cwd=ROOT,
    )
    assert proc.stdout is not None
    started: int | None = None
    lines: list[bytes] = []
    for line in proc.stdout:
        lines.append(line)
        match = STAMP.search(line)
        if match:
            started = int(match.group(1))
    proc.stdout.close()
    events.read()
    launch = events.first("task_launched")
    if proc.wait() != 0 or launch is None or started is None:
        raise JobFailed(
            f"tfrun -w 1 -s 0 -- date: status {proc.returncode}, {events.describe()}:\n"
            + b"".join(lines).decode(errors="replace")
        )
    return started / 1e9 - float(launch["ts"])


def direct_latency() -> float:
    """Seconds from Popen to ``sh -c 'date +%s%N'`` starting, without tfrun."""
    before = time.time_ns()
    out = subprocess.run(
        ["sh", "-c", "date +%s%N"], capture_output=True, check=True, env=bench_env()
    ).stdout
    return (int(out) - before) / 1e9


def agent_memory(logs: str, seconds: float) -> dict[str, float]:
    """Peak RSS, USS and VmHWM (MiB) of the one agent of ``tfrun -w 1 -s 0 -- sleep``."""
    argv = [*tfrun(), "-w", "1", "-s", "0", "--log-dir", logs, "--", f"sleep {seconds}"]
    proc = spawn(argv)
    rss = uss = hwm = 0
    launcher = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            # The agent is the parent of the task's command (a child of tfrun,
            # or of its fork server).
            agents = [c.parent() for c in launcher.children(recursive=True) if c.name() == "sleep"]
            for agent in agents:
                if agent is None:
                    continue
                info = agent.memory_full_info()
                rss, uss = max(rss, info.rss), max(uss, info.uss)
                hwm = max(hwm, _vm_hwm(agent.pid))
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            pass
        time.sleep(0.02)
    if proc.returncode != 0 or not rss:
        raise JobFailed(f"tfrun -- sleep: status {proc.returncode}, agent seen: {bool(rss)}")
    return {"rss": rss / MiB, "uss": uss / MiB, "hwm": hwm / MiB}


def _vm_hwm(pid: int) -> int:
    """The kernel's record of a process's peak RSS, in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def peak_rss_of(code: str) -> dict[str, float]:
    """Wall time and peak RSS (MiB) of ``python -c CODE``.

    The peak is the kernel's VmHWM for the process's own memory: ``ru_maxrss``
    would also count the parent's pages that the child shared before its exec.
    """
    probe = (
        f"{code}\nimport sys\n"
        "sys.stdout.write([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"
    )
    started = time.perf_counter()
    out = subprocess.run(
        [PYTHON, "-c", probe], capture_output=True, text=True, check=True, env=bench_env()
    ).stdout
    return {"wall": time.perf_counter() - started, "rss": int(out.split()[-2]) / 1024}


def import_breakdown() -> list[dict[str, Any]]:
    """The agent's slowest imports (cumulative microseconds), from ``-X importtime``."""
    err = subprocess.run(
        [PYTHON, "-X", "importtime", "-c", "import tfmesos.agent.main"],
        capture_output=True,
        text=True,
        check=True,
        env=bench_env(),
    ).stderr
    rows: list[dict[str, Any]] = []
    for line in err.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if match:
            rows.append(
                {
                    "module": match.group(4),
                    "self_us": int(match.group(1)),
                    "cumulative_us": int(match.group(2)),
                    "depth": len(match.group(3)) // 2,
                }
            )
    top = [r for r in rows if r["depth"] <= 1]
    return sorted(top, key=lambda r: -r["cumulative_us"])[:12]


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], reps=9)
    sleep = 0.5 if args.smoke else 1.0 if args.quick else 2.0
    result = Result(
        "agent_cost",
        command_line("agent_cost.py", args),
        args.quick,
        {"reps": args.reps, "sleep_s": sleep},
    )
    with scratch("agent") as logs:
        contenders: dict[str, Callable[[], Any]] = {
            "agent": lambda: agent_latency(str(logs)),
            "direct": direct_latency,
            "memory": lambda: agent_memory(str(logs), sleep),
            "tfrun true": lambda: timed(
                [*tfrun(), "-w", "1", "-s", "0", "--log-dir", str(logs), "--", "true"]
            ),
            "true": lambda: timed(["sh", "-c", "true"]),
            "python pass": lambda: peak_rss_of("pass"),
            "python import tfmesos.agent.main": lambda: peak_rss_of("import tfmesos.agent.main"),
            "python import tensorflow": lambda: peak_rss_of("import tensorflow"),
        }
        out = alternate(args.reps, contenders, warmup=args.warmup)
    agent_row = result.add("launch to command start, through the agent", "s", out["agent"])
    direct_row = result.add("Popen to command start, directly", "s", out["direct"])
    latency = agent_row.median - direct_row.median
    result.add("agent RSS (peak)", "MiB", [m["rss"] for m in out["memory"]])
    result.add("agent USS (peak)", "MiB", [m["uss"] for m in out["memory"]])
    result.add("agent VmHWM (kernel's peak RSS)", "MiB", [m["hwm"] for m in out["memory"]])
    result.add("tfrun -w 1 -s 0 -- true", "s", out["tfrun true"])
    result.add("sh -c true", "s", out["true"])
    for name in ("python pass", "python import tfmesos.agent.main", "python import tensorflow"):
        code = name.removeprefix("python ")
        result.add(f'python -c "{code}": wall', "s", [r["wall"] for r in out[name]])
        result.add(f'python -c "{code}": peak RSS', "MiB", [r["rss"] for r in out[name]])
    result.ratio(
        "import tensorflow / agent: time",
        'python -c "import tensorflow": wall',
        "launch to command start, through the agent",
    )
    result.ratio(
        "import tensorflow / agent: RSS",
        'python -c "import tensorflow": peak RSS',
        "agent RSS (peak)",
    )
    rss = max(
        result.row("agent RSS (peak)").median, result.row("agent VmHWM (kernel's peak RSS)").median
    )
    result.target(
        "3: agent start latency",
        "≤ 50 ms",
        f"{latency * 1000:.0f} ms (median through the agent minus median direct)",
        latency <= 0.050,
    )
    result.target("3: agent memory", "≤ 20 MiB", f"{rss:.1f} MiB RSS", rss <= 20)
    result.extra["agent_start_latency_s"] = latency
    result.extra["agent_start_latency_paired_s"] = [
        a - d for a, d in zip(out["agent"], out["direct"], strict=True)
    ]
    result.extra["agent_imports"] = import_breakdown()
    result.note(
        f"agent start latency = {latency * 1000:.1f} ms; per repetition "
        f"{statistics.median(result.extra['agent_start_latency_paired_s']) * 1000:.1f} ms median"
    )
    result.write(args.results_dir)


if __name__ == "__main__":
    main()
