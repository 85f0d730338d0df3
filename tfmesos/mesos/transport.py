"""How :class:`~tfmesos.mesos.scheduler.SchedulerClient` talks HTTP: a seam.

The client keeps the policy (which master, redirects, heartbeats, backoff, the
reconnect budget, the order of calls); a transport only moves bytes. Its
interface is two methods, after Mesos's own scheduler library
(``src/scheduler/scheduler.cpp``, ``struct Connections``), which keeps two
connections to the master: ``subscribe``, for the SUBSCRIBE call and its
streamed answer, and ``nonSubscribe``, for every other call:

- :meth:`Transport.open_stream` sends SUBSCRIBE and returns as soon as the
  answer's status and headers are in: an :class:`EventStream` whose body is
  read chunk by chunk;
- :meth:`Transport.post` sends one other call and returns its status and text.

Neither follows redirects, retries or times out on its own (bar ``post``'s
``timeout``): that is the client's policy. Failing to reach the master, or a
stream that breaks, is a :class:`TransportError` whose text says what happened
in words fit for the user. :class:`AiohttpTransport` is the real one; the
tests script an in-memory one.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Protocol

import aiohttp

__all__ = ["AiohttpTransport", "EventStream", "Transport", "TransportError"]


class TransportError(Exception):
    """The master could not be reached, or the connection broke. The text is
    the whole diagnosis (no type name needs adding)."""


class EventStream(Protocol):
    """The answer to SUBSCRIBE: status and headers now, the body in chunks."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    async def read_chunk(self) -> bytes:
        """The next piece of the body as it comes (any size); ``b""`` at its end."""
        ...

    async def text(self) -> str:
        """The whole body as text (for an answer other than ``200``)."""
        ...

    def close(self) -> None:
        """Drop the connection; a pending :meth:`read_chunk` ends."""
        ...


class Transport(Protocol):
    async def open_stream(
        self, url: str, body: bytes, headers: Mapping[str, str]
    ) -> EventStream: ...

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> tuple[int, str]:
        """Send one call; its answer's status and text."""
        ...

    async def aclose(self) -> None: ...


def describe(exc: BaseException) -> str:
    """What an aiohttp or socket error means, in one line: ``Cannot connect:
    Connection refused`` rather than the errno's repr (the client names the
    master)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        error = exc.os_error
        if error.errno is not None and error.errno > 0:
            why = os.strerror(error.errno)
        else:  # a resolver's error (socket.gaierror): negative codes
            why = error.strerror or str(error) or type(error).__name__
        return f"Cannot connect: {why}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _AiohttpStream:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers

    async def read_chunk(self) -> bytes:
        try:
            return await self._response.content.readany()
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportError(describe(exc)) from exc

    async def text(self) -> str:
        try:
            return await self._response.text()
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportError(describe(exc)) from exc
        finally:
            self._response.release()

    def close(self) -> None:
        self._response.close()


class AiohttpTransport:
    """HTTP/1.1 over aiohttp: one session, whose pool keeps the SUBSCRIBE
    stream's connection apart from the one that calls go out on (the client
    sends one call at a time, so one pooled connection carries them all)."""

    def __init__(self, auth: tuple[str, str] | None = None, connect_timeout: float = 10) -> None:
        self._auth = aiohttp.BasicAuth(*auth) if auth else None
        self._connect_timeout = connect_timeout
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        # Made on first use: a session belongs to the running loop.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                auth=self._auth,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout),
            )
        return self._session

    async def open_stream(self, url: str, body: bytes, headers: Mapping[str, str]) -> EventStream:
        try:
            response = await self._open().post(
                url, data=body, headers=dict(headers), allow_redirects=False
            )
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportError(describe(exc)) from exc
        return _AiohttpStream(response)

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> tuple[int, str]:
        try:
            async with self._open().post(
                url,
                data=body,
                headers=dict(headers),
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as response:
                return response.status, await response.text()
        except asyncio.TimeoutError:
            raise TransportError(f"no answer within {timeout:g}s") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportError(describe(exc)) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
