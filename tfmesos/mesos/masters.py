"""Where the Mesos master is: the addresses ``-m`` takes.

``-m`` takes ``host:port``, ``http(s)://host:port``, a comma-separated list of
either (tried in turn; a non-leader redirects to the leader),
``file:///path`` (a file holding any of these, read once at the start, as
``MasterDetector::create`` in ``src/master/detector/detector.cpp`` reads it), or
``zk://[user:password@]host1:2181,host2:2181/mesos``, where the credentials
are ZooKeeper ``digest`` ones, sent once each session is up, and the leader is
found as Mesos's own scheduler library finds it (:mod:`tfmesos.mesos.zookeeper`).

The scheme is ``https`` when libprocess SSL is enabled in the scheduler's
environment, ``http`` otherwise (:func:`default_scheme`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from tfmesos.errors import SpecError
from tfmesos.pathtext import shown_path

__all__ = [
    "MasterAddress",
    "ZooKeeperSource",
    "default_scheme",
    "parse_masters",
]

# src/master/constants.hpp
DEFAULT_PORT = 5050
SSL_ENABLED_VARIABLES = ("LIBPROCESS_SSL_ENABLED", "SSL_ENABLED")


@dataclass(frozen=True)
class MasterAddress:
    scheme: str
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @classmethod
    def parse(cls, text: str, default_scheme: str = "http") -> MasterAddress:
        """``host``, ``host:port``, ``scheme://host:port[/...]`` or
        ``//host:port[/...]`` (the form of the ``Location`` of a master's 307,
        ``//<hostname>:<port>/master/api/v1/scheduler``: ``Master::Http::redirect``
        in ``src/master/http.cpp``); any path is dropped."""
        text = text.strip()
        if not text:
            raise SpecError("empty Mesos master address")
        if text.startswith("//"):
            text = f"{default_scheme}:{text}"
        elif "://" not in text:
            text = f"{default_scheme}://{text}"
        try:
            parts = urlsplit(text)
            port = parts.port
        except ValueError as exc:
            raise SpecError(f"bad Mesos master address {text!r}: {exc}") from None
        if parts.scheme not in ("http", "https"):
            raise SpecError(f"Mesos master {text!r}: scheme must be http or https")
        if not parts.hostname:
            raise SpecError(f"Mesos master {text!r} has no host")
        return cls(parts.scheme, parts.hostname, port or DEFAULT_PORT)


def default_scheme(environ: Mapping[str, str] | None = None) -> str:
    """``https`` if libprocess SSL is enabled in ``environ`` (default: the
    process's), as the scheduler library decides it (``MesosProcess::detected``
    in ``src/scheduler/scheduler.cpp``); ``LIBPROCESS_SSL_ENABLED`` wins over
    the deprecated ``SSL_ENABLED`` (``reinitialize`` in
    ``3rdparty/libprocess/src/openssl.cpp``), whose values are ``true``,
    ``1``, ``false`` or ``0`` (stout's ``flags::parse<bool>``)."""
    environ = os.environ if environ is None else environ
    for name in SSL_ENABLED_VARIABLES:
        value = environ.get(name)
        if value is None:
            continue
        if value in ("true", "1"):
            return "https"
        if value in ("false", "0"):
            return "http"
        raise SpecError(f"{name}={value!r}: expected true, false, 1 or 0")
    return "http"


@dataclass(frozen=True)
class ZooKeeperSource:
    hosts: str
    path: str
    auth: str | None = field(repr=False)
    """``user:password`` for ZooKeeper's ``digest`` scheme, or None; never
    shown (``repr``) or logged."""
    scheme: str = "http"
    """How the leader is dialled: ``https`` with libprocess SSL enabled."""


MAX_FILE_DEPTH = 8
"""How many ``file://`` may lead to one another before a master spec (Mesos
follows them without a limit: a file naming itself would never end)."""


def _parse_zk(text: str, environ: Mapping[str, str] | None) -> ZooKeeperSource:
    """``zk://[credentials@]servers/path`` as ``zookeeper::URL::parse`` reads
    it (``include/mesos/zookeeper/url.hpp``): the path starts at the first
    ``/``, and the credentials (``user:password`` for the ``digest`` scheme)
    end at the last ``@`` before it, so a password may hold ``@`` or ``:``
    (ZooKeeper's digest takes the user to the first ``:``), never ``/``."""
    rest = text[len("zk://") :]
    servers, slash, after = rest.partition("/")
    auth, at, hosts = servers.rpartition("@")
    path = f"/{after}".rstrip("/")
    if not slash or not path or not hosts or (at and not auth):
        shown = f"zk://{'***@' if at else ''}{hosts}{slash}{after}"  # no password shown
        raise SpecError(
            f"bad ZooKeeper URL {shown!r}: expected zk://[user:password@]host:2181[,host:2181]/path"
        )
    for host in hosts.split(","):
        MasterAddress.parse(host)  # validates host:port
    return ZooKeeperSource(hosts, path, auth if at else None, default_scheme(environ))


def _read_master_file(text: str) -> str:
    """What a ``file://PATH`` names: the file's content, trimmed, itself a
    master spec (``MasterDetector::create``, ``src/master/detector/detector.cpp``:
    the path is all after ``file://``, ``file:///etc/mesos/zk`` is
    ``/etc/mesos/zk``)."""
    path = text[len("file://") :]
    try:
        with open(path, encoding="utf-8") as file:
            content = file.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SpecError(
            f"Mesos master {shown_path(text)}: cannot read {shown_path(path)}: {why}"
        ) from None
    if not content:
        raise SpecError(
            f"Mesos master {shown_path(text)}: {shown_path(path)} is empty (it should name the master)"
        )
    return content


def parse_masters(
    text: str, environ: Mapping[str, str] | None = None
) -> list[MasterAddress] | ZooKeeperSource:
    """``-m``'s masters; those given without a scheme, and a ``zk://``
    leader, are dialled with :func:`default_scheme`. ``file://PATH`` is read
    once, here, and its content parsed in its place."""
    text = text.strip()
    for _ in range(MAX_FILE_DEPTH):
        if not text.startswith("file://"):
            break
        text = _read_master_file(text)
    else:
        raise SpecError(
            f"Mesos master: more than {MAX_FILE_DEPTH} file:// in a row (does a file name itself?)"
        )
    if text.startswith("zk://"):
        return _parse_zk(text, environ)
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise SpecError("no Mesos master given")
    scheme = default_scheme(environ) if any("://" not in p for p in parts) else "http"
    return [MasterAddress.parse(part, scheme) for part in parts]


# -- the group and its leader ---------------------------------------------------
