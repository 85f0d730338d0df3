"""Each subscription of the framework, as the user and the launcher hear of
it: the framework's ID, the master it subscribed to, and the framework's
page in that master's web UI, where each task's sandbox is.

Whether a master serves a web UI is known only by asking it
(:meth:`SchedulerClient.web_ui`, briefly): the launcher hears of a
subscription (:class:`~tfmesos.backends.base.BackendAttached`) once the
master has answered, so that the event names the page or says there is
none, never a link that leads nowhere.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from tfmesos.backends.base import BackendAttached
from tfmesos.mesos.scheduler import SchedulerClient

__all__ = ["Subscriptions"]

logger = logging.getLogger("tfmesos")


class Subscriptions:
    """Says each subscription (the first, and each re-subscription, to the
    same master or a new leader): in a line to the user at once, and to the
    launcher through ``report`` once the master's web UI is known.

    A short job may be ``closing`` by then: the launcher still hears of it
    (the backend's close waits for the question, and a script must learn
    the framework of every job), the user not (the job is over). Once
    :meth:`close` is called, nothing is reported: the launcher may have
    said its verdict, its last event."""

    def __init__(
        self,
        client: SchedulerClient,
        report: Callable[[BackendAttached], None],
        closing: Callable[[], bool],
    ) -> None:
        self._client = client
        self._report = report
        self._closing = closing
        self._closed = False
        self.web_ui: str | None = None
        """The web UI of the master last subscribed to, once it has shown
        that it serves one (real Mesos does, at ``/``; the test master does
        not)."""

    def subscribed(self, framework_id: str) -> Coroutine[Any, Any, None] | None:
        """Say a SUBSCRIBED; what finds the web UI and reports it, for the
        backend to run (None when no master is known to have sent it)."""
        master = self._client.master
        if master is None:
            return None
        logger.info("Mesos: subscribed as framework %s at %s", framework_id, master.url)
        return self._attached(framework_id, master.url)

    def close(self) -> None:
        """Report nothing from now on."""
        self._closed = True

    async def _attached(self, framework_id: str, master_url: str) -> None:
        web_ui = await self._client.web_ui()
        if self._closed:
            return
        page = None if web_ui is None else f"{web_ui}/#/frameworks/{framework_id}"
        if web_ui is not None and web_ui != self.web_ui and not self._closing():
            # Once per web UI: a re-subscription to the same master says
            # nothing new here.
            logger.info("Mesos: each task's sandbox is in the master's web UI: %s", page)
        self.web_ui = web_ui
        details = {"framework_id": framework_id, "master": master_url, "web_ui": page}
        self._report(BackendAttached("mesos", details))
