"""The in-task agent needs nothing but the standard library.

It runs here with ``python -I -S``: no site-packages at all, no PYTHON*
variables, only a copy of the package's own files. If it imported anything
that is not in the standard library, the job could not start.
"""

from __future__ import annotations

import asyncio
import io
import shutil
import sys
from pathlib import Path

import pytest

from tfmesos import ClusterSpec, Job
from tfmesos.backends.local.backend import LocalBackend
from tfmesos.launcher import Launcher

pytestmark = pytest.mark.e2e  # every test here starts processes

PACKAGE = Path(__file__).resolve().parent.parent / "tfmesos"


def test_the_agent_runs_on_a_bare_python(tmp_path: Path) -> None:
    shutil.copytree(PACKAGE, tmp_path / "tfmesos", ignore=shutil.ignore_patterns("__pycache__"))
    bootstrap = (
        "import sys, runpy\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "assert not any('site-packages' in p for p in sys.path), sys.path\n"
        "runpy.run_module('tfmesos.agent.main', run_name='__main__', alter_sys=True)\n"
    )
    command = f"{sys.executable} -I -S -c \"import sys; print('tasks python sees site:', 'site' in sys.modules)\""
    spec = ClusterSpec((Job("worker", 2, cmd=command),), replica=True)
    backend = LocalBackend(spec, agent_command=[sys.executable, "-I", "-S", "-c", bootstrap])
    out = io.BytesIO()

    async def run() -> None:
        launcher = Launcher(spec, backend, output=out)
        try:
            await launcher.start()
            await launcher.wait_for_workers()
        finally:
            await launcher.stop()

    asyncio.run(run())
    assert sorted(out.getvalue().splitlines()) == [
        b"[worker:0] tasks python sees site: False",
        b"[worker:1] tasks python sees site: False",
    ]
