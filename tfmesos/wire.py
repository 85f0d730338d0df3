"""The rendezvous wire format, shared by the launcher and the in-task agent.

Standard library only (the agent imports it). A frame is a 4-byte big-endian
length, then one kind byte, then the payload; the length counts the kind byte
and the payload. Two kinds exist:

``J``
    a UTF-8 JSON object: registration, the cluster definition, stop, exit.
``O``
    raw bytes a task printed, whole lines except at the end of its output.
    Output is not JSON so that forwarding costs no encoding: it is the hot path.

Authentication is an HMAC-SHA256 challenge and response on a per-job secret, in
both directions, so the secret never crosses the wire and neither side can be
impersonated by someone who only reaches the port.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from typing import Any

__all__ = [
    "JSON",
    "MAX_FRAME",
    "MAX_HANDSHAKE_FRAME",
    "OUTPUT",
    "PROTOCOL_VERSION",
    "FrameDecoder",
    "FrameError",
    "encode_frame",
    "encode_json",
    "parse_json",
    "proof",
    "proof_matches",
]

JSON = b"J"
OUTPUT = b"O"
_KINDS = (JSON, OUTPUT)
_HEADER = struct.Struct(">I")

MAX_FRAME = 1 << 20
"""Largest frame an authenticated peer may send (1 MiB)."""
MAX_HANDSHAKE_FRAME = 4096
"""Largest frame before the peer has proved it knows the secret."""

PROTOCOL_VERSION = 2
"""2: the cluster message's proof covers its content, the registration's its address."""


class FrameError(ValueError):
    """The peer sent something that is not a valid frame."""


def encode_frame(kind: bytes, payload: bytes) -> bytes:
    if kind not in _KINDS:
        raise ValueError(f"unknown frame kind {kind!r}")
    return _HEADER.pack(len(payload) + 1) + kind + payload


def encode_json(message: dict[str, Any]) -> bytes:
    return encode_frame(JSON, json.dumps(message, separators=(",", ":")).encode())


def parse_json(payload: bytes) -> dict[str, Any]:
    """Decode a ``J`` payload into a dict with a string ``type``."""
    try:
        message = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FrameError(f"malformed JSON message: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise FrameError("a message must be a JSON object with a string 'type'")
    return message


class FrameDecoder:
    """Turns a byte stream into frames, however the stream was cut into chunks.

    Refuses a frame longer than ``max_frame`` as soon as its header is seen, so
    a peer cannot make the launcher buffer more than that.
    """

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        self._buffer += data
        frames: list[tuple[bytes, bytes]] = []
        while len(self._buffer) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(self._buffer)
            if length < 1 or length > self.max_frame + 1:
                raise FrameError(f"frame length {length} out of bounds (max {self.max_frame})")
            end = _HEADER.size + length
            if len(self._buffer) < end:
                break
            kind = bytes(self._buffer[_HEADER.size : _HEADER.size + 1])
            if kind not in _KINDS:
                raise FrameError(f"unknown frame kind {kind!r}")
            frames.append((kind, bytes(self._buffer[_HEADER.size + 1 : end])))
            del self._buffer[:end]
        return frames

    @property
    def pending(self) -> int:
        """Bytes received that do not yet make a whole frame."""
        return len(self._buffer)


def proof(secret: bytes, purpose: str, *parts: str) -> str:
    """An HMAC of ``parts`` under ``secret``, bound to ``purpose`` so that a
    proof made for one step can never be replayed as another."""
    message = "\n".join((purpose, *parts)).encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def digest(message: dict[str, Any]) -> str:
    """A digest of a JSON message's content, less its ``proof``, for a proof
    to cover: both ends compute it over the same canonical encoding."""
    content = {k: v for k, v in message.items() if k != "proof"}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def proof_matches(expected: str, given: object) -> bool:
    return isinstance(given, str) and hmac.compare_digest(expected, given)
