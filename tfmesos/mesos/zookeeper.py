"""The leading Mesos master as ZooKeeper names it (``-m zk://...``), found as
Mesos's own scheduler library finds it: the member with the lowest sequence,
read by its label (``json.info``, ``info`` or a bare UPID), and dialled at its
UPID's IP and port. A lowest member that cannot be read means no leader, as in
Mesos. The exact rules, with their sources in Mesos, are in
docs/mesos-protocol.md.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tfmesos.errors import TFMesosError
from tfmesos.mesos.masters import MasterAddress, ZooKeeperSource, host_problem, port_problem

__all__ = [
    "MasterInfo",
    "Member",
    "ZooKeeperAuthError",
    "ZooKeeperError",
    "ZooKeeperLeader",
    "group_members",
    "leader_from_master_info",
    "leading_member",
    "master_info_from_node",
]


class _AtDebug(logging.LoggerAdapter):  # type: ignore[type-arg]
    """kazoo's warnings and errors, logged at debug only: repeated on every try,
    they would bury tfrun's one line on what failed. kazoo's debug output is
    dropped (it prints the digest credentials), and ``secret`` is cut from
    whatever is kept."""

    def __init__(self, logger: logging.Logger, secret: str | None) -> None:
        super().__init__(logger, {})
        password = (secret or "").partition(":")[2]
        self._secrets = [s for s in (secret, password) if s]

    def isEnabledFor(self, level: int) -> bool:
        return level >= logging.WARNING and self.logger.isEnabledFor(logging.DEBUG)

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        kwargs.pop("exc_info", None)  # a traceback may show the request too
        try:
            text = str(msg) % args if args else str(msg)
        except (TypeError, ValueError):  # a message that does not format
            text = f"{msg} {args}"
        for secret in self._secrets:
            text = text.replace(secret, "***")
        self.logger.debug("%s", text, **kwargs)


_KAZOO_LOGGER = logging.getLogger("tfmesos.zookeeper")

# src/master/constants.hpp
MASTER_INFO_LABEL = "info"
MASTER_INFO_JSON_LABEL = "json.info"


@dataclass(frozen=True)
class Member:
    """A member of the masters' group: a child ``[<label>_]<sequence>``."""

    name: str
    label: str | None
    sequence: int


_INT = re.compile(r"[+-]?[0-9]+")


def group_members(children: list[str]) -> list[Member]:
    """The members among a group's children, lowest sequence first, as
    ``GroupProcess::cache`` (``src/zookeeper/group.cpp``) reads them:
    ``strings::tokenize(name, "_")``, the first token the label if there is
    more than one, the last the sequence, ``numify<int32_t>``."""
    members: dict[int, Member] = {}
    for name in children:
        tokens = [token for token in name.split("_") if token]
        if not tokens or not _INT.fullmatch(tokens[-1]):
            continue
        sequence = int(tokens[-1])
        if not -(2**31) <= sequence < 2**31:
            continue
        # One member a sequence (a hashmap there); ZooKeeper never repeats one.
        members[sequence] = Member(name, tokens[0] if len(tokens) > 1 else None, sequence)
    return [members[sequence] for sequence in sorted(members)]


def leading_member(children: list[str]) -> Member | None:
    """The member with the lowest sequence, of any label
    (``LeaderDetectorProcess::watched``, ``src/zookeeper/detector.cpp``)."""
    members = group_members(children)
    return members[0] if members else None


