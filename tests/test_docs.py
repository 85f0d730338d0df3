"""The docs promise commands; these tests hold them to it."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def _readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    return re.findall(r"```(?:sh|bash|console)?\n(.*?)```", readme, re.S)


def test_ci_runs_the_readmes_test_command() -> None:
    blocks = _readme_commands()
    test_command = blocks[1].strip()
    assert "pytest" in test_command
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command in ci


def test_readme_starts_with_the_local_job_then_the_tests() -> None:
    first = _readme_commands()[0]
    assert "tfrun -w 2 -s 1" in first
    assert "examples/mnist/mnist_replica.py" in first


def test_every_tfrun_flag_is_in_the_readme() -> None:
    from tfmesos.cli import build_parser

    readme = (ROOT / "README.md").read_text()
    for action in build_parser()._actions:
        for option in action.option_strings:
            if option not in ("-h", "--help"):
                assert f"`{option}" in readme, option
