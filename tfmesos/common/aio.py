"""asyncio helpers shared by the launcher's parts."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["reap"]


async def reap(task: asyncio.Task[Any], timeout: float | None = None) -> None:
    """Wait up to ``timeout`` for ``task`` (usually just cancelled) to end,
    dropping its error or cancellation but not the caller's own, which
    ``contextlib.suppress(BaseException)`` would swallow with a Ctrl-C."""
    await asyncio.wait({task}, timeout=timeout)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved: asyncio does not log it as never retrieved
