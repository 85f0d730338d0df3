"""Where the Mesos master is: parsing the addresses ``-m`` takes (``host:port``,
``http(s)://``, a comma-separated list, ``file://``,
``zk://[user:password@]hosts/path``), as Mesos's ``MasterDetector::create``
reads them. The scheme defaults to ``https`` when libprocess SSL is enabled
(:func:`default_scheme`).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from tfmesos.common.pathtext import shown_path
from tfmesos.errors import SpecError

__all__ = [
    "MasterAddress",
    "ZooKeeperSource",
    "default_scheme",
    "follow_redirect",
    "host_problem",
    "parse_masters",
    "port_problem",
    "read_master_files",
    "redirect_failure",
]

# src/master/constants.hpp
DEFAULT_PORT = 5050
MAX_LABEL = 63
MAX_HOST_NAME = 253
"""A host name's limits (RFC 1035, 2.3.4): what no resolver takes, and what
Python's IDNA codec, in the HTTP client, fails on with a traceback."""
SSL_ENABLED_VARIABLES = ("LIBPROCESS_SSL_ENABLED", "SSL_ENABLED")


def host_problem(host: str) -> str | None:
    """Why ``host`` (a name, an IPv4 or an IPv6 address) cannot be dialled,
    or None. Checked where an address is read, so that a bad one is one line
    there, not a codec's traceback at the first dial."""
    if ":" in host:
        try:
            ipaddress.IPv6Address(host.partition("%")[0])
        except ValueError:
            return "not an IPv6 address"
        return None
    name = host.removesuffix(".")
    if not name:
        return "an empty host name"
    if len(name) > MAX_HOST_NAME:
        return f"a host name of {len(name)} characters; at most {MAX_HOST_NAME} are allowed"
    for label in name.split("."):
        if not label:
            return "a host name with an empty label (two dots in a row)"
        if len(label) > MAX_LABEL:
            return (
                f"a host name with a label of {len(label)} characters; "
                f"at most {MAX_LABEL} are allowed"
            )
    try:
        # What the HTTP client does with it; a non-ASCII name must encode.
        encoded = name.encode("idna")
    except UnicodeError:
        return "a host name that cannot be encoded for DNS (IDNA)"
    if len(encoded) > MAX_HOST_NAME or any(len(p) > MAX_LABEL for p in encoded.split(b".")):
        return "a host name too long once encoded for DNS (IDNA)"
    return None


def _shown(text: str) -> str:
    """An address for a one-line message: quoted, and cut short when long."""
    return repr(text if len(text) <= 80 else text[:77] + "...")


def port_problem(port: int) -> str | None:
    """Why ``port`` cannot be dialled, or None."""
    return None if 0 < port < 65536 else f"port {port} is not between 1 and 65535"


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
        """``host[:port]``, ``scheme://host:port`` or a 307's ``//host:port``; any
        path is dropped."""
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
        port = DEFAULT_PORT if port is None else port
        problem = host_problem(parts.hostname) or port_problem(port)
        if problem:
            raise SpecError(f"bad Mesos master address {_shown(text)}: {problem}")
        return cls(parts.scheme, parts.hostname, port)


def redirect_failure(chain: list[MasterAddress], why: str) -> str:
    """Why the end of redirect ``chain`` failed, naming the standby that sent us
    there."""
    if len(chain) == 1:
        return f"{chain[0].url}: {why}"
    via = " -> ".join(m.url for m in chain[1:-1])
    via = f" (through {via})" if via else ""
    return (
        f"{chain[0].url} is not the leading master: it redirects to {chain[-1].url}{via}, "
        f"which does not answer ({why})"
    )


MAX_REDIRECTS = 5


