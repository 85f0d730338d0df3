"""Where the Mesos master is: URL parsing and leader detection.

``-m`` takes ``host:port``, ``http(s)://host:port``, a comma-separated list of
either (tried in turn; a non-leader redirects to the leader), or
``zk://[user:pass@]host1:2181,host2:2181/mesos``, where the leader is the
member of the ZooKeeper group with the lowest sequence number, its address in
the JSON ``MasterInfo`` stored in the ``json.info_<sequence>`` node (as
``src/master/detector/zookeeper.cpp`` reads it).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tfmesos.errors import SpecError, TFMesosError

__all__ = [
    "MasterAddress",
    "ZooKeeperError",
    "ZooKeeperLeader",
    "ZooKeeperSource",
    "leader_from_master_info",
    "parse_masters",
]

MASTER_INFO_LABEL = "json.info"
DEFAULT_PORT = 5050


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
        """``host``, ``host:port``, ``scheme://host:port[/...]`` or ``//host:port``
        (the form a 307 ``Location`` may take)."""
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


@dataclass(frozen=True)
class ZooKeeperSource:
    hosts: str
    path: str
    auth: str | None


_ZK = re.compile(r"^zk://(?:(?P<auth>[^@/]+)@)?(?P<hosts>[^/]+)(?P<path>/.*)$")


def parse_masters(text: str) -> list[MasterAddress] | ZooKeeperSource:
    text = text.strip()
    if text.startswith("zk://"):
        match = _ZK.match(text)
        if not match or match.group("path") in ("", "/"):
            raise SpecError(f"bad ZooKeeper URL {text!r}: expected zk://host:2181[,host:2181]/path")
        for host in match.group("hosts").split(","):
            MasterAddress.parse(host)  # validates host:port
        return ZooKeeperSource(
            match.group("hosts"), match.group("path").rstrip("/"), match.group("auth")
        )
    masters = [MasterAddress.parse(part) for part in text.split(",") if part.strip()]
    if not masters:
        raise SpecError("no Mesos master given")
    return masters


def leader_from_master_info(data: bytes) -> MasterAddress:
    """The address in a ``MasterInfo`` as JSON (from ZooKeeper or ``/state``)."""
    info: Any = json.loads(data.decode())
    address = info.get("address") or {}
    host = address.get("hostname") or address.get("ip") or info.get("hostname")
    port = address.get("port") or info.get("port")
    if not host or not port:
        raise ValueError(f"MasterInfo without an address: {info!r}")
    return MasterAddress("http", str(host), int(port))


class ZooKeeperError(TFMesosError):
    """ZooKeeper could not be reached, or the masters' group could not be read."""


class ZooKeeperLeader:
    """Follows the leading master in ZooKeeper; ``on_change`` hears each new one.

    kazoo runs its own thread; ``on_change`` is called from it. :meth:`start`
    blocks (run it in a thread) and :meth:`stop` may be called from another
    thread while it does.
    """

    def __init__(
        self, source: ZooKeeperSource, on_change: Callable[[MasterAddress | None], None]
    ) -> None:
        from kazoo.client import KazooClient

        self.source = source
        self._on_change = on_change
        # Commands retry a few times within a deadline, not forever (kazoo's
        # default): the reconnect budget must bound every step.
        self._client = KazooClient(
            hosts=source.hosts,
            timeout=10.0,
            command_retry={"max_tries": 3, "deadline": 10.0, "max_delay": 2.0},
        )
        if source.auth:
            self._client.add_auth("digest", source.auth)
        self._lock = threading.Lock()
        self._client_lock = threading.Lock()
        self._stopping = threading.Event()
        self._stopped = False
        self.leader: MasterAddress | None = None
        self.path_exists = False
        self._watching_children = False

    def start(self, timeout: float = 15.0) -> None:
        """Connect and watch the group; raise :class:`ZooKeeperError`, with the
        client stopped, if no server answers within ``timeout`` or the group
        cannot be read."""
        from kazoo.exceptions import KazooException

        with self._client_lock:
            if self._stopping.is_set():
                raise ZooKeeperError("stopped")
            connected = self._client.start_async()
        deadline = time.monotonic() + timeout
        # Waited for in slices (not kazoo's blocking start) so that stop() from
        # another thread ends the wait at once: a job that gives up must not
        # sit out a connection timeout on its way out.
        while not connected.wait(0.1):
            if self._stopping.is_set() or time.monotonic() >= deadline:
                self.stop()
                raise ZooKeeperError(
                    f"no ZooKeeper server at {self.source.hosts} answered "
                    f"within {round(timeout, 1):g}s"
                )
        try:
            # kazoo's ChildrenWatch ends quietly on a path that does not
            # exist; a DataWatch sees the path come and go, and starts the
            # ChildrenWatch once it is there.
            self._client.DataWatch(self.source.path, self._path_changed)
        except (KazooException, self._client.handler.timeout_exception) as exc:
            self.stop()
            raise ZooKeeperError(
                f"cannot read {self.source.path} from ZooKeeper at {self.source.hosts}: "
                f"{type(exc).__name__} {exc}".rstrip()
            ) from exc

    def _path_changed(self, data: bytes | None, stat: object) -> None:
        self.path_exists = stat is not None
        if self.path_exists and not self._watching_children:
            self._watching_children = True
            self._client.ChildrenWatch(
                self.source.path, self._children_changed, allow_session_lost=True
            )
        elif not self.path_exists:
            # The ChildrenWatch ended with the path (a new one starts when it
            # comes back), and no master leads from a group that is gone.
            self._watching_children = False
            self._children_changed([])

    def why_no_leader(self) -> str:
        """Why :attr:`leader` is None, in words."""
        where = f"ZooKeeper at {self.source.hosts}"
        if not self.path_exists:
            return (
                f"{where} has no {self.source.path}: is that the path the masters were "
                "started with (their --zk)?"
            )
        return f"no master has registered under {self.source.path} in {where}"

    def _children_changed(self, children: list[str]) -> None:
        members = sorted(
            (c for c in children if c.startswith(MASTER_INFO_LABEL + "_")),
            key=lambda c: int(c.rsplit("_", 1)[1]),
        )
        leader: MasterAddress | None = None
        if members:
            try:
                data, _ = self._client.get(f"{self.source.path}/{members[0]}")
                leader = leader_from_master_info(data)
            except Exception:  # the node may vanish between list and get
                leader = None
        with self._lock:
            if leader == self.leader:
                return
            self.leader = leader
        self._on_change(leader)

    def stop(self) -> None:
        """Stop and close the client; any number of times, from any thread."""
        self._stopping.set()
        with self._client_lock:
            if self._stopped:
                return
            self._stopped = True
            self._client.stop()
            self._client.close()
