"""Fine-grained mode keeps a dead worker's address: the policy by itself,
the launcher and the local backend with real agents and a stand-in server,
and ``examples/ps_strategy.py`` surviving a killed worker for real, on the
local backend and through the test Mesos master."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import ROOT, JobProcesses, until
from tests.jobevents import JobEvents
from tests.mesos_clusters import MesosUnderTest
from tests.test_mesos_backend import Harness, in_loop, offer
from tfmesos import ClusterSpec, Job, JobFailedError
from tfmesos.backends.base import NOT_PLACED, Launch, TaskEnded, TaskPlaced
from tfmesos.backends.local.backend import LocalBackend
from tfmesos.backends.mesos import pins as mesos_pins
from tfmesos.launcher import Launcher
from tfmesos.launcher.events import EventRecorder
from tfmesos.launcher.relaunch import NotRelaunched, RelaunchAt, decide
from tfmesos.spec import TaskSpec

PY = sys.executable
STAND_IN_AGENT = ROOT / "tests" / "programs" / "stand_in_server_agent.py"


# -- the policy ----------------------------------------------------------------


def task(job: str, index: int = 0) -> TaskSpec:
    return TaskSpec(job, index, 1.0, 1024.0, 0, None)


def test_a_worker_is_relaunched_at_its_address_up_to_the_jobs_bound() -> None:
    worker = task("worker", 1)
    first = decide(
        worker, "h:4001", done=0, allowed=2, backend="local", backend_keeps_addresses=True
    )
    assert first == RelaunchAt("h:4001", 1, 2)
    second = decide(
        worker, "h:4001", done=1, allowed=2, backend="local", backend_keeps_addresses=True
    )
    assert second == RelaunchAt("h:4001", 2, 2)
    spent = decide(
        task("worker", 0),
        "h:4000",
        done=2,
        allowed=2,
        backend="local",
        backend_keeps_addresses=True,
    )
    assert spent == NotRelaunched(
        "not relaunched: the job has made the 2 relaunches max_restarts=2 allows"
    )


def test_without_max_restarts_nothing_is_relaunched_and_nothing_more_is_said() -> None:
    assert decide(
        task("worker"), "h:1", done=0, allowed=0, backend="local", backend_keeps_addresses=True
    ) == NotRelaunched("")


def test_a_ps_or_another_job_is_never_relaunched_and_says_why() -> None:
    ps = decide(task("ps"), "h:1", done=0, allowed=3, backend="mesos", backend_keeps_addresses=True)
    assert isinstance(ps, NotRelaunched)
    assert "a ps holds the model's variables" in ps.why
    assert "ClusterCoordinator cannot recover them" in ps.why
    chief = decide(
        task("chief"), "h:1", done=0, allowed=3, backend="mesos", backend_keeps_addresses=True
    )
    assert chief == NotRelaunched(
        "not relaunched: only worker servers are (ClusterCoordinator recovers workers only), "
        "and this is a 'chief' server"
    )


def test_a_backend_that_cannot_place_a_task_at_an_address_relaunches_nothing() -> None:
    assert decide(
        task("worker"), "h:1", done=0, allowed=3, backend="slurm", backend_keeps_addresses=False
    ) == NotRelaunched("not relaunched: the slurm backend cannot start a task at a given address")


# -- the launcher and the local backend, with stand-in servers -------------------


class StandInBackend(LocalBackend):
    """The local backend running the real agent with a stand-in server;
    records each relaunch at an address, and can have a stranger take the
    port first."""

    def __init__(self, spec: ClusterSpec, log_dir: Path, *, steal_port: bool = False) -> None:
        super().__init__(spec, log_dir=log_dir, agent_command=[PY, str(STAND_IN_AGENT)])
        self.relaunched_at: list[tuple[str, int]] = []
        self.steal_port = steal_port
        self.stranger: socket.socket | None = None

    async def launch_at(self, launch: Launch, earlier: str, port: int) -> None:
        self.relaunched_at.append((launch.task.name, port))
        if self.steal_port:
            # Waits for the earlier attempt to be gone, as the backend does,
            # then takes its port, as another program could.
            while earlier in self._procs:
                await asyncio.sleep(0.01)
            self.stranger = socket.socket()
            self.stranger.bind(("", port))
            self.stranger.listen()
        await super().launch_at(launch, earlier, port)


class Said(logging.Handler):
    """What the launcher says, as it says it."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def said() -> Iterator[Said]:
    logger = logging.getLogger("tfmesos")
    handler, level = Said(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def kill_server(name: str) -> int:
    """SIGKILL the stand-in server of task ``name`` (``worker:1``); its pid."""
    job, _, index = name.partition(":")
    for proc in psutil.process_iter(["cmdline", "environ"]):
        with contextlib.suppress(psutil.Error):
            environ = proc.info["environ"] or {}
            if "stand-in-server" in (proc.info["cmdline"] or []) and (
                environ.get("TFMESOS_JOB_NAME"),
                environ.get("TFMESOS_TASK_INDEX"),
            ) == (job, index):
                proc.kill()
                return int(proc.pid)
    raise AssertionError(f"no stand-in server for {name}")


def watching(watch: asyncio.Task[None]) -> bool:
    """True while the launcher watches; once it stops, its failure raised."""
    if watch.done():
        watch.result()
        raise AssertionError("the launcher stopped watching")
    return True


def fine_grained(max_restarts: int) -> ClusterSpec:
    return ClusterSpec((Job("ps", 1), Job("worker", 2)), max_restarts=max_restarts)


def run_killing(
    backend_for: Callable[[ClusterSpec], LocalBackend],
    max_restarts: int,
    victims: list[str],
    events: EventRecorder,
) -> tuple[Launcher, JobFailedError | None]:
    """Bring a fine-grained cluster up, kill the victims' servers one after
    another, each once the one before is back (its ``task_ready`` event);
    return the launcher and how the job failed, if it did."""
    spec = fine_grained(max_restarts)
    launcher = Launcher(spec, backend_for(spec), output=io.BytesIO(), events=events)

    def relaunches_back() -> int:
        return sum(e["relaunched"] for e in events.of("task_ready"))

    async def scenario() -> JobFailedError | None:
        try:
            await launcher.start()
            watch = asyncio.create_task(launcher.watch())
            try:
                for victim in victims:
                    back = relaunches_back()
                    kill_server(victim)

                    def one_more_back(back: int = back) -> bool:
                        return relaunches_back() > back

                    await until(
                        lambda: watching(watch) and one_more_back(),
                        f"{victim}'s server back",
                        120,
                        poll=0.02,
                    )
            except JobFailedError as exc:
                return exc
            finally:
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError, JobFailedError):
                    await watch
            return None
        finally:
            await launcher.stop()

    return launcher, asyncio.run(scenario())


