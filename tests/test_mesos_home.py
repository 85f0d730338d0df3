"""Which Mesos the real-Mesos tests and scripts/start-mesos run
(tfmesos/testing/mesos_home.py): the -O2 build before the -O0 one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfmesos.testing import mesos_home

O2 = "mesos-1.12.0-O2-bookworm-amd64"
O0 = "mesos-1.12.0-bookworm-amd64"


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ../shared/mesos/ with both builds' tarballs, an empty cache, and no
    Mesos named or on PATH."""
    folder = tmp_path / "shared" / "mesos"
    (folder / "O2").mkdir(parents=True)
    (folder / "O2" / f"{O2}.tar.zst").write_bytes(b"")
    (folder / f"{O0}.tar.zst").write_bytes(b"")
    monkeypatch.setattr(mesos_home, "_checkout_shared", lambda: folder)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv(mesos_home.HOME_ENV, raising=False)
    monkeypatch.delenv(mesos_home.TARBALL_ENV, raising=False)
    return tmp_path


def unpacked(cache: Path, name: str) -> Path:
    home = cache / "tfmesos" / name
    for program in ("mesos-master", "mesos-agent"):
        (home / "sbin").mkdir(parents=True, exist_ok=True)
        (home / "sbin" / program).write_bytes(b"")
    return home


@pytest.mark.unit
def test_the_optimized_build_is_run_where_both_are_unpacked(shared: Path) -> None:
    o0 = unpacked(shared / "cache", O0)
    assert mesos_home.find_home() == o0
    o2 = unpacked(shared / "cache", O2)
    assert mesos_home.find_home() == o2


@pytest.mark.unit
def test_a_tarball_named_is_the_one_run(shared: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    unpacked(shared / "cache", O2)
    o0 = unpacked(shared / "cache", O0)
    monkeypatch.setenv(mesos_home.TARBALL_ENV, str(shared / "shared" / "mesos" / f"{O0}.tar.zst"))
    assert mesos_home.find_home() == o0
