"""Reading a Mesos cluster's JSON endpoints (a master's ``/state``, an
agent's ``/files/read``) from synchronous code, through the scheduler's own
client: the transport (:class:`~tfmesos.mesos.transport.AiohttpTransport`:
its HTTP Basic credentials, its TLS) and the master-finding of
:mod:`tfmesos.mesos.masters` and :mod:`tfmesos.mesos.zookeeper`.

Its one event loop lives as long as the reader, so that one session (and
its connections) serves every read of a command that reads often (``tfrun
logs -f``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tfmesos.mesos.masters import MasterAddress, parse_masters
from tfmesos.mesos.transport import AiohttpTransport, TransportError
from tfmesos.mesos.zookeeper import MasterInfo, ZooKeeperError, ZooKeeperLeader

__all__ = ["TEST_MASTER_FLAG", "MasterReader", "ReadError"]

TEST_MASTER_FLAG = "tfmesos_test_master"
"""What the tfmesos test master (``tfmesos.testing.master``) sets among the
flags of its ``/state``, and no real master has: how it is told apart."""

TIMEOUT = 15.0
"""Seconds for one read, and for ZooKeeper to name the leader."""


class ReadError(OSError):
    """A read that got no JSON: ``status`` is the HTTP status where one came
    (404: no such file), else None (no answer)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class MasterReader:
    """The leading master of ``master`` (``-m``'s forms, ``zk://`` among
    them) and its agents, read as ``principal`` with ``secret`` where given."""

    def __init__(
        self,
        master: str,
        auth: tuple[str, str] | None = None,
        ssl_ca: str | None = None,
        timeout: float = TIMEOUT,
    ) -> None:
        self.master = master
        self.timeout = timeout
        self._transport = AiohttpTransport(auth=auth, connect_timeout=timeout, ssl_ca=ssl_ca)
        self._loop: asyncio.AbstractEventLoop | None = None
        """Made at the first read: a reader that never reads holds nothing."""

    def read_json(self, url: str) -> Any:
        """The JSON at ``url``; :class:`ReadError` for another status than
        200 or no answer. Text is read with ``surrogateescape``: a file's
        bytes in ``/files/read``'s ``data`` are as they are, and a chunk
        may end inside a character."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        try:
            status, body = self._loop.run_until_complete(self._transport.read(url, self.timeout))
        except TransportError as exc:
            raise ReadError(f"{url}: {exc}") from None
        if status != 200:
            raise ReadError(f"{url}: HTTP {status}", status)
        try:
            return json.loads(body.decode("utf-8", "surrogateescape"))
        except ValueError as exc:
            raise ReadError(f"{url}: not JSON ({exc})", status) from None

    def leader(self) -> tuple[str, dict[str, Any] | None]:
        """The leading master's URL, and its ``/state`` where that was read
        on the way; :class:`ReadError` where none leads."""
        source = parse_masters(self.master)
        if not isinstance(source, list):
            return self._zookeeper_leader(source), None
        problems = []
        for address in source:
            try:
                state = self.read_json(address.url + "/state")
            except ReadError as exc:
                problems.append(str(exc))
                continue
            if state.get("leader") and state.get("leader") == state.get("pid"):
                return address.url, state
            named = _named_leader(state, address)
            if named is not None:
                return named.url, None
        raise ReadError(
            f"no leading Mesos master at {self.master}: {'; '.join(problems) or 'none leads'}"
        )

    def _zookeeper_leader(self, source: Any) -> str:
        zookeeper = ZooKeeperLeader(source, lambda leader: None)
        try:
            zookeeper.start(self.timeout)
            if zookeeper.leader is None:
                raise ReadError(f"ZooKeeper names no leading master: {self.master}")
            return zookeeper.leader.url
        except ZooKeeperError as exc:
            raise ReadError(str(exc)) from None
        finally:
            zookeeper.stop()

    def close(self) -> None:
        """Close its connections, its last act."""
        if self._loop is not None:
            self._loop.run_until_complete(self._transport.aclose())
            self._loop.close()
            self._loop = None


def _named_leader(state: dict[str, Any], asked: MasterAddress) -> MasterAddress | None:
    """The leader a standby's ``/state`` names (``leader_info``), dialled as
    the scheduler dials one ZooKeeper names, with the scheme ``asked`` has."""
    info = state.get("leader_info")
    if not isinstance(info, dict):
        return None
    try:
        return MasterInfo.from_json(json.dumps(info).encode()).address(asked.scheme)
    except ValueError:
        return None
