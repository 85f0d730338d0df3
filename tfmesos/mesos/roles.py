"""Role names as Mesos accepts them (``roles::validate`` in
``src/common/roles.cpp``), with the master's messages.
"""

from __future__ import annotations

__all__ = ["validate_role"]

_INVALID_CHARACTERS = frozenset("\x09\x0a\x0b\x0c\x0d\x20\x7f")


def validate_role(role: str) -> str | None:
    """Why Mesos refuses ``role``, or None if it accepts it."""
    if role == "*":
        return None
    if role.startswith("/"):
        return f"Role '{role}' cannot start with a slash"
    if role.endswith("/"):
        return f"Role '{role}' cannot end with a slash"
    if "//" in role:
        return f"Role '{role}' cannot contain two adjacent slashes"
    components = [part for part in role.split("/") if part]
    if not components:
        return "Role names cannot be the empty string"
    for component in components:
        if component == ".":
            return f"Role '{role}' cannot include '.' as a component"
        if component == "..":
            return f"Role '{role}' cannot include '..' as a component"
        if component == "*":
            return f"Role '{role}' cannot include '*' as a component"
        if component.startswith("-"):
            return f"Role component '{component}' is invalid because it starts with a dash"
        if any(char in _INVALID_CHARACTERS for char in component):
            return (
                f"Role component '{component}' is invalid "
                "because it contains backspace or whitespace"
            )
    return None
