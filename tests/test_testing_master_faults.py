"""The test master's faults are declared once (``faults.FAULTS``, one entry per
``@fault`` method of ``Faults``): each entry must be reachable as a method of
TestMaster, as a method of ThreadedTestMaster and as a POST route of
``/__test__/``, each reaching the same Faults method with the same arguments,
and docs/test-master.md must list it with its route."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tfmesos.testing.master import TestMaster, ThreadedTestMaster
from tfmesos.testing.master.fault_table import FAULTS, Fault
from tfmesos.testing.master.faults import Faults

pytestmark = pytest.mark.unit

DOCS = Path(__file__).resolve().parent.parent / "docs" / "test-master.md"

# A value of each type a fault's parameter may have, as Python passes it.
SAMPLES: dict[str, Any] = {
    "str": "a-value",
    "int": 7,
    "float": 0.25,
    "bool": False,
    "str | None": "another-value",
    "int | None": 3,
}


class Recorder:
    """Stands in for Faults: records the fault method called and its arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Callable[..., str]:
        def record(*args: Any, **kwargs: Any) -> str:
            self.calls.append((name, args, kwargs))
            return f"{name} done"

        return record


def expected_call(entry: Fault) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    args = tuple(SAMPLES[p.annotation] for p in entry.parameters if not p.keyword_only)
    kwargs = {p.name: SAMPLES[p.annotation] for p in entry.parameters if p.keyword_only}
    return entry.name, args, kwargs


ENTRIES = list(FAULTS.values())
IDS = [entry.name for entry in ENTRIES]


def test_the_table_holds_every_public_fault_method() -> None:
    public = {
        name
        for name, member in vars(Faults).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }
    # The master's own hooks, called by its other parts, not faults a test injects.
    hooks = {"take_launch_failure", "check_call", "call_delay"}
    assert set(FAULTS) == public - hooks


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_each_fault_is_a_method_of_the_test_master(entry: Fault) -> None:
    master = TestMaster(agents=1)
    recorder = Recorder()
    master.faults = recorder  # type: ignore[assignment]
    name, args, kwargs = expected_call(entry)
    assert getattr(master, name)(*args, **kwargs) == f"{name} done"
    assert recorder.calls == [(name, args, kwargs)]
    assert inspect.signature(getattr(TestMaster, name)) == inspect.signature(getattr(Faults, name))
    assert getattr(TestMaster, name).__doc__ == getattr(Faults, name).__doc__


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_each_fault_is_a_method_of_the_threaded_test_master(
    entry: Fault, monkeypatch: pytest.MonkeyPatch
) -> None:
    threaded = ThreadedTestMaster(agents=1)
    master = TestMaster(agents=1)
    recorder = Recorder()
    master.faults = recorder  # type: ignore[assignment]
    ran_through_call: list[bool] = []

    def call(fn: Callable[[TestMaster], Any], timeout: float = 30.0) -> Any:
        ran_through_call.append(True)  # on the master's loop, in the real thing
        return fn(master)

    monkeypatch.setattr(threaded, "call", call)
    name, args, kwargs = expected_call(entry)
    assert getattr(threaded, name)(*args, **kwargs) == f"{name} done"
    assert recorder.calls == [(name, args, kwargs)] and ran_through_call == [True]
    assert inspect.signature(getattr(ThreadedTestMaster, name)) == inspect.signature(
        getattr(Faults, name)
    )


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_each_fault_is_a_route(entry: Fault) -> None:
    master = TestMaster(agents=1)
    recorder = Recorder()
    master.http.faults = recorder  # type: ignore[assignment]
    name, args, kwargs = expected_call(entry)
    body = {p.body_key: SAMPLES[p.annotation] for p in entry.parameters}

    async def post() -> tuple[int, Any]:
        async with TestClient(TestServer(master.http.application())) as client:
            answer = await client.post(entry.path, json=body)
            return answer.status, await answer.json()

    status, answered = asyncio.run(post())
    assert (status, answered) == (200, {"result": f"{name} done"})
    assert recorder.calls == [(name, args, kwargs)]


WITH_PARAMETERS = [entry for entry in ENTRIES if entry.parameters]


@pytest.mark.parametrize("entry", WITH_PARAMETERS, ids=[entry.name for entry in WITH_PARAMETERS])
def test_a_route_takes_the_defaults_and_refuses_what_is_missing(entry: Fault) -> None:
    master = TestMaster(agents=1)
    recorder = Recorder()
    master.http.faults = recorder  # type: ignore[assignment]

    async def post(body: dict[str, Any]) -> int:
        async with TestClient(TestServer(master.http.application())) as client:
            answer = await client.post(entry.path, json=body)
            status: int = answer.status
            return status

    required = {p.body_key: SAMPLES[p.annotation] for p in entry.parameters if p.required}
    assert asyncio.run(post(required)) == 200
    [(_, args, kwargs)] = recorder.calls
    given = (
        dict(zip([p.name for p in entry.parameters if not p.keyword_only], args, strict=True))
        | kwargs
    )
    assert given == {
        p.name: SAMPLES[p.annotation] if p.required else p.default for p in entry.parameters
    }
    if required:
        assert asyncio.run(post({})) == 404  # a missing key, as for an unknown ID


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_the_docs_list_each_fault_with_its_route(entry: Fault) -> None:
    docs = DOCS.read_text()
    rows = [line for line in docs.splitlines() if line.startswith(f"| `{entry.name}(")]
    assert rows, f"docs/test-master.md has no row for {entry.name}"
    assert f"`POST {entry.path}`" in rows[0]
