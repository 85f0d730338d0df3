"""What every benchmark here shares: repetitions, statistics, machine facts, results.

Each benchmark runs the things it compares side by side in one run, alternating
their order from one repetition to the next so that a noisy neighbour or a slow
drift of the machine hits every contender alike. Results go to
``bench/results/<name>.json`` (everything, samples included) and
``bench/results/<name>.md`` (the table ``docs/benchmarks.md`` shows).

Nothing here asserts a timing: a benchmark fails only when a job it runs fails.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.metadata
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
QUICK_RESULTS = RESULTS / "quick"
PYTHON = sys.executable

MiB = 1 << 20


# -- the machine ---------------------------------------------------------------


def _version(*names: str) -> str | None:
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(name)
    return None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, Any]:
    """The facts a reader needs to judge the figures."""
    nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=False).stdout.strip()
    mem_kib = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    return {
        "nproc": int(nproc) if nproc.isdigit() else os.cpu_count(),
        "cpu_model": cpu_model(),
        "mem_gib": round(mem_kib / (1 << 20), 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "tensorflow": _version("tensorflow-cpu", "tensorflow"),
        "torch": _version("torch"),
        "psutil": _version("psutil"),
        "bytecode_cache": bench_env()["PYTHONPYCACHEPREFIX"],
        "sched_autogroup": _read("/proc/sys/kernel/sched_autogroup_enabled"),
    }


# -- statistics ----------------------------------------------------------------


@dataclass
class Summary:
    """One measured quantity over its repetitions."""

    name: str
    unit: str
    samples: list[float]
    median: float = 0.0
    min: float = 0.0
    max: float = 0.0

    def __post_init__(self) -> None:
        if self.samples:
            self.median = statistics.median(self.samples)
            self.min = min(self.samples)
            self.max = max(self.samples)


@dataclass
class Ratio:
    """``numerator / denominator`` of two measured quantities.

    ``value`` is the ratio of the medians; ``paired`` the ratio within each
    repetition (the two ran back to back), whose spread shows how steady it is.
    """

    name: str
    numerator: str
    denominator: str
    value: float
    paired: list[float]


@dataclass
class Target:
    name: str
    goal: str
    value: str
    met: bool | None
    """``None``: not measured in this run (say why in ``value``)."""


@dataclass
class Result:
    benchmark: str
    command: str
    quick: bool
    params: dict[str, Any]
    machine: dict[str, Any] = field(default_factory=machine)
    rows: list[Summary] = field(default_factory=list)
    ratios: list[Ratio] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    summary_md: str = ""
    """A table to show instead of every row (which the JSON still holds)."""
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S %z"))

    def add(self, name: str, unit: str, samples: Sequence[float]) -> Summary:
        row = Summary(name, unit, [float(s) for s in samples])
        self.rows.append(row)
        return row

    def row(self, name: str) -> Summary:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(name)

    def ratio(self, name: str, numerator: str, denominator: str) -> Ratio:
        num, den = self.row(numerator), self.row(denominator)
        paired = [a / b for a, b in zip(num.samples, den.samples, strict=False) if b]
        ratio = Ratio(name, numerator, denominator, num.median / den.median, paired)
        self.ratios.append(ratio)
        return ratio

    def target(self, name: str, goal: str, value: str, met: bool | None) -> None:
        if self.quick and met is not None:
            # One short repetition is a check that the benchmark runs, not a measurement.
            value, met = f"{value} (quick run: not judged)", None
        self.targets.append(Target(name, goal, value, met))

    def note(self, text: str) -> None:
        print(f"[{self.benchmark}] {text}", flush=True)
        self.notes.append(text)

    # -- output ----------------------------------------------------------------

    def markdown(self) -> str:
        lines = [
            f"### {self.benchmark}" + (" (quick)" if self.quick else ""),
            "",
            f"`{self.command}` — {self.started}",
            "",
        ]
        if self.summary_md:
            lines += [
                self.summary_md.rstrip("\n"),
                "",
                f"(every measurement: {self.benchmark}.json)",
            ]
        else:
            lines += ["| measurement | median | min\u2013max | n |", "|---|---:|---:|---:|"]
            for row in self.rows:
                lines.append(
                    f"| {row.name} | {fmt(row.median, row.unit)} | "
                    f"{fmt(row.min, row.unit)} \u2013 {fmt(row.max, row.unit)} | {len(row.samples)} |"
                )
        if self.ratios:
            lines += ["", "| ratio | of medians | per repetition min\u2013max |", "|---|---:|---:|"]
            for ratio in self.ratios:
                spread = (
                    f"{min(ratio.paired):.3f} \u2013 {max(ratio.paired):.3f}"
                    if ratio.paired
                    else "\u2013"
                )
                lines.append(f"| {ratio.name} | {ratio.value:.3f}\u00d7 | {spread} |")
        if self.targets:
            lines += ["", "| target | goal | measured | met |", "|---|---|---|---|"]
            for target in self.targets:
                met = {True: "yes", False: "**no**", None: "\u2013"}[target.met]
                lines.append(f"| {target.name} | {target.goal} | {target.value} | {met} |")
        if self.notes:
            lines += [""] + [f"- {note}" for note in self.notes]
        m = self.machine
        lines += [
            "",
            f"Machine: nproc {m['nproc']}, {m['cpu_model']}, {m['mem_gib']} GiB, "
            f"Linux {m['kernel']} (autogroup {m.get('sched_autogroup')}), "
            f"Python {m['python']}, TensorFlow {m['tensorflow']}"
            + (f", torch {m['torch']}" if m.get("torch") else ""),
            "",
        ]
        return "\n".join(lines)

    def write(self, directory: Path) -> tuple[Path, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        json_path = directory / f"{self.benchmark}.json"
        md_path = directory / f"{self.benchmark}.md"
        json_path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        md_path.write_text(self.markdown())
        print(self.markdown(), flush=True)
        print(f"[{self.benchmark}] wrote {json_path} and {md_path}", flush=True)
        return json_path, md_path


def span(row: Summary) -> str:
    """``median (min\u2013max)`` of a row, in its unit."""
    return f"{fmt(row.median, row.unit)} ({fmt(row.min, row.unit)} \u2013 {fmt(row.max, row.unit)})"


def fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
    if unit == "ms":
        return f"{value:.1f} ms"
    if unit == "MiB":
        return f"{value:.1f} MiB"
    if unit == "KiB":
        return f"{value:.0f} KiB"
    if unit == "lines/s":
        return f"{value:,.0f} lines/s"
    if unit == "MB/s":
        return f"{value:.1f} MB/s"
    if unit == "%":
        return f"{value:.2f} %"
    if unit == "steps/s":
        return f"{value:.1f} steps/s"
    return f"{value:.4g} {unit}".strip()


# -- running things --------------------------------------------------------------


def parse_args(
    description: str, reps: int, add: Callable[[argparse.ArgumentParser], object] | None = None
) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="one repetition, small sizes")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a check that the benchmark runs, in seconds: --quick at the smallest sizes",
    )
    parser.add_argument(
        "--reps", type=int, default=None, help=f"repetitions (default {reps}; 1 with --quick)"
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=None,
        help="where to write the results (default bench/results, bench/results/quick with --quick)",
    )
    if add is not None:
        add(parser)
    args = parser.parse_args()
    if args.smoke:
        # What the test suite runs: every code path once, nothing measured.
        args.quick = True
    if args.reps is None:
        args.reps = 1 if args.quick else reps
    args.warmup = not args.quick
    if args.results_dir is None:
        args.results_dir = QUICK_RESULTS if args.quick else RESULTS
    return args


def command_line(script: str, args: argparse.Namespace) -> str:
    return f"python bench/{script}" + (" --quick" if args.quick else "")


def alternate(
    reps: int, contenders: Mapping[str, Callable[[], Any]], *, warmup: bool = False
) -> dict[str, list[Any]]:
    """Run every contender once per repetition, rotating which goes first.

    ``warmup`` first runs each once, unrecorded: the page cache and the
    bytecode cache are then as warm for the first repetition as for the last.
    """
    names = list(contenders)
    results: dict[str, list[Any]] = {name: [] for name in names}
    if warmup:
        for name in names:
            started = time.perf_counter()
            contenders[name]()
            print(f"  warm-up {name}: {time.perf_counter() - started:.2f}s", flush=True)
    for rep in range(reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            started = time.perf_counter()
            results[name].append(contenders[name]())
            print(
                f"  rep {rep + 1}/{reps} {name}: {time.perf_counter() - started:.2f}s",
                flush=True,
            )
    return results


def tfrun() -> list[str]:
    """``tfrun`` as a user runs it: the console script next to this Python."""
    script = Path(PYTHON).with_name("tfrun")
    if script.exists():
        return [str(script)]
    return [PYTHON, "-m", "tfmesos.cli"]


PYCACHE = Path(tempfile.gettempdir()) / "tfmesos-bench-pycache"


def bench_env(**extra: str) -> dict[str, str]:
    """The environment every measured command gets.

    Bytecode is cached, as on any ordinary install: were it not (this
    machine's environment sets PYTHONDONTWRITEBYTECODE), every agent would
    compile tfmesos' modules again at each start. The cache lives outside the
    source tree, in PYCACHE.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PYTHONPYCACHEPREFIX", str(PYCACHE))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # The tasks' own commands find this Python first.
    env["PATH"] = str(Path(PYTHON).parent) + os.pathsep + env.get("PATH", "")
    env.update(extra)
    return env


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"tfmesos-bench-{prefix}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class JobFailed(RuntimeError):
    pass


def timed(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdout: int | Any = subprocess.DEVNULL,
    stderr: int | Any = subprocess.DEVNULL,
    timeout: float = 600,
) -> float:
    """Wall time of one command, which must exit 0."""
    started = time.perf_counter()
    proc = subprocess.run(
        list(argv),
        env=dict(env) if env is not None else bench_env(),
        stdout=stdout,
        stderr=stderr,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise JobFailed(f"{' '.join(argv)[:200]} exited with status {proc.returncode}")
    return wall


def spawn(argv: Sequence[str], *, stderr: int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    """Start a command to be watched while it runs (its memory, its threads),
    with the benchmark environment and nothing on its stdin or stdout."""
    return subprocess.Popen(
        list(argv),
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        stdin=subprocess.DEVNULL,
        env=bench_env(),
        cwd=ROOT,
    )


class OutputLines:
    """A command started with its stdout and stderr together in one pipe,
    read line by line as they come: ``for arrived, line in output``, with
    ``arrived`` from ``time.time()``, the clock of tfrun's events' ``ts``, so
    that a task's line and one of tfrun's events can be set against each
    other. ``tail`` keeps the last lines, for the message of a failure."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], keep: int = 40) -> None:
        self.proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env),
            cwd=ROOT,
        )
        self.tail: collections.deque[bytes] = collections.deque(maxlen=keep)

    def __iter__(self) -> Iterator[tuple[float, bytes]]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.tail.append(line)
            yield time.time(), line


Event = dict[str, Any]
"""One object of tfrun's event stream (docs/running.md, "The event stream")."""

EVENTS_POLL = 0.01
"""How often :meth:`EventStream.follow` looks at the file again. Times come
from each event's ``ts``, not from when it was read: this bounds only how
late a benchmark acts on an event (mesos_scale's reading of tfrun's CPU time
at ``cluster_up``)."""


class EventStream:
    """tfrun's event stream (``tfrun --events FILE``), read as tfrun writes it.

    The benchmarks learn what a job did (its cluster up, a task relaunched,
    its verdict) from these lines, not from tfrun's messages, which are
    written for people and may be reworded. When something happened is the
    event's ``ts``: the launcher's clock (``time.time()``) at the event
    itself, at least as accurate as the moment a message reached a reader, so
    set it against ``time.time()`` taken at the start.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.events: list[Event] = []
        """Every event read so far, in order."""
        self._offset = 0
        self._partial = b""
        # A file an earlier run left here would be read as this run's
        # until tfrun truncated it.
        path.unlink(missing_ok=True)

    @property
    def flag(self) -> list[str]:
        """tfrun's arguments that write the events here."""
        return ["--events", str(self.path)]

    def read(self) -> list[Event]:
        """The events written since the last read. A line still being
        written (no newline yet) waits for the next read."""
        try:
            with open(self.path, "rb") as file:
                file.seek(self._offset)
                data = file.read()
        except FileNotFoundError:
            return []  # tfrun opens FILE once it has checked its command line
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        new = [json.loads(line) for line in lines if line]
        self.events += new
        return new

    def follow(self, proc: subprocess.Popen[Any]) -> Iterator[Event]:
        """Each event as it is written, until ``proc`` (the tfrun writing
        them) has exited and every line it wrote has been read."""
        while True:
            ended = proc.poll() is not None  # before the read: it then sees the last lines
            yield from self.read()
            if ended:
                return
            time.sleep(EVENTS_POLL)

    def of(self, name: str) -> list[Event]:
        return [event for event in self.events if event["event"] == name]

    def first(self, name: str) -> Event | None:
        return next((event for event in self.events if event["event"] == name), None)

    def describe(self) -> str:
        """What the events say of the job's end, for a failure's message."""
        verdict = self.first("job_verdict")
        if verdict is not None:
            return f"its verdict: {verdict['result']}: {verdict['message']}"
        return f"no verdict; its events: {', '.join(e['event'] for e in self.events) or 'none'}"


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def start_test_master(
    *flags: str, env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """A test Mesos master in a process of its own on a free port, with
    ``flags`` (agents, their sizes, ...): the process and its URL, once it
    listens (it writes its address to a file then)."""
    address = Path(tempfile.mkdtemp(prefix="bench-master-")) / "address"
    master = [PYTHON, "-m", "tfmesos.testing.master", "--port", "0"]
    settings = ["--allocation-interval", "0.2", "--log-level", "WARNING"]
    proc = subprocess.Popen(
        [*master, "--address-file", str(address), *settings, *flags],
        env=dict(bench_env() if env is None else env),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        if address.exists() and address.read_text().strip():
            url = f"http://{address.read_text().strip()}"
            shutil.rmtree(address.parent, ignore_errors=True)
            return proc, url
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    shutil.rmtree(address.parent, ignore_errors=True)
    raise RuntimeError("the test master did not start")
