"""The local backend's fork server, started more than once in one event loop."""

from __future__ import annotations

import asyncio

import pytest

from tfmesos.backends.local.forking import ForkServer

pytestmark = pytest.mark.e2e  # every test here starts processes


def test_a_second_fork_server_starts_after_the_first_is_closed() -> None:
    # Each run of a restarted job (--max-restarts) starts its own. The first
    # one's pipe, closed under asyncio's transport, let that transport's late
    # cleanup unregister the second one's: it never heard "ready" and the
    # run waited 10 s, then started every agent as a new interpreter.
    async def twice() -> list[bool]:
        alive = []
        for _ in range(2):
            server = ForkServer()
            await server.start()
            alive.append(server.alive)
            await server.close()
        return alive

    assert asyncio.run(twice()) == [True, True]
