"""Which command lines the agent starts without a shell (tfmesos.common.shell)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tfmesos.common.shell import plain_argv, shell_environment

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("line", "argv"),
    [
        ("exec /bin/true", ["/bin/true"]),
        (
            "exec python train.py --steps=10 --lr 0.1",
            ["python", "train.py", "--steps=10", "--lr", "0.1"],
        ),
        ("  python   x.py  ", ["python", "x.py"]),
        ("exec python -c 'print(1)'", None),  # quoting
        ("exec echo $HOME", None),  # expansion
        ("exec ls *.py", None),  # a glob
        ("exec ls ~", None),  # a tilde
        ("exec python x > out", None),  # a redirection
        ("exec python x 2>&1", None),
        ("a && b", None),
        ("FOO=1 python x", None),  # an assignment
        ("exit 3", None),  # a builtin
        ("exec cd /tmp", None),
        ("if true", None),  # a keyword
        ("exec -a name x", None),  # exec's own options
        ("exec", None),
        ("", None),
        ("echo a\\ b", None),  # a backslash
        ("echo a#b", None),  # a comment, where it starts a word
    ],
)
def test_only_a_line_of_plain_words_is_split_without_a_shell(
    line: str, argv: list[str] | None
) -> None:
    assert plain_argv(line) == argv


def test_the_environment_is_the_one_sh_would_hand_on(tmp_path: Path) -> None:
    here = str(tmp_path)
    env = shell_environment({"PATH": "/bin", "PWD": "/nowhere"}, here)
    assert env == {"PATH": "/bin", "PWD": os.path.realpath(here)}
    logical = str(tmp_path / ".")
    assert shell_environment({"PATH": "/bin", "PWD": logical}, here) == {
        "PATH": "/bin",
        "PWD": logical,
    }
    assert shell_environment({"PWD": here}, here) is None  # sh's own default PATH
    assert shell_environment({"PATH": "/bin", "BAD.NAME": "1"}, here) is None  # sh drops it
