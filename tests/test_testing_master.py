"""The Mesos master test double, checked against the v1 scheduler HTTP API.

Everything here talks raw HTTP to the double and decodes RecordIO with its own
small reader, so these tests check the protocol (docs/scheduler-http-api.md,
docs/recordio.md, the v1 protos), not the double's own helpers.
"""

from __future__ import annotations

import asyncio
import base64
import getpass
import http.client
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import aiohttp
import pytest

from tests.conftest import JobProcesses, marked_master, run_tfrun, until
from tfmesos.testing.master import TestMaster, ThreadedTestMaster

JSON = dict[str, Any]

FAST: dict[str, Any] = {
    "heartbeat_interval": 0.5,
    "update_retry_interval": 0.3,
    "update_retry_max": 0.3,
    "allocation_interval": 0.1,
    "shutdown_grace_period": 0.5,
}


def run(coro: Coroutine[Any, Any, None], timeout: float = 30) -> None:
    """Run a test coroutine; close every stream it opened, even ones the server ended."""

    async def guarded() -> None:
        try:
            await asyncio.wait_for(coro, timeout)
        finally:
            while _OPEN_STREAMS:
                _OPEN_STREAMS.pop().close()

    asyncio.run(guarded())


def framework_info(**extra: Any) -> JSON:
    info: JSON = {"user": getpass.getuser(), "name": "protocol-test"}
    info.update(extra)
    return info


def scalar(name: str, value: float) -> JSON:
    return {"name": name, "type": "SCALAR", "scalar": {"value": value}}