def follow_redirect(
    chain: list[MasterAddress], location: str, zookeeper: bool
) -> MasterAddress | str:
    """Append to ``chain`` where the last master's 307 ``Location`` leads (scheme,
    host and port only), or return why it is not followed (an address that
    cannot be dialled, a loop, too many hops). Not used with ``zk://``: there
    ZooKeeper names the leader, and a redirecting master may still name the
    dead one."""
    master = chain[-1]
    if zookeeper:
        return (
            f"{master.url} is not the leading master (it redirects to "
            f"{location}); waiting for ZooKeeper to name the leader"
        )
    if len(chain) > MAX_REDIRECTS:
        return (
            f"{chain[0].url} is not the leading master: more than {MAX_REDIRECTS} "
            f"redirects ({' -> '.join(m.url for m in chain)})"
        )
    try:
        target = MasterAddress.parse(location, master.scheme)
    except SpecError as exc:
        return (
            f"{master.url} is not the leading master, and it redirects "
            f"to an address that cannot be dialled ({exc})"
        )
    if target in chain:
        return _redirect_loop(chain, target)
    chain.append(target)
    return target


def _redirect_loop(chain: list[MasterAddress], target: MasterAddress) -> str:
    if target == chain[-1]:
        return (
            f"{target.url} is not the leading master, and it redirects to itself "
            "(a redirect loop: is its leader's address, or its --advertise_ip/--hostname, wrong?)"
        )
    loop = " -> ".join(m.url for m in [*chain[chain.index(target) :], target])
    return f"{chain[0].url} is not the leading master, and its redirects loop: {loop}"


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
    """``zk://[user:password@]servers/path`` as ``zookeeper::URL::parse`` reads
    it: the path starts at the first ``/`` and the credentials end at the last
    ``@`` before it, so a password may hold ``@`` or ``:``, never ``/``."""
    rest = text[len("zk://") :]
    servers, slash, after = rest.partition("/")
    auth, at, hosts = servers.rpartition("@")
    path = f"/{after}".rstrip("/")
    shown = f"zk://{'***@' if at else ''}{hosts}{slash}{after}"  # no password shown
    if not slash or not path or not hosts or (at and not auth):
        raise SpecError(
            f"bad ZooKeeper URL {shown!r}: expected zk://[user:password@]host:2181[,host:2181]/path"
        )
    for server in hosts.split(","):
        problem = _server_problem(server)
        if problem:
            raise SpecError(f"bad ZooKeeper URL {_shown(shown)}: server {server!r}: {problem}")
    return ZooKeeperSource(hosts, path, auth if at else None, default_scheme(environ))


def _server_problem(server: str) -> str | None:
    """Why ``host[:port]`` cannot be dialled, or None."""
    try:
        parts = urlsplit(f"//{server}")
        port = parts.port
    except ValueError as exc:
        return str(exc)
    if not parts.hostname or parts.path or parts.query or parts.fragment:
        return "expected host or host:port"
    return host_problem(parts.hostname) or (None if port is None else port_problem(port))


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


def read_master_files(text: str) -> str:
    """The master spec ``text`` names, each ``file://PATH`` read (here, on
    this machine)."""
    text = text.strip()
    for _ in range(MAX_FILE_DEPTH):
        if not text.startswith("file://"):
            return text
        text = _read_master_file(text)
    raise SpecError(
        f"Mesos master: more than {MAX_FILE_DEPTH} file:// in a row (does a file name itself?)"
    )


def parse_masters(
    text: str, environ: Mapping[str, str] | None = None
) -> list[MasterAddress] | ZooKeeperSource:
    """``-m``'s masters; those given without a scheme, and a ``zk://``
    leader, are dialled with :func:`default_scheme`. ``file://PATH`` is read
    once, here, and its content parsed in its place."""
    text = read_master_files(text)
    if text.startswith("zk://"):
        return _parse_zk(text, environ)
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise SpecError("no Mesos master given")
    scheme = default_scheme(environ) if any("://" not in p for p in parts) else "http"
    masters = []
    for part in parts:
        masters.append(MasterAddress.parse(part, scheme))
        # A path would be dropped: the scheduler API is at the master's own
        # /api/v1/scheduler. Its web UI's address (".../#/") is no path.
        path = urlsplit(part if "://" in part else f"//{part}").path
        if path.strip("/"):
            raise SpecError(
                f"Mesos master {_shown(part)}: an address takes no path ({path!r}): "
                "give [http[s]://]host[:port]"
            )
    return masters


# -- the group and its leader ---------------------------------------------------
