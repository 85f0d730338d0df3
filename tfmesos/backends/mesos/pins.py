"""Pinned relaunches: a task that must run on one agent at one port (fine-grained
mode relaunches a dead worker at its address, ``Backend.launch_at``).

:class:`Pins` keeps the tasks waiting for an offer from their agent that holds
their port, and says which of them an offer places. Pure: the backend sends
the calls and runs the timers (:data:`PINNED_OFFER_WAIT`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from tfmesos.backends.base import Launch
from tfmesos.mesos.placement import OfferCapacity

__all__ = ["PINNED_OFFER_WAIT", "Pin", "Pins"]

PINNED_OFFER_WAIT = 60.0
"""How long a task relaunched at its address (``launch_at``: fine-grained mode
keeps a dead worker's address) waits for an offer from its agent that holds
its port. The master offers a task's resources again once the task is over
(``Master::updateTask`` recovers them when it turns terminal,
``src/master/master.cpp``); another framework may take the port first, or the
agent may be gone."""


@dataclass
class Pin:
    """A task that must run on one agent at one port: a relaunch at its address."""

    launch: Launch
    agent_id: str
    host: str
    port: int
    expiry: asyncio.TimerHandle | None = None


class Pins:
    def __init__(self) -> None:
        self.waiting: dict[str, Pin] = {}
        """Tasks waiting for an offer from their agent that holds their port."""
        self.launched: dict[str, Pin] = {}
        """Pinned tasks launched: pinned again should their ACCEPT fail."""

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def add(self, pin: Pin) -> None:
        self.waiting[pin.launch.task_id] = pin

    def remove(self, task_id: str) -> Pin | None:
        """``task_id`` waits no more (placed, killed, given up); its timer stops."""
        pin = self.waiting.pop(task_id, None)
        if pin is not None and pin.expiry is not None:
            pin.expiry.cancel()
        return pin

    def clear(self) -> None:
        for task_id in list(self.waiting):
            self.remove(task_id)

    def place(
        self, offer: dict[str, Any], capacity: OfferCapacity
    ) -> list[tuple[Launch, list[dict[str, Any]], int]]:
        """The pinned tasks this offer holds the agent and port of, each with
        what it takes of the offer; they wait no more."""
        agent_id = offer["agent_id"]["value"]
        placed = []
        for pin in list(self.waiting.values()):
            if pin.agent_id != agent_id or not capacity.holds_port(pin.port, pin.launch.task.ports):
                continue
            if not capacity.fits(pin.launch.task):
                continue
            resources, _ = capacity.take(pin.launch.task, pin.port)
            self.remove(pin.launch.task_id)
            self.launched[pin.launch.task_id] = pin
            placed.append((pin.launch, resources, pin.port))
        return placed

    def not_launched(self, task_id: str) -> Pin | None:
        """The pin of a task whose ACCEPT failed, if it was pinned: it waits again."""
        return self.launched.pop(task_id, None)

    def on_agent(self, agent_id: str) -> list[Pin]:
        return [pin for pin in self.waiting.values() if pin.agent_id == agent_id]
