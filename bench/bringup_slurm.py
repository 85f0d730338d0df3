"""Bring-up on Slurm: the MNIST replica job under tfrun on Slurm, on the local
backend, and as a hand-written sbatch script.

The job is ``examples/mnist/mnist_replica.py`` with 1 ps and 2 workers:

- ``tfrun --backend slurm -w 2 -s 1``: ps:0 and worker:1 as one Slurm job (two
  steps), worker 0 (the chief) beside tfrun;
- ``tfrun -w 2 -s 1``: every task on this machine (the local backend);
- ``sbatch bench/hand_sbatch_mnist.sh``: the three tasks as steps of one
  hand-written batch job, which picks ports itself; ``squeue`` is asked every
  50 ms whether it is over.

Each writes its output to a file, which this script reads as it grows:
*bring-up* is the time from the command's start to worker 0's first progress
line (the cluster is up, TensorFlow imported, the session made, the first
steps trained), *wall* the whole job, to the command's exit (tfrun) or to
when ``squeue`` no longer lists the job (by hand; tfrun, too, exits once
Slurm has the allocation back). Needs a Slurm
this machine can submit to, sharing its filesystem (``scripts/start-slurm``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from benchlib import (
    BENCH,
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

EXAMPLE = "examples/mnist/mnist_replica.py"
FIRST_STEP = re.compile(rb"worker 0: local step \d+, global step \d+")
POLL = 0.02


def hand_job(argv: list[str]) -> list[str]:
    """``sbatch ARGV``, then ``squeue`` every 50 ms until the job has ended and
    its allocation is released: what tfrun waits for too. (``sbatch --wait``
    polls with a growing back-off, which rounded every hand job to 42 s.)"""
    poll = (
        "import subprocess, sys, time\n"
        "job = subprocess.run(sys.argv[1:], check=True, capture_output=True, text=True)"
        ".stdout.strip().split(';')[0]\n"
        "while subprocess.run(['squeue', '-h', '-j', job, '-o', '%T'], capture_output=True,"
        " text=True).stdout.strip() not in ('',):\n"
        "    time.sleep(0.05)\n"
        "out = subprocess.run(['scontrol', 'show', 'job', job], capture_output=True,"
        " text=True).stdout\n"
        "sys.exit(0 if 'JobState=COMPLETED' in out or not out else 1)\n"
    )
    return [PYTHON, "-c", poll, "sbatch", "--parsable", *argv]


def run_job(argv: list[str], output: Path) -> tuple[float, float]:
    """(bring-up, wall) of one job whose worker 0 writes to ``output``."""
    output.unlink(missing_ok=True)
    started = time.perf_counter()
    with open(output.with_suffix(".tfrun"), "wb") as sink:
        proc = subprocess.Popen(
            argv,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=bench_env(PYTHON=PYTHON),
            cwd=ROOT,
        )
        first = None
        while True:
            code = proc.poll()
            if first is None:
                for path in (output, output.with_suffix(".tfrun")):
                    try:
                        if FIRST_STEP.search(path.read_bytes()):
                            first = time.perf_counter() - started
                            break
                    except OSError:
                        pass
            if code is not None:
                break
            time.sleep(POLL)
    wall = time.perf_counter() - started
    if code != 0 or first is None:
        text = b""
        for path in (output, output.with_suffix(".tfrun")):
            if path.exists():
                text += path.read_bytes()[-3000:]
        raise JobFailed(f"{argv[0]} exited with status {code}:\n{text.decode(errors='replace')}")
    return first, wall


def main() -> None:
    args = parse_args(
        __doc__.splitlines()[0],
        reps=3,
        add=lambda p: p.add_argument("--train-steps", type=int, default=200),
    )
    missing = [c for c in ("sbatch", "squeue") if shutil.which(c) is None]
    if missing:
        raise SystemExit(f"no Slurm here ({', '.join(missing)} missing): run scripts/start-slurm")
    steps = ["--train_steps", str(args.train_steps)]
    result = Result(
        "bringup_slurm",
        command_line("bringup_slurm.py", args),
        args.quick,
        {"reps": args.reps, "train_steps": args.train_steps, "ps": 1, "workers": 2},
    )
    mnist = [
        PYTHON,
        EXAMPLE,
        "--ps_hosts={ps_hosts}",
        "--worker_hosts={worker_hosts}",
        "--job_name={job_name}",
        "--task_index={task_index}",
        *steps,
    ]
    load_before = os.getloadavg()
    with scratch("slurm") as logs:
        out = logs / "out.txt"
        local = [*tfrun(), "-w", "2", "-s", "1", "--log-dir", str(logs / "local"), "--", *mnist]
        slurm = [
            *tfrun(),
            "--backend",
            "slurm",
            "-w",
            "2",
            "-s",
            "1",
            "--log-dir",
            str(logs / "slurm"),
            "--",
            *mnist,
        ]
        hand = hand_job(
            [f"--output={out}", "--export=ALL", str(BENCH / "hand_sbatch_mnist.sh"), *steps]
        )
        runs = alternate(
            args.reps,
            {
                "tfrun, Slurm": lambda: run_job(slurm, out),
                "tfrun, local": lambda: run_job(local, out),
                "hand-written sbatch": lambda: run_job(hand, out),
            },
            warmup=args.warmup,
        )
    names = ("tfrun, Slurm", "tfrun, local", "hand-written sbatch")
    for name in names:
        result.add(f"bring-up (to worker 0's first step), {name}", "s", [r[0] for r in runs[name]])
    for name in names:
        result.add(f"wall time, {name}", "s", [r[1] for r in runs[name]])
    result.ratio(
        "bring-up, tfrun on Slurm / hand-written sbatch",
        "bring-up (to worker 0's first step), tfrun, Slurm",
        "bring-up (to worker 0's first step), hand-written sbatch",
    )
    result.ratio(
        "bring-up, tfrun on Slurm / tfrun local",
        "bring-up (to worker 0's first step), tfrun, Slurm",
        "bring-up (to worker 0's first step), tfrun, local",
    )
    result.ratio(
        "wall, tfrun on Slurm / hand-written sbatch",
        "wall time, tfrun, Slurm",
        "wall time, hand-written sbatch",
    )
    load_after = os.getloadavg()
    result.note(
        "load average (1, 5, 15 min) at the start "
        + ", ".join(f"{x:.1f}" for x in load_before)
        + "; at the end "
        + ", ".join(f"{x:.1f}" for x in load_after)
        + f" (on {os.cpu_count()} CPUs: the machine is shared)"
    )
    result.write(args.results_dir)


if __name__ == "__main__":
    main()