def test_a_dead_worker_comes_back_at_its_address_until_the_relaunches_run_out(
    said: Said, tmp_path: Path, job_procs: JobProcesses
) -> None:
    backends: list[StandInBackend] = []

    def backend_for(spec: ClusterSpec) -> LocalBackend:
        backends.append(StandInBackend(spec, tmp_path))
        return backends[-1]

    events = EventRecorder()
    launcher, failed = run_killing(backend_for, 2, ["worker:1", "worker:0", "worker:1"], events)
    address = {
        name: launcher.cluster_def["worker"][i] for i, name in enumerate(["worker:0", "worker:1"])
    }
    # The cluster the program holds never changed.
    assert launcher.cluster_def["worker"] == [address["worker:0"], address["worker:1"]]
    port = {name: int(addr.rpartition(":")[2]) for name, addr in address.items()}
    assert backends[0].relaunched_at == [
        ("worker:1", port["worker:1"]),
        ("worker:0", port["worker:0"]),
    ]
    relaunched = [(e["task"], e["address"]) for e in events.of("task_relaunched")]
    assert relaunched == [("worker:1", address["worker:1"]), ("worker:0", address["worker:0"])]
    # Each death says what was done about it: two relaunches, then the end.
    exits = [(e["task"], e["signal"], e["action"]) for e in events.of("task_exited")][:3]
    assert exits == [
        ("worker:1", "SIGKILL", "relaunch"),
        ("worker:0", "SIGKILL", "relaunch"),
        ("worker:1", "SIGKILL", "fail job"),
    ]
    names = events.names()
    assert names.index("task_exited") < names.index("task_relaunched")
    # What the user reads, worded as docs/failures.md says.
    warnings = [line for line in said.lines if "relaunching it" in line]
    assert [w.splitlines()[0] for w in warnings] == [
        f"task worker:1 on 127.0.0.1 killed by SIGKILL; relaunching it at {address['worker:1']} "
        "(relaunch 1 of 2); its last output:",
        f"task worker:0 on 127.0.0.1 killed by SIGKILL; relaunching it at {address['worker:0']} "
        "(relaunch 2 of 2); its last output:",
    ]
    assert f"task worker:1 is back at {address['worker:1']}" in said.lines
    # The third death ends the job, saying why it was not relaunched.
    assert failed is not None
    assert str(failed).splitlines()[0] == (
        "task worker:1 on 127.0.0.1 killed by SIGKILL; not relaunched: the job has made the 2 "
        "relaunches max_restarts=2 allows; its last output:"
    )
    assert job_procs.wait_gone(10) == []


