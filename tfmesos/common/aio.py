"""asyncio helpers shared by the launcher's parts."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["reap"]


async def reap(task: asyncio.Task[Any], timeout: float | None = None) -> None:
    """Wait (up to ``timeout`` seconds) for ``task``, which the caller has
    usually just cancelled, to end, whatever it ends with: its error or its
    cancellation is its own and is dropped. The caller's own cancellation is
    not: ``contextlib.suppress(BaseException)`` around ``await task`` would
    swallow it too, and a Ctrl-C during teardown would be lost."""
    await asyncio.wait({task}, timeout=timeout)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved: asyncio does not log it as never retrieved
