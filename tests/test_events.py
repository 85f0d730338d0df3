"""The job's event stream (tfmesos.launcher.events): every kind of event,
through the fake backend (no process), then tfrun --events and
cluster(events=...) for real at the bottom."""

from __future__ import annotations

import asyncio
import fcntl
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.conftest import guide_section
from tests.jobevents import JobEvents
from tfmesos import ClusterSpec, Job
from tfmesos.backends.base import BackendAttached, Launch
from tfmesos.errors import ResourceError
from tfmesos.launcher import Launcher
from tfmesos.launcher.events import (
    EVENTS,
    SCHEMA_VERSION,
    EventRecorder,
    EventWriter,
    open_events,
)
from tfmesos.launcher.run import run_with_restarts
from tfmesos.testing.fake import DiesEarly, FakeBackend, Hangs, Plan, Runs

OK = "true"


def spec(**kw: Any) -> ClusterSpec:
    return ClusterSpec((Job("ps", 1, cmd=OK), Job("worker", 2, cmd=OK)), replica=True, **kw)


def run(job: ClusterSpec, runs: list[dict[str, Plan | list[Plan]]]) -> tuple[int, EventRecorder]:
    """Run ``job`` as tfrun does, each run on a fake backend with its plans."""
    events = EventRecorder()

    def make(restart: int) -> Launcher:
        plans = runs[restart] if restart < len(runs) else {}
        return FakeBackend(job, plans).launcher(restart=restart, events=events)

    return asyncio.run(run_with_restarts(job, make, 0.0, events=events)), events


def check_common(events: EventRecorder) -> None:
    for record in events.records:
        assert record["v"] == SCHEMA_VERSION and isinstance(record["ts"], float)
        assert record["event"] in EVENTS
    assert events.names()[-1] == "job_verdict" and events.names().count("job_verdict") == 1


pytestmark_unit = pytest.mark.unit
"""The unit lane's mark: the tests at the bottom start processes."""


@pytestmark_unit
def test_a_job_that_succeeds_says_each_step_and_its_verdict() -> None:
    status, events = run(spec(), [{}])
    check_common(events)
    assert status == 0
    names = events.names()
    for name in ("task_launched", "task_placed", "task_registered", "task_exited"):
        assert {r["task"] for r in events.of(name)} >= {"worker:0", "worker:1"}, name
    assert names.index("cluster_up") > max(i for i, n in enumerate(names) if n == "task_registered")
    assert names.index("job_stopping") < names.index("job_stopped") < names.index("job_verdict")
    [placed] = [r for r in events.of("task_placed") if r["task"] == "ps:0"]
    assert placed["backend"] == "fake" and placed["attempt"] == 1 and placed["host"]
    [up] = events.of("cluster_up")
    assert sorted(up["cluster"]) == ["ps", "worker"] and len(up["cluster"]["worker"]) == 2
    exits = {r["task"]: r for r in events.of("task_exited")}
    assert exits["worker:0"]["exit_code"] == 0 and exits["worker:0"]["action"] == "finish"
    [stopped] = events.of("job_stopped")
    assert stopped["outcomes"] == {
        "ps:0": "stopped by tfrun",
        "worker:0": "exited 0",
        "worker:1": "exited 0",
    }
    verdict = events.records[-1]
    assert verdict["exit_status"] == 0 and verdict["result"] == "succeeded"
    assert verdict["message"].startswith("job succeeded in ")


@pytestmark_unit
def test_a_failed_task_says_its_status_and_the_verdict_has_tfruns_status() -> None:
    status, events = run(spec(), [{"worker:1": Runs(3)}])
    check_common(events)
    assert status == 3
    [failed] = [r for r in events.of("task_exited") if r["task"] == "worker:1"]
    assert failed["exit_code"] == 3 and failed["action"] == "fail job" and failed["signal"] is None
    verdict = events.records[-1]
    assert verdict["exit_status"] == 3 and verdict["result"] == "failed"
    assert "worker:1" in verdict["message"]