@dataclass(frozen=True)
class MasterInfo:
    """The fields of ``MasterInfo`` (``include/mesos/mesos.proto``) that say
    where the master is."""

    pid: str | None = None
    ip: int | None = None
    """Legacy: the IPv4 ``s_addr``, see the module's docstring."""
    port: int | None = None
    hostname: str | None = None
    address_hostname: str | None = None
    address_ip: str | None = None
    address_port: int | None = None

    @classmethod
    def from_json(cls, data: bytes) -> MasterInfo:
        """From ``JSON::protobuf(MasterInfo)``, a ``json.info_`` member's data
        (or ``/state``'s ``leader_info``)."""
        info: Any = json.loads(data.decode())
        if not isinstance(info, dict):
            raise ValueError("MasterInfo JSON is not an object")
        address = info.get("address") or {}
        if not isinstance(address, dict):
            raise ValueError("MasterInfo JSON: address is not an object")
        return cls(
            pid=_str(info.get("pid")),
            ip=_int(info.get("ip")),
            port=_int(info.get("port")),
            hostname=_str(info.get("hostname")),
            address_hostname=_str(address.get("hostname")),
            address_ip=_str(address.get("ip")),
            address_port=_int(address.get("port")),
        )

    @classmethod
    def from_protobuf(cls, data: bytes) -> MasterInfo:
        """From ``MasterInfo.SerializeToString()``, an ``info_`` member's data.

        Fields: ip = 2 (uint32), port = 3 (uint32), pid = 4, hostname = 5,
        address = 7 (``Address``: hostname = 1, ip = 2, port = 3 (int32));
        the rest are skipped."""
        fields: dict[str, Any] = {}
        for number, value in _protobuf_fields(data):
            if number in (2, 3) and isinstance(value, int):
                fields["ip" if number == 2 else "port"] = value & 0xFFFFFFFF
            elif number in (4, 5) and isinstance(value, bytes):
                fields["pid" if number == 4 else "hostname"] = value.decode()
            elif number == 7 and isinstance(value, bytes):
                for inner, item in _protobuf_fields(value):
                    if inner in (1, 2) and isinstance(item, bytes):
                        key = "address_hostname" if inner == 1 else "address_ip"
                        fields[key] = item.decode()
                    elif inner == 3 and isinstance(item, int):
                        fields["address_port"] = _int32(item)
            elif number in (2, 3, 4, 5, 7):
                raise ValueError(f"MasterInfo field {number} has the wrong wire type")
        return cls(**fields)

    @classmethod
    def from_pid(cls, pid: str) -> MasterInfo:
        """From a bare ``UPID``, an unlabelled member's data (``createMasterInfo``)."""
        return cls(pid=pid.strip())

    def address(self, scheme: str = "http") -> MasterAddress:
        """Where the scheduler library dials it: the ``pid``'s host and port
        (``MesosProcess::detected``, ``src/scheduler/scheduler.cpp``)."""
        if self.pid:
            named, number = _split_pid(self.pid)
        else:
            ip = self.address_ip or _unpack_ip(self.ip)
            found = ip or self.address_hostname or self.hostname
            port = self.address_port or self.port
            if not found or not port:
                raise ValueError(f"MasterInfo without an address: {self!r}")
            named, number = found, port
        # Checked here, so that a bad member is one line naming it, not the
        # HTTP client's traceback at the first dial (IDNA's "label too long").
        problem = host_problem(named) or port_problem(number)
        if problem:
            raise ValueError(
                f"its address {_shown_host(named, number)} cannot be dialled: {problem}"
            )
        return MasterAddress(scheme, named, number)


def _shown_host(host: str, port: int) -> str:
    shown = host if len(host) <= 70 else host[:67] + "..."
    return repr(f"{shown}:{port}")


def _str(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"MasterInfo JSON: {value!r} is not a string")


def _int(value: object) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError(f"MasterInfo JSON: {value!r} is not an integer")


def _split_pid(pid: str) -> tuple[str, int]:
    """``id@host:port`` (``operator>>`` for ``UPID``, 3rdparty/libprocess/src/pid.cpp)."""
    _, at, rest = pid.partition("@")
    host, colon, port = rest.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not at or not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad master pid {pid!r}: expected master@host:port")
    return host, int(port)


