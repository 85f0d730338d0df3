"""The agent's end of the rendezvous (tfmesos.rendezvous.client): how it
names the launcher's host to the resolver. In-process sockets, no process."""

from __future__ import annotations

import socket

import pytest

from tfmesos.rendezvous.client import _dialled

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "::1", "localhost", "node-7.Cluster.example", "node-7.cluster.example."]
)
def test_an_ascii_host_is_dialled_as_the_bytes_idna_would_make_of_it(host: str) -> None:
    # Bytes go to getaddrinfo as they are; a str would first go through the
    # idna codec (and its import), which leaves an ASCII name unchanged.
    assert _dialled(host) == host.encode("idna") == host.encode("ascii")


def test_a_host_that_is_not_ascii_is_left_to_the_idna_codec() -> None:
    assert _dialled("b\u00fccher.example") == "b\u00fccher.example"


def test_the_launcher_is_reached_through_a_dialled_host() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        address = (_dialled("127.0.0.1"), port)
        with socket.create_connection(address, timeout=5):  # type: ignore[arg-type]
            accepted, _ = listener.accept()
            accepted.close()