def ports(begin: int, end: int) -> JSON:
    return {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": begin, "end": end}]}}


def task_info(task_id: str, offer: JSON, command: str, **extra: Any) -> JSON:
    info: JSON = {
        "name": extra.pop("name", task_id),
        "task_id": {"value": task_id},
        "agent_id": offer["agent_id"],
        "resources": extra.pop("resources", [scalar("cpus", 0.5), scalar("mem", 32)]),
        "command": {"value": command},
    }
    info.update(extra)
    return info


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


_OPEN_STREAMS: list[Stream] = []


class Stream:
    """One subscription: our own RecordIO decoder over the chunked body."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        _OPEN_STREAMS.append(self)
        self.response = response
        self.stream_id = response.headers.get("Mesos-Stream-Id", "")
        self.queue: asyncio.Queue[JSON] = asyncio.Queue()
        self.seen: list[JSON] = []
        self.ended = asyncio.Event()
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        content = self.response.content
        try:
            while True:
                line = await content.readline()
                if not line:
                    return
                assert line.endswith(b"\n") and line[:-1].isdigit(), f"bad record size {line!r}"
                size = int(line[:-1])
                assert size > 0
                event = json.loads(await content.readexactly(size))
                self.seen.append(event)
                self.queue.put_nowait(event)
        except (aiohttp.ClientError, asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            self.ended.set()

    async def next(
        self,
        kind: str | None = None,
        timeout: float = 5.0,
        where: Callable[[JSON], bool] | None = None,
    ) -> JSON:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, (
                f"no {kind or 'event'} within {timeout}s; saw {[e['type'] for e in self.seen]}"
            )
            try:
                event = await asyncio.wait_for(self.queue.get(), left)
            except asyncio.TimeoutError:
                continue
            if (kind is None or event["type"] == kind) and (where is None or where(event)):
                return event

    async def update(self, task_id: str, state: str | None = None, timeout: float = 5.0) -> JSON:
        event = await self.next(
            "UPDATE",
            timeout,
            lambda e: (
                e["update"]["status"]["task_id"]["value"] == task_id
                and (state is None or e["update"]["status"]["state"] == state)
            ),
        )
        status: JSON = event["update"]["status"]
        return status

    async def nothing(
        self, kind: str, within: float, where: Callable[[JSON], bool] | None = None
    ) -> None:
        deadline = time.monotonic() + within
        while (left := deadline - time.monotonic()) > 0:
            try:
                event = await asyncio.wait_for(self.queue.get(), left)
            except asyncio.TimeoutError:
                return
            assert not (event["type"] == kind and (where is None or where(event))), event

    def close(self) -> None:
        self.reader.cancel()
        self.response.close()


class Scheduler:
    """A bare-bones v1 scheduler: enough HTTP to drive the master."""

    def __init__(self, session: aiohttp.ClientSession, master: TestMaster) -> None:
        self.session = session
        self.url = master.url + "/api/v1/scheduler"
        self.framework_id = ""
        self.stream: Stream | None = None

    async def subscribe(self, info: JSON | None = None, **body: Any) -> Stream:
        info = info or framework_info()
        call: JSON = {"type": "SUBSCRIBE", "subscribe": {"framework_info": info, **body}}
        if "id" in info:
            call["framework_id"] = info["id"]
        response = await self.session.post(
            self.url, json=call, headers={"Accept": "application/json"}
        )
        assert response.status == 200, await response.text()
        self.stream = Stream(response)
        event = await self.stream.next()
        assert event["type"] == "SUBSCRIBED", event
        self.framework_id = event["subscribed"]["framework_id"]["value"]
        return self.stream

    async def call(
        self, kind: str, stream_id: str | None = None, **payload: Any
    ) -> tuple[int, str]:
        body: JSON = {"type": kind, "framework_id": {"value": self.framework_id}, **payload}
        headers = {}
        sid = (
            stream_id if stream_id is not None else (self.stream.stream_id if self.stream else None)
        )
        if sid:
            headers["Mesos-Stream-Id"] = sid
        async with self.session.post(self.url, json=body, headers=headers) as response:
            return response.status, await response.text()

    async def offers(self, count: int = 1, timeout: float = 5.0) -> list[JSON]:
        assert self.stream is not None
        found: list[JSON] = []
        while len(found) < count:
            event = await self.stream.next("OFFERS", timeout)
            found += event["offers"]["offers"]
        return found

    async def launch(self, offer: JSON, *tasks: JSON, filters: JSON | None = None) -> None:
        accept: JSON = {
            "offer_ids": [offer["id"]],
            "operations": [{"type": "LAUNCH", "launch": {"task_infos": list(tasks)}}],
        }
        if filters is not None:
            accept["filters"] = filters
        status, text = await self.call("ACCEPT", accept=accept)
        assert status == 202, text

    async def ack(self, status: JSON) -> None:
        code, text = await self.call(
            "ACKNOWLEDGE",
            acknowledge={
                "agent_id": status["agent_id"],
                "task_id": status["task_id"],
                "uuid": status["uuid"],
            },
        )
        assert code == 202, text

    async def updates_until(self, task_id: str, state: str, timeout: float = 5.0) -> JSON:
        """Acknowledge the task's updates until one in ``state`` arrives (and ack it)."""
        assert self.stream is not None
        while True:
            status = await self.stream.update(task_id, timeout=timeout)
            if "uuid" in status:
                await self.ack(status)
            if status["state"] == state:
                return status


def with_master(**config: Any) -> Callable[[Callable[..., Awaitable[None]]], Callable[[], None]]:
    """Run an async test with a fresh master, an HTTP session and a Scheduler."""

    def decorate(fn: Callable[..., Awaitable[None]]) -> Callable[[], None]:
        def test() -> None:
            async def body() -> None:
                async with (
                    TestMaster(**{**FAST, **config}) as master,
                    aiohttp.ClientSession() as session,
                ):
                    await fn(master, session, Scheduler(session, master))

            run(body())

        test.__name__ = fn.__name__
        test.__doc__ = fn.__doc__
        return test

    return decorate


# --------------------------------------------------------------------------- #


@pytest.mark.e2e
@with_master(agents=2, cpus=2, mem=1024, ports="31000-31009", attributes={"rack": "r1"})
async def test_subscribe_streams_subscribed_heartbeats_and_offers(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    call = {"type": "SUBSCRIBE", "subscribe": {"framework_info": framework_info()}}
    response = await session.post(sched.url, json=call, headers={"Accept": "application/json"})
    assert response.status == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers.get("Transfer-Encoding") == "chunked"
    assert "Content-Length" not in response.headers
    stream_id = response.headers["Mesos-Stream-Id"]
    assert 0 < len(stream_id) <= 128
    stream = Stream(response)
    first = await stream.next()
    assert first["type"] == "SUBSCRIBED"
    subscribed = first["subscribed"]
    assert subscribed["framework_id"]["value"]
    assert subscribed["heartbeat_interval_seconds"] == 0.5
    assert subscribed["master_info"]["id"] and subscribed["master_info"]["port"] == master.port
    offers: list[JSON] = []
    while len(offers) < 2:
        offers += (await stream.next("OFFERS"))["offers"]["offers"]
    assert len({o["agent_id"]["value"] for o in offers}) == 2
    seen_ports: list[tuple[int, int]] = []
    for offer in offers:
        assert offer["framework_id"] == subscribed["framework_id"]
        assert offer["hostname"] == "127.0.0.1"
        assert offer["url"]["scheme"] == "http" and offer["url"]["address"]["port"]
        assert offer["allocation_info"] == {"role": "*"}
        assert offer["attributes"] == [{"name": "rack", "type": "TEXT", "text": {"value": "r1"}}]
        by_name = {r["name"]: r for r in offer["resources"]}
        assert by_name["cpus"]["type"] == "SCALAR" and by_name["cpus"]["scalar"]["value"] == 2
        assert by_name["mem"]["scalar"]["value"] == 1024
        assert "gpus" not in by_name
        for resource in offer["resources"]:
            assert resource["role"] == "*"
            assert resource["allocation_info"] == {"role": "*"}
        ranges = by_name["ports"]["ranges"]["range"]
        seen_ports += [(r["begin"], r["end"]) for r in ranges]
    # Two agents of one host get disjoint slices of the ports range.
    assert sorted(seen_ports) == [(31000, 31004), (31005, 31009)]
    # HEARTBEATs keep coming (the timeouts: hang guards).
    await stream.next("HEARTBEAT", timeout=30)
    await stream.next("HEARTBEAT", timeout=30)
    stream.close()


@pytest.mark.e2e
@with_master(agents=1)
async def test_calls_are_validated_like_the_master_does(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    async def post(body: bytes | JSON, **headers: str) -> tuple[int, str]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
        async with session.post(sched.url, data=data, headers=headers) as response:
            return response.status, await response.text()

    stream = await sched.subscribe(framework_info(failover_timeout=60))
    fid = {"value": sched.framework_id}
    ok = {"type": "REVIVE", "framework_id": fid}
    assert (await post(ok, **{"Mesos-Stream-Id": stream.stream_id}))[0] == 202
    # No stream ID, or another stream's: 400.
    status, text = await post(ok)
    assert status == 400 and "Mesos-Stream-Id" in text
    assert (await post(ok, **{"Mesos-Stream-Id": "not-the-stream"}))[0] == 400
    # Malformed JSON, a type Mesos does not know, a missing framework_id: 400.
    assert (await post(b"{not json", **{"Mesos-Stream-Id": stream.stream_id}))[0] == 400
    bad_type = {"type": "DANCE", "framework_id": fid}
    assert (await post(bad_type, **{"Mesos-Stream-Id": stream.stream_id}))[0] == 400
    assert (await post({"type": "REVIVE"}, **{"Mesos-Stream-Id": stream.stream_id}))[0] == 400
    # A required field missing deep inside the call is a parse error: 400.
    no_task_id = {"type": "KILL", "framework_id": fid, "kill": {}}
    assert (await post(no_task_id, **{"Mesos-Stream-Id": stream.stream_id}))[0] == 400
    # ACKNOWLEDGE with a uuid that is not 16 bytes: 400.
    short_uuid = {
        "type": "ACKNOWLEDGE",
        "framework_id": fid,
        "acknowledge": {"agent_id": {"value": "a"}, "task_id": {"value": "t"}, "uuid": "AAAA"},
    }
    assert (await post(short_uuid, **{"Mesos-Stream-Id": stream.stream_id}))[0] == 400
    # Only JSON is spoken here; other media types: 415. Only POST: 405.
    assert (await post(ok, **{"Content-Type": "text/plain"}))[0] == 415
    async with session.get(sched.url) as response:
        assert response.status == 405
    # SUBSCRIBE must not carry a stream ID, and must accept JSON.
    subscribe = {"type": "SUBSCRIBE", "subscribe": {"framework_info": framework_info()}}
    assert (await post(subscribe, **{"Mesos-Stream-Id": stream.stream_id}))[0] == 400
    assert (await post(subscribe, Accept="application/x-protobuf"))[0] == 406
    # A framework the master never saw: 400 ("Framework cannot be found").
    stranger = {"type": "REVIVE", "framework_id": {"value": "nobody"}}
    assert (await post(stranger, **{"Mesos-Stream-Id": stream.stream_id}))[0] == 400
    # UPDATE_FRAMEWORK is answered synchronously: 200, or 400 for a forbidden change.
    update: JSON = {
        "type": "UPDATE_FRAMEWORK",
        "framework_id": fid,
        "update_framework": {"framework_info": framework_info(id=fid, failover_timeout=60)},
    }
    assert (await post(update, **{"Mesos-Stream-Id": stream.stream_id}))[0] == 200
    update["update_framework"]["framework_info"]["user"] = "someone-else"
    assert (await post(update, **{"Mesos-Stream-Id": stream.stream_id}))[0] == 400
    # Known but not subscribed (its connection dropped): 403 until it subscribes again.
    stream.close()
    await until(
        lambda: not master.framework(sched.framework_id)["connected"],
        "the framework disconnected",
        5.0,
    )
    status, text = await post(ok, **{"Mesos-Stream-Id": stream.stream_id})
    assert status == 403, text
    types = [c["type"] for c in master.calls()]
    assert types[0] == "SUBSCRIBE" and "DANCE" not in types


@pytest.mark.e2e
@with_master(agents=1, cpus=2, mem=512)
async def test_task_updates_are_resent_until_acknowledged(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe()
    [offer] = await sched.offers()
    await sched.launch(offer, task_info("t1", offer, "echo hi; exit 3"))
    starting = await stream.update("t1")
    assert starting["state"] == "TASK_STARTING"
    assert starting["source"] == "SOURCE_EXECUTOR"
    assert starting["agent_id"] == offer["agent_id"]
    assert starting["executor_id"] == {"value": "t1"}
    assert len(base64.b64decode(starting["uuid"])) == 16
    assert isinstance(starting["timestamp"], float)
    assert starting["container_status"]["container_id"]["value"]
    # Not acknowledged: the same update again, and nothing newer in between.
    again = await stream.update("t1")
    assert again == starting
    await sched.ack(starting)
    running = await stream.update("t1", "TASK_RUNNING")
    assert running["container_status"]["executor_pid"] > 0
    await sched.ack(running)
    failed = await stream.update("t1", "TASK_FAILED")
    assert failed["message"] == "Command exited with status 3"
    assert failed["source"] == "SOURCE_EXECUTOR" and failed["uuid"] != running["uuid"]
    assert (await stream.update("t1")) == failed  # resent
    await sched.ack(failed)
    await stream.nothing("UPDATE", 0.8)
    task = master.task("t1")
    assert task["returncode"] == 3
    with open(os.path.join(task["sandbox"], "stdout")) as out:
        assert out.read() == "hi\n"
    stream.close()


@pytest.mark.e2e
@with_master(agents=1, cpus=2, mem=512, ports="31000-31010")
async def test_tasks_that_do_not_fit_the_offer_get_task_error(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe()
    [offer] = await sched.offers()
    too_big = task_info("big", offer, "true", resources=[scalar("cpus", 3), scalar("mem", 32)])
    bad_ports = task_info(
        "ports",
        offer,
        "true",
        resources=[scalar("cpus", 0.1), scalar("mem", 32), ports(40000, 40001)],
    )
    fits = task_info("fits", offer, "true", resources=[scalar("cpus", 2), scalar("mem", 32)])
    # Resources are checked against what is left of the offer, task by task.
    after = task_info("after", offer, "true", resources=[scalar("cpus", 0.5), scalar("mem", 32)])
    await sched.launch(offer, too_big, bad_ports, fits, after)
    for task_id in ("big", "ports", "after"):
        status = await stream.update(task_id)
        assert status["state"] == "TASK_ERROR", status
        assert status["reason"] == "REASON_TASK_INVALID"
        assert status["source"] == "SOURCE_MASTER"
        assert "uuid" not in status  # master-generated: not retried, not acknowledged
    await sched.updates_until("fits", "TASK_FINISHED")
    stream.close()


@pytest.mark.e2e
@with_master(agents=1)
async def test_accepting_a_used_offer_loses_or_drops_the_tasks(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe()
    [offer] = await sched.offers()
    await sched.launch(offer, task_info("first", offer, "true"))
    await sched.launch(offer, task_info("second", offer, "true"))
    lost = await stream.update("second")
    assert lost["state"] == "TASK_LOST" and lost["reason"] == "REASON_INVALID_OFFERS"
    assert lost["source"] == "SOURCE_MASTER"
    stream.close()

    aware = Scheduler(session, master)
    stream2 = await aware.subscribe(framework_info(capabilities=[{"type": "PARTITION_AWARE"}]))
    bogus = {"id": {"value": "no-such-offer"}, "agent_id": offer["agent_id"]}
    await aware.launch(bogus, task_info("third", bogus, "true"))
    dropped = await stream2.update("third")
    assert dropped["state"] == "TASK_DROPPED" and dropped["reason"] == "REASON_INVALID_OFFERS"
    stream2.close()


@pytest.mark.e2e
@with_master(agents=1)
async def test_decline_filter_holds_the_resources_back_for_refuse_seconds(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe()
    [offer] = await sched.offers()
    declined_at = time.monotonic()
    status, _ = await sched.call(
        "DECLINE", decline={"offer_ids": [offer["id"]], "filters": {"refuse_seconds": 1.5}}
    )
    assert status == 202
    await stream.nothing("OFFERS", 1.2)
    await sched.offers(timeout=2)
    assert time.monotonic() - declined_at >= 1.4
    [decline] = master.calls("DECLINE")
    assert decline["body"]["decline"]["filters"] == {"refuse_seconds": 1.5}
    assert decline["status"] == 202
    stream.close()


@pytest.mark.e2e
@with_master(agents=1)
async def test_suppress_stops_offers_and_revive_brings_them_back(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe()
    [offer] = await sched.offers()
    assert (await sched.call("SUPPRESS"))[0] == 202
    status, _ = await sched.call(
        "DECLINE", decline={"offer_ids": [offer["id"]], "filters": {"refuse_seconds": 0}}
    )
    assert status == 202
    await stream.nothing("OFFERS", 0.8)
    assert (await sched.call("REVIVE"))[0] == 202
    await sched.offers(timeout=2)
    # REVIVE also clears filters set by DECLINE.
    [offer] = master.offers()
    await sched.call(
        "DECLINE", decline={"offer_ids": [offer["id"]], "filters": {"refuse_seconds": 60}}
    )
    await stream.nothing("OFFERS", 0.4)
    await sched.call("REVIVE")
    await sched.offers(timeout=2)
    stream.close()


@pytest.mark.e2e
@with_master(agents=1)
async def test_kill_sends_task_killed_and_ends_the_process(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe()
    [offer] = await sched.offers()
    await sched.launch(offer, task_info("sleeper", offer, "sleep 30"))
    running = await sched.updates_until("sleeper", "TASK_RUNNING")
    pid = running["container_status"]["executor_pid"]
    assert pid_alive(pid)
    status, _ = await sched.call(
        "KILL", kill={"task_id": {"value": "sleeper"}, "agent_id": offer["agent_id"]}
    )
    assert status == 202
    killed = await sched.updates_until("sleeper", "TASK_KILLED")
    assert killed["source"] == "SOURCE_EXECUTOR"
    assert killed["message"] == "Command terminated with signal Terminated"
    assert not pid_alive(pid)
    # KILL of a task the master does not know: a reconciliation answer (TASK_LOST).
    await sched.call("KILL", kill={"task_id": {"value": "ghost"}})
    ghost = await stream.update("ghost")
    assert ghost["state"] == "TASK_LOST" and ghost["reason"] == "REASON_RECONCILIATION"
    stream.close()


@pytest.mark.e2e
@with_master(agents=1)
async def test_reconcile_implicit_and_explicit(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe()
    [offer] = await sched.offers()
    await sched.launch(offer, task_info("r1", offer, "sleep 30"))
    await sched.updates_until("r1", "TASK_RUNNING")
    assert (await sched.call("RECONCILE", reconcile={}))[0] == 202
    latest = await stream.update("r1")
    assert latest["state"] == "TASK_RUNNING"
    assert latest["reason"] == "REASON_RECONCILIATION"
    assert latest["source"] == "SOURCE_MASTER"
    assert "uuid" not in latest
    await sched.call(
        "RECONCILE",
        reconcile={"tasks": [{"task_id": {"value": "r1"}}, {"task_id": {"value": "nope"}}]},
    )
    assert (await stream.update("r1"))["state"] == "TASK_RUNNING"
    unknown = await stream.update("nope")
    assert unknown["state"] == "TASK_LOST" and unknown["reason"] == "REASON_RECONCILIATION"
    stream.close()

    aware = Scheduler(session, master)
    stream2 = await aware.subscribe(framework_info(capabilities=[{"type": "PARTITION_AWARE"}]))
    await aware.call("RECONCILE", reconcile={"tasks": [{"task_id": {"value": "nope"}}]})
    assert (await stream2.update("nope"))["state"] == "TASK_UNKNOWN"
    await aware.call(
        "RECONCILE",
        reconcile={"tasks": [{"task_id": {"value": "nope"}, "agent_id": offer["agent_id"]}]},
    )
    assert (await stream2.update("nope"))["state"] == "TASK_GONE"
    stream2.close()


@pytest.mark.e2e
@with_master(agents=1)
async def test_teardown_kills_the_tasks_and_closes_the_stream(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe(framework_info(failover_timeout=300))
    [offer] = await sched.offers()
    await sched.launch(offer, task_info("a", offer, "sleep 30"))
    pid = (await sched.updates_until("a", "TASK_RUNNING"))["container_status"]["executor_pid"]
    assert (await sched.call("TEARDOWN"))[0] == 202
    await asyncio.wait_for(stream.ended.wait(), 5)
    await until(lambda: not pid_alive(pid), "the task's process gone", 5.0)
    assert master.framework(sched.framework_id)["removed"]
    assert master.task("a")["state"] == "TASK_KILLED"
    assert [c["type"] for c in master.calls()][-1] == "TEARDOWN"
    # The removed framework cannot come back.
    again = Scheduler(session, master)
    call = {
        "type": "SUBSCRIBE",
        "framework_id": {"value": sched.framework_id},
        "subscribe": {"framework_info": framework_info(id={"value": sched.framework_id})},
    }
    response = await session.post(again.url, json=call)
    error = await Stream(response).next()
    assert error == {"type": "ERROR", "error": {"message": "Framework has been removed"}}
    response.close()


@pytest.mark.e2e
@with_master(agents=1)
async def test_disconnect_with_zero_failover_timeout_kills_the_tasks(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    await sched.subscribe()
    [offer] = await sched.offers()
    await sched.launch(offer, task_info("doomed", offer, "sleep 30"))
    pid = (await sched.updates_until("doomed", "TASK_RUNNING"))["container_status"]["executor_pid"]
    assert sched.stream is not None
    sched.stream.close()
    await until(lambda: not pid_alive(pid), "the task's process gone", 5.0)
    assert master.framework(sched.framework_id)["removed"]


@pytest.mark.e2e
@with_master(agents=1)
async def test_resubscribing_within_failover_timeout_keeps_the_tasks(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    info = framework_info(failover_timeout=30)
    first = await sched.subscribe(info)
    [offer] = await sched.offers()
    await sched.launch(offer, task_info("keep", offer, "sleep 30"))
    pid = (await sched.updates_until("keep", "TASK_RUNNING"))["container_status"]["executor_pid"]
    # Drop the connection through the control API, as a network failure would.
    async with session.post(master.url + "/__test__/drop_subscription", json={}) as response:
        assert (await response.json())["result"] == [sched.framework_id]
    await asyncio.wait_for(first.ended.wait(), 5)
    # The master has seen the disconnection (and started the failover
    # timer) rather than removing the framework: its task lives on.
    await until(
        lambda: not master.framework(sched.framework_id)["connected"],
        "the framework disconnected",
        5.0,
    )
    assert not master.framework(sched.framework_id)["removed"]
    assert pid_alive(pid)
    old_stream = first.stream_id
    second = await sched.subscribe(
        framework_info(failover_timeout=30, id={"value": sched.framework_id})
    )
    assert second.stream_id != old_stream
    assert (await sched.call("REVIVE", stream_id=old_stream))[0] == 400
    await sched.call("RECONCILE", reconcile={})
    assert (await second.update("keep"))["state"] == "TASK_RUNNING"
    # A second SUBSCRIBE while connected fails the first stream over.
    third = await Scheduler(session, master).subscribe(
        framework_info(failover_timeout=30, id={"value": sched.framework_id})
    )
    error = await second.next("ERROR")
    assert error["error"]["message"] == "Framework failed over"
    await asyncio.wait_for(second.ended.wait(), 5)
    assert pid_alive(pid)
    third.close()


@pytest.mark.e2e
@with_master(agents=1)
async def test_non_leader_redirects_with_a_protocol_relative_location(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    async with session.get(master.url + "/master/redirect", allow_redirects=False) as response:
        assert response.status == 307
        assert response.headers["Location"] == f"//127.0.0.1:{master.port}"
    body = {"leader": False, "leader_address": "leader.example:5050"}
    async with session.post(master.url + "/__test__/leader", json=body) as response:
        assert response.status == 200
    call = {"type": "SUBSCRIBE", "subscribe": {"framework_info": framework_info()}}
    async with session.post(sched.url, json=call, allow_redirects=False) as response:
        assert response.status == 307
        # Master::Http::redirect: "//" + hostname + ":" + port + stringify(request.url),
        # the path as libprocess handed it to the "master" process.
        assert response.headers["Location"] == "//leader.example:5050/master/api/v1/scheduler"
    master_path = master.url + "/master/api/v1/scheduler?x=1"
    async with session.post(master_path, json=call, allow_redirects=False) as response:
        assert response.status == 307
        assert response.headers["Location"] == "//leader.example:5050/master/api/v1/scheduler?x=1"
    async with session.get(master.url + "/redirect/x", allow_redirects=False) as response:
        assert response.status == 404
    async with session.get(master.url + "/redirect", allow_redirects=False) as response:
        assert response.status == 307
        assert response.headers["Location"] == "//leader.example:5050"
    master.set_leader(False)
    async with session.post(sched.url, json=call, allow_redirects=False) as response:
        assert response.status == 503
    master.set_leader(True)
    await sched.subscribe()


@pytest.mark.e2e
@with_master(agents=2)
async def test_rescinded_offers_and_lost_agents(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe()
    offers = await sched.offers(2)
    victim = offers[0]
    async with session.post(
        master.url + "/__test__/rescind_offer", json={"offer_id": victim["id"]["value"]}
    ) as response:
        assert (await response.json())["result"] == [victim["id"]["value"]]
    rescind = await stream.next("RESCIND")
    assert rescind["rescind"]["offer_id"] == victim["id"]
    await sched.launch(victim, task_info("late", victim, "true"))
    assert (await stream.update("late"))["state"] == "TASK_LOST"

    other = offers[1]
    await sched.launch(other, task_info("on-agent", other, "sleep 30"))
    pid = (await sched.updates_until("on-agent", "TASK_RUNNING"))["container_status"][
        "executor_pid"
    ]
    async with session.post(
        master.url + "/__test__/kill_agent", json={"agent_id": other["agent_id"]["value"]}
    ) as response:
        assert response.status == 200
    lost = await stream.update("on-agent")
    assert lost["state"] == "TASK_LOST" and lost["reason"] == "REASON_AGENT_REMOVED"
    assert lost["source"] == "SOURCE_MASTER"
    failure = await stream.next("FAILURE")
    assert failure["failure"]["agent_id"] == other["agent_id"]
    await until(lambda: not pid_alive(pid), "the task's process gone", 5.0)
    stream.close()


@pytest.mark.e2e
@with_master(agents=2)
async def test_partition_aware_frameworks_see_unreachable_and_gone(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe(framework_info(capabilities=[{"type": "PARTITION_AWARE"}]))
    first, second = await sched.offers(2)
    await sched.launch(first, task_info("u", first, "sleep 30"))
    await sched.launch(second, task_info("g", second, "sleep 30"))
    await sched.updates_until("u", "TASK_RUNNING")
    await sched.updates_until("g", "TASK_RUNNING")
    master.kill_agent(first["agent_id"]["value"])
    unreachable = await stream.update("u")
    assert unreachable["state"] == "TASK_UNREACHABLE"
    assert unreachable["unreachable_time"]["nanoseconds"] > 0
    master.kill_agent(second["agent_id"]["value"], mode="gone")
    gone = await stream.update("g")
    assert gone["state"] == "TASK_GONE_BY_OPERATOR"
    assert gone["reason"] == "REASON_AGENT_REMOVED_BY_OPERATOR"
    stream.close()


@pytest.mark.e2e
@with_master(agents=1)
async def test_injected_launch_failure_and_task_environment(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe()
    [offer] = await sched.offers()
    async with session.post(
        master.url + "/__test__/fail_next_launch", json={"pattern": "^worker"}
    ) as response:
        assert response.status == 200
    env = {"variables": [{"name": "GREETING", "value": "hello"}]}
    script = (
        "import os, sys; "
        "assert os.getcwd() == os.environ['MESOS_SANDBOX']; "
        "assert os.getpgid(0) == os.getpid(); "
        "sys.exit(0 if os.environ['GREETING'] == 'hello' and sys.argv[1:] == ['x'] else 9)"
    )
    plain = task_info("plain", offer, "")
    plain["command"] = {
        "shell": False,
        "value": sys.executable,
        "arguments": ["python", "-c", script, "x"],
        "environment": env,
    }
    # A MESOS container without an image or volumes: the host's filesystem (one
    # with: test_what_the_double_does_not_emulate_fails_the_launch_saying_so).
    plain["container"] = {"type": "MESOS", "mesos": {}}
    await sched.launch(offer, task_info("worker-0", offer, "true"), plain)
    failed = await stream.update("worker-0")
    assert failed["state"] == "TASK_FAILED"
    assert failed["reason"] == "REASON_CONTAINER_LAUNCH_FAILED"
    await sched.ack(failed)
    finished = await sched.updates_until("plain", "TASK_FINISHED")
    assert finished["message"] == "Command exited with status 0"
    recorded = master.task("plain")
    assert recorded["container"] == {"type": "MESOS", "mesos": {}}
    assert recorded["task_info"]["command"]["arguments"][-1] == "x"
    stream.close()


@pytest.mark.e2e
@with_master(agents=2, gpus=1, gpu_agents=1)
async def test_gpu_agents_are_offered_only_to_gpu_aware_frameworks(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe()
    [offer] = await sched.offers()
    assert all(r["name"] != "gpus" for r in offer["resources"])
    await stream.nothing("OFFERS", 0.4)
    gpu = Scheduler(session, master)
    stream2 = await gpu.subscribe(
        framework_info(
            roles=["ml"], capabilities=[{"type": "MULTI_ROLE"}, {"type": "GPU_RESOURCES"}]
        )
    )
    [gpu_offer] = await gpu.offers()
    assert gpu_offer["allocation_info"] == {"role": "ml"}
    by_name = {r["name"]: r for r in gpu_offer["resources"]}
    assert by_name["gpus"]["scalar"]["value"] == 1
    assert by_name["gpus"]["allocation_info"] == {"role": "ml"}
    stream.close()
    stream2.close()


@pytest.mark.e2e
def test_threaded_master_serves_synchronous_clients_and_cleans_up() -> None:
    with ThreadedTestMaster(agents=1, **FAST) as master:
        conn = http.client.HTTPConnection("127.0.0.1", master.port, timeout=10)
        body = json.dumps({"type": "SUBSCRIBE", "subscribe": {"framework_info": framework_info()}})
        conn.request(
            "POST",
            "/api/v1/scheduler",
            body,
            {"Content-Type": "application/json", "Accept": "application/json"},
        )
        response = conn.getresponse()
        assert response.status == 200
        stream_id = response.getheader("Mesos-Stream-Id")

        def record() -> JSON:
            size = int(response.readline())
            event: JSON = json.loads(response.read(size))
            return event

        subscribed = record()
        framework_id = subscribed["subscribed"]["framework_id"]
        events = [record() for _ in range(2)]
        offer = next(e for e in events if e["type"] == "OFFERS")["offers"]["offers"][0]
        call = {
            "type": "ACCEPT",
            "framework_id": framework_id,
            "accept": {
                "offer_ids": [offer["id"]],
                "operations": [
                    {
                        "type": "LAUNCH",
                        "launch": {"task_infos": [task_info("bg", offer, "sleep 30")]},
                    }
                ],
            },
        }
        other = http.client.HTTPConnection("127.0.0.1", master.port, timeout=10)
        other.request(
            "POST",
            "/api/v1/scheduler",
            json.dumps(call),
            {"Content-Type": "application/json", "Mesos-Stream-Id": stream_id or ""},
        )
        assert other.getresponse().status == 202
        task = master.wait_task_state("bg", "TASK_RUNNING")
        pid = task["pid"]
        assert pid_alive(pid)
        assert [c["type"] for c in master.calls()] == ["SUBSCRIBE", "ACCEPT"]
    assert not pid_alive(pid)
    conn.close()
    other.close()


@pytest.mark.e2e
@pytest.mark.parametrize("accept", ["application/json", "*/*", None])
def test_subscribe_accept_header_variants(accept: str | None) -> None:
    async def body() -> None:
        async with TestMaster(agents=1, **FAST) as master, aiohttp.ClientSession() as session:
            headers = {"Accept": accept} if accept else {}
            call = {"type": "SUBSCRIBE", "subscribe": {"framework_info": framework_info()}}
            async with session.post(
                master.url + "/api/v1/scheduler", json=call, headers=headers
            ) as response:
                assert response.status == 200
                assert (await Stream(response).next())["type"] == "SUBSCRIBED"

    run(body())


@pytest.mark.e2e
@with_master(agents=1)
async def test_what_the_double_does_not_emulate_fails_the_launch_saying_so(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    """Images, the fetcher and host-path volumes are real Mesos's to test
    (tests/test_real_mesos_images.py, tests/test_mesos_agents.py): the double
    never runs such a task some other way, it refuses it."""
    stream = await sched.subscribe()
    [offer] = await sched.offers()
    mesos_image = task_info("mesos-image", offer, "true")
    mesos_image["container"] = {
        "type": "MESOS",
        "mesos": {"image": {"type": "DOCKER", "docker": {"name": "tfmesos/tfmesos:cpu"}}},
    }
    docker = task_info("docker", offer, "true")
    docker["container"] = {"type": "DOCKER", "docker": {"image": "debian:12"}}
    uris = task_info("uris", offer, "true")
    uris["command"]["uris"] = [{"value": "file:///etc/hostname"}]
    volume = task_info("volume", offer, "true")
    volume["container"] = {
        "type": "MESOS",
        "volumes": [{"host_path": "/tmp", "container_path": "/mnt/x", "mode": "RO"}],
    }
    await sched.launch(offer, mesos_image, docker, uris, volume)
    said = {}
    for name in ("mesos-image", "docker", "uris", "volume"):
        failed = await stream.update(name, "TASK_FAILED")
        assert (failed["source"], failed["reason"]) == (
            "SOURCE_AGENT",
            "REASON_CONTAINER_LAUNCH_FAILED",
        ), failed
        said[name] = failed["message"]
        assert master.task(name)["pid"] is None
    assert said == {
        "mesos-image": "Failed to launch container: the tfmesos test master runs no container "
        "images: its agents run tasks on this host only; try image 'tfmesos/tfmesos:cpu' "
        "on real Mesos (scripts/start-mesos)",
        "docker": "Failed to launch container: the tfmesos test master runs no container "
        "images: its agents run tasks on this host only; try image 'debian:12' on real "
        "Mesos (scripts/start-mesos)",
        "uris": "Failed to launch container: the tfmesos test master fetches no URIs: its "
        "agents have no fetcher; try the task on real Mesos (scripts/start-mesos)",
        # filesystem/posix's words, as a real agent without filesystem/linux says them.
        "volume": "Failed to launch container: Volumes in ContainerInfo is not supported",
    }
    stream.close()


@pytest.mark.e2e
@with_master(agents=1, cpus=4, mem=1024)
async def test_launch_group_runs_on_the_default_executor_and_fails_together(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe()
    [offer] = await sched.offers()
    executor = {
        "type": "DEFAULT",
        "executor_id": {"value": "group-exec"},
        "framework_id": {"value": sched.framework_id},
        "resources": [scalar("cpus", 0.1), scalar("mem", 32)],
    }
    group = {
        "executor": executor,
        "task_group": {
            "tasks": [
                task_info("g-fail", offer, "sleep 0.3; exit 1"),
                task_info("g-sleep", offer, "sleep 30"),
            ]
        },
    }
    accept = {
        "offer_ids": [offer["id"]],
        "operations": [{"type": "LAUNCH_GROUP", "launch_group": group}],
        "filters": {"refuse_seconds": 0},
    }
    assert (await sched.call("ACCEPT", accept=accept))[0] == 202
    running = await sched.updates_until("g-sleep", "TASK_RUNNING")
    assert running["executor_id"] == {"value": "group-exec"}
    assert (await sched.updates_until("g-fail", "TASK_FAILED"))[
        "message"
    ] == "Command exited with status 1"
    await sched.updates_until("g-sleep", "TASK_KILLED")
    # The default executor is known to the master: its exit is a FAILURE event.
    expected = {"agent_id": offer["agent_id"], "executor_id": {"value": "group-exec"}, "status": 0}
    await until(
        lambda: {"type": "FAILURE", "failure": expected} in stream.seen, "the FAILURE event", 5.0
    )
    # An invalid group is refused as a whole.
    [offer] = await sched.offers(timeout=3)
    bad = {
        "executor": {**executor, "type": "CUSTOM", "executor_id": {"value": "other"}},
        "task_group": {"tasks": [task_info("g-bad", offer, "true")]},
    }
    await sched.call(
        "ACCEPT",
        accept={
            "offer_ids": [offer["id"]],
            "operations": [{"type": "LAUNCH_GROUP", "launch_group": bad}],
        },
    )
    error = await stream.update("g-bad")
    assert error["state"] == "TASK_ERROR" and error["reason"] == "REASON_TASK_GROUP_INVALID"
    stream.close()


@pytest.mark.e2e
@with_master(agents=1)
async def test_an_injected_refusal_answers_the_call_and_does_nothing(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    await sched.subscribe()
    [offer] = await sched.offers()
    async with session.post(
        master.url + "/__test__/fail_next_call", json={"type": "ACCEPT", "status": 503}
    ) as response:
        assert response.status == 200
    accept: JSON = {
        "offer_ids": [offer["id"]],
        "operations": [
            {"type": "LAUNCH", "launch": {"task_infos": [task_info("t", offer, "true")]}}
        ],
    }
    assert await sched.call("ACCEPT", accept=accept) == (503, "Master has not finished recovery")
    # Nothing was launched, and the offer is still outstanding: it can be used.
    assert master.tasks() == []
    assert [o["id"] for o in master.offers()] == [offer["id"]]
    (refused,) = master.calls("ACCEPT")
    assert (refused["status"], refused["error"]) == (503, "Master has not finished recovery")
    await sched.launch(offer, task_info("t", offer, "true"))
    await sched.updates_until("t", "TASK_FINISHED")
    # Only that type, and only as many times as asked.
    master.fail_next_call("REVIVE", status=400, message="bad stream", count=2)
    assert await sched.call("SUPPRESS") == (202, "")
    assert await sched.call("REVIVE") == (400, "bad stream")
    assert await sched.call("REVIVE") == (400, "bad stream")
    assert await sched.call("REVIVE") == (202, "")
    with pytest.raises(ValueError, match="HTTP error status"):
        master.fail_next_call("REVIVE", status=202)


@pytest.mark.e2e
@with_master(agents=1)
async def test_a_delayed_call_is_overtaken_by_a_later_one(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    """A delay holds the request before the master takes it; the master applies
    calls in arrival order, so a DECLINE held on the way lands after a SUPPRESS
    sent later."""
    await sched.subscribe()
    [offer] = await sched.offers()
    async with session.post(
        master.url + "/__test__/delay_calls", json={"type": "DECLINE", "seconds": 1, "count": 1}
    ) as response:
        assert response.status == 200
    master.clear_calls()
    decline = asyncio.ensure_future(
        sched.call(
            "DECLINE", decline={"offer_ids": [offer["id"]], "filters": {"refuse_seconds": 30}}
        )
    )
    await until(lambda: master.http.held == 1, "a call held", 5.0)
    assert await sched.call("SUPPRESS") == (202, "")
    assert master.http.held == 1, "the DECLINE was not held until the SUPPRESS was taken"
    assert await decline == (202, "")
    calls = master.calls()
    assert [(c["type"], c["status"]) for c in calls] == [("SUPPRESS", 202), ("DECLINE", 202)]
    assert [c["delay"] for c in calls] == [0.0, 1.0]
    assert calls[0]["seq"] < calls[1]["seq"]
    # Both were applied: the role is suppressed and the agent filtered.
    (framework,) = master.frameworks()
    assert framework["suppressed_roles"] == ["*"]
    assert [f["agent_id"] for f in framework["filters"]] == [offer["agent_id"]["value"]]
    # The rule was for one DECLINE only.
    assert master.faults.call_delay("DECLINE") == 0.0
    with pytest.raises(ValueError, match="negative"):
        master.delay_calls("DECLINE", -1)


def test_random_call_delays_are_bounded_and_repeatable_with_a_seed() -> None:
    from tfmesos.testing.master.cli import _build_parser

    def delays(seed: int) -> list[float]:
        master = TestMaster(call_delay=(0.1, 0.3), call_delay_seed=seed)
        return [master.faults.call_delay("DECLINE") for _ in range(20)]

    first = delays(7)
    assert first == delays(7)
    assert first != delays(8)
    assert all(0.1 <= d <= 0.3 for d in first)
    master = TestMaster(call_delay=(0.1, 0.3))
    master.delay_calls("*", 2.0, count=1)
    assert master.faults.call_delay("SUPPRESS") == 2.0
    assert 0.1 <= master.faults.call_delay("SUPPRESS") <= 0.3
    with pytest.raises(ValueError, match="call_delay"):
        TestMaster(call_delay=(0.3, 0.1))
    args = _build_parser().parse_args(["--call-delay", "0-0.3", "--call-delay-seed", "3"])
    assert (args.call_delay, args.call_delay_seed) == ((0.0, 0.3), 3)
    assert _build_parser().parse_args(["--no-root-submissions"]).no_root_submissions


@pytest.mark.e2e
@with_master(agents=1, root_submissions=False)
async def test_root_is_refused_without_root_submissions(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    """``Master::validateFramework``: the HTTP handler has already answered 200
    with the stream when ``Master::subscribe`` refuses, so the refusal is one
    ERROR event (no SUBSCRIBED) and the end of the stream."""
    call = {"type": "SUBSCRIBE", "subscribe": {"framework_info": framework_info(user="root")}}
    async with session.post(sched.url, json=call) as response:
        assert response.status == 200
        stream = Stream(response)
        await asyncio.wait_for(stream.ended.wait(), 5)
    assert stream.seen == [
        {
            "type": "ERROR",
            "error": {
                "message": "User 'root' is not allowed to run frameworks"
                " without --root_submissions set"
            },
        }
    ]
    assert master.frameworks() == []
    await sched.subscribe(framework_info(user="nobody"))
    # UPDATE_FRAMEWORK validates as SUBSCRIBE does (Master::updateFramework).
    update = {
        "framework_info": {**framework_info(user="root"), "id": {"value": sched.framework_id}}
    }
    status, text = await sched.call("UPDATE_FRAMEWORK", update_framework=update)
    assert status == 400
    assert "without --root_submissions set" in text


@pytest.mark.e2e
@with_master(agents=1)
async def test_framework_roles_are_validated_as_roles_cpp_does(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    """``roles::validate`` (src/common/roles.cpp) through framework validation:
    its own messages, behind validation.cpp's prefix; ``a*b`` and a backslash
    are valid roles there."""
    capabilities = [{"type": "MULTI_ROLE"}]
    refused = {
        "a//b": "Role 'a//b' cannot contain two adjacent slashes",
        "-a": "Role component '-a' is invalid because it starts with a dash",
        "a/*": "Role 'a/*' cannot include '*' as a component",
        "a b": "Role component 'a b' is invalid because it contains backspace or whitespace",
    }
    for role, message in refused.items():
        info = framework_info(roles=[role], capabilities=capabilities)
        call = {"type": "SUBSCRIBE", "subscribe": {"framework_info": info}}
        async with session.post(sched.url, json=call) as response:
            stream = Stream(response)
            await asyncio.wait_for(stream.ended.wait(), 5)
        expected = f"'FrameworkInfo.roles' contains invalid role: {message}"
        assert stream.seen == [{"type": "ERROR", "error": {"message": expected}}]
    await sched.subscribe(framework_info(roles=["a*b", "x\\y"], capabilities=capabilities))
    (framework,) = master.frameworks()
    assert framework["roles"] == ["a*b", "x\\y"]


def test_tfrun_as_root_against_a_master_without_root_submissions_says_why(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    with marked_master(job_procs, monkeypatch, agents=1, root_submissions=False) as master:
        result = run_tfrun(
            "-m",
            master.url,
            "--user",
            "root",
            "-w",
            "1",
            "-s",
            "0",
            "--",
            "true",
            env=job_procs.env(),
        )
        assert master.frameworks() == []
    assert result.returncode == 125  # tfrun's own failure, not a task's
    message = "User 'root' is not allowed to run frameworks without --root_submissions set"
    said = [line for line in result.stderr.splitlines() if message in line]
    assert said == [
        f"tfrun: error: the mesos backend failed: the Mesos master sent an ERROR: {message}"
    ]
    assert job_procs.wait_gone(10) == []
