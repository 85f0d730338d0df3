"""Benchmark 2: launch 4 processes that do nothing, with tfrun, torchrun and by hand.

- tfrun:    ``tfrun -w 4 -s 0 -- python -c pass`` (local backend)
- torchrun: ``python -m torch.distributed.run --nproc_per_node 4 --standalone bench/noop.py``
- hand:     ``sh -c 'python -c pass & ... (4 times) wait'``

Wall time of each, start to exit, alternating. Targets: tfrun at most 1.10x
the hand launch, and faster than torchrun. Without an importable torch the
torchrun column is skipped, with the reason printed and recorded.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

from benchlib import (
    BENCH,
    PYTHON,
    Result,
    alternate,
    command_line,
    parse_args,
    scratch,
    tfrun,
    timed,
)

TASKS = 4


def torch_reason() -> str | None:
    """Why torchrun cannot be benchmarked here, or None when it can."""
    probe = subprocess.run(
        [PYTHON, "-c", "import torch.distributed.run"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        return f"torch is not importable by {PYTHON} ({last})"
    return None


def hand_script(tasks: int, command: str) -> str:
    return " ".join([f"{command} &"] * tasks) + " wait"


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], reps=7)
    result = Result(
        "bringup_trivial",
        command_line("bringup_trivial.py", args),
        args.quick,
        {"reps": args.reps, "tasks": TASKS, "task": "python -c pass"},
    )
    reason = torch_reason()
    with scratch("trivial") as logs:
        contenders: dict[str, Callable[[], float]] = {
            "tfrun": lambda: timed(
                [
                    *tfrun(),
                    "-w",
                    str(TASKS),
                    "-s",
                    "0",
                    "--log-dir",
                    str(logs),
                    "--",
                    PYTHON,
                    "-c",
                    "pass",
                ]
            ),
            "hand": lambda: timed(["sh", "-c", hand_script(TASKS, f"'{PYTHON}' -c pass")]),
        }
        if reason is None:
            contenders["torchrun"] = lambda: timed(
                [
                    PYTHON,
                    "-m",
                    "torch.distributed.run",
                    "--nproc_per_node",
                    str(TASKS),
                    "--standalone",
                    str(BENCH / "noop.py"),
                ]
            )
        else:
            result.note(f"torchrun skipped: {reason}")
        walls = alternate(args.reps, contenders, warmup=args.warmup)
    for name, samples in walls.items():
        result.add(f"wall time, {name}, {TASKS} tasks", "s", samples)
    vs_hand = result.ratio(
        "tfrun / hand", f"wall time, tfrun, {TASKS} tasks", f"wall time, hand, {TASKS} tasks"
    )
    result.target(
        "2: tfrun vs hand", "≤ 1.10\u00d7", f"{vs_hand.value:.2f}\u00d7", vs_hand.value <= 1.10
    )
    if "torchrun" in walls:
        vs_torch = result.ratio(
            "tfrun / torchrun",
            f"wall time, tfrun, {TASKS} tasks",
            f"wall time, torchrun, {TASKS} tasks",
        )
        result.target(
            "2: tfrun vs torchrun",
            "< 1\u00d7 (faster)",
            f"{vs_torch.value:.2f}\u00d7",
            vs_torch.value < 1,
        )
    else:
        result.target("2: tfrun vs torchrun", "< 1\u00d7 (faster)", f"skipped: {reason}", None)
    result.write(args.results_dir)


if __name__ == "__main__":
    main()
