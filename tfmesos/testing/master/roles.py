"""Role names as the master checks them: ``roles::validate``
(``src/common/roles.cpp``), in the master's order and with its messages.

A copy of the rule written from the master's source, not imported from the
client (:mod:`tfmesos.mesos.roles`), so that a mistake in the client's check
cannot hide in the double that tests it; tests/test_testing_master_roles.py
holds both to one table.
"""

from __future__ import annotations

import re

__all__ = ["role_error"]

# roles.cpp's INVALID_CHARACTERS: "\x09\x0a\x0b\x0c\x0d\x20\x7f".
_FORBIDDEN = re.compile("[\x09-\x0d\x20\x7f]")
_RESERVED_COMPONENTS = {
    ".": "cannot include '.' as a component",
    "..": "cannot include '..' as a component",
    "*": "cannot include '*' as a component",
}


def role_error(role: str) -> str | None:
    """The master's error for ``role``, or None where the master accepts it."""
    if role == "*":
        return None
    for refused, what in (
        (role[:1] == "/", "cannot start with a slash"),
        (role[-1:] == "/", "cannot end with a slash"),
        ("//" in role, "cannot contain two adjacent slashes"),
    ):
        if refused:
            return f"Role '{role}' {what}"
    tokens = [token for token in role.split("/") if token != ""]
    if len(tokens) == 0:
        return "Role names cannot be the empty string"
    for token in tokens:
        reserved = _RESERVED_COMPONENTS.get(token)
        if reserved is not None:
            return f"Role '{role}' {reserved}"
        if token[0] == "-":
            return f"Role component '{token}' is invalid because it starts with a dash"
        if _FORBIDDEN.search(token) is not None:
            return (
                f"Role component '{token}' is invalid because it contains backspace or whitespace"
            )
    return None
