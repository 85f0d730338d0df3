"""The first run: from Enter to the README job's first training step, tfrun against by hand.

The README's first job is ``tfrun -w 2 -s 1 -- python
examples/mnist/mnist_replica.py ...``: three processes that each import
TensorFlow, on a machine with as few as two cores. This benchmark runs it and
``bench/hand_launch_mnist.sh`` (the same three processes started by hand)
side by side, and times each of these from the moment the command starts
("Enter"), by the job's own lines as they arrive and by tfrun's events:

- cluster up: tfrun has started every task and handed out the addresses
  (tfrun only, the ``ts`` of its ``cluster_up`` event, ``--events``; by hand
  the addresses are fixed before the tasks start);
- data loaded: the chief has imported TensorFlow, started its server and
  loaded the data (its ``worker 0: ...images...`` line);
- first step: the chief's session is up and it is about to take its first
  training step (its ``initial validation cross entropy`` line);
- trained: its last step (``training: ...``); exit: the command's end.

Wall time on a shared machine follows its load; the CPU time the whole job
(every process of it) has used by its first step and by its exit is steadier,
and is recorded too.

Where scikit-learn is installed, each contender also runs with it hidden (a
``PYTHONPATH`` entry whose ``sklearn`` and ``scipy`` raise ImportError, as if
not installed): ``import tensorflow`` imports Keras, and Keras imports
scikit-learn (SciPy and all) whenever it can, in every task. One task's start is
also timed alone, phase by phase (interpreter, NumPy, TensorFlow, its server,
the data, and its exit), both ways, wall and CPU.

``--cold`` first drops this Python's installed files (its ``lib`` trees) and
the example from the page cache before every run, with
``posix_fadvise(DONTNEED)``: the first run after an install on a machine
whose memory has since gone to other things, or after a reboot. Results go to
``first_step_cold`` then.

The environment is the caller's, as a user's would be (bytecode settings
included); only ``TF_CPP_MIN_LOG_LEVEL=2`` is added, and this Python's
directory is put first on ``PATH`` so that the tasks' ``python`` is this one.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import (
    BENCH,
    PYTHON,
    ROOT,
    EventStream,
    JobFailed,
    OutputLines,
    Result,
    alternate,
    command_line,
    parse_args,
    scratch,
    span,
    tfrun,
)

EXAMPLE = "examples/mnist/mnist_replica.py"
MARKS = (
    # The chief's own lines: the task's output, which tfrun passes on.
    ("data loaded", re.compile(rb"worker 0: .*images")),
    ("first step", re.compile(rb"^(\[worker:0\] )?initial validation")),
    ("trained", re.compile(rb"training: \d+ global steps")),
)
HIDE = "scikit-learn hidden"


@dataclass
class Run:
    stamps: dict[str, float] = field(default_factory=dict)
    """Seconds from the start to each mark, and to ``exit``."""
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds the whole job (every process of it) had used by the first
    step, and by its exit: steadier than wall time on a shared machine."""


TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int) -> float:
    """CPU seconds used so far by ``root`` and every process below it, those
    that have exited and been waited for included (their parents' ``cutime``)."""
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        used[pid] = sum(int(f) for f in fields[11:15]) / TICK  # utime stime cutime cstime
    total = 0.0
    for pid in used:
        ancestor = pid
        while ancestor not in (0, 1, root):
            ancestor = parents.get(ancestor, 0)
        if ancestor == root:
            total += used[pid]
    return total


def job_env(hidden: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PATH"] = str(Path(PYTHON).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHON"] = PYTHON
    if hidden is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hidden), env.get("PYTHONPATH")]))
    return env


def hiding_dir(directory: Path) -> Path:
    """A directory that, first on PYTHONPATH, makes scikit-learn and SciPy
    look not installed."""
    for name in ("sklearn", "scipy"):
        package = directory / name
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(
            f"raise ImportError('{name} hidden by bench/first_step.py, as if not installed')\n"
        )
    return directory


def evict(paths: list[Path]) -> int:
    """Drop these files (trees) from the page cache; return how many files."""
    count = 0
    for top in paths:
        files = (
            [str(top)]
            if top.is_file()
            else (os.path.join(folder, name) for folder, _, names in os.walk(top) for name in names)
        )
        for path in files:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                count += 1
            except OSError:
                pass
            finally:
                os.close(fd)
    return count


