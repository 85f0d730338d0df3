"""Reconciliation: asking the master for the state of the tasks it may have
told us of while we were away (after a re-subscription), and asking again
for those it has not answered, backing off, until it has answered them all
(docs/reconciliation.md in Mesos: "retry with exponential backoff until all
tasks are answered").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from tfmesos.common.backoff import Backoff
from tfmesos.mesos import calls

__all__ = ["RECONCILE_BACKOFF", "RECONCILE_FIRST_WAIT", "RECONCILE_MAX_WAIT", "Reconciliation"]

logger = logging.getLogger("tfmesos")

RECONCILE_FIRST_WAIT = 2.0
"""How long the answers to a RECONCILE are waited for before the tasks not
yet answered are asked about again, the wait doubling each time."""
RECONCILE_MAX_WAIT = 60.0
RECONCILE_BACKOFF = Backoff(RECONCILE_FIRST_WAIT, cap=RECONCILE_MAX_WAIT)


class Reconciliation:
    """``call`` sends a call; ``name`` is a task's name for a message (None:
    unknown); ``over`` says the backend no longer asks (closing, failed)."""

    def __init__(
        self,
        call: Callable[[dict[str, Any]], None],
        name: Callable[[str], str | None],
        over: Callable[[], bool],
    ) -> None:
        self._call = call
        self._name = name
        self._over = over
        self._unanswered: set[str | None] = set()
        """The tasks asked about whose state has not come since."""
        self._asking: asyncio.Task[None] | None = None

    def start(self, agents: dict[str, str]) -> None:
        """Ask the master for the state of these tasks (``agents``: each
        task's agent), and again for those it has not answered, until it has
        answered them all or :meth:`start` is called anew."""
        self.cancel()
        self._unanswered = set(agents)
        # No tasks: an implicit reconciliation, asked once.
        self._call(calls.reconcile(list(agents.items())))
        if agents:
            self._asking = asyncio.create_task(self._until_answered(agents))

    def answered(self, task_id: str | None) -> None:
        """An update of ``task_id`` came: it needs asking about no more."""
        self._unanswered.discard(task_id)

    def cancel(self) -> None:
        if self._asking is not None:
            self._asking.cancel()
            self._asking = None

    async def _until_answered(self, agents: dict[str, str]) -> None:
        wait = RECONCILE_BACKOFF.first
        asked = list(agents)
        while True:
            await asyncio.sleep(wait)
            asked = [t for t in asked if t in self._unanswered]
            if not asked or self._over():
                return
            names = (self._name(t) for t in asked)
            logger.info(
                "Mesos: no answer yet to the reconciliation of %s; asking again",
                ", ".join(sorted(n for n in names if n is not None)),
            )
            self._call(calls.reconcile([(t, agents[t]) for t in asked]))
            wait = RECONCILE_BACKOFF.following(wait)
