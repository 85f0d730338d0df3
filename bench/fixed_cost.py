"""Issue 28: what every tfrun job pays, against a bare interpreter and a hand launch.

- ``tfrun -w 3 -s 1 -- /bin/true`` (4 tasks, local) against ``python3 -c pass``
  (the same Python, the same environment): target at most 5x, CPU and wall.
- ``tfrun -w 100 -s 0 -- /bin/true`` against ``python bench/spawn_true.py 100``
  (100 ``/bin/true`` started at once, then waited for): target at most 3x.

CPU is what the command and every process below it used, user + system, as
``os.wait4`` reports it for the command (each process is reaped by its parent,
so its time is in its parent's children's time). tfrun runs as a user runs
it: no ``--log-dir``, so the run directory is made and old ones pruned
(``XDG_STATE_HOME`` points into a scratch folder).

With ``--profile`` it also measures the parts of a trivial job, each on its
own, alternated the same way: the launcher's imports, the fork server's start
and one task against four (what each further agent costs). The load average
is recorded before and after each repetition.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchlib import (
    BENCH,
    PYTHON,
    ROOT,
    Result,
    alternate,
    bench_env,
    command_line,
    parse_args,
    scratch,
    tfrun,
)

TRIVIAL = ("-w", "3", "-s", "1")
MANY = 100
SMOKE_MANY = 10
# runpy, as ``python -m tfmesos.cli`` does: cli.py before the move into folders, cli/__main__.py after.
BASELINE = "import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); runpy.run_module('tfmesos.cli', run_name='__main__', alter_sys=True)"


def loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def cpu_and_wall(argv: Sequence[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU, wall) of one command and everything below it, in seconds; it must
    exit 0. Its stdin is a pipe closed at once (the fork server cannot poll
    /dev/null)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdin is not None
    proc.stdin.close()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)[:200]} exited with status {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, wall


def fork_server_alone() -> list[str]:
    """The fork server, started as the local backend starts it, its stdin
    closed: it imports the agent, says it is ready and exits."""
    from tfmesos.backends.local.forkstart import command

    return command()


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], reps=11, add=_add_arguments)
    many = SMOKE_MANY if args.smoke else MANY
    result = Result(
        "fixed_cost",
        command_line("fixed_cost.py", args)
        + (" --profile" if args.profile else "")
        + ("" if args.baseline is None else f" --baseline {args.baseline}"),
        args.quick,
        {
            "reps": args.reps,
            "many": many,
            "profile": args.profile,
            "baseline": None if args.baseline is None else str(args.baseline),
        },
    )
    loads: list[float] = [loadavg()]
    with scratch("fixed-cost") as state:
        env = bench_env(XDG_STATE_HOME=str(state))

        def measured(argv: Sequence[str]) -> Callable[[], tuple[float, float]]:
            def run() -> tuple[float, float]:
                sample = cpu_and_wall(argv, env)
                loads.append(loadavg())
                return sample

            return run

        contenders = {
            "tfrun, 4 tasks": measured([*tfrun(), *TRIVIAL, "--", "/bin/true"]),
            "python3 -c pass": measured([PYTHON, "-c", "pass"]),
            f"tfrun, {many} tasks": measured(
                [*tfrun(), "-w", str(many), "-s", "0", "--", "/bin/true"]
            ),
            f"hand, {many} tasks": measured([PYTHON, str(BENCH / "spawn_true.py"), str(many)]),
        }
        if args.baseline is not None:
            # The same jobs with another checkout's tfmesos (say, `git archive
            # BASE tfmesos | tar -x -C DIR`): a before and after in one run.
            before = [PYTHON, "-c", BASELINE, str(args.baseline.resolve())]
            contenders |= {
                "tfrun (baseline), 4 tasks": measured([*before, *TRIVIAL, "--", "/bin/true"]),
                f"tfrun (baseline), {many} tasks": measured(
                    [*before, "-w", str(many), "-s", "0", "--", "/bin/true"]
                ),
            }
        if args.profile:
            contenders |= {
                "python3 -S -c pass": measured([PYTHON, "-S", "-c", "pass"]),
                "import tfmesos.cli.main": measured([PYTHON, "-c", "import tfmesos.cli.main"]),
                "the launcher's imports": measured(
                    [
                        PYTHON,
                        "-c",
                        "import tfmesos.cli.main, tfmesos.launcher.run, tfmesos.backends.local.backend",
                    ]
                ),
                "the fork server alone": measured(fork_server_alone()),
                "tfrun, 1 task": measured([*tfrun(), "-w", "1", "-s", "0", "--", "/bin/true"]),
            }
        samples = alternate(args.reps, contenders, warmup=args.warmup)
    for name, pairs in samples.items():
        result.add(f"CPU, {name}", "s", [cpu for cpu, _ in pairs])
        result.add(f"wall, {name}", "s", [wall for _, wall in pairs])
    goals = (
        ("tfrun, 4 tasks", "python3 -c pass", 5.0),
        (f"tfrun, {many} tasks", f"hand, {many} tasks", 3.0),
    )
    for ours, theirs, goal in goals:
        for what in ("CPU", "wall"):
            ratio = result.ratio(
                f"{what}: {ours} / {theirs}", f"{what}, {ours}", f"{what}, {theirs}"
            )
            result.target(
                f"28: {what}, {ours} against {theirs}",
                f"\u2264 {goal:g}\u00d7",
                f"{ratio.value:.2f}\u00d7",
                ratio.value <= goal,
            )
    if args.baseline is not None:
        for tasks in ("4 tasks", f"{many} tasks"):
            result.ratio(
                f"CPU: tfrun, {tasks} / the baseline's",
                f"CPU, tfrun, {tasks}",
                f"CPU, tfrun (baseline), {tasks}",
            )
            result.ratio(
                f"wall: tfrun, {tasks} / the baseline's",
                f"wall, tfrun, {tasks}",
                f"wall, tfrun (baseline), {tasks}",
            )
    result.extra["loadavg_1min"] = loads
    result.note(
        f"load average (1 min) over the run: median {sorted(loads)[len(loads) // 2]:.2f}, "
        f"{min(loads):.2f} \u2013 {max(loads):.2f}"
    )
    result.write(args.results_dir)


def _add_arguments(parser: object) -> None:
    import argparse

    assert isinstance(parser, argparse.ArgumentParser)
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="DIR",
        help="also run tfrun from the tfmesos package in DIR (an earlier version), alternated",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also measure the parts of a trivial job: imports, the fork server, one task",
    )


if __name__ == "__main__":
    main()
