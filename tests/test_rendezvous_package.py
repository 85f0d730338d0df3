"""The rendezvous in one place (issue #47): what both ends rely on is in
``tfmesos.rendezvous.protocol``, and the task's end imports none of the
launcher's.

The layer table (docs/architecture.md, read by tests/test_layers.py) keeps
the client from importing the server; these hold the rest: no constant of
the agent's is read by the launcher's end (``UNRESOLVED_STATUS`` and
``ENV_COMMAND`` were), and the agent, the fork server and the Slurm job
script load neither the server nor asyncio.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_layers import AGENT, MODULES, PACKAGE, layer_of

AGENT_SIDE = ("tfmesos.agent", "tfmesos.rendezvous.client")
"""The task's end: what runs in a task, and its end of the rendezvous."""
CLIENTS = (*AGENT_SIDE, "tfmesos.slurm.jobscript")
"""What may read the task's end's own settings: it, and the Slurm job
script, which dials the rendezvous as a client too."""
CONSTANT = re.compile(r"[A-Z][A-Z0-9_]*$")


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def constants_read(path: Path) -> set[tuple[str, str]]:
    """Each ``(module, NAME)``: an upper-case name the source at ``path``
    reads from a tfmesos module, imported by name or read as an attribute
    of the module imported (``from tfmesos.agent import nproc``,
    ``nproc.ENV_NPROC``)."""
    tree = ast.parse(path.read_text(), str(path))
    modules: dict[str, str] = {}
    found: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tfmesos"):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if submodule in MODULES:
                    modules[alias.asname or alias.name] = submodule
                elif CONSTANT.match(alias.name):
                    found.add((str(node.module), alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tfmesos.") and alias.asname:
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and CONSTANT.match(node.attr)
        ):
            found.add((modules[node.value.id], node.attr))
    return found


@pytest.mark.unit
def test_the_agent_may_import_the_protocol_and_the_client_and_nothing_else() -> None:
    # The layer table places the package's modules apart, so that
    # tests/test_layers.py refuses an import of the server by the client or
    # by anything the agent imports.
    layers = {m: layer_of(m) for m in MODULES if m.startswith("tfmesos.rendezvous.")}
    below = {"tfmesos.rendezvous.protocol", "tfmesos.rendezvous.client"}
    assert below <= layers.keys()
    assert {m for m, layer in layers.items() if layer is not None and layer <= AGENT} == below


@pytest.mark.unit
def test_the_launchers_end_reads_no_constant_of_the_tasks_end() -> None:
    # Before: launcher/loop.py read UNRESOLVED_STATUS from the agent's end of
    # the rendezvous, launcher/message.py ENV_COMMAND from agent/nproc.py.
    strays = sorted(
        f"{module} reads {source}.{name}"
        for module, path in MODULES.items()
        if not _within(module, CLIENTS)
        for source, name in constants_read(path)
        if _within(source, AGENT_SIDE)
    )
    assert not strays, (
        "what both ends rely on belongs in tfmesos.rendezvous.protocol:\n" + "\n".join(strays)
    )


@pytest.mark.unit
def test_the_check_sees_a_constant_read_either_way(tmp_path: Path) -> None:
    path = tmp_path / "message.py"
    path.write_text(
        "from tfmesos.agent.nproc import ENV_NPROC, process_environment\n"
        "from tfmesos.rendezvous import client as agent_end\n"
        "from tfmesos.rendezvous import protocol\n"
        "limit = agent_end.KEEPALIVE_IDLE + protocol.STOP_GRACE\n"
    )
    assert constants_read(path) == {
        ("tfmesos.agent.nproc", "ENV_NPROC"),
        ("tfmesos.rendezvous.client", "KEEPALIVE_IDLE"),
        ("tfmesos.rendezvous.protocol", "STOP_GRACE"),
    }


@pytest.mark.unit
def test_the_package_imports_none_of_its_modules() -> None:
    # Importing tfmesos.rendezvous.client runs the package's __init__ first:
    # an import of the server there would put asyncio in every agent.
    init = PACKAGE / "rendezvous" / "__init__.py"
    tree = ast.parse(init.read_text(), str(init))
    imports = [
        ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
    ]
    assert imports == []


@pytest.mark.e2e
@pytest.mark.parametrize(
    "module", ["tfmesos.agent.main", "tfmesos.agent.forkserver", "tfmesos.slurm.jobscript"]
)
def test_the_tasks_end_loads_nothing_of_the_launchers(module: str) -> None:
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        f"import {module}\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    loaded = set(result.stdout.split())
    assert {"tfmesos.rendezvous.client", "tfmesos.rendezvous.protocol"} <= loaded
    launchers = {"asyncio", "tfmesos.rendezvous.server", "tfmesos.rendezvous.reports"}
    assert sorted(loaded & launchers) == []