def installed_trees() -> list[Path]:
    """Where this Python's modules come from: its lib trees (a venv's own and
    the base interpreter's) and any other site-packages on its path."""
    roots = {Path(sys.prefix, "lib"), Path(sys.base_prefix, "lib")}
    roots.update(Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    return sorted(roots)


def run_job(argv: list[str], env: dict[str, str], cold: bool, events: Path | None = None) -> Run:
    """One run of the job; ``events``: the file ``argv`` (tfrun's) writes
    its event stream to, whose ``cluster_up`` is the cluster-up mark."""
    if cold:
        evict([*installed_trees(), ROOT / EXAMPLE])
    run = Run()
    stream = None if events is None else EventStream(events)
    started = time.time()  # the clock of the output's arrival and of the events' ts
    output = OutputLines(argv, env, keep=31)
    proc = output.proc
    for arrived, line in output:
        now = arrived - started
        for name, mark in MARKS:
            if name not in run.stamps and mark.search(line):
                run.stamps[name] = now
                if name == "first step":
                    run.cpu[name] = tree_cpu(proc.pid)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    run.stamps["exit"] = time.time() - started
    # Every process of the job was waited for by its parent, and so counts
    # in the command's own rusage.
    run.cpu["exit"] = usage.ru_utime + usage.ru_stime
    if stream is not None:
        stream.read()
        up = stream.first("cluster_up")
        if up is not None:
            run.stamps["cluster up"] = up["ts"] - started
            run.stamps = dict(sorted(run.stamps.items(), key=lambda stamp: stamp[1]))
    marks = ("first step",) if stream is None else ("first step", "cluster up")
    if code != 0 or any(mark not in run.stamps for mark in marks):
        raise JobFailed(
            f"{argv[0]} exited with status {code}"
            + (f", {stream.describe()}" if stream is not None else "")
            + ":\n"
            + b"".join(output.tail).decode(errors="replace")
        )
    return run


# One task's start, phase by phase: wall (CLOCK_REALTIME, shared with the
# parent) and this process's CPU after each, as JSON on one line.
PHASES = """
import json, os, sys, time
stamps = [("started", time.time(), time.process_time())]
def stamp(name): stamps.append((name, time.time(), time.process_time()))
import numpy as np
stamp("numpy imported")
import tensorflow as tf
stamp("tensorflow imported")
tf.distribute.Server(
    tf.train.ClusterSpec({"worker": ["127.0.0.1:0"]}), job_name="worker", task_index=0
)
stamp("server up")
np.loadtxt(os.path.join("examples", "data", "digits.csv.gz"), delimiter=",")
stamp("digits read from examples/data")
if "sklearn" in sys.modules:
    from sklearn.datasets import load_digits
    load_digits()
    stamp("digits from sklearn.datasets.load_digits")
print(json.dumps(stamps), flush=True)
"""


def task_phases(env: dict[str, str], cold: bool) -> dict[str, tuple[float, float]]:
    """Seconds (wall, CPU) each phase of one task's start took, alone; and
    its exit (wall), after the work is done."""
    if cold:
        evict(installed_trees())
    started = time.time()
    proc = subprocess.Popen(
        [PYTHON, "-c", PHASES],
        env=env,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    read_at = time.time()
    if proc.wait() != 0 or not line:
        raise JobFailed(f"one task's phases: exited with status {proc.returncode}")
    exited = time.time()
    stamps = json.loads(line)
    phases = {"interpreter up": (stamps[0][1] - started, stamps[0][2])}
    for (_, wall0, cpu0), (name, wall1, cpu1) in itertools.pairwise(stamps):
        phases[name] = (wall1 - wall0, cpu1 - cpu0)
    phases["exit"] = (exited - read_at, 0.0)
    return phases


def main() -> None:
    args = parse_args(
        __doc__.splitlines()[0],
        reps=5,
        add=lambda p: (
            p.add_argument("--cold", action="store_true", help="drop the page cache first"),
            p.add_argument("--train-steps", type=int, default=200),
        ),
    )
    steps = ["--train_steps", str(4 if args.smoke else 20 if args.quick else args.train_steps)]
    name = "first_step_cold" if args.cold else "first_step"
    result = Result(
        name,
        command_line("first_step.py", args) + (" --cold" if args.cold else ""),
        args.quick,
        {"reps": args.reps, "cold": args.cold, "ps": 1, "workers": 2, "train_steps": steps[1]},
    )
    load_before = os.getloadavg()[0]
    has_sklearn = importlib.util.find_spec("sklearn") is not None
    bytecode = "not written" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "written"
    result.note(
        f"scikit-learn {'installed' if has_sklearn else 'not installed'}; new bytecode "
        f"{bytecode} (PYTHONDONTWRITEBYTECODE); page cache "
        + ("dropped before every run" if args.cold else "warm (after a warm-up round)")
    )
    suffixes = ["", f", {HIDE}"] if has_sklearn and not args.quick else [""]
    runs = _measure(args, steps, suffixes)
    jobs = [n for n in runs if not n.startswith("one task")]
    _add_jobs(result, runs, jobs)
    for suffix in suffixes:
        _add_phases(result, suffix, runs[f"one task{suffix}"])
    _add_ratios(result, hiding=len(suffixes) > 1)
    first, hand = result.row("CPU to first step, tfrun"), result.row("CPU to first step, hand")
    result.target(
        "CPU tfrun adds to the job's first step",
        "≤ 0.5 s (its launcher, fork server and agents)",
        f"{first.median - hand.median:+.2f} s ({span(first)} against {span(hand)})",
        first.median <= hand.median + 0.5,
    )
    result.note(
        "load average (1 min) on this machine at the start and the end: "
        f"{load_before:.1f}, {os.getloadavg()[0]:.1f} (other work on its {os.cpu_count()} cores)"
    )
    result.extra["timeline"] = {job: [r.stamps for r in runs[job]] for job in jobs}
    result.write(args.results_dir)


def _measure(
    args: argparse.Namespace, steps: list[str], suffixes: list[str]
) -> dict[str, list[Any]]:
    """The job through tfrun, by hand, and one task's phases, alternated;
    each also with scikit-learn hidden where ``suffixes`` says."""
    with scratch("first-step") as logs, tempfile.TemporaryDirectory() as hide_dir:
        hidden = hiding_dir(Path(hide_dir))
        events = logs / "events.jsonl"
        tfrun_argv = [
            *tfrun(),
            *("-w", "2", "-s", "1", "--worker-logs", "*", "--log-dir", str(logs)),
            *("--events", str(events), "--"),
            *("python", EXAMPLE, "--ps_hosts={ps_hosts}", "--worker_hosts={worker_hosts}"),
            *("--job_name={job_name}", "--task_index={task_index}", *steps),
        ]
        hand_argv = ["bash", str(BENCH / "hand_launch_mnist.sh"), *steps]
        contenders: dict[str, Callable[[], Run | dict[str, tuple[float, float]]]] = {}
        for suffix in suffixes:
            env = job_env(hidden if suffix else None)
            contenders[f"tfrun{suffix}"] = functools.partial(
                run_job, tfrun_argv, env, args.cold, events
            )
            contenders[f"hand{suffix}"] = functools.partial(run_job, hand_argv, env, args.cold)
            contenders[f"one task{suffix}"] = functools.partial(task_phases, env, args.cold)
        return alternate(args.reps, contenders, warmup=args.warmup and not args.cold)


def _add_jobs(result: Result, runs: dict[str, list[Any]], jobs: list[str]) -> None:
    for mark in ("cluster up", "data loaded", "first step", "trained", "exit"):
        for job in jobs:
            samples = [r.stamps[mark] for r in runs[job] if mark in r.stamps]
            if samples:
                result.add(f"Enter to {mark}, {job}", "s", samples)
    for mark in ("first step", "exit"):
        for job in jobs:
            result.add(f"CPU to {mark}, {job}", "s", [r.cpu[mark] for r in runs[job]])


def _add_phases(result: Result, suffix: str, phases: list[dict[str, tuple[float, float]]]) -> None:
    for phase in phases[0]:
        walls = [p[phase][0] for p in phases if phase in p]
        result.add(f"one task{suffix}: {phase}, wall", "s", walls)
        if phase not in ("interpreter up", "exit"):
            result.add(f"one task{suffix}: {phase}, CPU", "s", [p[phase][1] for p in phases])


def _add_ratios(result: Result, hiding: bool) -> None:
    result.ratio(
        "first step: tfrun / hand", "Enter to first step, tfrun", "Enter to first step, hand"
    )
    result.ratio("exit: tfrun / hand", "Enter to exit, tfrun", "Enter to exit, hand")
    result.ratio(
        "CPU to first step: tfrun / hand", "CPU to first step, tfrun", "CPU to first step, hand"
    )
    if not hiding:
        return
    for job in ("tfrun", "hand"):
        result.ratio(
            f"first step: {job}, {HIDE} / installed",
            f"Enter to first step, {job}, {HIDE}",
            f"Enter to first step, {job}",
        )
        result.ratio(
            f"CPU to first step: {job}, {HIDE} / installed",
            f"CPU to first step, {job}, {HIDE}",
            f"CPU to first step, {job}",
        )
    result.ratio(
        f"first step: tfrun, {HIDE} / hand, {HIDE}",
        f"Enter to first step, tfrun, {HIDE}",
        f"Enter to first step, hand, {HIDE}",
    )


if __name__ == "__main__":
    main()
