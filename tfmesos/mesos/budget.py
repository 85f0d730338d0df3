"""How long the scheduler client keeps trying to gain or regain a master.

A master that never answered is most likely a wrong address, so it gets the
short ``connect_timeout``; once one has answered, a lost master gets the long
``reconnect_timeout``. Every step of an attempt is bounded by what is left
(:meth:`Budget.step_limit`). Pure: the clock is handed in.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["MIN_ATTEMPT", "Budget"]

MIN_ATTEMPT = 1.0
"""The least time a step of an attempt is given, even when the reconnect budget
is all but spent, so that the last attempt is a real one."""


class Budget:
    def __init__(
        self, reconnect_timeout: float, connect_timeout: float, clock: Callable[[], float]
    ) -> None:
        self.reconnect_timeout = reconnect_timeout
        self.connect_timeout = min(connect_timeout, reconnect_timeout)
        self._clock = clock
        self.lost_since = 0.0
        """When the master was last lost (or the first attempt began): the
        budget runs from here."""
        self.ever_subscribed = False
        """Whether any master ever took our SUBSCRIBE: if not, running out of
        budget is a master we could not reach, not one we lost."""
        self.ever_answered = False
        """Whether any master ever answered an HTTP request of ours: until
        then the first-contact budget applies, and retries are quiet."""

    def restart(self) -> None:
        """The budget runs again from now (a master lost, or the first attempt)."""
        self.lost_since = self._clock()

    def total(self) -> float:
        """The reconnect budget, or the first-contact one while no master has answered."""
        return self.reconnect_timeout if self.ever_answered else self.connect_timeout

    def left(self) -> float:
        return self.lost_since + self.total() - self._clock()

    def step_limit(self, limit: float) -> float:
        """``limit``, or what is left of the budget if that is less."""
        return max(MIN_ATTEMPT, min(limit, self.left()))

    def gave_up(self, reason: str, where: str) -> str:
        """Why the client stops, the budget spent after ``reason``; ``where``:
        the masters as given."""
        budget = f"{self.total():g}s"
        if self.ever_subscribed:
            return f"lost the Mesos master ({reason}) and could not re-subscribe within {budget}"
        # We never had a master: most likely a mistyped -m, or a master that
        # is down. The reason names the master already when there is one.
        reason = reason.removeprefix(f"{where}: ")
        return f"could not reach the Mesos master at {where} ({reason}) within {budget}"
