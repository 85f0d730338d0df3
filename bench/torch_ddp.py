"""Benchmark 12: the same PyTorch DDP job under torchrun and under tfrun.

- torchrun: ``torchrun --nproc_per_node 4 examples/torch_ddp.py``
- tfrun:    ``tfrun -w 4 -s 0 -- python examples/torch_ddp.py``

Four processes train ``examples/torch_ddp.py`` (gloo, the digits in examples/data)
on this machine; each launcher runs the script unchanged, the first with the
environment torchrun makes, the second with the one tfrun makes. Measured,
alternating: the wall time of the whole job, start to exit, and the training
speed, steps per second as rank 0 times them (its ``steps per second = ...``
line, from its first step to its last).

Both give each process one OpenMP thread: torchrun sets ``OMP_NUM_THREADS=1``
when it starts several processes, tfrun sets it to the task's CPUs (``-Cw``,
1 by default). Without an importable torch the benchmark is skipped and the
reason recorded.

Each is measured twice: alone, and beside a busy neighbour, a CPU-bound
program the benchmark starts (``--neighbour N``: N busy processes in one
session of their own, as another user's N-threaded program; by default one
per CPU). Where the kernel groups scheduling by session
(``/proc/sys/kernel/sched_autogroup_enabled``) every session is a CPU share of
its own: torchrun starts each process in a session of its own
(``start_new_session``), and so does tfrun each task's command, so that beside
the neighbour each launcher's four processes hold four shares to its one.
Targets: tfrun's wall time within 1.05x of torchrun's, and its steps per
second at least 1/1.05 of torchrun's, alone and beside the neighbour.
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
CONDITIONS = ("alone", "beside a busy neighbour")
WITHIN = 1.05
"""tfrun against torchrun: at most this many times its wall time, at least
its inverse of its steps per second."""


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
        "--neighbour",
        type=int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="the busy neighbour's processes, in one session of their own (default: one "
        "per CPU; 0: the launchers alone only)",
    )


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], reps=5, add=add_arguments)
    epochs = args.epochs or (1 if args.quick else 30)
    processes = 1 if args.smoke else QUICK_PROCESSES if args.quick else PROCESSES
    neighbour = args.neighbour
    conditions = CONDITIONS if neighbour else CONDITIONS[:1]
    result = Result(
        "torch_ddp",
        command_line("torch_ddp.py", args) + f" --neighbour {neighbour}",
        args.quick,
        {
            "reps": args.reps,
            "processes": processes,
            "epochs": epochs,
            "example": EXAMPLE,
            "neighbour": neighbour,
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
    runs: dict[str, list[Run]] = {}
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
        }
        for condition in conditions:
            with background_load(neighbour if condition != CONDITIONS[0] else 0):
                measured = alternate(args.reps, contenders, warmup=args.warmup)
            for name, samples in measured.items():
                runs[f"{name}, {condition}"] = samples
    for what, unit, field in (
        ("wall time", "s", "wall"),
        ("steps/s", "steps/s", "rate"),
        ("final loss", "", "final_loss"),
    ):
        for key, samples in runs.items():
            result.add(f"{what}, {key}", unit, [getattr(r, field) for r in samples])
    for condition in conditions:
        wall = result.ratio(
            f"wall time tfrun / torchrun, {condition}",
            f"wall time, tfrun, {condition}",
            f"wall time, torchrun, {condition}",
        )
        rate = result.ratio(
            f"steps/s tfrun / torchrun, {condition}",
            f"steps/s, tfrun, {condition}",
            f"steps/s, torchrun, {condition}",
        )
        result.target(
            f"9: wall time, {condition}",
            f"\u2264 {WITHIN}\u00d7 torchrun's",
            f"{wall.value:.3f}\u00d7",
            wall.value <= WITHIN,
        )
        result.target(
            f"9: steps/s, {condition}",
            f"\u2265 {1 / WITHIN:.3f}\u00d7 torchrun's",
            f"{rate.value:.3f}\u00d7",
            rate.value >= 1 / WITHIN,
        )
    result.note(
        f"{processes} processes, {epochs} epochs of examples/torch_ddp.py (gloo on CPU); "
        "steps/s as rank 0 timed them"
    )
    if neighbour:
        result.note(
            f"the busy neighbour: {neighbour} busy processes in one session of their own, "
            "beside every job of the second half"
        )
    result.note(
        f"sched_autogroup_enabled = {result.machine.get('sched_autogroup')}; 1-minute load "
        f"average {load_before:.1f} when the run began, {os.getloadavg()[0]:.1f} when it ended "
        f"(on {result.machine['nproc']} CPUs: other programs' load shares the machine)"
    )
    result.write(args.results_dir)


if __name__ == "__main__":
    main()
