"""Reading a detached Mesos job's sandbox through an agent's ``/files/read``
(tfmesos.cli.mesos_jobs): the bytes come back exactly, a chunk that ends
inside a UTF-8 character included. A real HTTP server on 127.0.0.1 in a
thread, no process."""

from __future__ import annotations

import http.server
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfmesos.cli.mesos_jobs import MesosJobs

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
    copied = jobs._copy((agent, "/sandbox"), "stdout", target, 0)
    assert copied == len(CONTENT)
    assert target.read_bytes() == CONTENT
