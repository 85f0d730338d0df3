"""Benchmark 9: from a worker's crash to training resumed, with and without --max-restarts.

The job is ``examples/mnist/mnist_replica.py`` with 1 ps and 2 workers
(``tfrun -w 2 -s 1``), saving a checkpoint every ``--save-steps`` global steps
into a fresh directory. Once a checkpoint past step 0 is on disk, the benchmark
itself kills worker 1's process with SIGKILL (it found the process by its
command line beforehand, and polls the checkpoint index every 10 ms, as
``tests/programs/crash_after_checkpoint.py`` does), and takes that moment as the crash.
The end is the moment the chief's ``training from global step N`` line, with
N > 0, of the next run reaches the benchmark through tfrun's output.

Three contenders, alternating their order from one repetition to the next:

- ``--max-restarts 1, local``: tfrun restarts the whole job on the local backend.
- ``--max-restarts 1, test master``: the same through the test Mesos master
  (``python -m tfmesos.testing.master``, in a process of its own, its agents on
  this machine); worker 1 is one of the master's tasks, the chief runs beside
  tfrun.
- ``hand restart, local``: tfrun without ``--max-restarts`` fails and exits
  non-zero; the benchmark at once runs the same command again, as a user's
  shell loop (``until tfrun ...; do :; done``) would.

Also recorded, from tfrun's event stream (``--events``, each event's ``ts``):
the moment tfrun names the failure (worker 1's ``task_exited``, whose action
is ``fail job``), the moment the next run's cluster is up (its
``cluster_up``); and the wall time of the whole job (the first tfrun's start
to the last one's exit). All on one clock, ``time.time()``, the events'.
Nothing here is judged: the issue (#14) asks for the figures, not for a
target.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from benchlib import (
    PYTHON,
    Event,
    EventStream,
    JobFailed,
    OutputLines,
    Result,
    alternate,
    bench_env,
    command_line,
    parse_args,
    scratch,
    span,
    start_test_master,
    tfrun,
)

EXAMPLE = "examples/mnist/mnist_replica.py"
LOCAL = "--max-restarts 1, local"
MESOS = "--max-restarts 1, test master"
HAND = "hand restart, local"
CONTENDERS = (LOCAL, MESOS, HAND)

# The chief's own line (the task's output, which tfrun passes on).
RESUMED = re.compile(rb"\[worker:0\] worker 0: training from global step (\d+)")
LATEST = re.compile(r'^model_checkpoint_path: ".*?-(\d+)"', re.MULTILINE)


def saved_step(checkpoint_dir: Path) -> int:
    """The global step of the latest checkpoint in ``checkpoint_dir`` (0: none)."""
    try:
        found = LATEST.search((checkpoint_dir / "checkpoint").read_text())
    except OSError:
        return 0
    return int(found.group(1)) if found else 0


class Crash(threading.Thread):
    """Kills one task's process once a checkpoint past step 0 is on disk.

    The process is the one whose command line names ``marks`` (the job's own
    checkpoint directory among them), looked for every 100 ms until found;
    then the checkpoint index is polled every 10 ms.
    """

    def __init__(self, checkpoint_dir: Path, marks: tuple[str, ...]) -> None:
        super().__init__(daemon=True)
        self.checkpoint_dir = checkpoint_dir
        self.marks = marks
        self.done = threading.Event()
        self.killed_at: float | None = None
        self.step = 0
        self.error = ""

    def find(self) -> psutil.Process | None:
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if all(mark in cmdline for mark in self.marks):
                return proc
        return None

    def run(self) -> None:
        target = None
        while target is None and not self.done.is_set():
            target = self.find()
            if target is None:
                self.done.wait(0.1)
        while target is not None and not self.done.is_set():
            step = saved_step(self.checkpoint_dir)
            if step > 0:
                try:
                    target.send_signal(signal.SIGKILL)
                except psutil.Error as exc:
                    self.error = f"could not kill {target.pid}: {exc}"
                    return
                self.killed_at = time.time()
                self.step = step
                return
            self.done.wait(0.01)

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=10)


@dataclass
class Run:
    wall: float
    """The first tfrun's start to the last one's exit."""
    noticed: float
    """Crash to worker 1's ``task_exited`` event that fails the job."""
    up: float
    """Crash to the next run's ``cluster_up`` event."""
    resumed: float
    """Crash to the chief's "training from global step N" line, N > 0."""
    killed_after: int
    """The latest checkpoint's global step when worker 1 was killed."""
    resumed_from: int
    """N, the global step the next run began at."""
    exit_codes: list[int] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    """tfrun's own lines (not the tasks'), in seconds from the crash."""