def _unpack_ip(ip: int | None) -> str | None:
    if not ip:  # 0 is INADDR_ANY: no address
        return None
    return socket.inet_ntoa((ip & 0xFFFFFFFF).to_bytes(4, "little"))


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _varint(data: bytes, offset: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if offset >= len(data):
            raise ValueError("truncated protobuf varint")
        byte = data[offset]
        offset += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, offset
        shift += 7
        if shift >= 70:
            raise ValueError("protobuf varint too long")


def _protobuf_fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field of a serialized message: varints
    as ``int``, length-delimited fields as ``bytes``, fixed32 and fixed64 as
    ``int``; groups (wire types 3 and 4, unused by Mesos) are an error."""
    offset = 0
    while offset < len(data):
        key, offset = _varint(data, offset)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("protobuf field number 0")
        value: int | bytes
        if wire == 0:
            value, offset = _varint(data, offset)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if offset + size > len(data):
                raise ValueError("truncated protobuf fixed field")
            value = int.from_bytes(data[offset : offset + size], "little")
            offset += size
        elif wire == 2:
            size, offset = _varint(data, offset)
            if offset + size > len(data):
                raise ValueError("truncated protobuf length-delimited field")
            value = data[offset : offset + size]
            offset += size
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, value


def master_info_from_node(label: str | None, data: bytes) -> MasterInfo:
    """A member's ``MasterInfo``, read by its label
    (``ZooKeeperMasterDetectorProcess::fetched``, src/master/detector/zookeeper.cpp);
    ``ValueError`` if it cannot be."""
    if label is None:
        return MasterInfo.from_pid(data.decode())
    if label == MASTER_INFO_LABEL:
        return MasterInfo.from_protobuf(data)
    if label == MASTER_INFO_JSON_LABEL:
        return MasterInfo.from_json(data)
    raise ValueError(f"unknown label {label!r}")


def leader_from_master_info(data: bytes, scheme: str = "http") -> MasterAddress:
    """Where to dial the master of a ``MasterInfo`` as JSON (from ZooKeeper or ``/state``)."""
    return MasterInfo.from_json(data).address(scheme)


class ZooKeeperError(TFMesosError):
    """ZooKeeper could not be reached, or the masters' group could not be read."""


class ZooKeeperAuthError(TFMesosError):
    """ZooKeeper refuses these credentials, or none, the masters' group
    (``NoAuth``). Unlike :class:`ZooKeeperError` it is not retried: the same
    credentials cannot help, so the job ends at once."""

    @classmethod
    def refused(cls, source: ZooKeeperSource, path: str) -> ZooKeeperAuthError:
        where = f"ZooKeeper at {source.hosts}"
        if source.auth:
            user = source.auth.partition(":")[0]
            return cls(
                f"{where} refuses to let user {user!r} read {path} (NoAuth): check the user "
                "and password in the zk:// URL (zk://USER:PASSWORD@HOSTS/PATH)"
            )
        return cls(
            f"{where} refuses to let a client without credentials read {path} (NoAuth): "
            "give them in the URL, zk://USER:PASSWORD@HOSTS/PATH"
        )


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
        #
        # The credentials go with every session, once it is up (kazoo sends
        # them on each connection before any request, and again after a
        # reconnection), as Mesos's group authenticates when it is connected
        # (``GroupProcess::authenticate``, src/zookeeper/group.cpp). kazoo's
        # add_auth() before start() would fail: there is no connection yet.
        self._client = KazooClient(
            hosts=source.hosts,
            timeout=10.0,
            command_retry={"max_tries": 3, "deadline": 10.0, "max_delay": 2.0},
            auth_data=[("digest", source.auth)] if source.auth else None,
            logger=_AtDebug(_KAZOO_LOGGER, source.auth),
        )
        self._lock = threading.Lock()
        self._client_lock = threading.Lock()
        self._stopping = threading.Event()
        self._stopped = False
        self.leader: MasterAddress | None = None
        self._problem: str | None = None
        self.path_exists = False
        self._watching_children = False

    def start(self, timeout: float = 15.0) -> None:
        """Connect and watch the group; raise :class:`ZooKeeperError`, with the
        client stopped, if no server answers within ``timeout`` or the group
        cannot be read, :class:`ZooKeeperAuthError` if ZooKeeper refuses
        us the group."""
        from kazoo.exceptions import KazooException, NoAuthError

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
        except NoAuthError:
            self.stop()
            raise ZooKeeperAuthError.refused(self.source, self.source.path) from None
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
        with self._lock:
            problem = self._problem
        if problem:
            return f"{problem} (in {where}; Mesos would not pass it over for the next member)"
        return f"no master has registered under {self.source.path} in {where}"

    def _children_changed(self, children: list[str]) -> None:
        from kazoo.exceptions import NoAuthError

        member = leading_member(children)
        leader: MasterAddress | None = None
        problem: str | None = None
        if member is not None:
            path = f"{self.source.path}/{member.name}"
            try:
                data, _ = self._client.get(path)
                info = master_info_from_node(member.label, data)
                leader = info.address(self.source.scheme)
            except ValueError as exc:  # UnicodeDecodeError too
                problem = f"the lowest member, {path}, cannot be read: {exc}"
            except NoAuthError:
                refused = ZooKeeperAuthError.refused(self.source, path)
                problem = f"the lowest member cannot be read: {refused}"
            except Exception:  # the node may vanish between list and get
                leader = None  # the watch fires again with the children left
        with self._lock:
            self._problem = problem
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