@pytestmark_unit
def test_a_task_killed_by_a_signal_names_the_signal() -> None:
    # The ps runs until the job's end stops it: its agent's command is
    # killed by SIGTERM (the fake plays it so).
    status, events = run(spec(), [{}])
    [stopped] = [r for r in events.of("task_exited") if r["task"] == "ps:0"]
    assert stopped["signal"] == "SIGTERM" and stopped["exit_code"] == 128 + signal.SIGTERM
    assert stopped["action"] == "stop" and status == 0


@pytestmark_unit
def test_a_task_that_dies_before_the_cluster_is_up_is_relaunched_then_given_up() -> None:
    status, events = run(spec(), [{"worker:1": [DiesEarly(), DiesEarly(), DiesEarly()]}])
    check_common(events)
    assert status == 124
    relaunched = [r for r in events.of("task_relaunched") if r["task"] == "worker:1"]
    assert [r["attempt"] for r in relaunched] == [2, 3]
    assert relaunched[0]["address"] is None and relaunched[0]["reason"]
    actions = [r["action"] for r in events.of("task_exited") if r["task"] == "worker:1"]
    assert actions == ["relaunch", "relaunch", "give up"]
    assert "cluster_up" not in events.names()
    assert events.records[-1]["result"] == "never up"


@pytestmark_unit
def test_a_restart_is_said_with_its_cause() -> None:
    status, events = run(spec(max_restarts=1), [{"worker:1": Runs(5)}, {}])
    check_common(events)
    assert status == 0
    [restart] = events.of("job_restart")
    assert restart["restart"] == 1 and restart["max_restarts"] == 1
    assert "worker:1" in restart["cause"]
    assert [r["restart"] for r in events.of("cluster_up")] == [0, 1]


@pytestmark_unit
def test_each_run_starts_by_naming_its_log_directory_and_its_backends(tmp_path: Path) -> None:
    job = spec(max_restarts=1)
    events = EventRecorder()
    runs: list[dict[str, Plan | list[Plan]]] = [{"worker:1": Runs(5)}, {}]

    def make(restart: int) -> Launcher:
        backend = FakeBackend(job, runs[restart], log_dir=str(tmp_path))
        return backend.launcher(restart=restart, events=events)

    assert asyncio.run(run_with_restarts(job, make, 0.0, events=events)) == 0
    check_common(events)
    started = events.of("job_started")
    assert [r["restart"] for r in started] == [0, 1]
    assert {r["log_dir"] for r in started} == {str(tmp_path)}  # one directory for every run
    assert started[0]["backends"] == {"fake": ["ps:0", "worker:0", "worker:1"]}
    # Each run's first event, before any of its tasks is launched.
    names = events.names()
    second = names.index("job_started", 1)
    assert names[0] == "job_started" and names[1] == "task_launched"
    assert names.index("job_stopped") < second and names[second + 1] == "task_launched"


class ChiefHere(FakeBackend):
    """The chief's backend, beside the launcher, under the local backend's
    name, as tfrun runs it beside a cluster's tasks."""

    name = "local"


@pytestmark_unit
def test_a_job_beside_its_chief_names_both_backends_and_one_log_directory() -> None:
    job = spec()
    events = EventRecorder()
    cluster = FakeBackend(job, log_dir="/runs/1")
    chief = ChiefHere(job, network=cluster.network)
    launcher = cluster.launcher(chief_backend=chief, events=events)
    assert asyncio.run(run_with_restarts(job, lambda restart: launcher, 0.0, events=events)) == 0
    [started] = events.of("job_started")
    assert started["backends"] == {"fake": ["ps:0", "worker:1"], "local": ["worker:0"]}
    assert started["log_dir"] == "/runs/1"
    [launched] = [r for r in events.of("task_launched") if r["task"] == "worker:0"]
    assert launched["backend"] == "local"


@pytestmark_unit
def test_a_backend_that_keeps_no_logs_here_starts_with_a_null_log_directory() -> None:
    status, events = run(spec(), [{}])
    [started] = events.of("job_started")
    assert status == 0 and started["log_dir"] is None


