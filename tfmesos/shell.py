"""Which command lines a shell can ``exec``: the agent's way to make the
user's command its own child rather than a shell's.

Standard library only: the agent imports it.
"""

from __future__ import annotations

import shlex

__all__ = ["exec_if_simple"]

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
    """``exec`` a simple command, so that the shell becomes the command.

    The command is then the agent's own child, which the kernel kills when the
    agent dies however it dies (``PR_SET_PDEATHSIG``); behind a shell that
    stays, only the shell would be, and the command would outlive both.
    Anything that is not plainly one command (lists, pipelines, subshells,
    keywords, leading variable assignments, command substitution) is left as
    it is.
    """
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
