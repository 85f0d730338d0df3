"""Which command lines a shell can ``exec``: the agent's way to make the
user's command its own child rather than a shell's.

Standard library only: the agent imports it.
"""

from __future__ import annotations

import os
import shlex

__all__ = ["exec_if_simple", "plain_argv", "shell_environment"]

# Shell operators that make a command line more than one simple command.
_OPERATORS = ";&|()"
# Shell reserved words: a line that starts with one is not one plain command.
_KEYWORDS = frozenset(
    [
        "if",
        "for",
        "while",
        "until",
        "case",
        "{",
        "!",
        "[[",
        "exec",
        "function",
        "time",
        "coproc",
        "select",
    ]
)
# Shell builtins, which cannot be exec'ed (`exec exit 3` is "exit: not found").
_BUILTINS = frozenset(
    [
        ":",
        ".",
        "source",
        "alias",
        "bg",
        "bind",
        "break",
        "builtin",
        "caller",
        "cd",
        "command",
        "compgen",
        "complete",
        "compopt",
        "continue",
        "declare",
        "dirs",
        "disown",
        "enable",
        "eval",
        "exit",
        "export",
        "fg",
        "getopts",
        "hash",
        "help",
        "history",
        "jobs",
        "let",
        "local",
        "logout",
        "mapfile",
        "popd",
        "pushd",
        "read",
        "readarray",
        "readonly",
        "return",
        "set",
        "shift",
        "shopt",
        "suspend",
        "times",
        "trap",
        "type",
        "typeset",
        "ulimit",
        "umask",
        "unalias",
        "unset",
        "wait",
    ]
)


def exec_if_simple(command: str) -> str:
    """``exec`` a simple command, so the shell becomes the command: then the
    command itself dies with the agent (``PR_SET_PDEATHSIG``), not only a shell
    that stays. Anything not plainly one command is left as it is."""
    stripped = command.strip()
    if not stripped or "`" in stripped or "\n" in stripped or "$(" in stripped:
        return command
    lexer = shlex.shlex(stripped, posix=True, punctuation_chars=_OPERATORS)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: let the shell say so
        return command
    if not tokens or any(t and set(t) <= set(_OPERATORS) for t in tokens):
        return command
    if tokens[0] in _KEYWORDS or tokens[0] in _BUILTINS or "=" in tokens[0]:
        return command
    return f"exec {stripped}"


# Characters that mean nothing to the shell inside a word: a command line of
# words made only of these is split by the shell exactly as str.split does.
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:,+@%=-")
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_NAME_REST = _NAME_START | frozenset("0123456789")


def plain_argv(command: str) -> list[str] | None:
    """The argv ``sh -c COMMAND`` would ``exec`` when the command is only plain
    words (no quoting, expansion, redirection or operators), so the agent can
    skip the shell; else None. A leading ``exec`` is dropped; a keyword,
    builtin or assignment first needs a shell."""
    words = command.split()
    if words and words[0] == "exec":
        words = words[1:]
    if not words or words[0].startswith("-") or "=" in words[0]:
        return None
    if words[0] in _KEYWORDS or words[0] in _BUILTINS:
        return None
    if any(not set(word) <= _PLAIN for word in words):
        return None
    return words


def shell_environment(env: dict[str, str], cwd: str | None) -> dict[str, str] | None:
    """The environment ``sh -c`` (dash) hands the command it execs in ``cwd``
    (``PWD`` set as the shell sets it), or None where this cannot be told:
    variables that are not shell names, or no ``PATH``."""
    if "PATH" not in env or not all(name in _NAMES or _is_name(name) for name in env):
        return None
    here = os.path.abspath(cwd) if cwd else os.getcwd()
    pwd = env.get("PWD", "")
    try:
        kept = pwd.startswith("/") and os.path.samefile(pwd, here)
    except OSError:
        kept = False
    result = dict(env)
    result["PWD"] = pwd if kept else os.path.realpath(here)
    return result


_NAMES: set[str] = set()
"""Names found to be shell names already: every task of a job has nearly the
same environment, and each of its names is checked once."""


def _is_name(name: str) -> bool:
    if name and name[0] in _NAME_START and set(name) <= _NAME_REST:
        _NAMES.add(name)
        return True
    return False
