"""Ports for tasks, chosen so that no two tasks race for one.

A task's port comes from a range below the kernel's ephemeral range, which
``bind(0)`` and outgoing connections never take from, so a port free when
chosen stays free until the task binds it; and below 31000, where a Mesos
agent's offered ports begin. The local launcher hands ports out
(:class:`PortAllocator`); a Slurm task's agent takes and holds its own
(:func:`reserve_ports`). Standard library only: the agent imports it."""

from __future__ import annotations

import os
import socket

__all__ = [
    "MESOS_AGENT_PORTS",
    "PORT_SPAN",
    "NoFreePort",
    "PortAllocator",
    "ephemeral_range",
    "port_is_free",
    "reserve_port",
    "reserve_ports",
    "task_port_range",
]

PORT_SPAN = 8000
"""How many ports below the kernel's ephemeral range tasks' ports come from."""

MESOS_AGENT_PORTS = (31000, 32000)
"""The ``ports`` a Mesos agent offers unless told otherwise
(``src/slave/constants.hpp``, ``DEFAULT_PORTS``)."""


class NoFreePort(RuntimeError):
    """Every port in the range is taken."""


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for ``bind(0)`` and outgoing connections."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            low, high = ports.read().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default; macOS uses 49152-65535


def task_port_range() -> tuple[int, int]:
    """Where tasks' ports come from: below the ephemeral range, where no
    ``bind(0)`` and no outgoing connection ever takes one, and below the
    ports a Mesos agent on this machine would offer to other tasks (tfrun's
    chief may run on one)."""
    high = min(ephemeral_range()[0], MESOS_AGENT_PORTS[0]) - 1
    return max(1024, high - PORT_SPAN), high


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # TensorFlow's gRPC server binds with SO_REUSEADDR, so a port in
        # TIME_WAIT is free for it; test the way it will bind.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def _random_start(low: int, high: int) -> int:
    """A random port in ``low``-``high``: where a search starts, so that two
    searches at the same moment on one host rarely probe the same ports.
    ``os.urandom``, not ``random``: that module is import time the agent
    does not need."""
    return low + int.from_bytes(os.urandom(4), "big") % (high - low + 1)


def _hold(port: int) -> socket.socket | None:
    """A socket bound to ``port`` without ``SO_REUSEADDR``; None where it is taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("", port))
    except OSError:
        sock.close()
        return None
    return sock


def reserve_port() -> tuple[int, socket.socket]:
    """Choose a free port for this task and hold it (:func:`reserve_ports`)."""
    port, (sock,) = reserve_ports(1)
    return port, sock


def reserve_ports(count: int) -> tuple[int, list[socket.socket]]:
    """Choose ``count`` consecutive free ports for this task and hold them:
    sockets bound to them without ``SO_REUSEADDR``, so that no other task's
    agent on this host can take one (their check binds with it, and fails)
    until this one lets them go, right before its commands start and bind
    them. Tried from a random place in :func:`task_port_range`; the first
    port is returned."""
    low, high = task_port_range()
    span = high - low + 1 - (count - 1)
    if span < 1:
        raise NoFreePort(f"no {count} consecutive ports in {low}-{high} on this host")
    start = _random_start(low, low + span - 1)
    for step in range(span):
        port = low + (start - low + step) % span
        held: list[socket.socket] = []
        for each in range(port, port + count):
            sock = _hold(each) if port_is_free(each) else None
            if sock is None:
                break
            held.append(sock)
        if len(held) == count:
            return port, held
        for sock in held:
            sock.close()
    what = "free port" if count == 1 else f"{count} consecutive free ports"
    raise NoFreePort(f"no {what} in {low}-{high} on this host")


class PortAllocator:
    """The local backend's ports: handed out by the launcher, one per task
    (or a block of consecutive ones, ``--nproc-per-task``), never twice
    while a task holds one."""

    def __init__(self, low: int | None = None, high: int | None = None) -> None:
        if low is None or high is None:
            low, high = task_port_range()
        if not 0 < low <= high < 65536:
            raise ValueError(f"bad port range {low}-{high}")
        self.low, self.high = low, high
        self._taken: set[int] = set()
        self._blocks: dict[int, int] = {}
        """The first port of each block of more than one, to its size."""
        # Each launcher starts at a different place, so that two jobs on one
        # machine rarely probe the same ports at the same moment.
        self._next = _random_start(low, high)

    def allocate(self, count: int = 1) -> int:
        """A free port, or the first of ``count`` consecutive ones."""
        span = self.high - self.low + 1
        for _ in range(span):
            port = self._next
            self._next = self.low + (port + 1 - self.low) % span
            if port + count - 1 <= self.high and self.claim(port, count):
                return port
        what = "free port" if count == 1 else f"{count} consecutive free ports"
        raise NoFreePort(f"no {what} in {self.low}-{self.high}")

    def claim(self, port: int, count: int = 1) -> bool:
        """Take ``port`` itself, and the ``count - 1`` after it (a task
        relaunched at its address), if no task of this allocator holds any
        and nothing else has bound one."""
        block = range(port, port + count)
        if any(p in self._taken or not port_is_free(p) for p in block):
            return False
        self._taken.update(block)
        if count > 1:
            self._blocks[port] = count
        return True

    def release(self, port: int) -> None:
        """Give back ``port``, and the block it begins."""
        for each in range(port, port + self._blocks.pop(port, 1)):
            self._taken.discard(each)