@pytestmark_unit
def test_a_cluster_backend_says_what_the_cluster_knows_the_job_by() -> None:
    job = spec()
    events = EventRecorder()
    backend = FakeBackend(job, attached={"job_id": "42", "tasks": ["ps:0", "worker:1"]})
    launcher = backend.launcher(events=events)
    assert asyncio.run(run_with_restarts(job, lambda restart: launcher, 0.0, events=events)) == 0
    check_common(events)
    [attached] = events.of("backend_attached")
    assert {k: v for k, v in attached.items() if k != "ts"} == {
        "v": 1,
        "event": "backend_attached",
        "backend": "fake",
        "restart": 0,
        "job_id": "42",
        "tasks": ["ps:0", "worker:1"],
    }
    names = events.names()
    assert names.index("job_started") < names.index("backend_attached") < names.index("cluster_up")


class RefusedOnceSubmitted(FakeBackend):
    """Has its job taken by the cluster, then finds it can never run (as
    Slurm's backend cancels a job Slurm can never start), within one launch."""

    async def launch_many(self, launches: Sequence[Launch]) -> None:
        self.report(BackendAttached(self.name, {"job_id": "7", "tasks": ["worker:0"]}))
        raise ResourceError("the cluster will never run it")


@pytestmark_unit
def test_a_cluster_job_refused_within_the_launch_that_made_it_is_still_named() -> None:
    # The ID names the job the user may look up, though it was cancelled:
    # said as the backend reports it, not when the loop would next run.
    events = EventRecorder()
    launcher = RefusedOnceSubmitted(spec()).launcher(events=events)

    async def scenario() -> None:
        try:
            await launcher.start()
        finally:
            await launcher.stop()

    with pytest.raises(ResourceError):
        asyncio.run(scenario())
    [attached] = events.of("backend_attached")
    assert attached["job_id"] == "7" and attached["backend"] == "fake"


@pytestmark_unit
def test_a_mesos_subscription_is_reported_while_the_job_closes_but_not_once_closed() -> None:
    # A short job may be over before the master says whether it serves a web
    # UI: its framework is still said (the backend's close waits for it),
    # but nothing once the backend is closed, when the verdict may be out.
    from tfmesos.backends.mesos.subscriptions import Subscriptions
    from tfmesos.mesos.scheduler import SchedulerClient

    reported: list[BackendAttached] = []

    async def scenario() -> None:
        answer = asyncio.Event()

        class StandIn:
            """What Subscriptions asks of the scheduler client."""

            master = SimpleNamespace(url="http://m:5050")

            async def web_ui(self) -> str | None:
                await answer.wait()
                return "http://m:5050"

        closing = False
        said = Subscriptions(cast(SchedulerClient, StandIn()), reported.append, lambda: closing)
        first, second = said.subscribed("f-1"), said.subscribed("f-1")
        assert first is not None and second is not None
        waiting = asyncio.create_task(first)
        closing = True  # the job ended before the master answered
        answer.set()
        await waiting
        said.close()
        await second

    asyncio.run(scenario())
    assert [(r.backend, r.details) for r in reported] == [
        (
            "mesos",
            {
                "framework_id": "f-1",
                "master": "http://m:5050",
                "web_ui": "http://m:5050/#/frameworks/f-1",
            },
        )
    ]


class SignalsOnLaunch(EventRecorder):
    """Sends this process SIGTERM once the first task is launched, as a
    user's kill would come while the job starts."""

    def record(self, obj: dict[str, Any]) -> None:
        super().record(obj)
        if obj["event"] == "task_launched" and len(self.of("task_launched")) == 1:
            os.kill(os.getpid(), signal.SIGTERM)


@pytestmark_unit
def test_a_signal_ends_the_stream_with_the_interrupted_status() -> None:
    job = spec()
    events = SignalsOnLaunch()

    def make(restart: int) -> Launcher:
        plans: dict[str, Plan | list[Plan]] = {"worker:1": Hangs()}
        return FakeBackend(job, plans).launcher(restart=restart, events=events)

    status = asyncio.run(run_with_restarts(job, make, 0.0, events=events))
    check_common(events)
    assert status == 128 + signal.SIGTERM
    verdict = events.records[-1]
    assert verdict["exit_status"] == status and verdict["result"] == "interrupted"
    assert verdict["signal"] == "SIGTERM"
    assert "job_stopping" in events.names() and "cluster_up" not in events.names()


