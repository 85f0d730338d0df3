"""The offer hold: which offers the Mesos backend keeps, accepts or declines,
and when it stops or starts asking for more.

Gang placement: a job's tasks are launched together or not at all, since
two jobs that each took offers as they came could each hold half a cluster
and wait for ever. Offers that fit part of the job are held until the whole
fits; a hold that lasts ``GANG_HOLD_SECONDS`` gives them back and asks again
later, at random, so that another job can run meanwhile.

Once the held offers hold the whole job, where each task goes is the
placement's (:data:`~tfmesos.mesos.placement.PLACEMENTS`): by default the
tasks spread over every agent held, fewest of the job's tasks first; ``pack``
keeps the first fit, each offer filled before the next. The master sends a
framework the offers of one allocation in one OFFERS event (every agent with
room, at subscription and at each REVIVE), so the offers held when the job
first fits are those of every agent that had room then: spreading waits for
nothing more.

:class:`OfferHold` sends nothing and starts no timer: its methods return
their decisions (:data:`Decision`) for the backend to carry out, so it is
tested without a master or an event loop."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tfmesos.backends.base import Launch
from tfmesos.common.backoff import Backoff
from tfmesos.mesos.placement import PLACEMENTS, GangFit, OfferCapacity, Placement, spread

__all__ = [
    "DECLINE_IDLE_SECONDS",
    "DECLINE_SECONDS",
    "GANG_BACKOFF_MAX",
    "GANG_BACKOFF_SECONDS",
    "GANG_HOLD_SECONDS",
    "GPU_AGENT_GRACE",
    "Accept",
    "Decision",
    "Decline",
    "OfferHold",
    "Revive",
    "StartBackoff",
    "StartHold",
    "StopHold",
    "Suppress",
]

logger = logging.getLogger("tfmesos")

DECLINE_SECONDS = 5.0
"""Refuse filter on offers we cannot use while tasks are still pending."""
DECLINE_IDLE_SECONDS = 3600.0
"""...and once every task is placed (SUPPRESS is sent too)."""
GANG_HOLD_SECONDS = 5.0
"""How long offers that fit part of the job are held, waiting for the rest
(stretched at random by up to half again, so that two jobs holding halves of
a cluster do not give them back in step)."""
GANG_BACKOFF_SECONDS = 1.0
GANG_BACKOFF_MAX = 30.0
"""After giving held offers back, the job asks for offers again after this,
doubling each time the job still does not fit, up to the max, at random
between half and one and a half times that."""
GPU_AGENT_GRACE = 10.0
"""How long a task that needs no GPU waits for an agent without GPUs before it
takes room on one that has them (``docs/gpu-support.md``: GPU agents are to be
kept for the tasks that need them)."""

Placed = list[tuple[Launch, list[dict[str, Any]], int]]
"""Tasks placed on one offer: each with the resources and the port it takes."""


@dataclass(frozen=True)
class Accept:
    """ACCEPT ``offer`` with one LAUNCH of the tasks ``placed`` on it, the
    rest of it filtered for ``refuse_seconds``."""

    offer: dict[str, Any]
    placed: Placed = field(default_factory=list)
    refuse_seconds: float = DECLINE_SECONDS


@dataclass(frozen=True)
class Decline:
    """DECLINE the offer ``offer_id``, filtered for ``refuse_seconds``."""

    offer_id: dict[str, Any]
    refuse_seconds: float


@dataclass(frozen=True)
class Suppress:
    """SUPPRESS: no more offers until a REVIVE."""


@dataclass(frozen=True)
class Revive:
    """REVIVE: offers again, the filters of those declined lifted."""


@dataclass(frozen=True)
class StartHold:
    """Call :meth:`OfferHold.hold_expired` in ``seconds``."""

    seconds: float


@dataclass(frozen=True)
class StopHold:
    """The hold's timer is not wanted any more."""


@dataclass(frozen=True)
class StartBackoff:
    """Call :meth:`OfferHold.backoff_over` in ``seconds``."""

    seconds: float


Decision = Accept | Decline | Suppress | Revive | StartHold | StopHold | StartBackoff


