"""Test doubles, for tfmesos's tests and users' own (public: the names below).

:mod:`tfmesos.testing.master` is a stand-in Mesos master that speaks the v1
scheduler API and runs tasks as local processes; :mod:`tfmesos.testing.fake` is
an in-memory backend for testing the launcher's rules without a process. The
imports are lazy, so importing this package does not load aiohttp. The pytest
plugin and ``python -m tfmesos.testing.master`` are public too; ``real_mesos``,
``mesos_home`` and ``netns`` are this project's harness, not promised
(docs/test-master.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tfmesos.testing.fake import (
        BreaksBackend,
        DiesEarly,
        FakeBackend,
        FakeNetwork,
        FakeRuns,
        Hangs,
        Lost,
        Plan,
        Runs,
    )
    from tfmesos.testing.master import MasterConfig, TestMaster, ThreadedTestMaster

_MASTER = ("MasterConfig", "TestMaster", "ThreadedTestMaster")
_FAKE = (
    "BreaksBackend",
    "DiesEarly",
    "FakeBackend",
    "FakeNetwork",
    "FakeRuns",
    "Hangs",
    "Lost",
    "Plan",
    "Runs",
)
__all__ = [
    "BreaksBackend",
    "DiesEarly",
    "FakeBackend",
    "FakeNetwork",
    "FakeRuns",
    "Hangs",
    "Lost",
    "MasterConfig",
    "Plan",
    "Runs",
    "TestMaster",
    "ThreadedTestMaster",
]


def __getattr__(name: str) -> Any:
    if name in _MASTER:
        from tfmesos.testing import master

        return getattr(master, name)
    if name in _FAKE:
        from tfmesos.testing import fake

        return getattr(fake, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
