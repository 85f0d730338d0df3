"""The package's layering, and its modules' size, held by reading the source.

The layers are folders (docs/architecture.md, "Layers"): that page's layer
table names, for each layer, the folders and the few top-level modules in
it, and is the map this file checks against. Every module under
``tfmesos/`` is parsed with :mod:`ast` (nothing is imported) and each import
it makes of another tfmesos module must go to its own layer or one below.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import tfmesos

pytestmark = pytest.mark.unit

PACKAGE = Path(tfmesos.__file__).resolve().parent
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"

LAYER_NAMES = ["foundation", "agent", "protocol", "backends", "launcher", "entry", "testing"]
FOUNDATION, AGENT, PROTOCOL, BACKENDS, LAUNCHER, ENTRY, TESTING = range(len(LAYER_NAMES))


def documented_layers() -> dict[str, list[str]]:
    """docs/architecture.md's layer table: each layer's entries, the names
    in backquotes of its first column after the layer (``agent/`` for a
    folder, ``spec.py`` for a module at the top)."""
    rows = re.findall(r"^\| (\w+) \| (.*?) \| .*\|$", ARCHITECTURE.read_text(), re.MULTILINE)
    return {
        layer: re.findall(r"`([\w/.]+)`", entries)
        for layer, entries in rows
        if layer in LAYER_NAMES
    }


def _dotted(entry: str) -> str:
    name = entry.removesuffix("/").removesuffix(".py").replace("/", ".")
    return "tfmesos" if name == "__init__" else f"tfmesos.{name}"


LAYERS: dict[str, int] = {
    _dotted(entry): LAYER_NAMES.index(layer)
    for layer, entries in documented_layers().items()
    for entry in entries
}
"""Each folder and top-level module of the package, and its layer."""


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
    ``from tfmesos.rendezvous import protocol`` is ``tfmesos.rendezvous.protocol``,
    not the package."""
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


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph.get(module, ()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            circle = []
            while True:
                member = stack.pop()
                circle.append(member)
                if member == module:
                    break
            if len(circle) > 1:
                circles.append(sorted(circle))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def test_no_two_modules_import_each_other() -> None:
    # Before: cli imported tfrun (to run as __main__) and tfrun cli; jobs
    # imported cli's parser and cli jobs. Lazy imports count: a circle is
    # one to a reader. The test double's fault table is the exception: its
    # faults module fills the table by importing it (a registry).
    graph = {
        module: {t for t in imported(module, path) if t in MODULES}
        for module, path in MODULES.items()
        if not module.startswith("tfmesos.testing.")
    }
    assert import_circles(graph) == []
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    # The check above must be able to fail: a protocol module importing a backend.
    path = tmp_path / "scheduler.py"
    path.write_text("from tfmesos.backends import options\nfrom . import calls\n")
    found = imported("tfmesos.mesos.scheduler", path)
    assert found == {"tfmesos.backends.options", "tfmesos.mesos.calls"}
    assert layer_of("tfmesos.backends.options") == BACKENDS
    assert layer_of("tfmesos.mesos.calls") == PROTOCOL


BACKEND_PACKAGES = sorted(
    f"tfmesos.backends.{path.name}"
    for path in (PACKAGE / "backends").iterdir()
    if (path / "__init__.py").exists()
)
"""Each backend's own package (``backends/local/``, ``backends/mesos/``, ...)."""
BACKEND_PROTOCOLS = ("tfmesos.mesos", "tfmesos.slurm")
"""The cluster managers' own code, which only their backends call."""


def backend_internals(module: str, path: Path) -> list[str]:
    """What ``module`` imports of a backend's own package or of a cluster
    manager's protocol: the registry (``tfmesos.backends``) and the
    interfaces beside it (``tfmesos.backends.jobs``, ...) are not."""
    return sorted(
        target
        for target in imported(module, path)
        if any(
            target == inner or target.startswith(inner + ".")
            for inner in (*BACKEND_PACKAGES, *BACKEND_PROTOCOLS)
        )
    )


def test_the_cli_calls_the_backends_only_through_their_interface() -> None:
    # Issue 47: cli/ imported the Slurm backend's squeue (jobs.py), the
    # Mesos one's detach (main.py) and the local one's fork server; a
    # second Mesos client lived in cli/. Each backend is reached by name
    # through the registry, and its job's life through JobStore.
    assert BACKEND_PACKAGES == [
        "tfmesos.backends.local",
        "tfmesos.backends.mesos",
        "tfmesos.backends.slurm",
    ]
    reaching = [
        f"{module} imports {target}"
        for module, path in MODULES.items()
        if module == "tfmesos.cli" or module.startswith("tfmesos.cli.")
        for target in backend_internals(module, path)
    ]
    assert not reaching, "cli/ reaches into a backend:\n" + "\n".join(reaching)


def test_the_cli_check_sees_a_backends_own_module(tmp_path: Path) -> None:
    # The check above must be able to fail.
    path = tmp_path / "jobs.py"
    path.write_text(
        "from tfmesos.backends import job_store\n"
        "from tfmesos.backends.jobs import JobStore\n"
        "from tfmesos.backends.mesos.jobs import MesosJobs\n"
        "from tfmesos.slurm.commands import parse_squeue\n"
        "from tfmesos.backends.local import forkstart\n"
    )
    assert backend_internals("tfmesos.cli.jobs", path) == [
        "tfmesos.backends.local.forkstart",
        "tfmesos.backends.mesos.jobs",
        "tfmesos.slurm.commands",
    ]


HTTP_CLIENTS = ("aiohttp", "urllib.request", "http.client", "requests", "httpx")


def http_clients(path: Path) -> set[str]:
    """The HTTP client libraries the module at ``path`` imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and not node.level
            else []
        )
        found.update(n for n in names for c in HTTP_CLIENTS if n == c or n.startswith(c + "."))
    return found


def test_one_http_client_speaks_to_mesos() -> None:
    # Issue 47: cli/mesos_jobs.py had a second client (urllib, its own
    # leader lookup and Basic-auth header) beside the scheduler's. The test
    # double and real Mesos's harness (testing/) are Mesos's side, not ours.
    speaking = {
        module
        for module, path in MODULES.items()
        if not module.startswith("tfmesos.testing") and http_clients(path)
    }
    assert speaking == {"tfmesos.mesos.transport"}


def test_the_http_client_check_sees_urllib(tmp_path: Path) -> None:
    path = tmp_path / "jobs.py"
    path.write_text("import json\nimport urllib.request\nfrom aiohttp import web\n")
    assert http_clients(path) == {"urllib.request", "aiohttp"}


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


def test_the_layer_table_is_the_tree() -> None:
    # Every folder and every module at the top of the package is in one row,
    # and every entry of the table is there, in one row only. A module
    # inside a folder may have a row of its own (the rendezvous's protocol
    # and client sit below its server), under a folder the table names.
    documented = documented_layers()
    assert list(documented) == LAYER_NAMES
    entries = [entry for row in documented.values() for entry in row]
    assert len(entries) == len(set(entries)), f"named in two rows: {entries}"
    top = {entry for entry in entries if "/" not in entry.removesuffix("/")}
    tree = {
        path.name + ("/" if path.is_dir() else "")
        for path in PACKAGE.iterdir()
        if path.name != "__pycache__" and (path.is_dir() or path.suffix == ".py")
    }
    assert top == tree, (
        f"not in docs/architecture.md's layer table: {sorted(tree - top)}; "
        f"named there but not in the tree: {sorted(top - tree)}"
    )
    inner = sorted(set(entries) - top)
    astray = [e for e in inner if not (PACKAGE / e).exists() or e.split("/")[0] + "/" not in top]
    assert not astray, f"named in the layer table but not in a folder it names: {astray}"


def test_the_architecture_docs_module_table_is_the_tree() -> None:
    # Each module by its path under tfmesos/ (a folder's modules may share a
    # row), and no path that is not there: the table named `runs` and
    # `lazyssl` long after they were gone.
    section = ARCHITECTURE.read_text().split("## Modules, one job each", 1)[1]
    section = section.split("\n## ", 1)[0]
    named = {
        name
        for row in re.findall(r"^\| (.*?) \|", section, re.MULTILINE)
        for name in re.findall(r"`([\w/.-]+(?:\.py|/))`", row)
    }
    files = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
        and path.relative_to(PACKAGE).parts[:2] != ("testing", "master")
    }
    missing = sorted(files - named)
    assert not missing, f"modules docs/architecture.md's module table does not name: {missing}"
    stale = sorted(n for n in named if not (PACKAGE / n).exists())
    assert not stale, f"docs/architecture.md's module table names what is not there: {stale}"