@pytestmark_unit
def test_the_first_verdict_is_the_only_one() -> None:
    events = EventRecorder()
    events.emit("job_verdict", exit_status=3)
    events.emit("job_verdict", exit_status=125)
    assert [r["exit_status"] for r in events.records] == [3]
    with pytest.raises(ValueError, match="unknown event"):
        events.emit("no_such_event")


@pytestmark_unit
def test_the_readme_has_a_row_and_an_example_line_for_each_event() -> None:
    section = guide_section("docs/running.md", "The event stream")
    rows = re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE)
    assert sorted(rows) == sorted(EVENTS)
    examples = {json.loads(line)["event"] for line in re.findall(r"^\{.*\}$", section, re.M)}
    # Each new event with a line as tfrun writes it (the older ones' lines
    # are in the table's cells).
    assert {"job_started", "backend_attached", "task_exited", "job_verdict"} <= examples


@pytestmark_unit
def test_the_writer_writes_one_flushed_line_per_event(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = open_events(path)
    writer.emit("job_stopping", restart=0)
    assert writer.drain(timeout=60)
    assert json.loads(path.read_text())["event"] == "job_stopping"  # flushed already
    writer.emit("job_verdict", exit_status=0, message="it's \u2713\nok")
    writer.close()
    lines = path.read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["job_stopping", "job_verdict"]
    stream = io.StringIO()
    to_stream = EventWriter(stream)
    to_stream.emit("job_stopped", restart=0)
    to_stream.close()
    assert json.loads(stream.getvalue())["v"] == 1
    assert not stream.closed  # not the writer's to close
    assert os.stat(path).st_mode & 0o777 == 0o600  # the job's, its user's only


# -- for real: tfrun --events, cluster(events=...) -----------------------------------


def tfrun(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tfmesos.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard
        cwd=cwd,
    )


@pytest.mark.e2e
@pytest.mark.parametrize("code", [0, 4])
def test_tfrun_events_end_with_the_status_tfrun_returns(
    tmp_path: Path, job_events: JobEvents, code: int
) -> None:
    cmd = f"{sys.executable} -c 'import sys; sys.exit({code} if {{task_index}} == 1 else 0)'"
    result = tfrun(*job_events.flag, "-w", "2", "-s", "1", "--", cmd, cwd=tmp_path)
    assert result.returncode == code, result.stderr
    assert job_events.verdict()["exit_status"] == result.returncode
    assert all(e["v"] == 1 and isinstance(e["ts"], float) for e in job_events.all())
    names = job_events.names()
    assert "cluster_up" in names and names.count("job_verdict") == 1
    assert job_events.exited()["worker:1"]["exit_code"] == code
    started = job_events.all()[0]
    assert started["event"] == "job_started" and started["restart"] == 0
    assert started["backends"] == {"local": ["ps:0", "worker:0", "worker:1"]}
    assert Path(started["log_dir"]).is_dir() and "backend_attached" not in names


@pytest.mark.e2e
def test_a_job_refused_once_the_file_is_open_writes_its_verdict_alone(
    tmp_path: Path, job_events: JobEvents
) -> None:
    # More CPUs than this machine has: the local backend refuses the job
    # before it launches anything.
    result = tfrun(
        *job_events.flag, "-w", "1", "--worker-cpus", "100000", "--", "true", cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    [verdict] = job_events.all()
    assert verdict["event"] == "job_verdict" and verdict["exit_status"] == 2
    assert verdict["result"] == "refused" and verdict["message"]


@pytest.mark.e2e
def test_a_command_line_tfrun_refuses_writes_no_events(
    tmp_path: Path, job_events: JobEvents
) -> None:
    result = tfrun(*job_events.flag, "-w", "0", "--", "true", cwd=tmp_path)
    assert result.returncode == 2 and not job_events.path.exists()


@pytest.mark.e2e
def test_cluster_events_go_to_a_path_or_a_file(job_events: JobEvents) -> None:
    import tfmesos

    with tfmesos.cluster(
        {"name": "worker", "num": 1}, backend="local", events=job_events.path
    ) as c:
        assert c.targets
    names = job_events.names()
    assert names[0] == "job_started" and "cluster_up" in names and "job_stopped" in names
    assert job_events.all()[0]["backends"] == {"local": ["worker:0"]}
    verdict = job_events.verdict()
    assert verdict["exit_status"] == 0 and verdict["result"] == "succeeded"
    stream = io.StringIO()
    with tfmesos.cluster({"name": "worker", "num": 1}, backend="local", events=stream):
        pass
    assert json.loads(stream.getvalue().splitlines()[-1])["event"] == "job_verdict"


@pytest.mark.e2e
@pytest.mark.parametrize(("code", "status"), [(0, 0), (3, 3), (None, 0), ("bye", 1)])
def test_sys_exit_in_a_cluster_block_is_the_verdicts_status(
    job_events: JobEvents, code: int | str | None, status: int
) -> None:
    import tfmesos

    # Before: exit_status 1, result "error", whatever the status asked for.
    with (
        pytest.raises(SystemExit),
        tfmesos.cluster({"name": "worker", "num": 1}, backend="local", events=job_events.path),
    ):
        sys.exit(code)
    verdict = job_events.verdict()
    assert verdict["exit_status"] == status
    assert verdict["result"] == ("succeeded" if status == 0 else "failed")


@pytestmark_unit
def test_fine_grained_servers_say_when_they_accept_connections() -> None:
    job = ClusterSpec((Job("ps", 1), Job("worker", 2)))
    events = EventRecorder()
    plans: dict[str, Plan | list[Plan]] = {
        name: Runs(None) for name in ("ps:0", "worker:0", "worker:1")
    }
    launcher = FakeBackend(job, plans).launcher(events=events)

    async def scenario() -> None:
        try:
            await launcher.start()
        finally:
            await launcher.stop()

    asyncio.run(scenario())
    ready = {e["task"]: e["relaunched"] for e in events.of("task_ready")}
    assert ready == {"ps:0": False, "worker:0": False, "worker:1": False}
    names = events.names()
    assert names.index("cluster_up") < names.index("task_ready") < names.index("job_stopped")


# -- a stream that cannot keep up never holds up the job ---------------------------


def tfrun_events_to(events: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tfmesos.cli", "--events", events, *args],
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard: before the fix, a stalled reader hung the job for good
        cwd=cwd,
    )


@pytest.mark.e2e
def test_a_reader_that_never_reads_holds_up_only_the_stream(tmp_path: Path) -> None:
    fifo = tmp_path / "events"
    os.mkfifo(fifo)
    # Opened, so that tfrun's open does not wait, and never read while tfrun
    # runs; the smallest pipe a FIFO can have, which 16 tasks' events outgrow
    # before their cluster is up.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        fcntl.fcntl(reader, fcntl.F_SETPIPE_SZ, 4096)
        cmd = "sh -c '[ {task_index} = 3 ] && exit 3; exec sleep 300'"
        result = tfrun_events_to(str(fifo), "-w", "16", "--", cmd, cwd=tmp_path)
        kept = os.read(reader, 1 << 16).decode()
    finally:
        os.close(reader)
    assert result.returncode == 3, result.stderr
    assert "worker:3" in result.stderr and "Traceback" not in result.stderr
    assert re.search(r"--events: .*reader took nothing for .* events not written", result.stderr)
    # What the pipe holds is whole lines: the stream's start, in order.
    lines = [json.loads(line) for line in kept.splitlines()]
    assert lines and lines[0]["event"] == "job_started"


@pytest.mark.e2e
def test_a_reader_that_goes_away_costs_the_stream_not_the_job(tmp_path: Path) -> None:
    fifo = tmp_path / "events"
    os.mkfifo(fifo)
    first: list[str] = []

    def read_one_line() -> None:
        with open(fifo, encoding="utf-8") as stream:
            first.append(stream.readline())  # then gone, as `head -n 1`

    reader = threading.Thread(target=read_one_line)
    reader.start()
    try:
        result = tfrun_events_to(str(fifo), "-w", "2", "--", "sleep 0.2", cwd=tmp_path)
    finally:
        reader.join()
    assert result.returncode == 0, result.stderr
    assert json.loads(first[0])["event"] == "job_started"
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr
    [warning] = [line for line in result.stderr.splitlines() if "--events" in line]
    assert "the event stream is given up, the job goes on" in warning


@pytest.mark.e2e
def test_a_full_disk_under_the_stream_costs_the_stream_not_the_job(tmp_path: Path) -> None:
    result = tfrun_events_to("/dev/full", "-w", "2", "--", "true", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    [warning] = [line for line in result.stderr.splitlines() if "--events" in line]
    assert "No space left on device" in warning and "given up" in warning


@pytestmark_unit
def test_events_past_the_bound_are_dropped_and_the_verdict_counts_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tfmesos.launcher import events as events_module

    monkeypatch.setattr(events_module, "MAX_PENDING", 3)
    taken, release = threading.Event(), threading.Event()

    class Stalled(io.StringIO):
        def write(self, text: str) -> int:
            taken.set()
            release.wait()  # a reader that takes nothing until told to
            return super().write(text)

    stream = Stalled()
    writer = EventWriter(stream)
    writer.emit("job_restart", restart=0)
    assert taken.wait(timeout=60)
    for restart in range(1, 10):
        writer.emit("job_restart", restart=restart)
    writer.emit("job_verdict", exit_status=0)
    release.set()
    writer.close()
    written = [json.loads(line) for line in stream.getvalue().splitlines()]
    # One taken by the writer, three waiting, the verdict: six dropped.
    assert [e["event"] for e in written] == ["job_restart"] * 4 + ["job_verdict"]
    assert written[-1]["events_dropped"] == 6


class SignalsOnRestart(EventRecorder):
    """Sends this process SIGTERM as a restart is decided: it lands while
    the failed run is being stopped, on the way to the next."""

    def record(self, obj: dict[str, Any]) -> None:
        super().record(obj)
        if obj["event"] == "job_restart":
            os.kill(os.getpid(), signal.SIGTERM)


@pytestmark_unit
def test_a_signal_while_a_run_is_stopped_for_a_restart_ends_the_job() -> None:
    # Before: the next run started anyway, and the signal was forgotten
    # (it ran to its end; a second signal was ignored). "Ctrl-C or SIGTERM
    # is never restarted."
    job = spec(max_restarts=2)
    events = SignalsOnRestart()

    def make(restart: int) -> Launcher:
        first: dict[str, Plan | list[Plan]] = {"worker:1": Runs(3)}
        never: dict[str, Plan | list[Plan]] = {name: Hangs() for name in ("ps:0", "worker:0")}
        return FakeBackend(job, first if restart == 0 else never).launcher(
            restart=restart, events=events
        )

    status = asyncio.run(run_with_restarts(job, make, 0.0, events=events))
    assert status == 128 + signal.SIGTERM
    assert events.names().count("job_started") == 1
    verdict = events.records[-1]
    assert verdict["result"] == "interrupted" and verdict["signal"] == "SIGTERM"


@pytest.mark.e2e
def test_a_fifo_no_reader_ever_opens_holds_up_nothing(tmp_path: Path) -> None:
    # Before: tfrun waited in open() for a reader, before anything started.
    fifo = tmp_path / "events"
    os.mkfifo(fifo)
    result = tfrun_events_to(str(fifo), "-w", "1", "--", "echo hi", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "[worker:0] hi" in result.stdout
    assert re.search(r"--events: .*reader took nothing for .* events not written", result.stderr)


@pytest.mark.e2e
def test_a_fifo_whose_reader_comes_late_gets_every_event(tmp_path: Path) -> None:
    fifo, go = tmp_path / "events", tmp_path / "go"
    os.mkfifo(fifo)
    cmd = f"sh -c 'while [ ! -e {go} ]; do sleep 0.05; done'"
    with (
        subprocess.Popen(
            [sys.executable, "-m", "tfmesos.cli", "--events", str(fifo), "-w", "1", "--", cmd],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        ) as proc,
        open(fifo, encoding="utf-8") as reader,
    ):  # the job is under way meanwhile
        go.touch()
        lines = reader.read().splitlines()
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    names = [json.loads(line)["event"] for line in lines]
    assert names[0] == "job_started" and names[-1] == "job_verdict", names
