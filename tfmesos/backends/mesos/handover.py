"""The handover of a detached Mesos job: what its launcher task needs of the
submitting tfrun, carried so that no ``/state`` shows it.

The launcher task's ``TaskInfo`` holds only a one-time key and where to
dial the submitter. Each side proves the key over the other's nonce (as on
the rendezvous), and the submitter sends the job's flags and secrets sealed
under that key (an HMAC-SHA256 keystream, authenticated), so that no
``/state`` and no onlooker of the network sees them. The submitter serves one
launcher and leaves. The key itself stays in the ``TaskInfo`` and the
launcher's environment, and there is no forward secrecy: whoever recorded
the traffic and later reads the key can open it (docs/security.md).
Standard library only."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import socket
from typing import Any

from tfmesos.rendezvous import protocol

__all__ = ["ENV_HANDOVER", "HandoverError", "receive", "seal", "serve_one", "unseal"]

ENV_HANDOVER = "TFMESOS_HANDOVER"
"""The launcher task's: ``host:port`` of the submitter's handover."""
PURPOSE = "tfmesos-detached-handover"
TIMEOUT = 30.0
"""How long either side waits on the other once connected."""


class HandoverError(Exception):
    """The other side did not prove the key, or sent what cannot be read."""


def _keystream(key: bytes, nonces: str, length: int) -> bytes:
    out = bytearray()
    block = 0
    while len(out) < length:
        out += hmac.new(key, f"{PURPOSE} stream {nonces} {block}".encode(), hashlib.sha256).digest()
        block += 1
    return bytes(out[:length])


def seal(key: bytes, nonces: str, message: dict[str, Any]) -> dict[str, str]:
    """``message`` encrypted and authenticated under ``key`` (encrypt, then MAC)."""
    plain = json.dumps(message).encode()
    sealed = bytes(a ^ b for a, b in zip(plain, _keystream(key, nonces, len(plain)), strict=True))
    mac = hmac.new(key, f"{PURPOSE} mac {nonces}".encode() + sealed, hashlib.sha256).hexdigest()
    return {"sealed": sealed.hex(), "mac": mac}


def unseal(key: bytes, nonces: str, box: dict[str, Any]) -> dict[str, Any]:
    try:
        sealed = bytes.fromhex(str(box.get("sealed", "")))
    except ValueError:
        raise HandoverError("the handover is not hexadecimal") from None
    mac = hmac.new(key, f"{PURPOSE} mac {nonces}".encode() + sealed, hashlib.sha256).hexdigest()
    if not protocol.proof_matches(mac, box.get("mac")):
        raise HandoverError("the handover's seal does not match the key")
    plain = bytes(a ^ b for a, b in zip(sealed, _keystream(key, nonces, len(sealed)), strict=True))
    message = json.loads(plain)
    if not isinstance(message, dict):
        raise HandoverError("the handover is not a JSON object")
    return message


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
            nonce = os.urandom(16).hex()
            writer.write(protocol.encode_json({"type": protocol.HELLO, "nonce": nonce}))
            decoder = protocol.FrameDecoder(protocol.MAX_HANDSHAKE_FRAME)
            hello = await asyncio.wait_for(_read(reader, decoder), TIMEOUT)
            theirs = str(hello.get("nonce", ""))
            expected = protocol.proof(key, PURPOSE, "launcher", nonce, theirs, task_id)
            if served or not protocol.proof_matches(expected, hello.get("proof")):
                return
            served.append(True)
            nonces = f"{nonce} {theirs}"
            ours = protocol.proof(key, PURPOSE, "submitter", theirs, nonce, task_id)
            writer.write(
                protocol.encode_json(
                    {"type": "handover", "proof": ours, **seal(key, nonces, handover)}
                )
            )
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
        nonce = os.urandom(16).hex()
        proof = protocol.proof(key, PURPOSE, "launcher", theirs, nonce, task_id)
        sock.sendall(protocol.encode_json({"type": "proof", "nonce": nonce, "proof": proof}))
        box = _read_blocking(sock, decoder)
        expected = protocol.proof(key, PURPOSE, "submitter", nonce, theirs, task_id)
        if not protocol.proof_matches(expected, box.get("proof")):
            raise HandoverError(f"{address} did not prove the job's key")
        handover = unseal(key, f"{theirs} {nonce}", box)
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
