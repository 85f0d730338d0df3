"""The agent against a launcher written here from the wire protocol, frame by
frame, so that the test decides exactly what arrives in which read."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import Any

from tests.conftest import ROOT, JobProcesses
from tfmesos import agent, wire


def _receive(sock: socket.socket, decoder: wire.FrameDecoder) -> list[tuple[bytes, bytes]]:
    while True:
        data = sock.recv(1 << 16)
        assert data, "the agent closed the connection"
        frames = decoder.feed(data)
        if frames:
            return frames


def test_a_stop_in_the_same_read_as_the_cluster_is_not_lost(job_procs: JobProcesses) -> None:
    secret = os.urandom(32)
    listener = socket.create_server(("127.0.0.1", 0))
    with socket.socket() as probe:  # a free port for the task's address
        probe.bind(("127.0.0.1", 0))
        task_port = probe.getsockname()[1]
    env = job_procs.env(
        **{
            agent.ENV_LAUNCHER: f"127.0.0.1:{listener.getsockname()[1]}",
            agent.ENV_TASK_ID: "worker.0.1.test",
            agent.ENV_SECRET: secret.hex(),
            agent.ENV_HOST: "127.0.0.1",
            agent.ENV_PORT: str(task_port),
        }
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfmesos.agent"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        conn, _ = listener.accept()
        conn.settimeout(30)
        nonce = os.urandom(16).hex()
        conn.sendall(wire.encode_json({"type": "hello", "version": 1, "nonce": nonce}))
        decoder = wire.FrameDecoder(wire.MAX_FRAME)
        kind, payload = _receive(conn, decoder)[0]
        register: dict[str, Any] = wire.parse_json(payload)
        assert kind == wire.JSON and register["type"] == "register"
        cluster = {
            "type": "cluster",
            "proof": wire.proof(secret, "cluster", register["nonce"], nonce),
            "job_name": "worker",
            "task_index": 0,
            "cluster_def": {"worker": [f"127.0.0.1:{task_port}"]},
            "cmd": "sleep 60",
            "cwd": None,
            "env": {},
            "extra_config": {},
        }
        started = time.monotonic()
        # Both in one write: the agent reads them together.
        conn.sendall(
            wire.encode_json(cluster) + wire.encode_json({"type": "stop", "reason": "test"})
        )
        code = proc.wait(timeout=30)
        elapsed = time.monotonic() - started
        exits = []
        conn.settimeout(5)
        while True:
            data = conn.recv(1 << 16)
            if not data:
                break
            exits += [
                wire.parse_json(p)
                for k, p in decoder.feed(data)
                if k == wire.JSON and wire.parse_json(p)["type"] == "exit"
            ]
        conn.close()
    finally:
        listener.close()
        if proc.poll() is None:
            proc.kill()
    # `sleep 60` was stopped with SIGTERM at once, not left to run its course.
    assert exits == [{"type": "exit", "code": 143}]
    assert code == 143
    assert elapsed < agent.STOP_GRACE
    assert job_procs.wait_gone(5) == []
