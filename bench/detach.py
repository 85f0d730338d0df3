"""Benchmark: ``tfrun --detach``'s return, and a detached job's wall time against the same job attached.

- return:   ``tfrun --detach -w 2 -- python -c 'sleep 1'``, start to exit (the
            job goes on); on Slurm beside ``sbatch --wrap true``'s, where
            ``sinfo`` answers
- end:      the same job detached, from the submit to ``tfrun wait``'s exit,
            against it attached (``tfrun -w 2 -- ...``), start to exit; and
            each job's own wall time, from its first event to its verdict
            (the run's ``events.jsonl``; ``--events`` attached)
- follow:   the delay of ``tfrun logs -f`` beside the attached console's: a
            task prints LINES lines 25 ms apart, each with the time it was
            printed (the agent puts it in the task's log as it comes); each
            line's delay is from then to its arrival on the follower's stdout
            (``tfrun logs -f ID``, begun before the task prints) or on an
            attached tfrun's (``tfrun -w 1 -- ...``)
- mesos:    on real Mesos (one address, two agents), where it can start:
            ``tfrun --detach -m`` until it returns (its launcher task runs and
            has the job), the detached job from the submit to ``tfrun wait -m``'s
            exit, and the same job attached, start to exit and start to its
            cluster up (the attached bring-up)

Alternating (paired: each repetition runs every contender once). Targets:
the return within a few seconds (3 s), the detached job's own wall time at
most 1.05x the attached one's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchlib import (
    PYTHON,
    ROOT,
    JobFailed,
    OutputLines,
    Result,
    alternate,
    bench_env,
    command_line,
    median,
    parse_args,
    scratch,
    tfrun,
)

JOB = ("-w", "2", "--", PYTHON, "-c", "import time; time.sleep(1)")
EMIT = (
    "import os, sys, time\n"
    "while not os.path.exists(sys.argv[1]): time.sleep(0.005)\n"
    "for n in range(int(sys.argv[2])):\n"
    "    print('T', repr(time.time()), flush=True)\n"
    "    time.sleep(0.025)\n"
)
"""A task that waits for a file, then prints lines, each with its time."""


def _lines_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lines", type=int, default=40, help="lines a task prints for 'follow' (default 40)"
    )


def wait_for_follower(follower: OutputLines) -> None:
    """Until ``tfrun logs -f`` has begun following (it waits for the task's
    log: the job's first event is written by then)."""
    import psutil

    process = psutil.Process(follower.proc.pid)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        # Asleep in its poll, its interpreter started: its files are open.
        if any(f.path.endswith(".log") for f in process.open_files()):
            return
        if follower.proc.poll() is not None:
            raise JobFailed("tfrun logs -f ended before the task printed")
        time.sleep(0.005)
    raise JobFailed("tfrun logs -f did not open the task's log within 60 s")


def submit(env: dict[str, str], *args: str) -> tuple[float, str]:
    """Wall time of ``tfrun --detach ARGS`` (the benchmark's job where
    ``ARGS`` is only a backend), and the id it printed last."""
    job = args if "--" in args else (*args, *JOB)
    started = time.perf_counter()
    done = subprocess.run(
        [*tfrun(), "--detach", *job],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise JobFailed(f"tfrun --detach exited with {done.returncode}: {done.stderr[-500:]}")
    return wall, done.stdout.splitlines()[-1]


def wait(env: dict[str, str], job: str, *flags: str) -> None:
    done = subprocess.run(
        [*tfrun(), "wait", *flags, job], env=env, cwd=ROOT, timeout=600, check=False
    )
    if done.returncode != 0:
        raise JobFailed(f"tfrun wait {job} exited with {done.returncode}")


def mesos_contenders(
    env: dict[str, str], master: str, state: Path, submitted: list[tuple[str, ...]]
) -> dict[str, Callable[[], object]]:
    """The Mesos rows' contenders (tfmesos.backends.mesos.detached)."""
    flags = ("-m", master)

    def returns() -> float:
        wall, job = submit(env, *flags)
        submitted.append((*flags, job))
        return wall

    def detached() -> float:
        started = time.perf_counter()
        _, job = submit(env, *flags)
        wait(env, job, *flags)
        return time.perf_counter() - started

    def attached() -> tuple[float, float]:
        events = state / "mesos-attached.jsonl"
        started = time.perf_counter()
        done = subprocess.run(
            [*tfrun(), "--events", str(events), *flags, *JOB],
            env=env,
            capture_output=True,
            cwd=ROOT,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            raise JobFailed(f"tfrun -m exited with {done.returncode}: {done.stderr[-500:]!r}")
        lines = [json.loads(line) for line in events.read_text().splitlines() if line]
        up = next(e["ts"] for e in lines if e["event"] == "cluster_up")
        return time.perf_counter() - started, float(up - lines[0]["ts"])

    return {"mesos return": returns, "mesos detached": detached, "mesos attached": attached}


def start_mesos() -> Any:
    """Real Mesos, one address, two agents; or why there is none."""
    from tfmesos.testing.real_mesos import AgentSpec, MesosNotAvailable, RealMesos, prepare

    try:
        home = prepare()
    except MesosNotAvailable as exc:
        return str(exc)
    env = bench_env()
    executor_env: dict[str, str] = {k: env[k] for k in ("PATH", "PYTHONPYCACHEPREFIX") if k in env}
    if env.get("PYTHONPATH"):
        executor_env["PYTHONPATH"] = env["PYTHONPATH"]
    agents = [
        AgentSpec(f"cpus:8;mem:16384;ports:[{31000 + 100 * i}-{31099 + 100 * i}]") for i in range(2)
    ]
    try:
        return RealMesos(home, agents=agents, executor_env=executor_env).start()
    except MesosNotAvailable as exc:
        return str(exc)


def delays(lines: OutputLines, count: int) -> list[float]:
    """Each printed line's delay, from its time in it to its arrival here."""
    found = []
    for arrived, line in lines:
        words = line.split()
        if len(words) >= 2 and words[-2] == b"T":
            found.append(arrived - float(words[-1]))
            if len(found) == count:
                break
    lines.proc.wait(timeout=120)
    if len(found) < count:
        tail = b"".join(lines.tail).decode(errors="replace")[-500:]
        raise JobFailed(f"only {len(found)} of {count} lines came: {tail}")
    return found


def job_wall(events: Path) -> float:
    """Seconds from the job's first event to its verdict."""
    lines = [json.loads(line) for line in events.read_text().splitlines() if line]
    return float(lines[-1]["ts"] - lines[0]["ts"])


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], reps=7, add=_lines_flag)
    count = 3 if args.smoke else args.lines
    result = Result("detach", command_line("detach.py", args), args.quick, {"reps": args.reps})
    with scratch("detach") as state:
        env = bench_env(XDG_STATE_HOME=str(state), TFMESOS_KEEP_RUNS="1000")
        submitted: list[str] = []

        def detach_returns() -> float:
            wall, job = submit(env)
            submitted.append(job)
            return wall

        def detached_end() -> tuple[float, float]:
            started = time.perf_counter()
            _, job = submit(env)
            wait(env, job)
            wall = time.perf_counter() - started
            return wall, job_wall(state / "tfmesos" / "runs" / job / "events.jsonl")

        def attached_end() -> tuple[float, float]:
            events = state / "attached.jsonl"
            started = time.perf_counter()
            done = subprocess.run(
                [*tfrun(), "--events", str(events), *JOB],
                env=env,
                capture_output=True,
                cwd=ROOT,
                timeout=600,
                check=False,
            )
            if done.returncode != 0:
                raise JobFailed(f"tfrun exited with {done.returncode}")
            return time.perf_counter() - started, job_wall(events)

        go = state / "go"

        def followed() -> list[float]:
            go.unlink(missing_ok=True)
            _, job = submit(env, "-w", "1", "--", PYTHON, "-c", EMIT, str(go), str(count))
            follower = OutputLines([*tfrun(), "logs", "-f", job], env)
            # The follower begins before the first line: what it measures is
            # its following, not its catching up.
            wait_for_follower(follower)
            go.touch()
            return delays(follower, count)

        def console() -> list[float]:
            go.touch()
            return delays(
                OutputLines(
                    [*tfrun(), "-w", "1", "--", PYTHON, "-c", EMIT, str(go), str(count)], env
                ),
                count,
            )

        contenders: dict[str, Callable[[], object]] = {
            "return": detach_returns,
            "detached": detached_end,
            "attached": attached_end,
            "logs -f": followed,
            "console": console,
        }
        slurm = shutil.which("sinfo") is not None and (
            subprocess.run(["sinfo", "-h"], capture_output=True, check=False).returncode == 0
        )
        if slurm:

            def slurm_returns() -> float:
                wall, job = submit(env, "--backend", "slurm")
                submitted.append(job)
                return wall

            def sbatch_returns() -> float:
                started = time.perf_counter()
                subprocess.run(
                    ["sbatch", "--wrap", "true", "--output=/dev/null"],
                    capture_output=True,
                    check=True,
                )
                return time.perf_counter() - started

            contenders["slurm return"] = slurm_returns
            contenders["sbatch"] = sbatch_returns
        else:
            result.note("Slurm skipped: sinfo does not answer here")
        mesos = start_mesos()
        on_mesos: list[tuple[str, ...]] = []
        if isinstance(mesos, str):
            result.note(f"Mesos skipped: {mesos}")
        else:
            contenders.update(mesos_contenders(env, mesos.address, state, on_mesos))
        try:
            walls = alternate(args.reps, contenders, warmup=args.warmup)
            for job in submitted:
                wait(env, job)
            for *flags, job in on_mesos:
                wait(env, job, *flags)
        finally:
            if not isinstance(mesos, str):
                mesos.stop()
    result.add("tfrun --detach returns (local)", "s", walls["return"])
    result.add("detached job, submit to wait's end", "s", [w for w, _ in walls["detached"]])
    result.add("attached job, start to end", "s", [w for w, _ in walls["attached"]])
    result.add("detached job's own wall time (events)", "s", [j for _, j in walls["detached"]])
    result.add("attached job's own wall time (events)", "s", [j for _, j in walls["attached"]])
    if slurm:
        result.add("tfrun --detach --backend slurm returns", "s", walls["slurm return"])
        result.add("sbatch --wrap true returns", "s", walls["sbatch"])
    if "mesos return" in walls:
        result.add("tfrun --detach -m returns (Mesos)", "s", walls["mesos return"])
        result.add("Mesos detached job, submit to wait's end", "s", walls["mesos detached"])
        result.add("Mesos attached job, start to end", "s", [w for w, _ in walls["mesos attached"]])
        result.add(
            "Mesos attached job, its bring-up (events)",
            "s",
            [u for _, u in walls["mesos attached"]],
        )
        mesos_returned = result.row("tfrun --detach -m returns (Mesos)")
        result.target(
            "detach returns on Mesos",
            "≤ 3 s",
            f"{mesos_returned.median:.2f} s",
            mesos_returned.median <= 3,
        )
        result.ratio(
            "Mesos detached / attached, with the commands",
            "Mesos detached job, submit to wait's end",
            "Mesos attached job, start to end",
        )

    # Each repetition's median delay, and every line's.
    for name, row in (("logs -f", "tfrun logs -f"), ("console", "attached console")):
        result.add(f"{row}: a line's delay, median of a run", "s", [median(d) for d in walls[name]])
        result.add(f"{row}: a line's delay, every line", "s", [x for d in walls[name] for x in d])
    result.ratio(
        "logs -f / attached console, a line's delay",
        "tfrun logs -f: a line's delay, median of a run",
        "attached console: a line's delay, median of a run",
    )
    returned = result.row("tfrun --detach returns (local)")
    result.target("detach returns", "≤ 3 s", f"{returned.median:.2f} s", returned.median <= 3)
    result.ratio(
        "detached / attached, with the commands",
        "detached job, submit to wait's end",
        "attached job, start to end",
    )
    ratio = result.ratio(
        "detached / attached, the job's own",
        "detached job's own wall time (events)",
        "attached job's own wall time (events)",
    )
    result.target(
        "detached wall time", "≤ 1.05\u00d7", f"{ratio.value:.2f}\u00d7", ratio.value <= 1.05
    )
    for path in result.write(args.results_dir):
        print(path)


if __name__ == "__main__":
    main()
