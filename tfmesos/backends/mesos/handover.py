"""The handover of a detached Mesos job: what its launcher task needs of the
submitting tfrun, carried so that no ``/state`` shows it.

The launcher task's ``TaskInfo`` holds only a one-time key and where to
dial the submitter. Each side sends a fresh X25519 public key as its nonce
and proves the one-time key over both (as on the rendezvous); the submitter
then sends the job's flags and secrets sealed with AES-256-GCM under a key
of that session alone (HKDF-SHA256 of the X25519 exchange, salted with the
one-time key). The cryptography is the ``cryptography`` package's, never
our own: no ``/state`` and no onlooker of the network sees the secrets, a
changed or replayed message is refused, and traffic recorded and opened
later with the one-time key stays sealed (forward secrecy). The submitter
serves one launcher and leaves (docs/security.md). Python's ``ssl`` could
carry it only with a certificate (it has no pre-shared keys before 3.13),
which a one-time key is not."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from typing import Any

from tfmesos.rendezvous import protocol

# cryptography is imported where it is used: every Mesos backend imports
# this module (through detached.py), and only a detached job's handover
# needs it (some 50 ms).

__all__ = ["ENV_HANDOVER", "HandoverError", "receive", "seal", "serve_one", "unseal"]

ENV_HANDOVER = "TFMESOS_HANDOVER"
"""The launcher task's: ``host:port`` of the submitter's handover."""
PURPOSE = "tfmesos-detached-handover"
TIMEOUT = 30.0
"""How long either side waits on the other once connected."""
_IV_BYTES = 12
"""AES-GCM's nonce, as NIST SP 800-38D recommends it: random, once per key
(and each session's key seals one message)."""


class HandoverError(Exception):
    """The other side did not prove the key, or sent what cannot be read."""


class _Exchange:
    """One side's fresh X25519 key pair: its public half is that side's
    nonce, which the other proves the one-time key over."""

    def __init__(self) -> None:
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        self._private = X25519PrivateKey.generate()
        self.nonce = self._private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()

    def session_key(self, key: bytes, theirs: str, nonces: str) -> bytes:
        """The key this session's message is sealed under: the X25519
        secret shared with ``theirs``, bound to the one-time ``key`` and to
        both nonces (``nonces``: the submitter's, then the launcher's)."""
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
        from cryptography.hazmat.primitives.hashes import SHA256
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        try:
            shared = self._private.exchange(
                X25519PublicKey.from_public_bytes(bytes.fromhex(theirs))
            )
        except ValueError:  # not hexadecimal, not 32 bytes, or a small-order point
            raise HandoverError("the other side's nonce is not an X25519 public key") from None
        info = f"{PURPOSE} {nonces}".encode()
        return HKDF(algorithm=SHA256(), length=32, salt=key, info=info).derive(shared)


def seal(key: bytes, nonces: str, message: dict[str, Any]) -> dict[str, str]:
    """``message`` encrypted and authenticated under ``key`` (AES-GCM, 16, 24
    or 32 bytes), bound to ``nonces``: it opens under no others."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    iv = os.urandom(_IV_BYTES)
    sealed = AESGCM(key).encrypt(iv, json.dumps(message).encode(), _bound(nonces))
    return {"iv": iv.hex(), "sealed": sealed.hex()}


def unseal(key: bytes, nonces: str, box: dict[str, Any]) -> dict[str, Any]:
    """What :func:`seal` sealed under ``key`` and ``nonces``; anything
    changed, sealed otherwise or under other nonces is a :class:`HandoverError`."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        iv = bytes.fromhex(str(box.get("iv", "")))
        sealed = bytes.fromhex(str(box.get("sealed", "")))
    except ValueError:
        raise HandoverError("the handover is not hexadecimal") from None
    if len(iv) != _IV_BYTES:
        raise HandoverError("the handover's nonce is not AES-GCM's")
    aead = AESGCM(key)
    try:
        plain = aead.decrypt(iv, sealed, _bound(nonces))
    except InvalidTag:
        raise HandoverError("the handover's seal does not match the key") from None
    try:
        message = json.loads(plain)
    except ValueError:  # and UnicodeDecodeError: a peer with the key sealed it wrong
        raise HandoverError("the handover is not JSON") from None
    if not isinstance(message, dict):
        raise HandoverError("the handover is not a JSON object")
    return message


def _bound(nonces: str) -> bytes:
    """What a seal is bound to besides its key (AES-GCM's associated data)."""
    return f"{PURPOSE} {nonces}".encode()


async def _read(reader: asyncio.StreamReader, decoder: protocol.FrameDecoder) -> dict[str, Any]:
    while True:
        data = await reader.read(65536)
        if not data:
            raise HandoverError("the launcher task hung up")
        for kind, payload in decoder.feed(data):
            if kind == protocol.JSON:
                return protocol.parse_json(payload)


async def serve_one(
    key: bytes, task_id: str, handover: dict[str, Any], host: str
) -> tuple[asyncio.AbstractServer, int, asyncio.Future[str]]:
    """Listen on ``host`` for the launcher task ``task_id``: the server, its
    port, and a future that is the launcher's host once the handover has
    gone to the one that proved ``key``. Connections that do not prove it
    are dropped."""
    done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    served: list[bool] = []
    """Set before the handover is written: a second prover, even one that
    proves the key while the first has not said "taken", gets nothing."""

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            exchange = _Exchange()
            nonce = exchange.nonce
            writer.write(protocol.encode_json({"type": protocol.HELLO, "nonce": nonce}))
            decoder = protocol.FrameDecoder(protocol.MAX_HANDSHAKE_FRAME)
            hello = await asyncio.wait_for(_read(reader, decoder), TIMEOUT)
            theirs = str(hello.get("nonce", ""))
            expected = protocol.proof(key, PURPOSE, "launcher", nonce, theirs, task_id)
            if served or not protocol.proof_matches(expected, hello.get("proof")):
                return
            nonces = f"{nonce} {theirs}"
            session = exchange.session_key(key, theirs, nonces)
            served.append(True)
            ours = protocol.proof(key, PURPOSE, "submitter", theirs, nonce, task_id)
            box = seal(session, nonces, handover)
            writer.write(protocol.encode_json({"type": "handover", "proof": ours, **box}))
            await writer.drain()
            ack = await asyncio.wait_for(_read(reader, protocol.FrameDecoder()), TIMEOUT)
            if ack.get("type") == "taken":
                peer = writer.get_extra_info("peername")
                done.set_result(str(peer[0]) if peer else "")
        except (OSError, asyncio.TimeoutError, HandoverError, protocol.FrameError):
            return
        finally:
            writer.close()

    server = await asyncio.start_server(one, host, 0)
    port = int(server.sockets[0].getsockname()[1])
    return server, port, done


def receive(address: str, key: bytes, task_id: str) -> dict[str, Any]:
    """The launcher task's side: dial ``address``, prove the key, check the
    submitter's proof, and return the handover, unsealed."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host.strip("[]"), int(port)), timeout=TIMEOUT) as sock:
        decoder = protocol.FrameDecoder()
        hello = _read_blocking(sock, decoder)
        theirs = str(hello.get("nonce", ""))
        exchange = _Exchange()
        nonce = exchange.nonce
        proof = protocol.proof(key, PURPOSE, "launcher", theirs, nonce, task_id)
        sock.sendall(protocol.encode_json({"type": "proof", "nonce": nonce, "proof": proof}))
        box = _read_blocking(sock, decoder)
        expected = protocol.proof(key, PURPOSE, "submitter", nonce, theirs, task_id)
        if not protocol.proof_matches(expected, box.get("proof")):
            raise HandoverError(f"{address} did not prove the job's key")
        nonces = f"{theirs} {nonce}"
        handover = unseal(exchange.session_key(key, theirs, nonces), nonces, box)
        sock.sendall(protocol.encode_json({"type": "taken"}))
        return handover


def _read_blocking(sock: socket.socket, decoder: protocol.FrameDecoder) -> dict[str, Any]:
    while True:
        data = sock.recv(65536)
        if not data:
            raise HandoverError("the submitting tfrun hung up")
        for kind, payload in decoder.feed(data):
            if kind == protocol.JSON:
                return protocol.parse_json(payload)
