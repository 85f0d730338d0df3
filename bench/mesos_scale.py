"""Benchmark 4: the Mesos backend at scale, through the test master.

A. The scheduler's own CPU time to place 1,000 tasks on 200 offers: the Mesos
   backend's offer handler (fit, TaskInfo, ACCEPT bodies, JSON encoding), fed
   200 offers at once with 1,000 tasks pending. Target: at most 50 ms. The
   same 200 offers also come in 20 OFFERS events of 10 and in 200 of one, as
   agents that register over time or offers back from a filter make them come:
   the job holds each offer until the last one lets every task fit.
B. Bring-up: time from tfrun's start to every task registered (the ``ts`` of
   its ``cluster_up`` event, ``tfrun --events``) for 10, 100 and 500 trivial tasks (``sleep``) over 50 agents of a test
   master running in its own process, over 10 agents of real Apache Mesos
   (``tfmesos.testing.real_mesos``, when one can be prepared here; up to
   REAL_MAX_TASKS tasks), against
   the local backend starting the same tasks; and tfrun's own CPU time in
   each. The target: bring-up of 500 tasks bounded by process start, not by
   the framework.
C. Placement: PLACEMENT_TASKS trivial tasks on PLACEMENT_AGENTS real agents
   with room for all of them each, under ``--placement spread`` (the default)
   and ``--placement pack``, alternating: start to cluster up, and how many
   agents the tasks used (from the master's ``/state``). ``--placement-only``
   runs this part alone.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

import psutil
from benchlib import (
    ROOT,
    EventStream,
    Result,
    alternate,
    bench_env,
    command_line,
    parse_args,
    scratch,
    start_test_master,
    tfrun,
)

sys.path.insert(0, str(ROOT))

from tfmesos import ClusterSpec, Job
from tfmesos.backends.base import Launch
from tfmesos.backends.mesos import MesosBackend, MesosOptions
from tfmesos.testing.real_mesos import AgentSpec, MesosNotAvailable, RealMesos, prepare

REAL_AGENTS = 10
"""Real agents are processes of their own (with an executor per task): 10
of them, 100 ports each, hold 500 tasks."""
PLACEMENT_TASKS = 50
PLACEMENT_AGENTS = 5
REAL_MAX_TASKS = 100
"""The largest job run on real Mesos here. At 500, this -O0 build's executors
(a mesos-executor and a mesos-containerizer per task) on 2 cores did not
register within the agents' --executor_registration_timeout (1 min): the
agents terminated them, and 213 of 500 tasks were up after 20 minutes
(docs/benchmarks.md, section 4)."""


def offers(count: int) -> list[dict[str, Any]]:
    def scalar(name: str, value: float) -> dict[str, Any]:
        return {
            "name": name,
            "type": "SCALAR",
            "scalar": {"value": value},
            "role": "*",
            "allocation_info": {"role": "*"},
        }

    return [
        {
            "id": {"value": f"o{i}"},
            "framework_id": {"value": "f"},
            "agent_id": {"value": f"a{i}"},
            "hostname": f"agent{i}",
            "resources": [
                scalar("cpus", 8),
                scalar("mem", 65536),
                {
                    "name": "ports",
                    "type": "RANGES",
                    "ranges": {"range": [{"begin": 31000, "end": 32000}]},
                    "role": "*",
                    "allocation_info": {"role": "*"},
                },
            ],
        }
        for i in range(count)
    ]


def placement_cpu(tasks: int, offer_count: int, events: int = 1) -> float:
    """CPU seconds of the offer handler for ``tasks`` pending on ``offer_count``
    offers, which come in ``events`` OFFERS events of equal size."""
    spec = ClusterSpec((Job("worker", tasks, cpus=1, mem=512, cmd="true"),), replica=True)
    backend = MesosBackend(spec, MesosOptions(master="127.0.0.1:5050"))
    sent: list[dict[str, Any]] = []
    backend._sink = lambda event: None

    def record(call: dict[str, Any]) -> asyncio.Future[str | None]:
        # What the client's submit() does first: take the call, in order.
        sent.append(call)
        taken: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        taken.set_result(None)
        return taken

    backend._submit = record  # type: ignore[method-assign]
    env = {"TFMESOS_LAUNCHER": "h:1", "TFMESOS_SECRET": "00" * 32}
    backend.hold.pending = [
        Launch(f"worker.{t.index}.1.x", t, {**env, "TFMESOS_TASK_ID": f"worker.{t.index}.1.x"})
        for t in spec.tasks()
    ]

    async def handle(batches: list[list[dict[str, Any]]]) -> None:
        for batch in batches:
            backend._on_offers(batch)
        await asyncio.gather(*backend._calls)  # each ACCEPT's answer is awaited by a task

    every = offers(offer_count)
    size = offer_count // events
    batches = [every[i : i + size] for i in range(0, offer_count, size)]
    loop = asyncio.new_event_loop()
    try:
        started = time.process_time()
        loop.run_until_complete(handle(batches))
        for call in sent:
            json.dumps(call)  # the client encodes each call before sending it
        cpu = time.process_time() - started
    finally:
        loop.close()
    placed = sum(
        len(op["launch"]["task_infos"])
        for call in sent
        if call["type"] == "ACCEPT"
        for op in call["accept"]["operations"]
    )
    assert placed == tasks, f"placed {placed} of {tasks}"
    return cpu


def start_master(agents: int) -> tuple[subprocess.Popen[bytes], str]:
    return start_test_master(
        *("--agents", str(agents), "--cpus", "64", "--mem", "65536", "--inherit-env")
    )


def start_real_mesos(agent_count: int = REAL_AGENTS) -> RealMesos | str:
    """Real Mesos with ``agent_count`` agents of 100 ports each, or why there is none here."""
    try:
        home = prepare()
    except MesosNotAvailable as exc:
        return str(exc)
    env = bench_env()
    # A real agent gives tasks its executor environment only.
    executor_env = {k: env[k] for k in ("PATH", "PYTHONPYCACHEPREFIX", "TF_CPP_MIN_LOG_LEVEL")}
    agents = [
        AgentSpec(f"cpus:64;mem:65536;ports:[{31000 + 100 * i}-{31099 + 100 * i}]")
        for i in range(agent_count)
    ]
    return RealMesos(home, agents=agents, executor_env=executor_env).start()


def agents_used(master: str, name: str) -> int:
    """How many agents the tasks of the framework called ``name`` ran on."""
    with urllib.request.urlopen(f"{master}/state", timeout=10) as answer:
        state = json.loads(answer.read())
    (framework,) = [
        f for f in state["frameworks"] + state["completed_frameworks"] if f["name"] == name
    ]
    tasks = framework["tasks"] + framework["completed_tasks"]
    return len({task["slave_id"] for task in tasks})


def bring_up(tasks: int, master: str | None, *extra: str) -> tuple[float, float]:
    """Seconds from tfrun's start to its cluster up, and tfrun's CPU seconds
    until then; ``extra``: more tfrun flags."""
    with scratch("scale") as work:
        events = EventStream(work / "events.jsonl")
        argv = [*tfrun(), *extra]
        if master:
            argv += ["-m", master]
        argv += ["-w", str(tasks), "-s", "0", "-Cw", "0.01", "-Mw", "1", *events.flag]
        argv += ["--", "sleep", "1"]
        started = time.time()  # the clock of the events' ts
        proc = subprocess.Popen(
            argv,
            env=bench_env(),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        up = None
        cpu = 0.0
        for event in events.follow(proc):
            if event["event"] == "cluster_up":
                up = event["ts"] - started
                # Read once the event is seen, within EVENTS_POLL of it: tfrun
                # then waits on tasks that sleep, so the lag adds little CPU.
                times = psutil.Process(proc.pid).cpu_times()
                cpu = times.user + times.system
                break
        code = proc.wait(timeout=600)
        events.read()
        if code != 0 or up is None:
            raise RuntimeError(f"tfrun exited with status {code}, {events.describe()}")
        return up, cpu


def placement(result: Result, reps: int, tasks: int = PLACEMENT_TASKS) -> None:
    """Part C: ``tasks`` on PLACEMENT_AGENTS real agents, spread and packed."""
    real = start_real_mesos(PLACEMENT_AGENTS)
    if isinstance(real, str):
        result.note(f"no real Mesos here, so no placement rows: {real}")
        return
    runs = 0

    def run(how: str) -> tuple[float, float, int]:
        nonlocal runs
        runs += 1
        name = f"placement-{how}-{runs}"
        up, cpu = bring_up(tasks, real.url, "--placement", how, "-n", name)
        return up, cpu, agents_used(real.url, name)

    try:
        kinds = {how: functools.partial(run, how) for how in ("spread", "pack")}
        samples = alternate(reps, kinds)
    finally:
        real.stop()
    for how, measured in samples.items():
        where = f"real Mesos, {tasks} tasks on {PLACEMENT_AGENTS} agents, {how}"
        result.add(f"start to cluster up, {where}", "s", [m[0] for m in measured])
        result.add(f"agents used, {where}", "", [m[2] for m in measured])
    result.ratio(
        f"start to cluster up, spread / pack, {tasks} tasks on {PLACEMENT_AGENTS} agents",
        f"start to cluster up, real Mesos, {tasks} tasks on {PLACEMENT_AGENTS} agents, spread",
        f"start to cluster up, real Mesos, {tasks} tasks on {PLACEMENT_AGENTS} agents, pack",
    )
    result.note(
        f"placement: {PLACEMENT_AGENTS} real agents of 64 CPUs, 64 GiB and 100 ports each "
        f"on this machine, each with room for all {tasks} tasks (0.01 CPU, 1 MiB, 1 port; worker 0 runs beside tfrun, the rest on the agents)"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--placement-only",
        action="store_true",
        help="only part C: spread against pack on real Mesos",
    )


def main() -> None:
    # Stopped from outside, it still stops the real Mesos it started (finally).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args = parse_args(__doc__.splitlines()[0], reps=3, add=add_arguments)
    if args.placement_only:
        result = Result(
            "mesos_placement",
            command_line("mesos_scale.py", args) + " --placement-only",
            args.quick,
            {"tasks": PLACEMENT_TASKS, "agents": PLACEMENT_AGENTS},
        )
        load_before = os.getloadavg()[0]
        placement(result, args.reps, 4 if args.smoke else PLACEMENT_TASKS)
        result.note(
            f"load average (1 min) on this machine at the start and the end: "
            f"{load_before:.1f}, {os.getloadavg()[0]:.1f} (other work on its "
            f"{os.cpu_count()} cores)"
        )
        result.write(args.results_dir)
        return
    sizes = [2] if args.smoke else [10] if args.quick else [10, 100, 500]
    result = Result(
        "mesos_scale",
        command_line("mesos_scale.py", args),
        args.quick,
        {"sizes": sizes, "agents": 50, "placement": "1000 tasks on 200 offers"},
    )
    load_before = os.getloadavg()[0]
    cpu = [placement_cpu(1000, 200) for _ in range(max(args.reps, 3))]
    result.add("placement CPU, 1,000 tasks on 200 offers", "s", cpu)
    row = result.row("placement CPU, 1,000 tasks on 200 offers")
    result.target(
        "4: placement", "\u2264 50 ms", f"{row.median * 1000:.1f} ms", row.median <= 0.050
    )
    for events in (20, 200):
        result.add(
            f"placement CPU, 1,000 tasks on 200 offers in {events} OFFERS events",
            "s",
            [placement_cpu(1000, 200, events) for _ in range(max(args.reps, 3))],
        )
    master, url = start_master(50)
    real = start_real_mesos()
    if isinstance(real, str):
        result.note(f"no real Mesos here, so no real-mesos rows: {real}")
    try:
        for size in sizes:
            kinds = {
                f"mesos {size}": functools.partial(bring_up, size, url),
                f"local {size}": functools.partial(bring_up, size, None),
            }
            on_real = not isinstance(real, str) and size <= REAL_MAX_TASKS
            if on_real and not isinstance(real, str):
                kinds[f"real-mesos {size}"] = functools.partial(bring_up, size, real.url)
            runs = alternate(args.reps, kinds, warmup=args.warmup and size == sizes[0])
            for where in [k.rsplit(" ", 1)[0] for k in kinds]:
                samples = runs[f"{where} {size}"]
                result.add(
                    f"start to cluster up, {where}, {size} tasks", "s", [s[0] for s in samples]
                )
                result.add(
                    f"tfrun CPU until up, {where}, {size} tasks", "s", [s[1] for s in samples]
                )
            result.ratio(
                f"mesos / local, {size} tasks",
                f"start to cluster up, mesos, {size} tasks",
                f"start to cluster up, local, {size} tasks",
            )
            if on_real:
                result.ratio(
                    f"real-mesos / local, {size} tasks",
                    f"start to cluster up, real-mesos, {size} tasks",
                    f"start to cluster up, local, {size} tasks",
                )
                result.ratio(
                    f"real-mesos / test master, {size} tasks",
                    f"start to cluster up, real-mesos, {size} tasks",
                    f"start to cluster up, mesos, {size} tasks",
                )
    finally:
        master.terminate()
        master.wait(timeout=60)
        if not isinstance(real, str):
            real.stop()
    if not args.quick:
        placement(result, args.reps)
    biggest = sizes[-1]
    mesos = result.row(f"start to cluster up, mesos, {biggest} tasks").median
    local = result.row(f"start to cluster up, local, {biggest} tasks").median
    tfrun_cpu = result.row(f"tfrun CPU until up, mesos, {biggest} tasks").median
    result.target(
        "4: bring-up bounded by process start",
        f"{biggest} tasks: Mesos close to local, tfrun's CPU a small part",
        f"mesos {mesos:.2f} s vs local {local:.2f} s ({mesos / local:.2f}\u00d7); "
        f"tfrun CPU {tfrun_cpu:.2f} s of it",
        mesos / local <= 1.5 and tfrun_cpu <= 0.5 * mesos,
    )
    result.note(
        "both backends start one Python agent per task on this 2-core machine; the test "
        "master's agents are this machine too, so process start bounds both"
    )
    if not isinstance(real, str):
        result.note(
            f"real Mesos: Apache Mesos {real.home.name} (built at -O0), {REAL_AGENTS} agents "
            "with the posix launcher on this machine; each task is also a mesos-executor "
            f"and a mesos-containerizer process; jobs of up to {REAL_MAX_TASKS} tasks (at 500 "
            "the executors did not register within the agents' 1 min timeout on 2 cores)"
        )
    result.note(
        f"load average (1 min) on this machine at the start and the end: {load_before:.1f}, "
        f"{os.getloadavg()[0]:.1f} (other work on its {os.cpu_count()} cores)"
    )
    result.write(args.results_dir)


if __name__ == "__main__":
    main()
