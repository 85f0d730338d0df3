"""The package's layering, and its modules' size, held by reading the source.

Every module under ``tfmesos/`` is parsed with :mod:`ast` (nothing is
imported) and each import it makes of another tfmesos module is checked
against :data:`LAYERS`: a module may import its own layer and those below,
never one above. The map is the one docs/architecture.md ("Layers") explains.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tfmesos

pytestmark = pytest.mark.unit

PACKAGE = Path(tfmesos.__file__).resolve().parent

FOUNDATION, AGENT, PROTOCOL, BACKENDS, LAUNCHER, ENTRY, TESTING = range(7)
LAYER_NAMES = ["foundation", "agent", "protocol", "backends", "launcher", "entry", "testing"]

LAYERS: dict[str, int] = {
    # What both ends share, each part on its own: stdlib only or nearly.
    "tfmesos.errors": FOUNDATION,
    "tfmesos.wire": FOUNDATION,
    "tfmesos.taskenv": FOUNDATION,
    "tfmesos.clusterfile": FOUNDATION,
    "tfmesos.exported": FOUNDATION,
    "tfmesos.spec": FOUNDATION,
    "tfmesos.flagtypes": FOUNDATION,
    "tfmesos.procfs": FOUNDATION,
    "tfmesos.procenv": FOUNDATION,
    "tfmesos.oomkills": FOUNDATION,
    "tfmesos.proctree": FOUNDATION,
    "tfmesos.aio": FOUNDATION,
    "tfmesos.ports": FOUNDATION,
    "tfmesos.resources": FOUNDATION,
    "tfmesos.policy": FOUNDATION,
    "tfmesos.shell": FOUNDATION,
    "tfmesos.console": FOUNDATION,
    "tfmesos.rundirs": FOUNDATION,
    "tfmesos.advertise": FOUNDATION,
    "tfmesos.tasklog": FOUNDATION,
    "tfmesos.pathtext": FOUNDATION,
    # The runner of a task's several processes (--nproc-per-task): the agent
    # and the launcher start it, the spec reads its limit.
    "tfmesos.nproc": FOUNDATION,
    # A job's state as its event stream tells it (tfrun list, status, wait).
    "tfmesos.jobstate": FOUNDATION,
    # What runs in a task.
    "tfmesos.agent": AGENT,
    "tfmesos.supervisor": AGENT,
    "tfmesos.rendezvous_client": AGENT,
    "tfmesos.forkserver": AGENT,
    "tfmesos.tfserver": AGENT,
    "tfmesos.sweeper": AGENT,
    # ... and in every Python of a task: JAX's cluster environment, its hook.
    "tfmesos.jaxhook": AGENT,
    "tfmesos.jaxcluster": AGENT,
    # The protocols: Mesos's scheduler API, Slurm's commands and job script,
    # the launcher's end of the rendezvous.
    "tfmesos.mesos": PROTOCOL,
    "tfmesos.slurm": PROTOCOL,
    "tfmesos.rendezvous": PROTOCOL,
    # The backends, their options among them.
    "tfmesos.backends": BACKENDS,
    # The supervision of a job, and of its restarts.
    "tfmesos.launcher": LAUNCHER,
    "tfmesos.run": LAUNCHER,
    # What users call: tfrun, tfmesos.cluster(), the package's own names.
    "tfmesos.cli": ENTRY,
    "tfmesos.finegrained": ENTRY,
    "tfmesos.tfcontext": ENTRY,
    # tfrun --detach, and a detached job's commands (tfrun list, logs, wait, stop).
    "tfmesos.detach": ENTRY,
    "tfmesos.jobs": ENTRY,
    "tfmesos": ENTRY,
    # Test doubles, for tfmesos's tests and users' own.
    "tfmesos.testing": TESTING,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int | None:
    """The layer of ``module``: that of the longest name in LAYERS it is under."""
    while module:
        if module in LAYERS:
            return LAYERS[module]
        module = module.rpartition(".")[0]
    return None


def imported(module: str, path: Path) -> set[str]:
    """The tfmesos modules ``module`` imports, type-checking imports included:
    ``from tfmesos import wire`` is ``tfmesos.wire``, not the package."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "tfmesos")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            if base.split(".")[0] != "tfmesos":
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in MODULES else base)
    found.discard(module)
    return found


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in MODULES if layer_of(m) is None]
    assert not unplaced, f"give these a layer in LAYERS (tests/test_layers.py): {unplaced}"