class OfferHold:
    """The tasks waiting for offers, the offers held for them, and what to do
    with each new offer. ``pins`` (in the methods that take it): whether a
    relaunch waits for its own agent's offer, which keeps offers coming.
    ``placement``: one of PLACEMENTS; ``load``: the job's tasks on each agent
    now (by agent ID), which spreading counts with those it places."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        placement: str = "spread",
        load: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, not {placement!r}")
        self._clock = clock
        self._random = rng or random.Random()
        self.placement = placement
        self._load = load
        self.pending: list[Launch] = []
        """The tasks waiting for offers, in the order they were handed over."""
        self.waiting_since: dict[str, float] = {}
        """When each pending task began to wait (for GPU_AGENT_GRACE)."""
        self.handed_tasks = False
        """Whether the launcher has handed the backend a task yet. Offers that
        come before are held for the tasks about to come: the subscription can
        beat the launcher's first launches (the chief's local backend starts
        between the two, waiting for its fork server), and offers declined then
        would be filtered for an hour, the role suppressed, and offers asked
        for again once the tasks came."""
        self.held: dict[str, dict[str, Any]] = {}
        """Offers held for the gang, by offer ID: each fits some task that is
        waiting, but all of them together do not yet fit every such task."""
        self.suppressed = False
        self.holding = False
        """The hold's timer runs (StartHold, not yet expired or stopped)."""
        self.backing_off = False
        """The held offers were given back; offers are asked for again when
        the backoff is over."""
        self.shortfall = ""
        """What the offers last given back lacked, said while no offer is held."""
        self._fit: GangFit | None = None
        """The waiting tasks' fit over the held offers, as last brought up to
        date (fit_held)."""
        self._give_backs = 0
        """Times in a row the held offers were given back without the job fitting."""

    # -- tasks -------------------------------------------------------------

    def add(self, launch: Launch) -> list[Decision]:
        """A task handed over: it waits for offers."""
        self.handed_tasks = True
        self.pending.append(launch)
        self.waiting_since[launch.task_id] = self._clock()
        if self.suppressed and not self.backing_off:
            return self.revive()
        return []

    def handed(self, pins: bool) -> list[Decision]:
        """A batch of tasks handed over: offers held before them that fit
        none go back, the rest may fit the whole gang."""
        if not (self.held and self.pending):
            return []
        return [*self._decline_unfit(), *self.place(), *self.suppress_if_idle(pins)]

    def forget(self, task_id: str) -> None:
        """A task killed: it waits no more."""
        self.pending = [p for p in self.pending if p.task_id != task_id]

    def requeue(self, launches: list[Launch]) -> None:
        """Tasks whose ACCEPT failed wait again, ahead of the others."""
        self.pending = launches + self.pending

    # -- offers ------------------------------------------------------------

    def offered(self, offer: dict[str, Any], capacity: OfferCapacity, pins: bool) -> list[Decision]:
        """One new offer: held if it fits a task waiting (or the tasks are yet
        to come), else declined."""
        if not self.backing_off and (
            not self.handed_tasks
            or any(capacity.fits(self.pending[i].task) for i in self.candidates_for(capacity))
        ):
            self.held[offer["id"]["value"]] = offer
            return []
        return [
            Decline(offer["id"], DECLINE_SECONDS if self.pending or pins else DECLINE_IDLE_SECONDS)
        ]

    def rescinded(self, offer_id: str) -> None:
        """The master took an offer back. A held one is let go (the gang's fit
        is cut back to the offers held before it when next wanted)."""
        self.held.pop(offer_id, None)

    def resubscribed(self) -> list[Decision]:
        """Offers do not outlive a subscription (the master rescinds them when
        a framework fails over or re-subscribes: Master::_subscribe)."""
        self.held.clear()
        return self._stop_hold()

    def place(self) -> list[Decision]:
        """Launch every waiting task on the held offers if they all fit there."""
        if not self.held:
            return []
        if not self.pending:
            if self.handed_tasks:
                return self._give_back(DECLINE_IDLE_SECONDS)
            return self._hold_for_the_rest()  # the tasks are yet to come
        fit = self.fit_held()
        if not fit.complete:
            return self._hold_for_the_rest()
        decisions = self._stop_hold()
        self.shortfall = ""
        self._give_backs = 0
        by_offer: dict[str, Placed] = {}
        self._fit = None
        placed = self._spread() if self.placement == "spread" else None
        for position, (offer, resources, port) in sorted((placed or fit.placed).items()):
            by_offer.setdefault(offer["id"]["value"], []).append(
                (self.pending[position], resources, port)
            )
        for launch in self.pending:
            self.waiting_since.pop(launch.task_id, None)
        self.pending = []
        held, self.held = self.held, {}
        for offer_id, offer in held.items():
            if offer_id in by_offer:
                decisions.append(Accept(offer, by_offer[offer_id]))
            else:
                decisions.append(Decline(offer["id"], DECLINE_IDLE_SECONDS))
        return decisions

    def suppress_if_idle(self, pins: bool) -> list[Decision]:
        """Every task handed over is placed: no more offers, until REVIVE."""
        if self.handed_tasks and not self.pending and not pins and not self.suppressed:
            return self.suppress()
        return []

    def suppress(self) -> list[Decision]:
        self.suppressed = True
        return [Suppress()]

    def revive(self) -> list[Decision]:
        self.suppressed = False
        return [Revive()]

    # -- timers --------------------------------------------------------------

    def hold_expired(self, pins: bool) -> list[Decision]:
        """The hold's time is up: the held offers go back."""
        self.holding = False
        if not self.held:
            return []
        if not self.pending:
            # Held for tasks that never came (or were killed meanwhile): idle
            # until some come (add revives), unless relaunches wait.
            decisions = self._give_back(DECLINE_SECONDS if pins else DECLINE_IDLE_SECONDS)
            if not pins and not self.suppressed:
                decisions += self.suppress()
            return decisions
        backoff = Backoff(GANG_BACKOFF_SECONDS, cap=GANG_BACKOFF_MAX, jitter=0.5)
        delay = backoff.delay(self._give_backs, self._random.random())
        self._give_backs += 1
        self.shortfall = self.fit_held().shortfall()
        logger.info("Mesos: %s; giving them back, asking again in %.1fs", self.shortfall, delay)
        decisions = self._give_back(delay)
        # Suppressed meanwhile: the offers given back go to other frameworks
        # rather than straight back to this one.
        decisions += self.suppress()
        self.backing_off = True
        return [*decisions, StartBackoff(delay)]

    def backoff_over(self) -> list[Decision]:
        self.backing_off = False
        return self.revive() if self.pending else []

    def stop(self) -> list[Decision]:
        """The backend closes: nothing waits, no timer runs."""
        self.pending.clear()
        self.backing_off = False
        return self._stop_hold()

    # -- the fit -------------------------------------------------------------

    def fit_held(self) -> GangFit:
        """The fit of the waiting tasks over the held offers, brought up to
        date: made anew when other tasks wait or a GPU offer's candidates
        changed, cut back to the first offer no longer held, then extended by
        the offers held since. It equals a fit of every held offer from scratch
        (tests/test_mesos_backend.py checks it does)."""
        key = [launch.task_id for launch in self.pending]
        fit = self._fit
        if (
            fit is None
            or fit.key != key
            or (fit.gpu_candidates is not None and fit.gpu_candidates != self._gpu_candidates())
        ):
            fit = self._fit = GangFit([launch.task for launch in self.pending], key)
        held = list(self.held)
        kept = len(fit.offer_ids)
        if held[:kept] != fit.offer_ids:
            # Offers are only ever added at the end: one is gone (rescinded).
            kept = 0
            while kept < len(held) and held[kept] == fit.offer_ids[kept]:
                kept += 1
            fit.drop_from(kept)
        for offer_id in held[kept:]:
            capacity = OfferCapacity.of(self.held[offer_id])
            candidates = None
            if capacity.total("gpus") > 0:
                if fit.gpu_candidates is None:
                    fit.gpu_candidates = self._gpu_candidates()
                candidates = fit.gpu_candidates
            fit.add(capacity, candidates)
        return fit

    def _spread(self) -> Placement | None:
        """The waiting tasks spread over the held offers, or None where the
        greedy spread leaves one out (the first fit, which holds them all, is
        then kept)."""
        offers = []
        for offer in self.held.values():
            capacity = OfferCapacity.of(offer)
            candidates = self._gpu_candidates() if capacity.total("gpus") > 0 else None
            offers.append((capacity, candidates))
        load = self._load() if self._load is not None else None
        return spread([launch.task for launch in self.pending], offers, load)

    def candidates_for(self, capacity: OfferCapacity) -> list[int]:
        """Positions in ``pending`` of the tasks that may use this offer, those
        that need GPUs first. An agent with GPUs is kept for GPU tasks: one that
        needs none takes room there only after GPU_AGENT_GRACE without a better
        offer (``docs/gpu-support.md``)."""
        if capacity.total("gpus") <= 0:
            return list(range(len(self.pending)))
        return self._gpu_candidates()

    def _gpu_candidates(self) -> list[int]:
        """candidates_for an offer with GPUs."""
        now = self._clock()
        gpu_tasks = [i for i, p in enumerate(self.pending) if p.task.gpus]
        patient = [
            i
            for i, p in enumerate(self.pending)
            if not p.task.gpus and now - self.waiting_since.get(p.task_id, now) >= GPU_AGENT_GRACE
        ]
        return gpu_tasks + patient

    # -- parts ---------------------------------------------------------------

    def _decline_unfit(self) -> list[Decision]:
        """Decline the held offers that fit no task waiting."""
        decisions: list[Decision] = []
        for offer_id, offer in list(self.held.items()):
            capacity = OfferCapacity.of(offer)
            if not any(capacity.fits(self.pending[i].task) for i in self.candidates_for(capacity)):
                del self.held[offer_id]
                decisions.append(Decline(offer["id"], DECLINE_SECONDS))
        return decisions

    def _hold_for_the_rest(self) -> list[Decision]:
        """Bound the hold of the offers held: given back if they still do not
        fit the job in GANG_HOLD_SECONDS (stretched at random)."""
        if self.holding:
            return []
        self.holding = True
        return [StartHold(GANG_HOLD_SECONDS * self._random.uniform(1.0, 1.5))]

    def _stop_hold(self) -> list[Decision]:
        if not self.holding:
            return []
        self.holding = False
        return [StopHold()]

    def _give_back(self, refuse_seconds: float) -> list[Decision]:
        decisions = self._stop_hold()
        held, self.held = self.held, {}
        return decisions + [Decline(offer["id"], refuse_seconds) for offer in held.values()]
