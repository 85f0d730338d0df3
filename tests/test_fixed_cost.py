"""What a trivial local job loads (issue 28): nothing it does not use.

Each test runs a real tfrun (or the module under test) in a subprocess of
its own and reads its ``sys.modules``; no timing is checked here
(``bench/fixed_cost.py`` measures, docs/benchmarks.md has the figures).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.jobevents import JobEvents

pytestmark = pytest.mark.e2e

UNUSED = (
    "aiohttp",
    "kazoo",
    "jsonschema",
    "logging.config",
    "difflib",
    "uuid",
    "tfmesos.backends.mesos.backend",
    "tfmesos.backends.slurm.backend",
    "tfmesos.mesos.transport",
    "tfmesos.launcher.relaunch",  # fine-grained mode's, to relaunch a server
)
"""Modules a local job never needs: the cluster backends' and their
clients, fine-grained mode's relaunches, what only a mistyped flag needs."""

_RUN_AND_LIST = (
    "import json, sys\n"
    "from tfmesos.cli.main import main\n"
    "code = main(sys.argv[1:])\n"
    "print(json.dumps(sorted(sys.modules)))\n"
    "sys.exit(code)\n"
)


def test_a_trivial_local_job_imports_nothing_it_does_not_use(
    tmp_path: Path, job_events: JobEvents
) -> None:
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path))  # the run directory made as by default
    job = ("-w", "3", "-s", "1", "--", "/bin/true")
    result = subprocess.run(
        [sys.executable, "-c", _RUN_AND_LIST, *job_events.flag, *job],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    modules = set(json.loads(result.stdout.splitlines()[-1]))
    assert {"tfmesos.launcher", "tfmesos.backends.local.backend", "asyncio"} <= modules
    assert sorted(modules.intersection(UNUSED)) == []
    # The cluster backends' packages hold their options, which tfrun reads on
    # every job; nothing else of them may come along (their __init__s are lazy).
    cluster_parts = {
        m for m in modules if m.startswith(("tfmesos.backends.mesos.", "tfmesos.backends.slurm."))
    }
    assert cluster_parts <= {"tfmesos.backends.mesos.options", "tfmesos.backends.slurm.options"}
    assert job_events.verdict()["result"] == "succeeded"


def test_the_fork_server_holds_what_its_agents_would_import() -> None:
    # Not typing, which only type checkers need (tfmesos/__init__.py); nor
    # the idna codec, even once an agent has dialled: it hands getaddrinfo an
    # ASCII host as bytes, which need no encoding.
    code = (
        "import socket, sys\n"
        "import tfmesos.agent.forkserver\n"
        "from tfmesos.rendezvous.client import _dialled\n"
        "listener = socket.create_server(('127.0.0.1', 0))\n"
        "socket.create_connection((_dialled('127.0.0.1'), listener.getsockname()[1])).close()\n"
        "unused = {'ssl', 'traceback', 'encodings.idna'}\n"
        "assert not unused & set(sys.modules), sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r})\n" + code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
