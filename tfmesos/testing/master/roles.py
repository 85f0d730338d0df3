"""Role names as the master checks them: ``roles::validate`` (``src/common/roles.cpp``).

The test double keeps its own copy of the rule, written from the master's
source rather than imported from the client (:mod:`tfmesos.mesos.roles`), so
that a mistake in the client's check cannot hide in the master that tests it:
``tests/test_testing_master_roles.py`` holds both to one table of names.

In the order the master tries them: ``*`` is accepted at once; a role that
starts or ends with ``/`` or holds ``//`` is refused; the role is cut at each
``/`` (``strings::tokenize``, which drops empty pieces) and, if nothing is
left, refused as empty; then each piece in turn must not be ``.``, ``..`` or
``*``, must not start with ``-``, and must hold none of the master's
``INVALID_CHARACTERS`` (tab, line feed, vertical tab, form feed, carriage
return, space, DEL). The messages are the master's, word for word.
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
