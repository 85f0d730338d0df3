"""Run every benchmark, one after another: ``python bench/run_all.py [--quick]``.

With ``--quick`` each runs once at small sizes (the whole lot in about a
minute on 2 cores, besides the three MNIST jobs of ``restart_resume``): a check that every benchmark still works, not a
measurement. Results go to ``--results-dir`` (default ``bench/results``, or
``bench/results/quick`` with ``--quick``). With ``--smoke``, each at its
smallest sizes (what tests/test_bench_smoke.py runs): a check that it runs, in
seconds. Exits non-zero if any benchmark failed; no timing decides the exit
status.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
BENCHMARKS = (
    "bringup_tf",
    "bringup_trivial",
    "fixed_cost",
    "spawn_cost",
    "agent_cost",
    "log_forwarding",
    "launcher_memory",
    "bringup_scale",
    "mesos_scale",
    "handshake_flood",
    "torch_ddp",
    "first_step",
    "detach",
    "restart_resume",
)
SLOW = ("restart_resume",)
"""Benchmarks whose quick run still trains real jobs (a minute or more on 2
cores): tests/test_bench_smoke.py runs them on their own, as heavy tests."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repetition, small sizes")
    parser.add_argument(
        "--smoke", action="store_true", help="each at its smallest: a check that they run"
    )
    parser.add_argument("--results-dir", type=Path, default=None)
    parser.add_argument(
        "--only", nargs="+", choices=BENCHMARKS, default=list(BENCHMARKS), metavar="NAME"
    )
    args = parser.parse_args()
    results_dir = args.results_dir or BENCH / "results" / ("quick" if args.quick else "")
    failed: list[str] = []
    timings: list[tuple[str, float, int]] = []
    for name in args.only:
        argv = [sys.executable, str(BENCH / f"{name}.py"), "--results-dir", str(results_dir)]
        if args.quick:
            argv.append("--quick")
        if args.smoke:
            argv.append("--smoke")
        print(f"=== {name}", flush=True)
        started = time.perf_counter()
        code = subprocess.run(argv, check=False).returncode
        timings.append((name, time.perf_counter() - started, code))
        if code != 0:
            failed.append(name)
    print("\n=== summary", flush=True)
    for name, seconds, code in timings:
        print(f"{name:18} {seconds:7.1f}s  {'ok' if code == 0 else f'FAILED ({code})'}")
    print(f"results in {results_dir}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