@pytest.mark.e2e
def test_a_dead_ps_ends_the_job_since_its_variables_died_with_it(
    said: Said, tmp_path: Path
) -> None:
    events = EventRecorder()
    _, failed = run_killing(lambda spec: StandInBackend(spec, tmp_path), 3, ["ps:0"], events)
    assert failed is not None and failed.failure.task == "ps:0"
    assert str(failed).splitlines()[0] == (
        "task ps:0 on 127.0.0.1 killed by SIGKILL; not relaunched: a ps holds the model's "
        "variables, which died with it, and ClusterCoordinator cannot recover them; its last "
        "output:"
    )
    assert events.of("task_relaunched") == []


@pytest.mark.e2e
def test_without_max_restarts_a_dead_worker_ends_the_job_as_before(
    said: Said, tmp_path: Path
) -> None:
    _, failed = run_killing(
        lambda spec: StandInBackend(spec, tmp_path), 0, ["worker:1"], EventRecorder()
    )
    assert failed is not None
    assert str(failed).splitlines()[0] == (
        "task worker:1 on 127.0.0.1 killed by SIGKILL; its last output:"
    )


@pytest.mark.e2e
def test_a_port_taken_meanwhile_fails_the_job_naming_the_task_and_its_address(
    said: Said, tmp_path: Path
) -> None:
    backends: list[StandInBackend] = []

    def backend_for(spec: ClusterSpec) -> LocalBackend:
        backends.append(StandInBackend(spec, tmp_path, steal_port=True))
        return backends[-1]

    launcher, failed = run_killing(backend_for, 3, ["worker:1"], EventRecorder())
    address = launcher.cluster_def["worker"][1]
    port = address.rpartition(":")[2]
    assert failed is not None and failed.failure.task == "worker:1"
    assert str(failed) == (
        f"task worker:1 on 127.0.0.1 could not be relaunched at {address}: port {port} on "
        "127.0.0.1 is taken by another process"
    )
    assert backends[0].stranger is not None
    backends[0].stranger.close()


# -- examples/ps_strategy.py surviving a killed worker, for real -----------------


