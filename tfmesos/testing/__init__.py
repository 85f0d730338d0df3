"""Test doubles for tfmesos's tests.

:mod:`tfmesos.testing.master` is a stand-in for an Apache Mesos master that
speaks the v1 scheduler HTTP API and runs accepted tasks as local processes.
It is a package of modules by responsibility (``docs/test-master.md`` lists
them). Its classes are importable from here too; the import is lazy, so that
importing :mod:`tfmesos.testing` alone does not load aiohttp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tfmesos.testing.master import MasterConfig, TestMaster, ThreadedTestMaster

__all__ = ["MasterConfig", "TestMaster", "ThreadedTestMaster"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tfmesos.testing import master

        return getattr(master, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
