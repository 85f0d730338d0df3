"""The scheduler calls (Mesos JSON, ``scheduler.proto``'s ``Call``) and the
order they go out in: beside :mod:`tfmesos.mesos.scheduler`, which sends them.

A call never overtakes one decided before it that it depends on. Mesos's
own library (``src/scheduler/scheduler.cpp``) keeps two connections
(``struct Connections``: ``subscribe`` and ``nonSubscribe``) and sends every
call but SUBSCRIBE on the second (``Connection::send`` in
``3rdparty/libprocess/include/process/http.hpp`` pipelines them on that one
connection, so the master reads them in order, and reads the next before it
has answered the one before). Here a call waits for the answer to every
earlier call it shares a subject with (:func:`call_subjects`): the offer
and role state for DECLINE, SUPPRESS, REVIVE and ACCEPT (a REVIVE overtaken
by the SUPPRESS decided before it would leave the role suppressed for good),
a task for the ACCEPT that launches it and a KILL or RECONCILE of it. Calls
with no subject in common go out at once, side by side (:class:`CallQueue`):
a call the master is slow to answer holds up only those that depend on it,
not every ACKNOWLEDGE and KILL behind it for up to the call timeout.

Pure: no I/O, no event loop of its own.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MASTER_ANSWERS",
    "OFFERS_SUBJECT",
    "CallQueue",
    "Queued",
    "accept",
    "acknowledge",
    "call_subjects",
    "decline",
    "kill",
    "reconcile",
    "revive",
    "subscribe_refused",
    "suppress",
]

Call = dict[str, Any]

OFFERS_SUBJECT = "offers"
"""The subject of the calls that change what the master offers us."""


MASTER_ANSWERS = frozenset({200, 307, 400, 401, 403, 503})
"""What a Mesos master answers SUBSCRIBE (``src/master/http.cpp``): subscribed,
a redirect to the leader, a refusal, or 503 while no leader is elected or it
recovers. Anything else is not a master: it does not end the first contact,
and when every master given answers so the client ends at once
(:func:`tfmesos.mesos.scheduler.not_a_master`)."""


def subscribe_refused(url: str, status: int, text: str) -> tuple[bool, str]:
    """What an answer to SUBSCRIBE other than 200 or a redirect says, in one
    line: (whether trying again cannot help, the line). ``text``: the
    answer's first 500 characters."""
    if status in (400, 401, 403):
        return True, f"the Mesos master at {url} refused SUBSCRIBE: {status} {text}"
    said = f"{url} answered {status}"
    text = " ".join(text.split())
    if text.startswith("<"):
        text = "(a web page)"
    if text:
        said += f" {text}"
    if status not in MASTER_ANSWERS:
        said += ", which no Mesos master answers to SUBSCRIBE: is -m a Mesos master?"
    return False, said


def accept(offer_id: dict[str, Any], task_infos: list[dict[str, Any]], refuse: float) -> Call:
    """ACCEPT ``offer_id`` with one LAUNCH of ``task_infos``; what the tasks
    leave of the offer is filtered for ``refuse`` seconds."""
    return {
        "type": "ACCEPT",
        "accept": {
            "offer_ids": [offer_id],
            "operations": [{"type": "LAUNCH", "launch": {"task_infos": task_infos}}],
            "filters": {"refuse_seconds": refuse},
        },
    }


def decline(offer_id: dict[str, Any], refuse: float) -> Call:
    return {
        "type": "DECLINE",
        "decline": {"offer_ids": [offer_id], "filters": {"refuse_seconds": refuse}},
    }


def kill(task_id: str, agent_id: str) -> Call:
    return {
        "type": "KILL",
        "kill": {"task_id": {"value": task_id}, "agent_id": {"value": agent_id}},
    }


def revive(roles: Sequence[str]) -> Call:
    return {"type": "REVIVE", "revive": {"roles": list(roles)}}


def suppress(roles: Sequence[str]) -> Call:
    return {"type": "SUPPRESS", "suppress": {"roles": list(roles)}}


def reconcile(tasks: Sequence[tuple[str, str]]) -> Call:
    """RECONCILE these (task ID, agent ID); none: an implicit reconciliation."""
    return {
        "type": "RECONCILE",
        "reconcile": {
            "tasks": [{"task_id": {"value": t}, "agent_id": {"value": a}} for t, a in tasks]
        },
    }


def acknowledge(status: dict[str, Any]) -> Call:
    """ACKNOWLEDGE the update ``status`` (one that carries a ``uuid``)."""
    return {
        "type": "ACKNOWLEDGE",
        "acknowledge": {
            "agent_id": status.get("agent_id", {}),
            "task_id": status["task_id"],
            "uuid": status["uuid"],
        },
    }


def call_subjects(call: Call) -> frozenset[str]:
    """What a call is about: it is sent only once every earlier call that
    shares a subject with it is answered. Acknowledgements of one task are
    in order already (an agent sends a task's next update only once the last
    is acknowledged) and depend on nothing else; a call of a type not named
    here is ordered with the offer calls."""
    kind = call.get("type")

    def task(body: Any) -> str:
        return f"task:{body.get('task_id', {}).get('value')}"

    if kind == "ACKNOWLEDGE":
        return frozenset({"acknowledge:" + task(call.get("acknowledge", {}))})
    if kind == "KILL":
        return frozenset({task(call.get("kill", {}))})
    if kind == "RECONCILE":
        return frozenset(task(t) for t in call.get("reconcile", {}).get("tasks", []))
    subjects = {OFFERS_SUBJECT}
    if kind == "ACCEPT":
        for operation in call.get("accept", {}).get("operations", []):
            launched = operation.get("launch", {}).get("task_infos", [])
            grouped = operation.get("launch_group", {}).get("task_group", {}).get("tasks", [])
            subjects.update(task(info) for info in [*launched, *grouped])
    return frozenset(subjects)


@dataclass(eq=False)
class Queued:
    """A call waiting to be sent, or sent and not yet answered."""

    call: Call
    future: asyncio.Future[str | None]
    subjects: frozenset[str] = frozenset()


class CallQueue:
    """The calls decided and not yet sent, in the order they were decided;
    :meth:`ready` takes out those that may go now."""

    def __init__(self) -> None:
        self._waiting: deque[Queued] = deque()

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, call: Call, future: asyncio.Future[str | None]) -> None:
        self._waiting.append(Queued(call, future, call_subjects(call)))

    def ready(self, in_flight: Sequence[Queued]) -> list[Queued]:
        """Take out the calls that no call before them on a subject of theirs
        waits for: neither one ``in_flight`` (sent, not answered) nor one still
        queued. A call whose caller stopped waiting (its future done) is dropped."""
        busy: set[str] = set()
        for sent in in_flight:
            busy |= sent.subjects
        ready = []
        waiting: deque[Queued] = deque()
        for item in self._waiting:
            if item.future.done():
                continue
            if item.subjects & busy:
                waiting.append(item)
            else:
                ready.append(item)
            # Later calls on its subjects wait for it, sent or not.
            busy |= item.subjects
        self._waiting = waiting
        return ready

    def drop(self, result: str | None) -> None:
        """Give up every call queued: each one's future gets ``result``."""
        while self._waiting:
            item = self._waiting.popleft()
            if not item.future.done():
                item.future.set_result(result)
