"""pytest fixtures that start the test Mesos master for a user's own tests.

Installed as the ``tfmesos`` plugin (``pytest11``), it offers:

``mesos_master``
    the address, ``127.0.0.1:PORT``, of a test master started for the test;
``mesos_test_master``
    the :class:`~tfmesos.testing.master.ThreadedTestMaster` itself;
``mesos_master_config``
    its :class:`~tfmesos.testing.master.MasterConfig` keywords, by default
    from the ``mesos_master`` marker.

pytest imports this in every project with tfmesos installed, so it imports
nothing beyond pytest until a fixture is used. ``-p no:tfmesos`` turns it off.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tfmesos.testing.master import ThreadedTestMaster

__all__ = ["mesos_master", "mesos_master_config", "mesos_test_master"]

MARKER = "mesos_master"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(**options): MasterConfig keywords for the test's mesos_master "
        "(tfmesos's pytest plugin)",
    )


@pytest.fixture
def mesos_master_config(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The MasterConfig keywords for this test's master: the ``mesos_master``
    marker's, the nearest marker's winning; none gives MasterConfig's defaults
    (three agents of 4 CPUs and 8 GiB)."""
    options: dict[str, Any] = {}
    for marker in reversed(list(request.node.iter_markers(MARKER))):
        if marker.args:
            raise pytest.UsageError(f"@pytest.mark.{MARKER} takes keywords only")
        options.update(marker.kwargs)
    return options


@pytest.fixture
def mesos_test_master(mesos_master_config: dict[str, Any]) -> Iterator[ThreadedTestMaster]:
    """A test Mesos master on a free port of 127.0.0.1 for the test; stopped,
    with every task it started, when the test ends."""
    from tfmesos.testing.master import ThreadedTestMaster

    with ThreadedTestMaster(**{"port": 0, **mesos_master_config}) as master:
        yield master


@pytest.fixture
def mesos_master(mesos_test_master: ThreadedTestMaster) -> str:
    """The address, ``127.0.0.1:PORT``, of the test's test Mesos master."""
    return f"{mesos_test_master.config.ip}:{mesos_test_master.port}"