class Watch:
    """Runs tfrun, once or more, and keeps what each run did: its events
    (``--events``) and the chief's lines, timed as they arrive, from its
    output (stdout and stderr together)."""

    def __init__(self, events: Path) -> None:
        self.path = events
        self.events: list[Event] = []
        """Every run's events, in order."""
        self.starts: list[tuple[float, int]] = []
        self.tail: Sequence[bytes] = ()
        self.own: list[tuple[float, bytes]] = []

    @property
    def flag(self) -> list[str]:
        return ["--events", str(self.path)]

    def run(self, argv: list[str], env: dict[str, str]) -> int:
        stream = EventStream(self.path)  # each run writes the file anew
        output = OutputLines(argv, env, keep=41)
        self.tail = output.tail
        for now, line in output:
            # tfrun's own lines, kept for a reader of the results: "[tfrun]
            # ..." (with -v), its warnings and verdict. Nothing is read from them.
            ours = line.startswith(b"[tfrun]") or not line.startswith(b"[")
            if ours and len(self.own) < 200:
                self.own.append((now, line.rstrip()))
            resumed = RESUMED.search(line)
            if resumed:
                self.starts.append((now, int(resumed.group(1))))
        code = output.proc.wait(timeout=600)
        self.events += stream.read()
        return code

    def after(self, name: str, moment: float) -> list[Event]:
        """The events called ``name`` after ``moment`` (``time.time()``)."""
        return [e for e in self.events if e["event"] == name and e["ts"] > moment]

    def failure(self, why: str) -> JobFailed:
        seen = ", ".join(e["event"] for e in self.events) or "none"
        return JobFailed(
            f"{why} (its events: {seen}):\n" + b"".join(self.tail).decode(errors="replace")
        )


def mnist(checkpoint_dir: Path, train_steps: int, save_steps: int) -> list[str]:
    return [
        PYTHON, EXAMPLE,
        "--ps_hosts={ps_hosts}", "--worker_hosts={worker_hosts}",
        "--job_name={job_name}", "--task_index={task_index}",
        "--train_steps", str(train_steps), "--save_checkpoint_steps", str(save_steps),
        "--checkpoint_dir", str(checkpoint_dir),
    ]  # fmt: skip


def crash_and_resume(master: str | None, restarts: bool, train_steps: int, save_steps: int) -> Run:
    """One job, worker 1 killed after the first checkpoint; the times from the kill."""
    with scratch("restart") as work:
        checkpoints = work / "checkpoints"
        watch = Watch(work / "events.jsonl")
        argv = [*tfrun(), *(["-m", master] if master else []), "-w", "2", "-s", "1", *watch.flag]
        if restarts:
            argv += ["--max-restarts", "1"]
        argv += ["--", *mnist(checkpoints, train_steps, save_steps)]
        # Each run's logs under the scratch folder, not the user's state directory.
        env = bench_env(PYTHON=PYTHON, XDG_STATE_HOME=str(work / "state"))
        crash = Crash(checkpoints, ("--job_name=worker", "--task_index=1", str(checkpoints)))
        started = time.time()  # one clock: the events' ts, the kill, the lines' arrival
        crash.start()
        try:
            codes = [watch.run(argv, env)]
        finally:
            crash.stop()
        if crash.killed_at is None:
            raise watch.failure(crash.error or "worker 1 was never killed")
        if not restarts:
            if codes[0] == 0:
                raise watch.failure("tfrun without --max-restarts exited 0 after the crash")
            # The user's loop: the same command again, at once.
            codes.append(watch.run(argv, env))
        wall = time.time() - started
        if codes[-1] != 0:
            raise watch.failure(f"the job exited with status {codes[-1]}")
        killed = crash.killed_at
        after = [(at, step) for at, step in watch.starts if at > killed]
        ups = watch.after("cluster_up", killed)
        noticed = [
            e
            for e in watch.after("task_exited", killed)
            if e["task"] == "worker:1" and e["action"] == "fail job"
        ]
        if not after or after[0][1] <= 0 or not ups or not noticed:
            raise watch.failure("no run resumed from a checkpoint after the crash")
        return Run(
            wall=wall,
            noticed=noticed[0]["ts"] - killed,
            up=ups[0]["ts"] - killed,
            resumed=after[0][0] - killed,
            killed_after=crash.step,
            resumed_from=after[0][1],
            exit_codes=codes,
            log=[
                f"{at - killed:+.3f}s {line.decode(errors='replace')}"
                for at, line in watch.own
                if at > killed - 5
            ],
        )


