"""Calls that do not depend on each other do not wait for each other.

Mesos's library pipelines calls on one connection: the master reads the next
before it has answered the one before. A client that sends one call at a time,
each after the last one's answer, makes every ACKNOWLEDGE and KILL wait behind
a call the master is slow to answer, for up to the call timeout (75 s): the
agents resend the unacknowledged updates, and a task to be killed runs on.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.conftest import until
from tests.test_scheduler_client import (
    CONDITION_TIMEOUT,
    FakeTransport,
    make_client,
    run,
    running,
    stream,
    task_call,
    within,
)
from tfmesos.mesos.calls import call_subjects


def test_a_call_left_unanswered_holds_up_only_the_calls_that_depend_on_it() -> None:
    async def scenario() -> None:
        release = asyncio.Event()
        started: list[tuple[str, str]] = []

        async def answer(call: dict[str, Any]) -> tuple[int, str]:
            subject = sorted(call_subjects(call))[-1]
            started.append((call["type"], subject))
            if call["type"] == "ACCEPT":
                await release.wait()  # the master is slow with this one
            return 202, ""

        subscription = stream()
        transport = FakeTransport([subscription], answer=answer)
        client = make_client(transport)
        async with running(client):
            subscription.subscribed()
            await within(client.subscribed.wait())
            accept = client.submit(task_call("ACCEPT", "t1"))
            await until(
                lambda: started == [("ACCEPT", "task:t1")], "the ACCEPT started", CONDITION_TIMEOUT
            )
            independent = [
                client.submit(task_call("ACKNOWLEDGE", "t2")),
                client.submit(task_call("KILL", "t2")),
                client.submit(task_call("ACKNOWLEDGE", "t1")),
                client.submit(task_call("RECONCILE", "t3")),
            ]
            kill_t1 = client.submit(task_call("KILL", "t1"))
            revive = client.submit({"type": "REVIVE"})
            # Answered while the ACCEPT is not.
            assert await within(asyncio.gather(*independent)) == [None] * 4
            assert not accept.done()
            # The KILL of the task the ACCEPT launches, and the next offer
            # call, wait for its answer: neither may overtake it.
            assert not kill_t1.done() and not revive.done()
            assert ("KILL", "task:t1") not in started
            release.set()
            assert list(await within(asyncio.gather(accept, kill_t1, revive))) == [None] * 3
            assert transport.types().index("KILL", 3) > transport.types().index("ACCEPT")

    run(scenario())


def test_what_each_call_is_about() -> None:
    assert call_subjects({"type": "DECLINE"}) == {"offers"}
    assert call_subjects({"type": "SUPPRESS"}) == {"offers"}
    assert call_subjects(task_call("ACCEPT", "t1")) == {"offers", "task:t1"}
    assert call_subjects(task_call("KILL", "t1")) == {"task:t1"}
    assert call_subjects(task_call("ACKNOWLEDGE", "t1")) == {"acknowledge:task:t1"}
    assert call_subjects({"type": "RECONCILE", "reconcile": {}}) == frozenset()
    # Unknown to the client: ordered with the offer calls, to be safe.
    assert call_subjects({"type": "ACCEPT_INVERSE_OFFERS"}) == {"offers"}
