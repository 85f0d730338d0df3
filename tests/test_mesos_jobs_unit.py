"""Detached Mesos jobs from the client's side (tfmesos.backends.mesos.jobs), no
Mesos: reading the launcher's sandbox through an agent's ``/files/read``
(the bytes exactly, a chunk that ends inside a UTF-8 character included; a
real HTTP server on 127.0.0.1 in a thread), and ``tfrun stop`` of a job
whose launcher is lost or whose framework outlives its teardown. No process."""

from __future__ import annotations

import http.server
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tfmesos.backends.jobs import JobError, Run
from tfmesos.backends.jobstate import JobState
from tfmesos.backends.mesos import jobs as mesos_jobs
from tfmesos.backends.mesos.jobs import MesosJobs
from tfmesos.cli import jobs

CONTENT = "aé€b".encode()
CHUNK = 2
"""Bytes per answer: the first ends inside "é" (0xC3 0xA9)."""


class _Files(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        offset = int(query["offset"][0])
        data = CONTENT[offset : offset + CHUNK]
        # As Mesos answers: the file's bytes inside the JSON string, as they are.
        body = b'{"data":"' + data + b'","offset":' + str(offset).encode() + b"}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def agent() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_chunk_ending_inside_a_character_is_copied_exactly(agent: str, tmp_path: Path) -> None:
    jobs = MesosJobs("127.0.0.1:5050")
    target = tmp_path / "stdout"
    try:
        copied = jobs._copy((agent, "/sandbox"), "stdout", target, 0)
    finally:
        jobs.close()
    assert copied == len(CONTENT)
    assert target.read_bytes() == CONTENT


class _LostLauncher:
    """A store whose job's launcher is gone without a verdict while its
    framework is still listed (the launcher's host lost)."""

    backend = "mesos"

    def __init__(self, where: Path) -> None:
        self.run = Run("mesos-job", "mesos", where, {"framework_id": "f-1"})
        self.stopped: list[str] = []

    def find(self, job_id: str) -> Run:
        return self.run

    def state(self, run: Run) -> JobState:
        return JobState(running=False, events=[], tasks={})

    def stop(self, run: Run) -> bool:
        self.stopped.append(run.id)
        return True


def test_stop_ends_what_a_job_with_a_lost_launcher_left(tmp_path: Path) -> None:
    import argparse

    store = _LostLauncher(tmp_path)
    assert jobs._stop(store, argparse.Namespace(id="mesos-job")) == 0  # type: ignore[arg-type]
    assert store.stopped == ["mesos-job"]


def test_stop_fails_when_the_framework_outlives_its_teardown(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    framework = {"id": "f-1", "name": "job", "user": "me", "labels": []}
    store = MesosJobs("127.0.0.1:5050")
    torn: list[str] = []

    async def teardown(master: str, info: Any, framework_id: str, **_: Any) -> None:
        torn.append(framework_id)

    monkeypatch.setattr(mesos_jobs, "teardown", teardown)
    monkeypatch.setattr(mesos_jobs, "STOP_TIMEOUT", 0.0)
    monkeypatch.setattr(store, "_frameworks", lambda fresh=False: [(framework, True)])
    run = Run("mesos-job", "mesos", tmp_path, {"framework_id": "f-1"})
    with pytest.raises(JobError) as raised:
        store.stop(run)
    assert torn == ["f-1"]
    assert raised.value.status == 125
    assert "still registered" in str(raised.value) and "\n" not in str(raised.value)


def test_a_stop_whose_teardown_another_stop_beat_succeeds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Two tfrun stop at once: the master refuses the later one's subscription
    # to a framework the first tore down. Before: 125, "cannot stop job".
    framework = {"id": "f-1", "name": "job", "user": "me", "labels": []}
    store = MesosJobs("127.0.0.1:5050")
    listed = [True]

    async def teardown(master: str, info: Any, framework_id: str, **_: Any) -> str:
        listed[0] = False  # the other stop's teardown, done meanwhile
        return "the master refused the subscription: Framework has been removed"

    monkeypatch.setattr(mesos_jobs, "teardown", teardown)
    monkeypatch.setattr(store, "_frameworks", lambda fresh=False: [(framework, listed[0])])
    run = Run("mesos-job", "mesos", tmp_path, {"framework_id": "f-1"})
    assert store.stop(run)


def test_a_stop_whose_teardown_is_refused_still_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    framework = {"id": "f-1", "name": "job", "user": "me", "labels": []}
    store = MesosJobs("127.0.0.1:5050")

    async def teardown(master: str, info: Any, framework_id: str, **_: Any) -> str:
        return "the master refused the subscription: not authorized"

    monkeypatch.setattr(mesos_jobs, "teardown", teardown)
    monkeypatch.setattr(store, "_frameworks", lambda fresh=False: [(framework, True)])
    run = Run("mesos-job", "mesos", tmp_path, {"framework_id": "f-1"})
    with pytest.raises(JobError) as raised:
        store.stop(run)
    assert raised.value.status == 125 and "not authorized" in str(raised.value)
