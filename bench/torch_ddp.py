"""Benchmark 12: the same PyTorch DDP job under torchrun and under tfrun.

- torchrun: ``torchrun --nproc_per_node 4 examples/torch_ddp.py``
- tfrun:    ``tfrun -w 4 -s 0 -- python examples/torch_ddp.py``

Four processes train ``examples/torch_ddp.py`` (gloo, the digits in examples/data)
on this machine; each launcher runs the script unchanged, the first with the
environment torchrun makes, the second with the one tfrun makes. Measured,
alternating: the wall time of the whole job, start to exit, and the training
speed, steps per second as rank 0 times them (its ``steps per second = ...``
line, from its first step to its last). Targets: tfrun's wall time at most
torchrun's, and its steps per second within 2 % of torchrun's.

Both give each process one OpenMP thread: torchrun sets ``OMP_NUM_THREADS=1``
when it starts several processes, tfrun sets it to the task's CPUs (``-Cw``,
1 by default). Without an importable torch the benchmark is skipped and the
reason recorded.

A third contender separates the launchers from the kernel's scheduling:
``tfrun -w 4 -s 0 -- setsid -w python examples/torch_ddp.py``. torchrun starts
each process in a session of its own (``start_new_session``); tfrun keeps its
tasks in its own session, in process groups (docs/architecture.md). Where the
kernel groups scheduling by session (``/proc/sys/kernel/sched_autogroup_enabled``)
every session is a CPU share of its own: on a machine where other programs
run, torchrun's four processes then hold four shares to tfrun's one. With
``setsid -w`` each of tfrun's tasks is a session too, as under torchrun, and
what is left between the two is the launchers themselves.

``--background-load N`` makes that case on purpose: N busy processes in one
session of their own (another user's program with N threads) run beside every
job, so that the launchers are compared beside a known load rather than
whatever else the machine happens to run. Its results are
``torch_ddp_loaded_N``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchlib import (
    PYTHON,
    ROOT,
    JobFailed,
    Result,
    alternate,
    bench_env,
    command_line,
    parse_args,
    scratch,
    tfrun,
)

EXAMPLE = "examples/torch_ddp.py"
PROCESSES = 4
QUICK_PROCESSES = 2
"""With --quick, a check that the benchmark runs: fewer processes to start
(with --smoke, one: each process's ``import torch`` is most of a smoke run)."""
RATE = re.compile(rb"steps per second = ([0-9.]+)")
FINAL = re.compile(rb"final loss = ([0-9.eE+-]+)")
SESSIONS = "tfrun, a session per task"


@dataclass
class Run:
    wall: float
    rate: float
    final_loss: float


def torch_reason() -> str | None:
    """Why the job cannot run here, or None when it can."""
    probe = subprocess.run(
        [PYTHON, "-c", "import torch.distributed.run"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        return f"torch is not importable by {PYTHON} ({last})"
    return None


def torchrun() -> list[str]:
    """``torchrun`` as a user runs it: the console script next to this Python."""
    script = Path(PYTHON).with_name("torchrun")
    return [str(script)] if script.exists() else [PYTHON, "-m", "torch.distributed.run"]


@contextlib.contextmanager
def background_load(processes: int) -> Iterator[None]:
    """``processes`` busy loops in one session of their own while the block
    runs: one share of the CPU under autogroup, as another user's
    multi-threaded program would hold."""
    if processes == 0:
        yield
        return
    spin = "import os\nfor _ in range(%d - 1):\n    if os.fork() == 0: break\nwhile True: pass\n"
    leader = subprocess.Popen(
        [sys.executable, "-c", spin % processes], start_new_session=True, stdin=subprocess.DEVNULL
    )
    try:
        yield
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()


def run_job(argv: list[str]) -> Run:
    started = time.perf_counter()
    proc = subprocess.run(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=bench_env(),
        cwd=ROOT,
        timeout=900,
        check=False,
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise JobFailed(
            f"{' '.join(argv)[:200]} exited with status {proc.returncode}:\n"
            + proc.stdout[-3000:].decode(errors="replace")
        )
    rate, final = RATE.search(proc.stdout), FINAL.search(proc.stdout)
    if rate is None or final is None:
        raise JobFailed(f"no 'steps per second' or 'final loss' line from {argv[0]}")
    return Run(wall, float(rate.group(1)), float(final.group(1)))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument(
        "--background-load",
        type=int,
        default=0,
        metavar="N",
        help="N busy processes in one session of their own beside every job",
    )


def main() -> None:
    args = parse_args(
        __doc__.splitlines()[0],
        reps=5,
        add=add_arguments,
    )
    epochs = args.epochs or (1 if args.quick else 30)
    processes = 1 if args.smoke else QUICK_PROCESSES if args.quick else PROCESSES
    loaded = args.background_load
    result = Result(
        f"torch_ddp_loaded_{loaded}" if loaded else "torch_ddp",
        command_line("torch_ddp.py", args) + (f" --background-load {loaded}" if loaded else ""),
        args.quick,
        {
            "reps": args.reps,
            "processes": processes,
            "epochs": epochs,
            "example": EXAMPLE,
            "background_load": loaded,
        },
    )
    load_before = os.getloadavg()[0]
    reason = torch_reason()
    if reason is not None:
        result.note(f"skipped: {reason}")
        for name in ("wall time", "steps/s"):
            result.target(f"9: {name}", "", f"skipped: {reason}", None)
        result.write(args.results_dir)
        return
    script = [EXAMPLE, "--epochs", str(epochs)]
    with scratch("torch-ddp") as logs:
        contenders = {
            "torchrun": lambda: run_job([*torchrun(), "--nproc_per_node", str(processes), *script]),
            "tfrun": lambda: run_job(
                [
                    *tfrun(),
                    *("-w", str(processes), "-s", "0", "--log-dir", str(logs), "--"),
                    *(PYTHON, *script),
                ]
            ),
            SESSIONS: lambda: run_job(
                [
                    *tfrun(),
                    *("-w", str(processes), "-s", "0", "--log-dir", str(logs), "--"),
                    *("setsid", "-w", PYTHON, *script),
                ]
            ),
        }
        with background_load(loaded):
            runs = alternate(args.reps, contenders, warmup=args.warmup)
    for name in contenders:
        result.add(f"wall time, {name}", "s", [r.wall for r in runs[name]])
    for name in contenders:
        result.add(f"steps/s, {name}", "steps/s", [r.rate for r in runs[name]])
    for name in contenders:
        result.add(f"final loss, {name}", "", [r.final_loss for r in runs[name]])
    wall = result.ratio("wall time tfrun / torchrun", "wall time, tfrun", "wall time, torchrun")
    rate = result.ratio("steps/s tfrun / torchrun", "steps/s, tfrun", "steps/s, torchrun")
    wall_s = result.ratio(
        f"wall time {SESSIONS} / torchrun", f"wall time, {SESSIONS}", "wall time, torchrun"
    )
    rate_s = result.ratio(
        f"steps/s {SESSIONS} / torchrun", f"steps/s, {SESSIONS}", "steps/s, torchrun"
    )
    for name, w, r in (("tfrun", wall, rate), (SESSIONS, wall_s, rate_s)):
        result.target(
            f"9: wall time, {name}", "≤ 1\u00d7 torchrun's", f"{w.value:.3f}\u00d7", w.value <= 1
        )
        result.target(
            f"9: steps/s, {name}",
            "within 2 % of torchrun's",
            f"{r.value:.3f}\u00d7",
            abs(r.value - 1) <= 0.02,
        )
    result.note(
        f"{processes} processes, {epochs} epochs of examples/torch_ddp.py (gloo on CPU); "
        "steps/s as rank 0 timed them"
    )
    if loaded:
        result.note(f"{loaded} busy processes in one session of their own ran beside every job")
    result.note(
        f"sched_autogroup_enabled = {result.machine.get('sched_autogroup')}; 1-minute load "
        f"average {load_before:.1f} when the run began, {os.getloadavg()[0]:.1f} when it ended "
        f"(on {result.machine['nproc']} CPUs: other programs' load shares the machine)"
    )
    result.write(args.results_dir)


if __name__ == "__main__":
    main()
