"""The test suite's own rules: one way to wait on a condition, with a failure
that names what was awaited (tests/conftest.py's ``wait_until`` and
``until``); lanes that match file names."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import E2E_FIXTURES, until, wait_until

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


WAITS = {"until", "_until", "wait_until", "_wait_for"}


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


# -- lanes that match file names ------------------------------------------------
#
# A file named ``test_*_unit.py`` holds unit tests only; one named
# ``test_real_*.py`` (real Apache Mesos) e2e tests only; and no test is marked
# for both lanes. The lanes as tests/conftest.py's collection hook gives them,
# read from the source: an ``e2e`` or ``heavy`` mark (the test's, its class's
# or the module's ``pytestmark``), or a fixture of E2E_FIXTURES reached
# through the fixtures the module and conftest.py define.


def mark_names(decorators: list[ast.expr]) -> set[str]:
    """The ``pytest.mark.NAME`` among ``decorators`` (called or not)."""
    names = set()
    for node in decorators:
        target = node.func if isinstance(node, ast.Call) else node
        if isinstance(target, ast.Attribute) and ast.unparse(target.value) == "pytest.mark":
            names.add(target.attr)
    return names


def used_fixtures(decorators: list[ast.expr]) -> set[str]:
    """The fixtures named by ``@pytest.mark.usefixtures(...)`` among ``decorators``."""
    return {
        arg.value
        for node in decorators
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.mark.usefixtures"
        for arg in node.args
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
    }


def pytestmark_of(body: list[ast.stmt]) -> list[ast.expr]:
    """The marks of a module's or a class's ``pytestmark = ...``, as decorators."""
    for node in body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            value = node.value
            return list(value.elts) if isinstance(value, ast.List) else [value]
    return []


Function = ast.FunctionDef | ast.AsyncFunctionDef


def fixtures_of(tree: ast.Module) -> dict[str, set[str]]:
    """Each fixture the module defines, with the fixtures it asks for."""
    return {
        node.name: {a.arg for a in node.args.args}
        for node in ast.walk(tree)
        if isinstance(node, Function)
        and any("fixture" in ast.unparse(d) for d in node.decorator_list)
    }


def e2e_fixtures(defined: dict[str, set[str]]) -> set[str]:
    """E2E_FIXTURES and every fixture that reaches one of them."""
    found = set(E2E_FIXTURES)
    while more := {name for name, asks in defined.items() if asks & found} - found:
        found |= more
    return found


def collected_in(tree: ast.Module) -> Iterator[tuple[str, Function, list[ast.expr]]]:
    """Each test function, by its name in pytest's node id, with the marks
    its class gives it."""
    for node in tree.body:
        if isinstance(node, Function) and node.name.startswith("test"):
            yield node.name, node, []
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            marks = node.decorator_list + pytestmark_of(node.body)
            for inner in node.body:
                if isinstance(inner, Function) and inner.name.startswith("test"):
                    yield f"{node.name}::{inner.name}", inner, marks


def lanes(path: Path, conftest: dict[str, set[str]]) -> dict[str, set[str]]:
    """Each test of ``path`` with the lanes it is in: {"unit"}, {"e2e"} or both."""
    tree = ast.parse(path.read_text())
    e2e = e2e_fixtures({**conftest, **fixtures_of(tree)})
    module = pytestmark_of(tree.body)
    found = {}
    for name, test, class_marks in collected_in(tree):
        decorators = module + class_marks + test.decorator_list
        marks = mark_names(decorators)
        asks = {a.arg for a in test.args.args} | used_fixtures(decorators)
        in_e2e = bool(marks & {"e2e", "heavy"} or asks & e2e)
        found[name] = ({"e2e"} if in_e2e else set()) | (
            {"unit"} if "unit" in marks or not in_e2e else set()
        )
    return found


def disagreements(root: Path) -> list[str]:
    conftest = fixtures_of(ast.parse((root / "conftest.py").read_text()))
    said = []
    for path in sorted(root.glob("test_*.py")):
        for test, lane in lanes(path, conftest).items():
            where = f"{path.name}::{test}"
            if lane == {"unit", "e2e"}:
                said.append(f"{where} is marked unit but is e2e")
            elif path.stem.endswith("_unit") and lane != {"unit"}:
                said.append(f"{where} is e2e in a file named unit")
            elif path.name.startswith("test_real_") and lane != {"e2e"}:
                said.append(f"{where} is unit in a file of real Mesos (e2e)")
    return said


def test_every_file_named_for_a_lane_holds_tests_of_that_lane_only() -> None:
    """Before, test_local_backend_unit.py was marked e2e (two of its tests
    marked unit as well, so in both lanes), and test_real_mesos_security.py
    held a unit test."""
    assert disagreements(TESTS) == []


def test_a_disagreement_is_found_wherever_it_stands(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "import pytest\n@pytest.fixture\ndef cluster(mesos): ...\n"
    )
    (tmp_path / "test_x_unit.py").write_text(
        "import pytest\n"
        "def test_plain(): ...\n"
        "def test_on_a_cluster(cluster): ...\n"
        "@pytest.mark.usefixtures('slurm')\ndef test_on_slurm(): ...\n"
        "class TestSome:\n    pytestmark = pytest.mark.heavy\n    def test_in_a_class(self): ...\n"
    )
    (tmp_path / "test_real_y.py").write_text(
        "import pytest\npytestmark = [pytest.mark.e2e]\n"
        "@pytest.mark.unit\ndef test_both(): ...\ndef test_e2e(): ...\n"
    )
    (tmp_path / "test_real_z.py").write_text("def test_pure(): ...\n")
    (tmp_path / "test_w_unit.py").write_text(
        "import pytest\npytestmark = pytest.mark.usefixtures('zk')\ndef test_zk(): ...\n"
    )
    assert disagreements(tmp_path) == [
        "test_real_y.py::test_both is marked unit but is e2e",
        "test_real_z.py::test_pure is unit in a file of real Mesos (e2e)",
        "test_w_unit.py::test_zk is e2e in a file named unit",
        "test_x_unit.py::test_on_a_cluster is e2e in a file named unit",
        "test_x_unit.py::test_on_slurm is e2e in a file named unit",
        "test_x_unit.py::TestSome::test_in_a_class is e2e in a file named unit",
    ]
