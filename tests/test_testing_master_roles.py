"""The test double's role check (``tfmesos.testing.master.roles``), written from
Mesos's ``src/common/roles.cpp``, against one table of names the master accepts
or refuses; and the client's own check (``tfmesos.mesos.roles``) against the same
table, so that a mistake in either one shows rather than hiding in the other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tfmesos.mesos.roles import validate_role as client_role_error
from tfmesos.testing.master.roles import role_error
from tfmesos.testing.master.subscriptions import validate_framework_info

pytestmark = pytest.mark.unit

# (role, the master's error or None where it accepts the role), each error as
# roles.cpp words it.
ROLES: list[tuple[str, str | None]] = [
    ("*", None),
    ("ml", None),
    ("ml/team-a", None),
    ("a*b", None),  # only a whole '*' component is refused
    ("*a", None),
    ("a\\b", None),  # a backslash is not among INVALID_CHARACTERS
    ("a.b", None),
    ("...", None),
    ("a-", None),
    ("rôle", None),  # nor is anything outside ASCII
    ("a\x08b", None),  # nor backspace, despite the message's words
    ("", "Role names cannot be the empty string"),
    ("/", "Role '/' cannot start with a slash"),
    ("/ml", "Role '/ml' cannot start with a slash"),
    ("ml/", "Role 'ml/' cannot end with a slash"),
    ("a//b", "Role 'a//b' cannot contain two adjacent slashes"),
    (".", "Role '.' cannot include '.' as a component"),
    ("a/./b", "Role 'a/./b' cannot include '.' as a component"),
    ("..", "Role '..' cannot include '..' as a component"),
    ("a/../b", "Role 'a/../b' cannot include '..' as a component"),
    ("a/*", "Role 'a/*' cannot include '*' as a component"),
    ("-ml", "Role component '-ml' is invalid because it starts with a dash"),
    ("a/-b", "Role component '-b' is invalid because it starts with a dash"),
    *(
        (
            f"a{char}b",
            f"Role component 'a{char}b' is invalid because it contains backspace or whitespace",
        )
        for char in "\t\n\v\f\r \x7f"
    ),
    # The first refused component decides, and a '.' comes before a dash.
    ("-a/.", "Role component '-a' is invalid because it starts with a dash"),
    ("./-a", "Role './-a' cannot include '.' as a component"),
]


@pytest.mark.parametrize(("role", "error"), ROLES, ids=[repr(r) for r, _ in ROLES])
def test_the_double_checks_roles_as_roles_cpp(role: str, error: str | None) -> None:
    assert role_error(role) == error


@pytest.mark.parametrize(("role", "error"), ROLES, ids=[repr(r) for r, _ in ROLES])
def test_the_client_and_the_double_agree(role: str, error: str | None) -> None:
    assert client_role_error(role) == role_error(role) == error


@pytest.mark.parametrize(("role", "error"), ROLES, ids=[repr(r) for r, _ in ROLES])
def test_subscribe_refuses_the_roles_the_master_refuses(role: str, error: str | None) -> None:
    info = {"user": "u", "name": "f", "roles": [role], "capabilities": [{"type": "MULTI_ROLE"}]}
    problem = validate_framework_info(info, removed=())
    if error is None:
        assert problem is None
    else:
        assert problem is not None and error in problem


def test_the_double_does_not_import_the_clients_check() -> None:
    import tfmesos.testing.master.roles as double_roles
    import tfmesos.testing.master.schema as schema
    import tfmesos.testing.master.subscriptions as subscriptions

    for module in (double_roles, schema, subscriptions):
        tree = ast.parse(Path(str(module.__file__)).read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        assert "tfmesos.mesos.roles" not in imported, module.__name__
