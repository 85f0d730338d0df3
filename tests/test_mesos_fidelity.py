"""The test master held to the real thing.

One scripted framework speaks the v1 scheduler HTTP API itself (no tfrun, no
SchedulerClient: every call, header and answer is the script's own) to real
Apache Mesos 1.12 and to the test master, each with the same two agents, and
writes down what it saw: the HTTP status and text of each call, the event
types, the first offer, every status update (its ``(state, reason, source)``
sequence per task, and each field), the answers to reconciliation. The two
transcripts must be equal but for :data:`KNOWN_DIFFERENCES`, which
``docs/test-master.md`` ("Real Mesos: differences found") mirrors. Real Mesos
is right where they differ: a difference is fixed in the double, or listed
with its reason.

The script: SUBSCRIBE (MULTI_ROLE, PARTITION_AWARE, a failover timeout), take
the first offer and LAUNCH four tiny tasks on it (``exit 3``, ``true``,
``sleep 60``, and one asking for a port the offer lacks), DECLINE the other
offer, LAUNCH on the offer already used, ACKNOWLEDGE every update that has a
``uuid``, RECONCILE while ``sleep 60`` runs, KILL it, RECONCILE again (with a
KILL and an explicit RECONCILE of tasks the master does not know), make calls
the master must refuse, TEARDOWN, and SUBSCRIBE again as the removed framework.
"""

from __future__ import annotations

import base64
import contextlib
import fnmatch
import getpass
import http.client
import json
import queue
import re
import socket
import threading
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MARK, JobProcesses, wait_until
from tests.mesos_clusters import real_mesos_home
from tfmesos.testing.master import ThreadedTestMaster
from tfmesos.testing.real_mesos import AgentSpec, RealMesos

JSON = dict[str, Any]
API_PATH = "/api/v1/scheduler"
STEP_TIMEOUT = 30.0
"""How long one step of the script may take before the test fails: a guard
against a hang (the whole script takes a few seconds on real Mesos)."""

AGENTS = [
    AgentSpec("cpus:4;mem:8192;disk:10240;ports:[31000-31499]"),
    AgentSpec("cpus:4;mem:8192;disk:10240;ports:[31500-31999]"),
]
"""The harness's two unreserved agents (``real_mesos.DEFAULT_AGENTS``; its third
is reserved for a role this framework does not have, so it is never offered),
with a fixed disk rather than the size of this machine's, and without
attributes: the double's agents, ``DOUBLE_CONFIG``, are the same."""
DOUBLE_CONFIG: JSON = {
    "agents": 2,
    "cpus": 4,
    "mem": 8192,
    "disk": 10240,
    # Split in two, as the real agents have them: 31000-31499 and 31500-31999.
    "ports": "31000-31999",
    # The real master's --allocation_interval in the harness; the heartbeat
    # interval is both masters' default (15 s).
    "allocation_interval": 0.2,
}
NOT_OFFERED_PORT = 30999
"""Below both agents' port ranges: no offer has it."""

