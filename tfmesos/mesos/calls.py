"""The scheduler calls (``scheduler.proto``'s ``Call``, as JSON) and the order
they go out in; :mod:`tfmesos.mesos.scheduler` sends them.

A call waits for the answer to every earlier call it shares a subject with
(:func:`call_subjects`), so it never overtakes one it depends on (a REVIVE
overtaken by its SUPPRESS would leave the role suppressed for good). Calls with
nothing in common go out side by side (:class:`CallQueue`), so one slow answer
does not hold up every KILL and ACKNOWLEDGE behind it. Mesos's own library gets
the same order by pipelining calls on one connection (docs/mesos-protocol.md).
Pure: no I/O.
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
    reason = f"{url} answered {status}"
    text = " ".join(text.split())
    if text.startswith("<"):
        text = "(a web page)"
    if text:
        reason += f" {text}"
    if status not in MASTER_ANSWERS:
        reason += ", which no Mesos master answers to SUBSCRIBE: is -m a Mesos master?"
    return False, reason


def accept(offer_id: dict[str, Any], task_infos: list[dict[str, Any]], refuse: float) -> Call:
    """ACCEPT ``offer_id`` with one LAUNCH; the rest of the offer is refused for
    ``refuse`` s."""
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
    """What a call is about: it waits for every earlier call sharing a subject. A
    task's acknowledgements are ordered by the agent already; an unknown call
    type is ordered with the offer calls."""
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
    """Calls decided but not sent, in order; :meth:`ready` takes those that may go
    now."""

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
