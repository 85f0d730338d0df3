"""Launches paced per agent: no agent is asked to start more than
``LAUNCHES_PER_AGENT`` of the job's tasks at once.

An agent starts each task's executor (on real Mesos a ``mesos-executor`` and
a ``mesos-containerizer`` per task) as the master hands it over. Handed 200
at once, a busy agent fell behind its pings and the master removed it
(``TASK_UNREACHABLE``), and the job relaunched everything: a storm. So once
a job's gang is placed, each agent's ``ACCEPT`` launches at most its free
slots (``LAUNCHES_PER_AGENT`` less the job's tasks there not yet
``TASK_STARTING`` or ``TASK_RUNNING``); the rest wait for that agent.

What an ``ACCEPT`` does not use goes back to the allocator, so the agent's
rest is declined with no filter and comes straight back in a new offer, which
is held here (so that no other framework takes it meanwhile) until a slot
frees: each task that reaches ``TASK_STARTING``, ``TASK_RUNNING`` or an end
frees one, and once half the slots are free (or as many as tasks wait) the
next are launched on the held offer. Should the agent's
offer no longer hold the next task (another framework took its room), or no
offer of it come within ``PACED_WAIT`` while its tasks wait, they go back to
wait for any offer, as a gang of their own; so do those of an agent lost.

:class:`LaunchPacer` sends nothing: it returns its decisions, as the offer
hold does (:mod:`.hold`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tfmesos.backends.base import Launch
from tfmesos.backends.mesos.hold import DECLINE_SECONDS, Accept, Decision, Decline, Placed
from tfmesos.mesos.placement import OfferCapacity, place

__all__ = ["LAUNCHES_PER_AGENT", "PACED_WAIT", "LaunchPacer"]

LAUNCHES_PER_AGENT = 16
"""The job's tasks an agent starts at once. An executor's start is a few
processes and a registration: 16 keep an agent's cores busy without starving
its own work (its pings); a job of up to 16 tasks an agent is not paced at all."""
PACED_WAIT = 30.0
"""How long tasks waiting for their agent wait without a launch there before
they wait for any offer instead."""


@dataclass
class _Waiting:
    """One agent's tasks not yet launched, and its offer held for them."""

    launches: list[Launch]
    since: float
    """When the last of its tasks was launched (or the first began to wait)."""
    offers: list[dict[str, Any]] = field(default_factory=list)


class LaunchPacer:
    """The tasks waiting for a slot on their agent. ``in_flight``: the job's
    tasks on each agent launched but not yet started (nor ended), by agent ID."""

    def __init__(
        self,
        in_flight: Callable[[], Mapping[str, int]],
        clock: Callable[[], float] = time.monotonic,
        limit: int = LAUNCHES_PER_AGENT,
    ) -> None:
        self._in_flight = in_flight
        self._clock = clock
        self.limit = limit
        self.waiting: dict[str, _Waiting] = {}
        """By agent ID: its tasks waiting for a slot (never an empty list)."""

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def admit(self, offer: dict[str, Any], placed: Placed) -> tuple[Placed, float]:
        """Of the tasks ``placed`` on ``offer``, those to launch now, and the
        refuse filter for the rest of the offer: none while some of the agent's
        tasks wait (its room is to come straight back)."""
        agent = _agent(offer)
        free = self._free(agent)
        now, later = placed[:free], placed[free:]
        if later:
            entry = self.waiting.setdefault(agent, _Waiting([], self._clock()))
            entry.launches += [launch for launch, _, _ in later]
        return now, 0.0 if agent in self.waiting else DECLINE_SECONDS

    def offered(self, offer: dict[str, Any]) -> tuple[list[Decision], list[Launch]] | None:
        """A new offer: None if no task waits for its agent; else held for them
        and launched on as slots allow (decisions), or, where it no longer
        holds the next of them, their launches back to wait for any offer."""
        entry = self.waiting.get(_agent(offer))
        if entry is None:
            return None
        entry.offers.append(offer)
        return self._launch(_agent(offer))

    def progressed(self, agent: str) -> tuple[list[Decision], list[Launch]]:
        """A task on ``agent`` started or ended: a slot may be free there."""
        if agent not in self.waiting:
            return [], []
        return self._launch(agent)

    def overdue(self) -> tuple[list[Decision], list[Launch]]:
        """The tasks of agents with no launch for PACED_WAIT, to wait for any
        offer; their held offers declined."""
        now = self._clock()
        late = [a for a, entry in self.waiting.items() if now - entry.since >= PACED_WAIT]
        return self._release(late)

    def agent_lost(self, agent: str) -> list[Launch]:
        """The tasks that waited for a lost agent (its offers are gone with it)."""
        entry = self.waiting.pop(agent, None)
        return entry.launches if entry is not None else []

    def forget(self, task_id: str) -> list[Decision]:
        """A task killed: it waits no more (nor does an offer held for it alone)."""
        emptied = []
        for agent, entry in self.waiting.items():
            entry.launches = [launch for launch in entry.launches if launch.task_id != task_id]
            if not entry.launches:
                emptied.append(agent)
        decisions, _ = self._release(emptied)
        return decisions

    def rescinded(self, offer_id: str) -> None:
        for entry in self.waiting.values():
            entry.offers = [o for o in entry.offers if o["id"]["value"] != offer_id]

    def resubscribed(self) -> None:
        """Offers do not outlive a subscription: those held are gone."""
        for entry in self.waiting.values():
            entry.offers.clear()

    def clear(self) -> list[Decision]:
        """Nothing waits any more: the offers held go back."""
        decisions, _ = self._release(list(self.waiting))
        return decisions

    def _free(self, agent: str) -> int:
        return max(0, self.limit - self._in_flight().get(agent, 0))

    def _launch(self, agent: str) -> tuple[list[Decision], list[Launch]]:
        entry = self.waiting[agent]
        free = self._free(agent)
        # Launched in waves of half the slots at least (or all that wait):
        # an offer is used once, and one task per status update would take
        # an allocation round each.
        if free < min(len(entry.launches), max(1, self.limit // 2)) or not entry.offers:
            return [], []
        offer = entry.offers.pop(0)
        tasks = [launch.task for launch in entry.launches[:free]]
        took = place(tasks, OfferCapacity.of(offer))
        if not took or took[0][0] != 0:
            # Its room was taken meanwhile: they wait for any offer instead.
            entry.offers.insert(0, offer)
            return self._release([agent])
        placed: Placed = [(entry.launches[i], resources, port) for i, resources, port in took]
        launched = {i for i, _, _ in took}
        entry.launches = [x for i, x in enumerate(entry.launches) if i not in launched]
        entry.since = self._clock()
        if not entry.launches:
            del self.waiting[agent]
            decisions: list[Decision] = [Accept(offer, placed, DECLINE_SECONDS)]
            return decisions + [Decline(o["id"], DECLINE_SECONDS) for o in entry.offers], []
        return [Accept(offer, placed, 0.0)], []

    def _release(self, agents: list[str]) -> tuple[list[Decision], list[Launch]]:
        decisions: list[Decision] = []
        launches: list[Launch] = []
        for agent in agents:
            entry = self.waiting.pop(agent)
            decisions += [Decline(offer["id"], 0.0) for offer in entry.offers]
            launches += entry.launches
        return decisions, launches


def _agent(offer: dict[str, Any]) -> str:
    return str(offer["agent_id"]["value"])