TASK_RESOURCES = [
    {"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}},
    {"name": "mem", "type": "SCALAR", "scalar": {"value": 32}},
]
TASK_COMMANDS = {
    "exit-3": "exit 3",
    "true": "true",
    "sleep-60": "sleep 60",
    "port-not-offered": "true",
    "on-a-used-offer": "true",
}
"""The scripted tasks, by ID (which is also their name in the transcript)."""
NEVER_LAUNCHED = "never-launched"
"""A task ID the framework never used. The explicit RECONCILE that names it
is answered after the answers to every call before it (one stream, in order),
so its answer marks the end of those."""
KILLED_UNKNOWN = "killed-but-never-launched"

ABSENT = "<absent>"
"""What a transcript has where the other has a field and it has none."""


@dataclass(frozen=True)
class KnownDifference:
    """Observations (an ``fnmatch`` pattern over the transcript's names) where
    the double does ``double`` and real Mesos ``real``, and why that stays."""

    observations: str
    double: Any
    real: Any
    reason: str


KNOWN_DIFFERENCES = [
    KnownDifference(
        "UPDATE.*.0.container_status.executor_pid",
        ABSENT,
        "<pid>",
        "no executor process: the double's executor_pid is the task's own pid, "
        "which TASK_STARTING precedes",
    ),
]
"""Mirrored in docs/test-master.md, "Real Mesos: differences found"."""


class ScriptedFramework:
    """A framework that is a script: SUBSCRIBE's stream read by a thread into a
    queue, every other call a POST on a connection of its own, and each event
    handled (each update with a ``uuid`` acknowledged) while the script waits
    for a condition."""

    def __init__(self, url: str, kind: str, logs: Callable[[], str]) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 5050
        self.kind = kind
        self.logs = logs
        self.events: queue.Queue[JSON | None] = queue.Queue()
        self.stream: http.client.HTTPConnection | None = None
        self.stream_ended = False
        self.framework_id = ""
        self.stream_id = ""
        self.event_types: list[str] = []
        self.subscribed: JSON = {}
        self.offer_events: list[list[JSON]] = []
        self.updates: dict[str, list[JSON]] = {}
        self.error: JSON = {}
        self.ack_statuses: set[int] = set()
        self.answers: dict[str, JSON] | None = None
        """While not None, the updates that arrive are answers to
        reconciliation, collected here by task rather than in :attr:`updates`."""
        self.placeholders: dict[str, str] = {}
        """Values this run was given or made up (IDs, ports), each with what it
        is written as in a transcript, so that two runs compare."""

    # -- the wire --------------------------------------------------------

    def subscribe(self, framework_info: JSON) -> JSON:
        """Open the stream; what its answer's status line and headers say."""
        self.events = queue.Queue()
        self.stream_ended = False
        self.event_types = []
        call: JSON = {"type": "SUBSCRIBE", "subscribe": {"framework_info": framework_info}}
        if "id" in framework_info:
            call["framework_id"] = framework_info["id"]
        connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        connection.request("POST", API_PATH, json.dumps(call), headers)
        answer = connection.getresponse()
        self.stream = connection
        self.stream_id = answer.getheader("Mesos-Stream-Id") or ""
        if answer.status == 200:
            threading.Thread(target=self._read_stream, args=(answer,), daemon=True).start()
        return {
            "status": answer.status,
            "Content-Type": answer.getheader("Content-Type", ABSENT),
            "Transfer-Encoding": answer.getheader("Transfer-Encoding", ABSENT),
            "Mesos-Stream-Id": "<uuid>" if self.stream_id else ABSENT,
        }

    def _read_stream(self, answer: http.client.HTTPResponse) -> None:
        # RecordIO: a decimal length, a newline, that many bytes of JSON.
        with contextlib.suppress(OSError, ValueError, http.client.HTTPException):
            while True:
                length = answer.readline()
                if not length.strip():
                    break
                self.events.put(json.loads(answer.read(int(length))))
        self.events.put(None)

    def close_stream(self) -> None:
        if self.stream is not None and self.stream.sock is not None:
            # Wakes the reading thread, which close() alone would not.
            with contextlib.suppress(OSError):
                self.stream.sock.shutdown(socket.SHUT_RDWR)
            self.stream.close()
        self.stream = None

    def post(
        self, call: JSON, *, stream_id: str | None = None, framework_id: str | None = None
    ) -> str:
        """One call; its answer as ``"STATUS text"``, normalised. ``stream_id``
        is the current one by default; ``""`` sends no ``Mesos-Stream-Id``."""
        body = {"framework_id": {"value": framework_id or self.framework_id}, **call}
        headers = {"Content-Type": "application/json"}
        stream_id = self.stream_id if stream_id is None else stream_id
        if stream_id:
            headers["Mesos-Stream-Id"] = stream_id
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            connection.request("POST", API_PATH, json.dumps(body), headers)
            answer = connection.getresponse()
            text = answer.read().decode(errors="replace")
            return f"{answer.status} {self.normalise(text)}".rstrip()
        finally:
            connection.close()

    # -- events ----------------------------------------------------------

    def handle_events_until(self, what: str, condition: Callable[[], Any]) -> Any:
        """Handle events, one at each look, until ``condition`` holds; fail
        naming ``what``, with the updates so far and the cluster's logs."""

        def met() -> Any:
            if not (found := condition()):
                with contextlib.suppress(queue.Empty):
                    self.handle(self.events.get(timeout=0.05))
            return found

        def explain() -> str:
            updates = {task: self.states(task) for task in self.updates}
            return f"updates so far: {updates}\n{self.logs()}"

        return wait_until(met, f"{self.kind}: {what}", STEP_TIMEOUT, poll=0, explain=explain)

    def handle(self, event: JSON | None) -> None:
        if event is None:
            self.stream_ended = True
            return
        kind = str(event.get("type"))
        if kind not in self.event_types:
            self.event_types.append(kind)
        if kind == "SUBSCRIBED":
            self.subscribed = event["subscribed"]
            self.framework_id = self.subscribed["framework_id"]["value"]
            self.placeholders[self.framework_id] = "<framework>"
        elif kind == "OFFERS":
            offers = event["offers"].get("offers", [])
            self.offer_events.append(offers)
            for offer in offers:
                self.placeholders[offer["id"]["value"]] = "<offer>"
                self.placeholders[offer["agent_id"]["value"]] = "<agent>"
        elif kind == "UPDATE":
            self._update(event["update"]["status"])
        elif kind == "ERROR":
            self.error = event["error"]

    def _update(self, status: JSON) -> None:
        task = status["task_id"]["value"]
        if self.answers is not None:
            self.answers[task] = status
        else:
            self.updates.setdefault(task, []).append(status)
        if "uuid" in status:
            ack = {
                "type": "ACKNOWLEDGE",
                "acknowledge": {
                    "agent_id": status["agent_id"],
                    "task_id": status["task_id"],
                    "uuid": status["uuid"],
                },
            }
            self.ack_statuses.add(int(self.post(ack).split()[0]))

    def states(self, task: str) -> list[str]:
        return [status["state"] for status in self.updates.get(task, [])]

    def collect_answers(self, *calls: JSON) -> JSON:
        """Make ``calls``, then an explicit RECONCILE of a task never launched;
        the updates that came meanwhile, by task, normalised."""
        self.answers = {}
        barrier = {"task_id": {"value": NEVER_LAUNCHED}}
        for call in [*calls, {"type": "RECONCILE", "reconcile": {"tasks": [barrier]}}]:
            answer = self.post(call)
            assert answer == "202", f"{self.kind}: {call['type']} answered {answer}"
        self.handle_events_until(
            f"the answer about {NEVER_LAUNCHED}",
            lambda: self.answers is not None and NEVER_LAUNCHED in self.answers,
        )
        answers, self.answers = self.answers, None
        return {task: self.normalise_status(status) for task, status in sorted(answers.items())}

    # -- normalising -------------------------------------------------------

    def normalise(self, text: str) -> str:
        for value, placeholder in sorted(self.placeholders.items(), key=lambda p: -len(p[0])):
            text = text.replace(value, placeholder)
        # Anything else shaped like a UUID: stream and container IDs.
        return re.sub(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", "<uuid>", text)

    def normalise_status(self, status: JSON) -> JSON:
        """A TaskStatus with what differs from run to run written as what it is."""
        out: JSON = json.loads(self.normalise(json.dumps(status)))
        for field in ("timestamp", "uuid"):
            if field in out:
                out[field] = f"<{field}>"
        container = out.get("container_status", {})
        if "executor_pid" in container:
            container["executor_pid"] = "<pid>"
        return out

    def normalise_offer(self, offer: JSON) -> JSON:
        out: JSON = json.loads(self.normalise(json.dumps(offer)))
        # The real agent's own port, a free one; the double has no agent to reach.
        out["url"]["address"]["port"] = "<agent port>"
        for resource in out["resources"]:
            if resource["name"] == "ports":
                # Which agent's range comes first differs from run to run:
                # Mesos's allocator shuffles the agents.
                resource["ranges"] = "<the agent's ports>"
        return out


def task_info(task_id: str, agent_id: JSON, port: int | None = None) -> JSON:
    resources = list(TASK_RESOURCES)
    if port is not None:
        ranges = {"range": [{"begin": port, "end": port}]}
        resources.append({"name": "ports", "type": "RANGES", "ranges": ranges})
    return {
        "name": task_id,
        "task_id": {"value": task_id},
        "agent_id": agent_id,
        "resources": resources,
        "command": {"value": TASK_COMMANDS[task_id]},
    }


def launch(offer_id: JSON, *tasks: JSON) -> JSON:
    operation = {"type": "LAUNCH", "launch": {"task_infos": list(tasks)}}
    return {"type": "ACCEPT", "accept": {"offer_ids": [offer_id], "operations": [operation]}}


def acknowledge(agent_id: JSON, task_id: str, uuid_bytes: bytes) -> JSON:
    return {
        "type": "ACKNOWLEDGE",
        "acknowledge": {
            "agent_id": agent_id,
            "task_id": {"value": task_id},
            "uuid": base64.b64encode(uuid_bytes).decode(),
        },
    }


def run_script(url: str, kind: str, logs: Callable[[], str]) -> JSON:
    """Drive one master through the script; what it did, normalised."""
    fw = ScriptedFramework(url, kind, logs)
    seen: JSON = {}
    framework_info: JSON = {
        "user": getpass.getuser(),
        "name": "fidelity",
        "roles": ["*"],
        "capabilities": [{"type": "MULTI_ROLE"}, {"type": "PARTITION_AWARE"}],
        "failover_timeout": 60.0,
    }
    try:
        seen["SUBSCRIBE"] = fw.subscribe(framework_info)
        fw.handle_events_until("SUBSCRIBED", lambda: fw.framework_id)
        fw.placeholders[fw.stream_id] = "<stream>"
        seen["SUBSCRIBED"] = {
            "fields": sorted(fw.subscribed),
            "heartbeat_interval_seconds": fw.subscribed.get("heartbeat_interval_seconds"),
            "master_info fields": sorted(fw.subscribed.get("master_info", {})),
        }
        first_offers = fw.handle_events_until("the first offers", lambda: fw.offer_events)[0]
        seen["offers in the first OFFERS event"] = len(first_offers)
        offer, *others = first_offers
        seen["first offer"] = fw.normalise_offer(offer)
        agent_id = offer["agent_id"]
        for resource in offer["resources"]:
            if resource["name"] == "ports":
                for r in resource["ranges"]["range"]:
                    assert not r["begin"] <= NOT_OFFERED_PORT <= r["end"], offer
                    fw.placeholders[f"[{r['begin']}-{r['end']}]"] = "[<the agent's ports>]"

        tasks = [task_info(task, agent_id) for task in ("exit-3", "true", "sleep-60")]
        tasks.append(task_info("port-not-offered", agent_id, NOT_OFFERED_PORT))
        seen["ACCEPT"] = fw.post(launch(offer["id"], *tasks))
        decline: JSON = {"type": "DECLINE", "decline": {"offer_ids": [o["id"] for o in others]}}
        # For an hour: the other agent is not offered again in this run.
        decline["decline"]["filters"] = {"refuse_seconds": 3600}
        seen["DECLINE of the other offers"] = fw.post(decline)
        used = {"type": "DECLINE", "decline": {"offer_ids": [offer["id"]]}}
        seen["DECLINE of the offer already accepted"] = fw.post(used)
        again = launch(offer["id"], task_info("on-a-used-offer", agent_id))
        seen["ACCEPT of the offer already accepted"] = fw.post(again)

        def ended(task: str) -> bool:
            return bool(set(fw.states(task)) & {"TASK_FAILED", "TASK_FINISHED"})

        fw.handle_events_until(
            "the short tasks ending and sleep-60 running",
            lambda: (
                fw.states("port-not-offered")
                and fw.states("on-a-used-offer")
                and ended("exit-3")
                and ended("true")
                and "TASK_RUNNING" in fw.states("sleep-60")
            ),
        )
        implicit = {"type": "RECONCILE", "reconcile": {"tasks": []}}
        seen["RECONCILE while sleep-60 runs"] = fw.collect_answers(implicit)

        kill = {"type": "KILL", "kill": {"task_id": {"value": "sleep-60"}, "agent_id": agent_id}}
        seen["KILL"] = fw.post(kill)
        fw.handle_events_until(
            "sleep-60 killed", lambda: fw.states("sleep-60")[-1] != "TASK_RUNNING"
        )
        finished = {"task_id": {"value": "true"}, "agent_id": agent_id}
        kill_unknown = {
            "type": "KILL",
            "kill": {"task_id": {"value": KILLED_UNKNOWN}, "agent_id": agent_id},
        }
        seen["RECONCILE, KILL of an unknown task, after all ended"] = fw.collect_answers(
            implicit, {"type": "RECONCILE", "reconcile": {"tasks": [finished]}}, kill_unknown
        )
        seen["UPDATE (state, reason, source, uuid)"] = {
            task: [
                (s["state"], s.get("reason", ABSENT), s.get("source", ABSENT), "uuid" in s)
                for s in statuses
            ]
            for task, statuses in sorted(fw.updates.items())
        }
        seen["UPDATE"] = {
            task: [fw.normalise_status(status) for status in statuses]
            for task, statuses in sorted(fw.updates.items())
        }
        seen["ACKNOWLEDGE statuses"] = sorted(fw.ack_statuses)

        revive = {"type": "REVIVE"}
        seen["REVIVE with another stream ID"] = fw.post(revive, stream_id=str(uuid.uuid4()))
        seen["REVIVE without a stream ID"] = fw.post(revive, stream_id="")
        stranger = f"{fw.framework_id[:-4]}9999"
        fw.placeholders[stranger] = "<another framework>"
        seen["REVIVE for a framework never seen"] = fw.post(revive, framework_id=stranger)
        seen["ACKNOWLEDGE, uuid of 5 bytes"] = fw.post(acknowledge(agent_id, "true", b"short"))
        seen["ACKNOWLEDGE, uuid of 16 zero bytes"] = fw.post(
            acknowledge(agent_id, "true", bytes(16))
        )
        stray = acknowledge(agent_id, "port-not-offered", uuid.uuid4().bytes)
        seen["ACKNOWLEDGE of a task the master does not know"] = fw.post(stray)

        seen["TEARDOWN"] = fw.post({"type": "TEARDOWN"})
        fw.handle_events_until("the stream's end after TEARDOWN", lambda: fw.stream_ended)
        seen["event types"] = sorted(fw.event_types)
        seen["REVIVE after TEARDOWN"] = fw.post(revive)

        fw.close_stream()
        removed = {**framework_info, "id": {"value": fw.framework_id}}
        seen["SUBSCRIBE as the removed framework"] = fw.subscribe(removed)
        fw.handle_events_until("the stream's end", lambda: fw.stream_ended)
        seen["SUBSCRIBE as the removed framework: events"] = fw.event_types
        seen["SUBSCRIBE as the removed framework: ERROR"] = json.loads(
            fw.normalise(json.dumps(fw.error))
        )
    finally:
        fw.close_stream()
    return seen


def flatten(value: Any, name: str = "") -> dict[str, Any]:
    """Nested dicts and lists as one level: ``{"a": [{"b": 1}]}`` is ``{"a.0.b": 1}``.
    Tuples stay whole: each is one observation (an update's summary)."""
    items: Iterable[tuple[str, Any]]
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value):
        items = ((str(index), item) for index, item in enumerate(value))
    else:
        return {name: value}
    out: dict[str, Any] = {}
    for key, item in items:
        out.update(flatten(item, f"{name}.{key}" if name else str(key)))
    return out


def differences(double: JSON, real: JSON) -> dict[str, tuple[Any, Any]]:
    """Every observation where the two differ: name -> (double's, real's)."""
    flat_double, flat_real = flatten(double), flatten(real)
    return {
        name: (flat_double.get(name, ABSENT), flat_real.get(name, ABSENT))
        for name in sorted(flat_double.keys() | flat_real.keys())
        if flat_double.get(name, ABSENT) != flat_real.get(name, ABSENT)
    }


def unexplained(found: dict[str, tuple[Any, Any]]) -> tuple[list[str], list[KnownDifference]]:
    """The differences no entry of the table explains, and the entries that
    explained none (the double was fixed, or Mesos changed: the table is stale)."""
    used: set[int] = set()
    left = []
    for name, (double, real) in found.items():
        for index, known in enumerate(KNOWN_DIFFERENCES):
            if fnmatch.fnmatchcase(name, known.observations) and (double, real) == (
                known.double,
                known.real,
            ):
                used.add(index)
                break
        else:
            left.append(f"{name}:\n    test master: {double!r}\n    real Mesos:  {real!r}")
    stale = [known for index, known in enumerate(KNOWN_DIFFERENCES) if index not in used]
    return left, stale


@pytest.fixture
def real_mesos(job_procs: JobProcesses, tmp_path: Path) -> Iterator[RealMesos]:
    home = real_mesos_home()
    # Tasks get the executor environment only: the mark goes there.
    with RealMesos(
        home, agents=AGENTS, executor_env={MARK: job_procs.mark}, base=tmp_path / "mesos"
    ) as real:
        job_procs.ignored.update(real.daemon_pids())
        yield real


@pytest.fixture
def double_master(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ThreadedTestMaster]:
    with ThreadedTestMaster(**DOUBLE_CONFIG) as master:
        # Tasks inherit the master's environment: the mark goes there.
        monkeypatch.setenv(MARK, job_procs.mark)
        job_procs.ignored.update(master.call(lambda m: m.helper_pids()))
        yield master


def test_the_test_master_does_what_real_mesos_does(
    real_mesos: RealMesos, double_master: ThreadedTestMaster
) -> None:
    real = run_script(real_mesos.url, "real-mesos", real_mesos.logs)
    # The script did what it meant to: else two equal transcripts prove nothing.
    assert real["UPDATE (state, reason, source, uuid)"]["exit-3"][-1][0] == "TASK_FAILED"
    assert real["UPDATE (state, reason, source, uuid)"]["true"][-1][0] == "TASK_FINISHED"
    assert real["UPDATE (state, reason, source, uuid)"]["sleep-60"][-1][0] == "TASK_KILLED"
    assert real["UPDATE (state, reason, source, uuid)"]["port-not-offered"] == [
        ("TASK_ERROR", "REASON_TASK_INVALID", "SOURCE_MASTER", False)
    ]
    assert real["TEARDOWN"] == "202"

    double = run_script(double_master.url, "test-master", lambda: "")
    left, stale = unexplained(differences(double, real))
    assert not left, (
        f"{len(left)} difference(s) between the test master and real Mesos that "
        "KNOWN_DIFFERENCES does not list (real Mesos is right: fix the double, or list "
        "the difference with its reason here and in docs/test-master.md):\n" + "\n".join(left)
    )
    assert not stale, f"KNOWN_DIFFERENCES lists differences no longer seen: {stale}"