def start_master() -> tuple[subprocess.Popen[bytes], str]:
    """A test Mesos master in a process of its own: 2 agents, room for the job."""
    return start_test_master("--agents", "2", "--cpus", "4", "--mem", "8192", "--inherit-env")


def main() -> None:
    args = parse_args(
        __doc__.splitlines()[0],
        reps=3,
        add=lambda p: (
            p.add_argument("--train-steps", type=int, default=None, help="default 300; 200 quick"),
            p.add_argument("--save-steps", type=int, default=None, help="default 50"),
            p.add_argument("--no-warmup", action="store_true", help="no unrecorded first round"),
        ),
    )
    if args.no_warmup:
        args.warmup = False
    train_steps = args.train_steps or (200 if args.quick else 300)
    save_steps = args.save_steps or 50
    result = Result(
        "restart_resume",
        command_line("restart_resume.py", args) + (" --no-warmup" if args.no_warmup else ""),
        args.quick,
        {
            "reps": args.reps,
            "ps": 1,
            "workers": 2,
            "killed": "worker:1",
            "train_steps": train_steps,
            "save_checkpoint_steps": save_steps,
        },
    )
    load_before = os.getloadavg()
    master, url = start_master()
    try:
        runs = alternate(
            args.reps,
            {
                LOCAL: lambda: crash_and_resume(None, True, train_steps, save_steps),
                MESOS: lambda: crash_and_resume(url, True, train_steps, save_steps),
                HAND: lambda: crash_and_resume(None, False, train_steps, save_steps),
            },
            warmup=args.warmup,
        )
    finally:
        master.terminate()
        master.wait(timeout=60)
    measured = (
        ("crash to the failure named", "noticed"),
        ("crash to the next run's cluster up", "up"),
        ("crash to training resumed", "resumed"),
        ("whole job, wall time", "wall"),
    )
    for label, attr in measured:
        for name in CONTENDERS:
            result.add(f"{label}, {name}", "s", [getattr(r, attr) for r in runs[name]])
    for name in (LOCAL, MESOS):
        result.ratio(
            f"crash to training resumed, {name} / {HAND}",
            f"crash to training resumed, {name}",
            f"crash to training resumed, {HAND}",
        )
    for name in (LOCAL, MESOS):
        result.ratio(
            f"whole job, {name} / {HAND}",
            f"whole job, wall time, {name}",
            f"whole job, wall time, {HAND}",
        )
    table = [
        "| median (min \u2013 max) | " + " | ".join(CONTENDERS) + " |",
        "|---|" + "---:|" * len(CONTENDERS),
    ]
    for label, _ in measured:
        table.append(
            f"| {label} | "
            + " | ".join(span(result.row(f"{label}, {name}")) for name in CONTENDERS)
            + " |"
        )
    table.append(
        "| killed after the checkpoint of step \u2192 resumed from step | "
        + " | ".join(
            ", ".join(f"{r.killed_after} \u2192 {r.resumed_from}" for r in runs[name])
            for name in CONTENDERS
        )
        + " |"
    )
    result.summary_md = "\n".join(table)
    result.note(
        f"medians (min \u2013 max) of {args.reps} repetition{'s' if args.reps > 1 else ''}; "
        "the times run from the moment the benchmark's SIGKILL to worker 1 returned"
    )
    load_after = os.getloadavg()
    result.note(
        "this machine is shared: 1-minute load average "
        f"{load_before[0]:.1f} at the start, {load_after[0]:.1f} at the end, on {os.cpu_count()} cores"
    )
    result.extra["checkpoint_at_kill_and_resumed_from"] = {
        name: [[r.killed_after, r.resumed_from] for r in runs[name]] for name in CONTENDERS
    }
    result.extra["tfrun_lines"] = {name: [r.log for r in runs[name]] for name in CONTENDERS}
    result.write(args.results_dir)


if __name__ == "__main__":
    main()
