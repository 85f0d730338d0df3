"""Ports for tasks on the local backend, handed out so that no two tasks race.

The launcher, not the task, picks each task's port, from a range below the
kernel's ephemeral range: ``bind(0)`` and outgoing connections never take a
port from there, so a port that was free when it was handed out stays free
until the task binds it (barring another program that binds fixed ports). The
range also ends below 31000, where a Mesos agent's ports begin: a chief that
runs beside tfrun on an agent's machine must not take a port the agent offers
to another task (:func:`tfmesos.agent.task_port_range`).
"""

from __future__ import annotations

import random

from tfmesos.agent import ephemeral_range, port_is_free, task_port_range

__all__ = ["PortAllocator", "ephemeral_range"]


class PortAllocator:
    def __init__(self, low: int | None = None, high: int | None = None) -> None:
        if low is None or high is None:
            low, high = task_port_range()
        if not 0 < low <= high < 65536:
            raise ValueError(f"bad port range {low}-{high}")
        self.low, self.high = low, high
        self._taken: set[int] = set()
        # Start each launcher at a different place so that two jobs on one
        # machine rarely probe the same ports at the same moment.
        self._next = random.randint(low, high)

    def allocate(self) -> int:
        span = self.high - self.low + 1
        for _ in range(span):
            port = self._next
            self._next = self.low + (port + 1 - self.low) % span
            if port not in self._taken and port_is_free(port):
                self._taken.add(port)
                return port
        raise RuntimeError(f"no free port in {self.low}-{self.high}")

    def claim(self, port: int) -> bool:
        """Take ``port`` itself (a task relaunched at its address), if no
        task of this allocator holds it and nothing else has bound it."""
        if port in self._taken or not port_is_free(port):
            return False
        self._taken.add(port)
        return True

    def release(self, port: int) -> None:
        self._taken.discard(port)
