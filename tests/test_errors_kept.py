"""Errors and cancellations reach whoever must see them: a caller's own
cancellation is never swallowed by teardown, a bug in the Mesos backend keeps
its traceback, and a failed call is never reported as taken."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.conftest import until
from tfmesos import ClusterSpec, Job
from tfmesos.backends.base import BackendEvent, BackendFailed
from tfmesos.backends.mesos import MesosBackend, MesosOptions
from tfmesos.common import advertise
from tfmesos.common.aio import reap
from tfmesos.mesos.scheduler import MasterLostError
from tfmesos.rendezvous.server import RendezvousServer

SPEC = ClusterSpec((Job("worker", 1, cmd="true"),), replica=True)


def mesos_backend(monkeypatch: pytest.MonkeyPatch) -> MesosBackend:
    monkeypatch.setenv(advertise.ADVERTISE_ENV, "launcher.example")
    return MesosBackend(SPEC, MesosOptions(master="127.0.0.1:1"))


# -- the caller's own cancellation ------------------------------------------------


def test_reap_drops_the_tasks_error_and_keeps_the_callers_cancellation() -> None:
    async def scenario() -> None:
        async def fails() -> None:
            raise RuntimeError("the task's own")

        await reap(asyncio.create_task(fails()))  # its error is its own: dropped

        release = asyncio.Event()
        slow = asyncio.create_task(release.wait())
        caller = asyncio.create_task(reap(slow))
        await until(lambda: not caller.done(), "the caller started", poll=0)
        caller.cancel()
        release.set()
        await asyncio.wait({caller})
        assert caller.cancelled()

    asyncio.run(scenario())


def test_closing_the_mesos_backend_keeps_the_callers_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = mesos_backend(monkeypatch)
    stopping = asyncio.Event()
    let_go = asyncio.Event()

    async def run_until_cancelled_then_linger() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            stopping.set()
            await let_go.wait()  # its own clean-up, while close() waits for it

    backend.client.run = run_until_cancelled_then_linger  # type: ignore[method-assign]

    async def scenario() -> None:
        await backend.start(lambda event: None)
        closing = asyncio.create_task(backend.close())
        await stopping.wait()
        closing.cancel()  # the caller of close() is cancelled (a Ctrl-C)
        let_go.set()
        await asyncio.wait({closing})
        assert closing.cancelled(), "close() swallowed its caller's cancellation"

    asyncio.run(scenario())


def test_closing_the_rendezvous_keeps_the_callers_cancellation() -> None:
    async def scenario() -> None:
        server = RendezvousServer(b"s" * 32, lambda task_id: False, lambda event: None)
        port = await server.start("127.0.0.1")
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # A connection gets its handler once it speaks: one byte of a frame.
        writer.write(b"\0")
        await writer.drain()
        await until(lambda: server._handlers, "a handler for the connection", poll=0)
        closing = asyncio.create_task(server.close())
        # close() stops listening, cancels the handlers, and waits for them:
        # its first wait.
        await until(
            lambda: server._listener is not None and server._listener.fileno() == -1,
            "the listener closed",
            poll=0,
        )
        closing.cancel()
        await asyncio.wait({closing})
        writer.close()
        assert closing.cancelled(), "close() swallowed its caller's cancellation"

    asyncio.run(scenario())


# -- the Mesos backend's failures ---------------------------------------------------


def test_a_bug_in_the_mesos_backends_loop_keeps_its_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = mesos_backend(monkeypatch)
    events: list[BackendEvent] = []

    async def broken_run() -> None:
        empty: dict[str, int] = {}
        empty["no such key"]

    backend.client.run = broken_run  # type: ignore[method-assign]

    async def scenario() -> None:
        await backend.start(events.append)
        await until(lambda: events, "the backend's event", poll=0)

    asyncio.run(scenario())
    [failed] = events
    assert isinstance(failed, BackendFailed)
    assert failed.message.startswith("KeyError: 'no such key' (a bug in tfmesos)\n")
    assert "Traceback (most recent call last):" in failed.message
    assert "in broken_run" in failed.message


def test_a_foreseen_mesos_failure_is_said_in_its_words_with_its_traceback_at_debug(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    backend = mesos_backend(monkeypatch)
    events: list[BackendEvent] = []

    async def master_lost() -> None:
        raise MasterLostError("lost the Mesos master for 120s")

    backend.client.run = master_lost  # type: ignore[method-assign]
    caplog.set_level(logging.DEBUG, logger="tfmesos")

    async def scenario() -> None:
        await backend.start(events.append)
        await until(lambda: events, "the backend's event", poll=0)

    asyncio.run(scenario())
    assert events == [BackendFailed("lost the Mesos master for 120s")]
    [record] = [r for r in caplog.records if r.getMessage() == "the Mesos backend failed"]
    assert record.levelno == logging.DEBUG and record.exc_info is not None


def test_a_call_whose_answer_failed_is_not_reported_as_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # _outcome (once _try) said None, "the master took it", after a failure:
    # a REVIVE that failed so was never retried nor reported.
    backend = mesos_backend(monkeypatch)
    events: list[BackendEvent] = []
    backend._sink = events.append

    async def scenario() -> str | None:
        answer: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        answer.set_exception(ValueError("malformed answer"))
        return await backend._outcome(answer)

    problem = asyncio.run(scenario())
    assert problem is not None and problem.startswith("ValueError: malformed answer")
    assert len(events) == 1 and isinstance(events[0], BackendFailed)
