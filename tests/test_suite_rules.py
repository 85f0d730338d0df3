"""The test suite's own rules: one way to wait on a condition, with a failure
that names what was awaited (tests/conftest.py's ``wait_until`` and ``until``)."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from tests.conftest import until, wait_until

TESTS = Path(__file__).resolve().parent


def test_wait_until_returns_what_the_condition_gave() -> None:
    looks = iter([0, None, "found"])
    assert wait_until(lambda: next(looks), "the third look", poll=0) == "found"


def test_wait_until_fails_naming_what_was_awaited_and_explaining() -> None:
    with pytest.raises(AssertionError) as never:
        wait_until(lambda: False, "the moon", 0.01, poll=0.001, explain=lambda: "its logs")
    assert str(never.value) == "never: the moon (not within 0.01s)\nits logs"


def test_until_lets_the_loop_turn_while_it_waits() -> None:
    async def scenario() -> str:
        said: list[str] = []
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, said.append, "here")
        await until(lambda: said, "the callback")
        with pytest.raises(AssertionError, match=r"^never: nothing \(not within 0\.01s\)$"):
            await until(lambda: False, "nothing", 0.01)
        return said[0]

    assert asyncio.run(scenario()) == "here"


WAITS = {"until", "_until", "wait_until"}


def test_only_the_helpers_define_a_wait_on_a_condition() -> None:
    """Before, eleven test modules each wrote their own, most failing with
    "the condition never held" and no word of which."""
    defined = [
        f"{path.relative_to(TESTS)}:{node.lineno} {node.name}"
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != "conftest.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in WAITS
    ]
    assert defined == [], "use tests.conftest's wait_until or until"
