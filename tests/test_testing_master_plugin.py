"""tfmesos's pytest plugin (``tfmesos.testing.pytest_plugin``, the ``pytest11``
entry point ``tfmesos``), used as a user would: a pytest run of its own, outside
this repository's conftest, on a small test file that asks for the fixtures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

USER_TESTS = """
import json
import urllib.request

import pytest


def test_the_address_answers(mesos_master):
    host, port = mesos_master.split(":")
    assert host == "127.0.0.1" and int(port) > 0
    with urllib.request.urlopen(f"http://{mesos_master}/master/state") as answer:
        state = json.load(answer)
    assert len(state["slaves"]) == 3


@pytest.mark.mesos_master(agents=1, cpus=2)
def test_the_marker_configures_the_master_and_faults_reach_it(mesos_test_master, mesos_master):
    assert mesos_master.endswith(f":{mesos_test_master.port}")
    [agent] = mesos_test_master.agents()
    assert agent["resources"]["cpus"] == 2
    assert mesos_test_master.kill_agent() == agent["id"]
"""


def run_pytest(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_users_tests_get_the_master_through_the_entry_point(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    result = run_pytest(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_without_the_plugin_the_fixtures_are_unknown(tmp_path: Path) -> None:
    """The fixtures come from the entry point named ``tfmesos``, nothing else."""
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    result = run_pytest(tmp_path, "-p", "no:tfmesos")
    assert result.returncode != 0
    assert "fixture 'mesos_master' not found" in result.stdout


def test_without_aiohttp_a_test_using_the_fixture_names_the_extra(tmp_path: Path) -> None:
    """As after ``pip install tfmesos`` without the mesos extra: the plugin
    loads, and only a test that asks for the master fails, naming the extra."""
    (tmp_path / "conftest.py").write_text("import sys\nsys.modules['aiohttp'] = None\n")
    (tmp_path / "test_user.py").write_text(
        "def test_uses_it(mesos_master):\n    pass\n\n\ndef test_does_not():\n    pass\n"
    )
    result = run_pytest(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 passed, 1 error" in result.stdout
    assert "pip install 'tfmesos[mesos]'" in result.stdout


def test_loading_the_plugin_imports_neither_the_master_nor_aiohttp() -> None:
    probe = (
        "import sys, tfmesos.testing.pytest_plugin; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'aiohttp' "
        "or m.startswith('tfmesos.testing.master')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"
