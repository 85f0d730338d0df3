"""What the agent's start would cost if it were started leaner: a diagnostic.

    python bench/agent_whatif.py [--reps 15]

Times, interleaved, the interpreter start plus imports of the agent as it is
(``python -m tfmesos.agent`` imports the ``tfmesos`` package first, and with it
``tfmesos.spec`` and ``tfmesos.errors``) against variants that change nothing in
tfmesos/ but how it is loaded:

- ``-S``: without the ``site`` module (no site-packages scan, no .pth files such
  as the editable install's import hook); tfmesos is put on ``sys.path`` by hand.
- lean package: a scratch copy of the package whose ``__init__`` is empty,
  holding links to only the modules the agent imports; what a lazy
  ``tfmesos/__init__.py`` would give.
- the standard library modules the agent needs, alone: the floor.

Not one of the benchmarks run_all runs; its figures back the suggestions in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchlib import PYTHON, ROOT, bench_env

AGENT_STDLIB = (
    "contextlib, json, os, selectors, signal, socket, subprocess, sys, time, "
    "hashlib, hmac, struct, re, ctypes"
)


def lean_package(where: Path) -> Path:
    """A ``tfmesos`` with an empty ``__init__`` and links to the agent's modules."""
    package = where / "tfmesos"
    package.mkdir()
    (package / "__init__.py").write_text("")
    wanted: set[str] = set()
    todo = ["agent"]
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        wanted.add(name)
        source = (ROOT / "tfmesos" / f"{name}.py").read_text()
        for names in re.findall(r"^from tfmesos import ([\w, ]+)$", source, re.M):
            todo += [n.strip() for n in names.split(",")]
        todo += re.findall(r"^from tfmesos\.(\w+) import", source, re.M)
    for name in wanted:
        (package / f"{name}.py").symlink_to(ROOT / "tfmesos" / f"{name}.py")
    return where


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tfmesos-lean-") as tmp:
        lean = lean_package(Path(tmp))
        modules = sorted(p.stem for p in (lean / "tfmesos").iterdir())
        check = f"assert tfmesos.agent.main.__file__.startswith({str(lean)!r})"
        variants = {
            "python -c pass": [PYTHON, "-c", "pass"],
            "python -S -c pass": [PYTHON, "-S", "-c", "pass"],
            "agent as today": [PYTHON, "-c", "import tfmesos.agent.main"],
            "agent, -S": [
                PYTHON,
                "-S",
                "-c",
                f"import sys; sys.path.insert(0, {str(ROOT)!r}); import tfmesos.agent.main",
            ],
            "agent, lean package": [
                PYTHON,
                "-c",
                f"import sys; sys.path.insert(0, {str(lean)!r}); import tfmesos.agent.main; {check}",
            ],
            "agent, lean package, -S": [
                PYTHON,
                "-S",
                "-c",
                f"import sys; sys.path.insert(0, {str(lean)!r}); import tfmesos.agent.main; {check}",
            ],
            "stdlib the agent needs, -S": [PYTHON, "-S", "-c", f"import {AGENT_STDLIB}"],
            "... and dataclasses, -S": [
                PYTHON,
                "-S",
                "-c",
                f"import {AGENT_STDLIB}, dataclasses",
            ],
        }
        env = bench_env()
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for rep in range(args.reps + 1):  # the first is a warm-up
            for name, argv in variants.items():
                started = time.perf_counter()
                subprocess.run(argv, check=True, env=env, cwd=tmp)
                if rep:
                    samples[name].append(time.perf_counter() - started)
    print(f"lean package holds: {', '.join(modules)}")
    print(f"median wall of {args.reps}, interleaved (min-max):")
    for name, values in samples.items():
        print(
            f"  {name:30} {statistics.median(values) * 1000:6.1f} ms "
            f"({min(values) * 1000:.1f}-{max(values) * 1000:.1f})"
        )


if __name__ == "__main__":
    main()
