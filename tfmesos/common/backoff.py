"""Exponential backoff, written once: the waits between tries of something
that failed (a subscription, a reconciliation, a REVIVE, a gang of offers).
Pure: the caller draws the random numbers and keeps the count or the last
wait. Standard library only."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True)
class Backoff:
    """The wait before each retry: ``first``, then ``factor`` times the one
    before, up to ``cap``, each spread at random by up to ``jitter`` of
    itself either way (0.2: between 0.8 and 1.2 times), so that many
    clients that failed together do not come back together."""

    first: float
    factor: float = 2.0
    cap: float = math.inf
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not (self.first > 0 and self.factor >= 1 and self.cap >= self.first):
            raise ValueError(f"not a backoff: {self}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"a backoff's jitter is a fraction below 1, not {self.jitter}")

    def delay(self, attempt: int, draw: float = 0.5) -> float:
        """The wait before retry ``attempt`` (0 for the first). ``draw`` is
        a number drawn uniformly from [0, 1) (``random.random()``), which the
        jitter spreads the wait by; 0.5, the default, spreads it not at all.
        The spread comes after the cap: a capped wait is still spread."""
        try:
            grown = self.first * self.factor**attempt
        except OverflowError:  # a client that has tried for a very long time
            grown = math.inf
        return min(grown, self.cap) * (1 - self.jitter + 2 * self.jitter * draw)

    def following(self, previous: float, draw: float = 0.5) -> float:
        """The wait after one of ``previous``: ``factor`` times it, spread by
        the jitter, then capped. For a caller that carries its last wait
        rather than a count: the spreads compound from one wait to the next,
        the cap holds after the spread, and a wait at the cap stays there
        while ``factor * (1 - jitter)`` is at least 1. Without jitter,
        ``following(delay(n)) == delay(n + 1)``."""
        spread = previous * self.factor * (1 - self.jitter + 2 * self.jitter * draw)
        return min(spread, self.cap)