def tf_server(procs: list[psutil.Process], index: int) -> psutil.Process:
    """Worker ``index``'s TensorFlow server among ``procs``."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            environ = proc.environ()
            if "tfmesos.agent.tfserver" in proc.cmdline() and (
                environ.get("TFMESOS_JOB_NAME"),
                environ.get("TFMESOS_TASK_INDEX"),
            ) == ("worker", str(index)):
                return proc
    raise AssertionError(f"no TensorFlow server for worker:{index}")


def run_ps_strategy_killing_worker_1(
    args: list[str],
    env: dict[str, str],
    servers: Callable[[], list[psutil.Process]],
    events: JobEvents,
) -> tuple[str, str]:
    """Run the example, its events to ``events``; once it has trained an
    epoch, SIGKILL worker 1's server. Worker 0's server is paused meanwhile,
    so that no step can finish until worker 1 is back (ClusterCoordinator
    would otherwise hand every step to worker 0 and could end before the
    relaunch is up); it goes on once worker 1 is back (its ``task_ready``
    event, ``relaunched``). Returns the example's stdout and worker 1's first
    address."""
    stderr = events.path.with_name("stderr")
    with stderr.open("w") as said:  # a file: no pipe to fill while the test waits
        example = subprocess.Popen(
            [PY, "examples/ps_strategy.py", *args, *events.flag, "--epochs", "3", "--steps", "40"],
            stdout=subprocess.PIPE,
            stderr=said,
            text=True,
            env=env,
            cwd=ROOT,
        )
    assert example.stdout is not None

    def worker_1_ready(relaunched: bool) -> dict[str, Any]:
        return events.wait_for(
            "task_ready",
            example,
            where=lambda e: e["task"] == "worker:1" and e["relaunched"] is relaunched,
            timeout=300,  # a guard: the example is done long before
        )

    try:
        address: str = worker_1_ready(relaunched=False)["addr"]
        out = [example.stdout.readline()]
        if not out[0].startswith("epoch 1: loss = "):
            example.wait(timeout=60)
            raise AssertionError(f"no first epoch: {out}\n" + stderr.read_text()[-5000:])
        running = servers()
        paused, killed = tf_server(running, 0), tf_server(running, 1)
        paused.suspend()
        try:
            killed.kill()
            worker_1_ready(relaunched=True)
        finally:
            paused.resume()
        out.append(example.stdout.read())
        example.wait(timeout=300)
    finally:
        if example.poll() is None:
            example.kill()
            example.wait()
        example.stdout.close()
    stdout = "".join(out)
    assert example.returncode == 0, stdout[-3000:] + stderr.read_text()[-5000:]
    return stdout, address


def check_survived(stdout: str, events: JobEvents, address: str, host: str) -> None:
    assert re.findall(r"^epoch (\d+): loss", stdout, re.MULTILINE) == ["1", "2", "3"], stdout
    first = float(re.search(r"^first loss = (\S+)$", stdout, re.MULTILINE).group(1))  # type: ignore[union-attr]
    final = float(re.search(r"^final loss = (\S+)$", stdout, re.MULTILINE).group(1))  # type: ignore[union-attr]
    assert final < first / 2, (first, final)
    (killed, *_) = [e for e in events.of("task_exited") if e["task"] == "worker:1"]
    assert (killed["attempt"], killed["host"], killed["signal"]) == (1, host, "SIGKILL"), killed
    relaunched = [(e["task"], e["attempt"], e["address"]) for e in events.of("task_relaunched")]
    assert relaunched == [("worker:1", 2, address)], relaunched
    # Registered twice at the one address: first start, then the relaunch.
    registered = [e["addr"] for e in events.of("task_registered") if e["task"] == "worker:1"]
    assert registered == [address, address], registered
    assert events.verdict()["result"] == "succeeded", events.verdict()


def test_ps_strategy_survives_a_killed_worker_on_the_local_backend(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    events = JobEvents(tmp_path / "events.jsonl")
    stdout, address = run_ps_strategy_killing_worker_1(
        ["--max-restarts", "1"], job_procs.env(TMPDIR=str(tmp_path)), job_procs.alive, events
    )
    check_survived(stdout, events, address, "127.0.0.1")
    assert job_procs.wait_gone(10) == []


def test_ps_strategy_survives_a_killed_worker_through_mesos(
    mesos: MesosUnderTest, job_procs: JobProcesses, tmp_path: Path
) -> None:
    events = JobEvents(tmp_path / "events.jsonl")
    stdout, address = run_ps_strategy_killing_worker_1(
        ["--master", mesos.url, "--max-restarts", "1"],
        job_procs.env(TMPDIR=str(tmp_path)),
        job_procs.alive,
        events,
    )
    check_survived(stdout, events, address, "127.0.0.1")
    # The master ran worker 1 twice, on one agent, with one port.
    runs = [t for t in mesos.tasks() if t["name"].endswith("/job:worker/task:1")]
    assert len(runs) == 2, runs
    states = sorted(t["state"] for t in runs)
    # The relaunch ends with the job: finished, or killed by the TEARDOWN.
    assert states[0] == "TASK_FAILED" or states[1] == "TASK_FAILED", states
    placements = {(t["slave_id"], t["resources"]["ports"]) for t in runs}
    assert len(placements) == 1, placements
    assert job_procs.wait_gone(10) == []


# -- the Mesos backend: the same agent, the same port ---------------------------


def with_ports(offer_json: dict[str, Any], *ranges: tuple[int, int]) -> dict[str, Any]:
    for resource in offer_json["resources"]:
        if resource["name"] == "ports":
            resource["ranges"] = {"range": [{"begin": b, "end": e} for b, e in ranges]}
    return offer_json


async def placed_worker(harness: Harness) -> None:
    """Worker 0 runs on agent a1 at port 31000."""
    await harness.launch_all()
    harness.offers(offer("a1"))
    await harness.settle()
    assert harness.accepted() == [("a1", ["id-worker:0"])]
    harness.client.sent.clear()


def one_worker() -> ClusterSpec:
    return ClusterSpec((Job("worker", 1),), max_restarts=1)


async def relaunching_worker(monkeypatch: pytest.MonkeyPatch) -> Harness:
    """Worker 0 placed on agent a1 at port 31000, and its relaunch pinned there."""
    harness = Harness(one_worker(), monkeypatch)
    await placed_worker(harness)
    again = Launch("id-worker:0-again", one_worker().tasks()[0], {})
    await harness.backend.launch_at(again, "id-worker:0", 31000)
    return harness


@in_loop
async def test_a_relaunch_takes_only_its_agents_offer_that_holds_its_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    harness = await relaunching_worker(monkeypatch)
    assert harness.client.types() == ["REVIVE"]  # the role was suppressed: offers again
    # Another agent, then its own agent before the port is back: declined,
    # with a short filter (a later offer that adds the port is not filtered).
    harness.offers(offer("a2"), with_ports(offer("a1"), (31001, 31010)))
    await harness.settle()
    declines = [c for c in harness.client.sent if c["type"] == "DECLINE"]
    assert [d["decline"]["filters"]["refuse_seconds"] for d in declines] == [5.0, 5.0]
    assert harness.accepted() == []
    # Its agent, with the port among others: exactly that port, on that agent.
    harness.offers(with_ports(offer("a1"), (30990, 31005)))
    await harness.settle()
    assert harness.accepted() == [("a1", ["id-worker:0-again"])]
    accept = next(c for c in harness.client.sent if c["type"] == "ACCEPT")
    info = accept["accept"]["operations"][0]["launch"]["task_infos"][0]
    ports = [r["ranges"] for r in info["resources"] if r["name"] == "ports"]
    assert ports == [{"range": [{"begin": 31000, "end": 31000}]}]
    variables = {v["name"]: v["value"] for v in info["command"]["environment"]["variables"]}
    assert variables["TFMESOS_PORT"] == "31000"
    assert TaskPlaced("id-worker:0-again", "10.0.0.2") in harness.events
    assert harness.client.types()[-1] == "SUPPRESS"  # nothing waits any more


@in_loop
async def test_a_relaunch_whose_port_is_never_offered_ends_after_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mesos_pins, "PINNED_OFFER_WAIT", 0.05)
    harness = await relaunching_worker(monkeypatch)
    harness.offers(with_ports(offer("a1"), (31001, 31010)))
    while not any(isinstance(e, TaskEnded) for e in harness.events):
        await asyncio.sleep(0.01)
    ended = [e for e in harness.events if isinstance(e, TaskEnded)]
    assert ended == [
        TaskEnded(
            "id-worker:0-again",
            NOT_PLACED,
            None,
            "no offer from its agent (a1) held port 31000 within 0.05s",
            "10.0.0.2",
        )
    ]
    # A late offer with the port launches nothing.
    harness.offers(offer("a1"))
    await harness.settle()
    assert harness.accepted() == []


@in_loop
async def test_a_relaunch_whose_agent_is_lost_ends_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    harness = await relaunching_worker(monkeypatch)
    harness.backend._on_event({"type": "FAILURE", "failure": {"agent_id": {"value": "a1"}}})
    ended = [e for e in harness.events if isinstance(e, TaskEnded)]
    assert (
        TaskEnded(
            "id-worker:0-again",
            NOT_PLACED,
            None,
            "its agent (a1) was lost, and port 31000 with it",
            "10.0.0.2",
        )
        in ended
    )
    # Its agent's offer, should one still come, launches nothing.
    harness.offers(offer("a1"))
    await harness.settle()
    assert harness.accepted() == []


@pytest.mark.e2e
def test_a_launcher_fails_a_relaunch_not_placed_naming_the_task_and_address(
    said: Said, tmp_path: Path
) -> None:
    class NowhereBackend(StandInBackend):
        async def launch_at(self, launch: Launch, earlier: str, port: int) -> None:
            assert self._sink is not None
            self._sink(
                TaskEnded(launch.task_id, NOT_PLACED, None, f"no offer held port {port}", "h1")
            )

    launcher, failed = run_killing(
        lambda spec: NowhereBackend(spec, tmp_path), 1, ["worker:0"], EventRecorder()
    )
    address = launcher.cluster_def["worker"][0]
    assert failed is not None
    assert str(failed) == (
        f"task worker:0 on h1 could not be relaunched at {address}: no offer held port "
        f"{address.rpartition(':')[2]}"
    )
