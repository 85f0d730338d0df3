"""The one module that starts and ends tfmesos's processes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tfmesos.common import proctree

pytestmark = pytest.mark.e2e  # every test here starts processes


def test_a_bootstrap_command_runs_this_package_without_site() -> None:
    argv = proctree.bootstrap_command(
        "tfmesos.agent.main", "print(sys.modules['tfmesos'].__file__, 'site' in sys.modules)"
    )
    assert argv[:3] == [sys.executable, "-S", "-c"]
    # From elsewhere, with nothing on the path: the package still comes from here.
    done = subprocess.run(argv, capture_output=True, text=True, cwd="/", env={}, check=True)
    assert done.stdout.split() == [str(ROOT / "tfmesos" / "__init__.py"), "False"]


def test_signalling_a_group_says_whether_anyone_was_left_in_it() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        assert proctree.signal_group(proc.pid, 0)
        assert proctree.signal_group(proc.pid, 9)
        assert proc.wait(timeout=30) == -9
    finally:
        proc.kill()
        proc.wait()
    # Reaped: the group is gone, and signalling it is no error.
    assert not proctree.signal_group(proc.pid, 9)
    proctree.signal_pid(proc.pid, 9)