def test_no_import_runs_from_a_lower_layer_to_a_higher_one() -> None:
    upward = []
    for module, path in MODULES.items():
        own = layer_of(module)
        assert own is not None
        for target in sorted(imported(module, path)):
            theirs = layer_of(target)
            if theirs is not None and theirs > own:
                upward.append(
                    f"{module} ({LAYER_NAMES[own]}) imports {target} ({LAYER_NAMES[theirs]})"
                )
    assert not upward, "imports that run up the layers:\n" + "\n".join(upward)


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    # The check above must be able to fail: a protocol module importing a backend.
    path = tmp_path / "scheduler.py"
    path.write_text("from tfmesos.backends import options\nfrom . import calls\n")
    found = imported("tfmesos.mesos.scheduler", path)
    assert found == {"tfmesos.backends.options", "tfmesos.mesos.calls"}
    assert layer_of("tfmesos.backends.options") == BACKENDS
    assert layer_of("tfmesos.mesos.calls") == PROTOCOL


LONG_MODULE = 600
"""A module longer than this is reported: worth a look, not a failure."""
MAX_LINES = 1000
"""A module longer than this fails the suite: split it."""


def module_lengths() -> dict[str, int]:
    return {
        str(path.relative_to(PACKAGE.parent)): len(path.read_text().splitlines())
        for path in MODULES.values()
    }


def test_no_module_is_over_1000_lines() -> None:
    lengths = module_lengths()
    long = sorted((lines, path) for path, lines in lengths.items() if lines > LONG_MODULE)
    for lines, path in reversed(long):
        # Shown by `pytest -rP`; a long module is a hint, not a defect.
        print(f"long module: {path} ({lines} lines)")
    over = [f"{path} ({lines})" for lines, path in reversed(long) if lines > MAX_LINES]
    assert not over, f"modules over {MAX_LINES} lines: " + ", ".join(over)


MOST_TANGLED = "D"
"""radon's rank a function may reach at the most (cyclomatic complexity 21
to 30); E and F are split up (issue 39)."""


def test_no_function_is_more_tangled_than_radons_d() -> None:
    from radon.complexity import cc_rank, cc_visit

    root = PACKAGE.parent
    sources = sorted(PACKAGE.rglob("*.py")) + sorted((root / "bench").glob("*.py"))
    tangled = [
        f"{path.relative_to(root)}:{block.lineno} {block.name} ({block.complexity})"
        for path in sources
        for block in cc_visit(path.read_text())
        if cc_rank(block.complexity) > MOST_TANGLED
    ]
    assert not tangled, "functions past radon's D: " + ", ".join(tangled)


ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def documented_layers() -> dict[str, set[str]]:
    """docs/architecture.md's layer table: each layer's row, the names in
    backquotes of its modules column (``mesos/`` for a package)."""
    import re

    rows = re.findall(r"^\| (\w+) \| (.*?) \| .*\|$", ARCHITECTURE.read_text(), re.MULTILINE)
    return {
        layer: {name.rstrip("/") for name in re.findall(r"`([\w/.]+)`", modules)}
        for layer, modules in rows
        if layer in LAYER_NAMES
    }


def test_the_architecture_docs_layer_table_is_the_layer_map() -> None:
    # Before: it named `runs` (renamed rundirs) and `lazyssl` (gone), and
    # left out procenv, oomkills, sweeper and tfcontext.
    documented = documented_layers()
    assert set(documented) == set(LAYER_NAMES)
    for module, layer in LAYERS.items():
        if module == "tfmesos":
            continue
        name = module.removeprefix("tfmesos.")
        assert name in documented[LAYER_NAMES[layer]], (
            f"{module} ({LAYER_NAMES[layer]}) is not in docs/architecture.md's row"
        )
    names = {module.removeprefix("tfmesos.") for module in LAYERS}
    named = {n for row in documented.values() for n in row if not n.endswith(".py")}
    unknown = named - names - {"__init__"}
    assert not unknown, f"docs/architecture.md names modules that are not: {sorted(unknown)}"


def test_the_architecture_docs_module_table_names_every_module() -> None:
    import re

    section = ARCHITECTURE.read_text().split("## Modules, one job each", 1)[1]
    section = section.split("\n## ", 1)[0]
    named = {
        name
        for row in re.findall(r"^\| (.*?) \|", section, re.MULTILINE)
        for name in re.findall(r"`([\w/.-]+\.py)`", row)
    }
    files = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py" and path.relative_to(PACKAGE).parts[0] != "testing"
    }
    # A module is named by its path under tfmesos/, or by its file's name.
    missing = sorted(f for f in files if f not in named and f.rpartition("/")[2] not in named)
    assert not missing, f"modules docs/architecture.md's module table does not name: {missing}"
