"""Which setpriv the agent trusts with the parent-death signal
(tfmesos.common.proctree.death_signal_program): the version test, no process started."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tfmesos.common import proctree

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("said", "found"),
    [
        ("setpriv from util-linux 2.38.1\n", True),
        ("setpriv from util-linux 2.33\n", True),
        ("setpriv from util-linux 2.32.1\n", False),  # no --pdeathsig yet
        ("setpriv from util-linux 3.0-rc1\n", False),  # not a version it can read: not trusted
        ("setpriv 1.0 (some other setpriv)\n", False),
        ("", False),
    ],
)
def test_only_a_setpriv_with_pdeathsig_is_used(
    monkeypatch: pytest.MonkeyPatch, said: str, found: bool
) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("the parent-death signal is Linux's: elsewhere nothing is looked for")
    monkeypatch.setattr(proctree, "_death_signal_looked_for", False)
    monkeypatch.setattr(proctree, "_death_signal_program", None)
    monkeypatch.setattr(os, "access", lambda path, mode: path == "/usr/bin/setpriv")
    asked: list[list[str]] = []

    def version(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 0, said.encode(), b"")

    monkeypatch.setattr(subprocess, "run", version)
    assert proctree.death_signal_program() == ("/usr/bin/setpriv" if found else None)
    assert proctree.death_signal_program() == ("/usr/bin/setpriv" if found else None)
    assert asked == [["/usr/bin/setpriv", "--version"]]  # looked for once
