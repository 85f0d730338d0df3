"""The test double ships in every wheel, but aiohttp only with the `mesos`
extra: without it, ``python -m tfmesos.testing.master`` says in one line
which extra to install (exit 2, no traceback), and the package imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, install_in_new_venv

NEEDS = "the test master needs aiohttp, which tfmesos's mesos extra installs: pip install 'tfmesos[mesos]'"

WITHOUT_AIOHTTP = (
    "import sys, runpy; sys.modules['aiohttp'] = None; sys.argv[1:] = ['--help']; "
    "runpy.run_module('tfmesos.testing.master', run_name='__main__', alter_sys=True)"
)


def _one_line_and_exit_2(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"python -m tfmesos.testing.master: {NEEDS}"]
    assert result.stdout == ""


@pytest.mark.e2e
def test_without_aiohttp_the_command_names_the_extra() -> None:
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_AIOHTTP], capture_output=True, text=True, cwd=ROOT
    )
    _one_line_and_exit_2(result)


def test_without_aiohttp_the_package_imports_and_its_classes_name_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tfmesos.testing
    import tfmesos.testing.master  # imported, to be put back as it was

    # The package's attribute too: put back with the modules when the test ends.
    monkeypatch.setattr(tfmesos.testing, "master", sys.modules["tfmesos.testing.master"])
    for name in [m for m in sys.modules if m.startswith("tfmesos.testing.master")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # import aiohttp now fails
    import tfmesos.testing.master as double

    assert double.MESOS_VERSION
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'tfmesos\[mesos\]'"):
        double.TestMaster  # noqa: B018


@pytest.mark.heavy
def test_a_plain_install_runs_the_command_or_names_the_extra(tmp_path: Path) -> None:
    """``pip install .`` with no extras, in a fresh environment, as a user would."""
    python, _ = install_in_new_venv(tmp_path)
    result = subprocess.run(
        [python, "-m", "tfmesos.testing.master", "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the checkout: the installed package
    )
    _one_line_and_exit_2(result)
