"""Hold N silent connections to a tfrun's rendezvous: ``flood_rendezvous.py PID N``.

Waits for the process PID to listen on a TCP port (its rendezvous), opens N
connections to it that never send a byte, and opens a new one each time the
launcher closes one, until killed. What a hostile neighbour on the network
could do to a job coming up.
"""

from __future__ import annotations

import contextlib
import resource
import selectors
import socket
import sys
import time

import psutil


def rendezvous_port(pid: int) -> int:
    proc = psutil.Process(pid)
    while True:
        for conn in proc.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN:
                return int(conn.laddr.port)
        time.sleep(0.002)


def main() -> int:
    pid, count = int(sys.argv[1]), int(sys.argv[2])
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        port = rendezvous_port(pid)
    except psutil.Error:
        return 0
    selector = selectors.DefaultSelector()

    def connect() -> None:
        sock = socket.socket()
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            sock.connect(("127.0.0.1", port))
        selector.register(sock, selectors.EVENT_READ)

    for _ in range(count):
        connect()
    while True:
        for key, _ in selector.select():
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(4096)  # the hello, or the end
            except OSError:
                data = b""
            if not data:
                selector.unregister(sock)
                sock.close()
                try:
                    connect()
                except OSError:  # the launcher is gone
                    return 0


if __name__ == "__main__":
    sys.exit(main())
