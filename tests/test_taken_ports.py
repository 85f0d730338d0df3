"""A port already taken: the test master, scripts/start-mesos and the README's
blocks say so in one line, name the holder where it is known and how to
choose another, and leave nothing behind (issue 40, item 15)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, JobProcesses
from tfmesos.testing.portholder import port_holder, port_taken


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port of 127.0.0.1 that this process listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_the_holder_of_a_port_is_named(held_port: int) -> None:
    holder = port_holder(held_port)
    assert holder is not None and holder.endswith(f"(pid {os.getpid()})"), holder
    assert port_taken(held_port, "127.0.0.1") == (
        f"port {held_port} of 127.0.0.1 is taken (by {holder})"
    )


def test_a_port_no_one_listens_on_has_no_holder() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening
        assert port_holder(sock.getsockname()[1]) is None


def test_the_test_master_on_a_taken_port_says_so_in_one_line_and_leaves_nothing(
    held_port: int, tmp_path: Path, job_procs: JobProcesses
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = job_procs.env()
    env["TMPDIR"] = str(temp)
    work = tmp_path / "made" / "work"
    for extra in ([], ["--work-dir", str(work)]):
        result = subprocess.run(
            [sys.executable, "-m", "tfmesos.testing.master", "--port", str(held_port), *extra],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1, result
        lines = result.stderr.splitlines()
        assert lines == [
            f"python -m tfmesos.testing.master: port {held_port} of 127.0.0.1 is taken "
            f"(by {port_holder(held_port)}): choose another with --port PORT "
            "(--port 0: any free one, written to --address-file FILE)"
        ], result.stderr
        assert str(os.getpid()) in lines[0]
        # No empty temporary work directory, and no folder of --work-dir's.
        assert list(temp.iterdir()) == []
        assert not (tmp_path / "made").exists()
    assert [p.cmdline() for p in job_procs.wait_gone(30)] == []


def test_the_test_master_writes_its_address_for_port_0(
    tmp_path: Path, job_procs: JobProcesses
) -> None:
    address = tmp_path / "master.address"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfmesos.testing.master", "--port", "0", "--agents", "1",
         "--remove-work-dir", "--address-file", str(address)],
        env=job_procs.env(),
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        listening = proc.stdout.readline()
        # The file is written before the line is printed.
        host_port = address.read_text().strip()
        assert f"listening on http://{host_port} " in listening, (listening, host_port)
        host, _, port = host_port.partition(":")
        with socket.create_connection((host, int(port)), timeout=5):
            pass
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert not address.exists()
    assert [p.cmdline() for p in job_procs.wait_gone(30)] == []


def test_start_mesos_on_a_taken_port_says_so_before_starting_anything(
    held_port: int, job_procs: JobProcesses
) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "start-mesos"), "--port", str(held_port)],
        env=job_procs.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result
    assert result.stderr.splitlines() == [
        f"start-mesos: port {held_port} of 127.0.0.1 is taken (by {port_holder(held_port)}): "
        "choose another with --port PORT (or leave it out: a free one is chosen, "
        "written to --address-file FILE)"
    ], result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert [p.cmdline() for p in job_procs.wait_gone(30)] == []
