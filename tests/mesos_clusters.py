"""One face for the two Mesos the end-to-end tests run on: the test master
(``tfmesos.testing.master``) and real Apache Mesos (``tfmesos.testing.real_mesos``).

A scenario written against :class:`MesosUnderTest` sees only what a framework
or an operator sees on either: the master's address, its ``/state`` JSON, and
agents that can be killed and started again. What only the double can show
(the calls it received) is behind :attr:`MesosUnderTest.double`.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tfmesos.testing.master import ThreadedTestMaster
from tfmesos.testing.real_mesos import MesosNotAvailable, RealMesos, prepare

JSON = dict[str, Any]

_home: Any = None
"""prepare()'s answer (a path), or the MesosNotAvailable it raised: asked once."""


def real_mesos_home() -> Any:
    """The Mesos to start, prepared once per session; under CI (which runs
    scripts/start-mesos --prepare) its absence fails the test, elsewhere it
    skips it with the reason printed."""
    global _home
    if _home is None:
        try:
            _home = prepare()
        except MesosNotAvailable as exc:
            _home = exc
    if isinstance(_home, MesosNotAvailable):
        if os.environ.get("CI"):
            pytest.fail(f"CI runs scripts/start-mesos --prepare, yet {_home}")
        print(f"\nskipping a real-Mesos run: {_home}", file=sys.stderr)
        pytest.skip(str(_home))
    return _home


class MesosUnderTest:
    """A master with agents, either kind, as the scenarios see it."""

    def __init__(self, double: ThreadedTestMaster | None = None, real: RealMesos | None = None):
        assert (double is None) != (real is None)
        self.double = double
        self.real = real
        self.kind = "test-master" if double is not None else "real-mesos"

    @property
    def url(self) -> str:
        if self.double is not None:
            return self.double.url
        assert self.real is not None
        return self.real.url

    def state(self) -> JSON:
        with urllib.request.urlopen(self.url + "/state", timeout=10) as answer:
            state: JSON = json.loads(answer.read())
            return state

    def framework(self, name_part: str = "") -> JSON:
        """The one framework (active or completed) whose name holds ``name_part``."""
        state = self.state()
        found = [
            f
            for f in state["frameworks"] + state["completed_frameworks"]
            if name_part in (f.get("name") or "")
        ]
        assert len(found) == 1, [f.get("name") for f in found]
        return found[0]

    def tasks(self) -> list[JSON]:
        """Every task of every framework, as the master's ``/state`` lists it."""
        state = self.state()
        return [
            task
            for f in state["frameworks"] + state["completed_frameworks"]
            for key in ("tasks", "unreachable_tasks", "completed_tasks")
            for task in f.get(key, [])
        ]

    def wait_for(self, what: str, condition: Callable[[], Any], timeout: float = 60.0) -> Any:
        """Poll ``condition`` until it is true; fail naming ``what`` (and the logs)."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.kind}: {what} not within {timeout:g}s\n{self.logs()}")
            time.sleep(0.1)

    def torn_down(self, name_part: str = "") -> bool:
        """The job's framework is over: no longer among the master's active ones."""
        state = self.state()
        return not any(name_part in (f.get("name") or "") for f in state["frameworks"])

    def agent_ids(self) -> list[str]:
        return sorted(a["id"] for a in self.state()["slaves"] if a.get("active"))

    def kill_agent_of(self, task_name_part: str) -> str:
        """Kill the agent running the first task whose name holds ``task_name_part``."""
        (task,) = [
            t for t in self.tasks() if task_name_part in t["name"] and t["state"] == "TASK_RUNNING"
        ]
        agent_id = str(task["slave_id"])
        if self.double is not None:
            self.double.kill_agent(agent_id)
            return agent_id
        assert self.real is not None
        for index in range(len(self.real.agents)):
            if self.real.agent_id(index) == agent_id:
                self.real.kill_agent(index)
                return agent_id
        raise AssertionError(f"no agent {agent_id}")

    def logs(self) -> str:
        return "" if self.real is None else "real Mesos logs:\n" + self.real.logs()
