"""The agent against a launcher written here from the wire protocol, frame by
frame, so that the test decides exactly what arrives in which read."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from tests.conftest import ROOT, JobProcesses
from tfmesos.rendezvous import protocol


def _receive(sock: socket.socket, decoder: protocol.FrameDecoder) -> list[tuple[bytes, bytes]]:
    while True:
        data = sock.recv(1 << 16)
        assert data, "the agent closed the connection"
        frames = decoder.feed(data)
        if frames:
            return frames


class FakeLauncher:
    """The launcher's side of the rendezvous, by hand, for one agent."""

    def __init__(
        self, job_procs: JobProcesses, command: str, stdout: Any = subprocess.PIPE
    ) -> None:
        self.secret = os.urandom(32)
        self.listener = socket.create_server(("127.0.0.1", 0))
        with socket.socket() as probe:  # a free port for the task's address
            probe.bind(("127.0.0.1", 0))
            self.task_port = probe.getsockname()[1]
        env = job_procs.env(
            **{
                protocol.ENV_LAUNCHER: f"127.0.0.1:{self.listener.getsockname()[1]}",
                protocol.ENV_TASK_ID: "worker.0.1.test",
                protocol.ENV_SECRET: self.secret.hex(),
                protocol.ENV_HOST: "127.0.0.1",
                protocol.ENV_PORT: str(self.task_port),
            }
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tfmesos.agent"],
            env=env,
            cwd=ROOT,
            stdout=stdout,
            stderr=subprocess.STDOUT,
        )
        self.decoder = protocol.FrameDecoder(protocol.MAX_FRAME)
        try:
            self.listener.settimeout(30)  # a hang guard, should the agent never dial
            self.conn, _ = self.listener.accept()
            self.conn.settimeout(30)
            self.nonce = os.urandom(16).hex()
            self.conn.sendall(
                protocol.encode_json(
                    {"type": "hello", "version": protocol.PROTOCOL_VERSION, "nonce": self.nonce}
                )
            )
            kind, payload = _receive(self.conn, self.decoder)[0]
            self.register: dict[str, Any] = protocol.parse_json(payload)
            assert kind == protocol.JSON and self.register["type"] == "register"
        except BaseException:
            self.close()  # no test holds this launcher to close it
            raise
        self.cluster: dict[str, Any] = {
            "type": "cluster",
            "job_name": "worker",
            "task_index": 0,
            "cluster_def": {"worker": [f"127.0.0.1:{self.task_port}"]},
            "cmd": command,
            "cwd": None,
            "env": {},
            "extra_config": {},
        }

    def sealed(self, message: dict[str, Any]) -> dict[str, Any]:
        nonces = (self.register["nonce"], self.nonce)
        proof = protocol.proof(self.secret, "cluster", *nonces, protocol.digest(message))
        return {**message, "proof": proof}

    def messages_until_closed(self) -> list[dict[str, Any]]:
        messages = []
        self.conn.settimeout(10)
        while data := self.conn.recv(1 << 16):
            messages += [
                protocol.parse_json(p) for k, p in self.decoder.feed(data) if k == protocol.JSON
            ]
        return messages

    def close(self) -> None:
        if hasattr(self, "conn"):  # not when __init__ failed before the agent dialled
            self.conn.close()
        self.listener.close()
        with self.proc:  # closes its stdout and reaps it
            if self.proc.poll() is None:
                self.proc.kill()


def test_a_stop_in_the_same_read_as_the_cluster_is_not_lost(job_procs: JobProcesses) -> None:
    launcher = FakeLauncher(job_procs, "sleep 60")
    try:
        # Both in one write: the agent reads them together.
        launcher.conn.sendall(
            protocol.encode_json(launcher.sealed(launcher.cluster))
            + protocol.encode_json({"type": "stop", "reason": "test"})
        )
        code = launcher.proc.wait(timeout=30)  # a hang guard: SIGTERM ends it at once
        exits = [m for m in launcher.messages_until_closed() if m["type"] == "exit"]
    finally:
        launcher.close()
    # `sleep 60` was stopped with SIGTERM at once, not left to run its course.
    # The report says the command was killed by SIGTERM, not "status 143".
    assert exits == [{"type": "exit", "code": 143, "output_bytes": 0, "signal": 15}]
    assert code == 143
    assert job_procs.wait_gone(5) == []


def test_a_cluster_message_changed_on_the_way_runs_nothing(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    launcher = FakeLauncher(job_procs, "true")
    try:
        sealed = launcher.sealed(launcher.cluster)
        tampered = {**sealed, "cmd": f"touch {marker}"}  # the proof is the original's
        launcher.conn.sendall(protocol.encode_json(tampered))
        code = launcher.proc.wait(timeout=30)
        assert launcher.proc.stdout is not None
        said = launcher.proc.stdout.read().decode()
    finally:
        launcher.close()
    assert code == 1
    assert "the cluster message failed its proof" in said
    assert not marker.exists()
    assert job_procs.wait_gone(5) == []


def test_an_agent_that_chooses_its_port_holds_it_until_it_lets_go() -> None:
    """Slurm hands out no ports (TFMESOS_PORT=0): the agent takes one below
    the ephemeral range and holds it, so that another agent on the host, which
    checks as TensorFlow binds (SO_REUSEADDR), finds it taken."""
    from tfmesos.common.ports import port_is_free, reserve_port, task_port_range

    port, held = reserve_port()
    try:
        low, high = task_port_range()
        assert low <= port <= high
        assert not port_is_free(port)
    finally:
        held.close()
    assert port_is_free(port)


def test_an_agent_whose_launcher_does_not_read_still_obeys_its_stop(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    """Issue 38: an agent whose output tfrun cannot take (a cut, a launcher
    that does not read) holds up to UNSENT_MAX, then lets its command wait;
    it never blocks itself, so it still reads a stop, and stops the command
    at once. Before, it blocked in its send and never saw the stop."""
    log = tmp_path / "agent.log"
    with log.open("wb") as stdout:  # the agent's log: its stdout
        launcher = FakeLauncher(job_procs, "yes 'a line of output'", stdout)
    try:
        launcher.conn.sendall(protocol.encode_json(launcher.sealed(launcher.cluster)))
        # The launcher reads nothing: the log grows until the agent lets
        # the command wait, past what it holds and the sockets do.
        deadline = time.monotonic() + 60
        size = -1
        while size != (size := log.stat().st_size if log.exists() else 0) or size == 0:
            assert time.monotonic() < deadline, "the log never stopped growing"
            time.sleep(0.5)
        assert size > protocol.UNSENT_MAX, size
        yes = [p for p in job_procs.alive() if p.name() == "yes"]
        assert len(yes) == 1, yes
        launcher.conn.sendall(protocol.encode_json({"type": "stop", "reason": "test"}))
        gone, _ = psutil.wait_procs(yes, timeout=protocol.STOP_GRACE + 10)
        assert gone == yes, "the command was not stopped while its output waited"
        exits = [m for m in launcher.messages_until_closed() if m["type"] == "exit"]
    finally:
        launcher.close()
    assert [(m["code"], m["signal"]) for m in exits] == [(143, 15)], exits
