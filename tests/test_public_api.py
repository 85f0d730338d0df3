"""The public API, pinned: a name added to or dropped from a package's
``__all__`` is a change users see, so it must be made here too, on purpose."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "tfmesos": [
        "ClusterSpec",
        "ClusterStartError",
        "Job",
        "JobFailedError",
        "ResourceError",
        "SpecError",
        "TFMesosError",
        "TaskFailure",
        "TaskSpec",
        "__version__",
        "cluster",
    ],
    "tfmesos.testing": [
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
    ],
}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_each_package_exports_what_is_pinned_and_each_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(PUBLIC[package])
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    assert set(module.__all__) <= set(dir(module))


def test_the_errors_are_one_tree() -> None:
    import tfmesos

    for name in ("ClusterStartError", "JobFailedError", "ResourceError", "SpecError"):
        assert issubclass(getattr(tfmesos, name), tfmesos.TFMesosError), name


def test_an_unknown_name_is_an_attribute_error() -> None:
    import tfmesos

    with pytest.raises(AttributeError, match="no attribute 'Cluster'"):
        tfmesos.Cluster  # noqa: B018
