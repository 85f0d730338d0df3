"""Finding, or installing, the Apache Mesos that :mod:`tfmesos.testing.real_mesos`
runs: a folder with ``sbin/mesos-master`` and ``sbin/mesos-agent``, named,
on ``PATH`` or unpacked from the project's tarball into the cache, with the
Debian packages it needs at run time.

Only the standard library: ``scripts/start-mesos`` runs it before any virtual
environment exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["HOME_ENV", "TARBALL_ENV", "MesosNotAvailable", "find_home", "prepare"]

HOME_ENV = "TFMESOS_MESOS_HOME"
"""A folder with ``sbin/mesos-master``: the Mesos to use, before any other."""
TARBALL_ENV = "TFMESOS_MESOS_TARBALL"
"""A tarball of such a folder (``.tar.zst``), unpacked once into the cache."""
RUNTIME_PACKAGES = (
    "libapr1",
    "libarchive13",
    "libcurl4",
    "libgrpc++1.51",
    "libgrpc29",
    "libprotobuf32",
    "libsasl2-2",
    "libsvn1",
    "libunwind8",
    "libzookeeper-mt2",
    "zlib1g",
)
"""Debian 12's packages that the 1.12.0 build in ``../shared/mesos/`` needs at
run time (its ``RUNTIME-DEPS.txt``, used instead when it is beside the tarball)."""


class MesosNotAvailable(Exception):
    """No Mesos could be found, installed or started here; the message says why."""


def _checkout_shared() -> Path:
    # The repository's sibling folder ../shared/mesos/, where this project
    # keeps the build of Apache Mesos for its machines.
    return Path(__file__).resolve().parents[3] / "shared" / "mesos"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tfmesos"


def _is_home(path: Path) -> bool:
    return (path / "sbin" / "mesos-master").is_file() and (path / "sbin" / "mesos-agent").is_file()


def _tarballs() -> list[Path]:
    named = os.environ.get(TARBALL_ENV)
    if named:
        return [Path(named)]
    # The optimized build first: the same commit and patches at -O2, which
    # brings 40 tasks up in about half the time of the -O0 one.
    shared = _checkout_shared()
    return sorted(shared.glob("O2/mesos-*.tar.zst")) + sorted(shared.glob("mesos-*.tar.zst"))


def find_home() -> Path | None:
    """The Mesos to run, if one is here already: ``$TFMESOS_MESOS_HOME``,
    then ``mesos-master`` on ``PATH``, then a tarball unpacked by an earlier
    :func:`prepare` in ``$XDG_CACHE_HOME/tfmesos/``."""
    named = os.environ.get(HOME_ENV)
    if named:
        return Path(named) if _is_home(Path(named)) else None
    on_path = shutil.which("mesos-master")
    if on_path:
        home = Path(on_path).resolve().parent.parent
        if _is_home(home):
            return home
    for tarball in _tarballs():
        home = _cache_dir() / tarball.name.removesuffix(".tar.zst")
        if _is_home(home):
            return home
    return None


def _missing_libraries(home: Path) -> list[str]:
    missing: set[str] = set()
    binaries = [home / "sbin" / "mesos-master", home / "sbin" / "mesos-agent"]
    binaries += sorted((home / "lib").glob("libmesos*.so"))
    for binary in binaries:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
        missing.update(
            line.split()[0] for line in out.splitlines() if "not found" in line and line.split()
        )
    return sorted(missing)


def _runtime_packages() -> list[str]:
    for tarball in _tarballs():
        listed = tarball.parent / "RUNTIME-DEPS.txt"
        if listed.is_file():
            lines = listed.read_text().splitlines()
            return [w for w in (line.split("#", 1)[0].strip() for line in lines) if w]
    return list(RUNTIME_PACKAGES)


def _apt_install(packages: Sequence[str]) -> None:
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise MesosNotAvailable(
            "Mesos needs these Debian packages, and only root can install them: "
            + " ".join(packages)
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    command = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    if subprocess.run(command, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise MesosNotAvailable(
                f"apt-get could not install {' '.join(packages)}: {done.stderr.strip()[-500:]}"
            )


def prepare() -> Path:
    """A Mesos that can run here: :func:`find_home`'s, or the tarball's
    (``$TFMESOS_MESOS_TARBALL``, else ``../shared/mesos/O2/mesos-*.tar.zst``,
    then ``../shared/mesos/mesos-*.tar.zst`` beside this checkout) unpacked into the cache; its runtime packages
    installed when missing (as root, with apt-get)."""
    home = find_home()
    if home is None:
        tarballs = _tarballs()
        if not tarballs or not tarballs[0].is_file():
            raise MesosNotAvailable(
                f"no Mesos here: neither ${HOME_ENV}, nor mesos-master on PATH, nor a tarball "
                f"(${TARBALL_ENV}, or {_checkout_shared()}/mesos-*.tar.zst)"
            )
        tarball = tarballs[0]
        home = _cache_dir() / tarball.name.removesuffix(".tar.zst")
        if not shutil.which("zstd"):
            _apt_install(["zstd"])
        unpacking = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=_mkdir(_cache_dir())))
        done = subprocess.run(
            ["tar", "--zstd", "-xf", str(tarball), "-C", str(unpacking)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 or not _is_home(unpacking):
            shutil.rmtree(unpacking, ignore_errors=True)
            raise MesosNotAvailable(f"could not unpack {tarball}: {done.stderr.strip()[-500:]}")
        # Whole or not at all: a half-unpacked folder would be found next time.
        shutil.rmtree(home, ignore_errors=True)
        unpacking.rename(home)
    missing = _missing_libraries(home)
    if missing:
        _apt_install(_runtime_packages())
        missing = _missing_libraries(home)
        if missing:
            raise MesosNotAvailable(f"{home}: libraries still missing: {' '.join(missing)}")
    return home


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
