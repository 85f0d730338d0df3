"""The handover of a detached Mesos job (tfmesos.backends.mesos.handover):
the submitter gives what the launcher task needs only to a peer that proves
the job's one-time key, sealed (AES-GCM, under a key of the session's own
X25519 exchange) so that only that session opens it; the job goes in it
typed (tfmesos.backends.jobspec), as the launcher runs it, less what is the
submitter's alone (tfmesos.backends.mesos.detached). Real sockets on
127.0.0.1, no process."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tfmesos.backends.jobs import DetachedJob
from tfmesos.backends.jobspec import from_json
from tfmesos.backends.mesos import handover
from tfmesos.backends.mesos.detached import _handover
from tfmesos.backends.mesos.options import MesosOptions


async def _serve_and_receive(server_key: bytes, client_key: bytes) -> tuple[object, bool]:
    given = {"secret": "s3cret", "env": {"TOKEN": "x"}}
    server, port, done = await handover.serve_one(server_key, "job.launcher", given, "127.0.0.1")
    try:
        received: object = await asyncio.to_thread(
            handover.receive, f"127.0.0.1:{port}", client_key, "job.launcher"
        )
    except (handover.HandoverError, OSError) as exc:
        received = exc
    try:
        await asyncio.wait_for(asyncio.shield(done), 2)
        return received, True
    except asyncio.TimeoutError:
        return received, False
    finally:
        server.close()
        await server.wait_closed()


def test_the_launcher_with_the_key_gets_the_handover() -> None:
    key = os.urandom(32)
    received, handed = asyncio.run(_serve_and_receive(key, key))
    assert received == {"secret": "s3cret", "env": {"TOKEN": "x"}}
    assert handed


def test_a_peer_without_the_key_gets_nothing() -> None:
    received, handed = asyncio.run(_serve_and_receive(os.urandom(32), os.urandom(32)))
    assert isinstance(received, handover.HandoverError)
    assert not handed


def test_a_sealed_handover_opens_only_with_its_key_and_nonces() -> None:
    key = os.urandom(32)
    box = handover.seal(key, "a b", {"secret": "s3cret"})
    assert "s3cret" not in str(box) and b"s3cret".hex() not in str(box)
    assert handover.unseal(key, "a b", box) == {"secret": "s3cret"}
    for other_key, nonces in ((os.urandom(32), "a b"), (key, "a c")):
        with pytest.raises(handover.HandoverError):
            handover.unseal(other_key, nonces, box)


def test_the_submitters_own_options_stay_behind(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MESOS_MASTER", "127.0.0.1:5050")
    (tmp_path / "ca.pem").write_text("a CA")
    argv = ["--detach", "--events=e.jsonl", "--log-dir", "d", "--ssl-ca", "ca.pem", "-w", "1"]
    job, given = _launcher_job([*argv, "--", "true"], monkeypatch, tmp_path)
    assert job.events is None
    assert isinstance(job.options, MesosOptions)
    assert job.options.log_dir is None and job.options.ssl_ca is None
    assert given["files"] == {"ssl-ca.pem": b"a CA".hex()}


def test_a_proof_or_seal_that_is_not_ascii_is_refused_not_a_traceback() -> None:
    from tfmesos.rendezvous import protocol

    assert not protocol.proof_matches("ab", "é")
    assert not protocol.proof_matches("ab", "\ud800")
    for box in ({"iv": "é", "sealed": "é"}, {"iv": "", "sealed": ""}, {"mac": "é"}):
        with pytest.raises(handover.HandoverError):
            handover.unseal(os.urandom(32), "a b", box)


def test_a_sealed_handover_changed_anywhere_is_refused() -> None:
    key = os.urandom(32)
    box = handover.seal(key, "a b", {"secret": "s3cret"})
    for field in ("iv", "sealed"):
        raw = bytearray.fromhex(box[field])
        for at in (0, len(raw) - 1):
            changed = bytearray(raw)
            changed[at] ^= 1
            with pytest.raises(handover.HandoverError, match="does not match"):
                handover.unseal(key, "a b", {**box, field: changed.hex()})
    with pytest.raises(handover.HandoverError):
        handover.unseal(key, "a b", {**box, "sealed": box["sealed"][:-2]})


class _Handlers:
    """A test server's connection handlers, each waited for before its
    event loop ends (asyncio.start_server does not)."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def __call__(self, handler: Handler) -> Handler:
        async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self.tasks.add(task)
            try:
                await handler(reader, writer)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

        return tracked

    async def finished(self) -> None:
        await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), 10)


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _recorded(key: bytes, given: dict[str, object]) -> tuple[object, list[bytes]]:
    """A handover from the submitter to a launcher through a relay that
    keeps every byte each way: what the launcher got, and the bytes."""
    server, port, done = await handover.serve_one(key, "job.launcher", given, "127.0.0.1")
    captured: list[bytes] = []
    handlers = _Handlers()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            captured.append(data)
            writer.write(data)
        writer.close()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))
        with contextlib.suppress(OSError):
            await upstream_writer.wait_closed()

    relay_server = await asyncio.start_server(handlers(relay), "127.0.0.1", 0)
    relay_port = relay_server.sockets[0].getsockname()[1]
    try:
        received = await asyncio.to_thread(
            handover.receive, f"127.0.0.1:{relay_port}", key, "job.launcher"
        )
        await asyncio.wait_for(asyncio.shield(done), 10)
        await handlers.finished()
        return received, captured
    finally:
        for each in (relay_server, server):
            each.close()
            await each.wait_closed()


def _frames(captured: list[bytes]) -> list[dict[str, object]]:
    from tfmesos.rendezvous import protocol

    decoder = protocol.FrameDecoder()
    frames: list[dict[str, object]] = []
    for data in captured:
        frames += [
            protocol.parse_json(p) for kind, p in decoder.feed(data) if kind == protocol.JSON
        ]
    return frames


def test_the_wire_carries_nothing_of_the_secrets() -> None:
    import base64

    secret = f"s3cret-{os.urandom(8).hex()}"
    key = os.urandom(32)
    received, captured = asyncio.run(_recorded(key, {"secret": secret, "env": {"T": secret}}))
    assert received == {"secret": secret, "env": {"T": secret}}
    wire_bytes = b"".join(captured)
    assert any(b'"handover"' in data for data in captured)  # the relay saw the handover
    for form in (
        secret.encode(),
        secret.encode().hex().encode(),
        base64.b64encode(secret.encode()),
    ):
        assert form not in wire_bytes


def test_recorded_traffic_does_not_open_with_the_one_time_key() -> None:
    """Forward secrecy: whoever recorded the handover and later reads the
    key in the launcher task's TaskInfo cannot open it (the seal before,
    under the key and the nonces on the wire, opened)."""
    key = os.urandom(32)
    _, captured = asyncio.run(_recorded(key, {"secret": "s3cret"}))
    hello, proof, box = _frames(captured)[:3]
    nonces = f"{hello['nonce']} {proof['nonce']}"
    with pytest.raises(handover.HandoverError):
        handover.unseal(key, nonces, box)


async def _replay_to_a_launcher(frames: list[dict[str, object]]) -> object:
    """A submitter that replays a recorded session's hello and handover to a
    launcher that holds the key: what the launcher makes of it."""
    from tfmesos.rendezvous import protocol

    hello, _, box = frames[:3]
    handlers = _Handlers()

    async def replay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(protocol.encode_json(hello))
        await handover._read(reader, protocol.FrameDecoder())
        writer.write(protocol.encode_json(box))
        await writer.drain()
        await reader.read()

    server = await asyncio.start_server(handlers(replay), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        said: object = await asyncio.to_thread(
            handover.receive, f"127.0.0.1:{port}", KEY, "job.launcher"
        )
    except handover.HandoverError as exc:
        said = exc
    await handlers.finished()
    server.close()
    await server.wait_closed()
    return said


async def _replay_to_the_submitter(frames: list[dict[str, object]]) -> tuple[object, bool]:
    """A launcher that replays a recorded session's proof to the submitter:
    what it gets, and whether the submitter took it for its launcher."""
    from tfmesos.rendezvous import protocol

    server, port, done = await handover.serve_one(KEY, "job.launcher", {"s": "x"}, "127.0.0.1")
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await handover._read(reader, protocol.FrameDecoder())
        writer.write(protocol.encode_json(frames[1]))
        got: object = await reader.read()  # until the submitter hangs up
        writer.close()
        await writer.wait_closed()
        return got, done.done()
    finally:
        server.close()
        await server.wait_closed()


KEY = os.urandom(32)


def test_a_replayed_handover_or_proof_is_refused() -> None:
    _, captured = asyncio.run(_recorded(KEY, {"secret": "s3cret"}))
    frames = _frames(captured)
    said = asyncio.run(_replay_to_a_launcher(frames))
    assert isinstance(said, handover.HandoverError), said
    assert "did not prove" in str(said)
    assert asyncio.run(_replay_to_the_submitter(frames)) == (b"", False)


async def _two_provers() -> tuple[object, object]:
    """A first launcher proves the key and takes its time to say "taken";
    a second proves it meanwhile."""
    from tfmesos.rendezvous import protocol

    key = os.urandom(32)
    given = {"secret": "s3cret"}
    server, port, _ = await handover.serve_one(key, "job.launcher", given, "127.0.0.1")
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        decoder = protocol.FrameDecoder()
        hello = await handover._read(reader, decoder)
        nonce = handover._Exchange().nonce
        proof = protocol.proof(
            key, handover.PURPOSE, "launcher", hello["nonce"], nonce, "job.launcher"
        )
        writer.write(protocol.encode_json({"type": "proof", "nonce": nonce, "proof": proof}))
        first: object = await handover._read(reader, decoder)
        try:
            second: object = await asyncio.to_thread(
                handover.receive, f"127.0.0.1:{port}", key, "job.launcher"
            )
        except (handover.HandoverError, OSError) as exc:
            second = exc
        writer.close()
        return first, second
    finally:
        server.close()
        await server.wait_closed()


def test_the_handover_goes_to_one_launcher_only() -> None:
    first, second = asyncio.run(_two_provers())
    assert isinstance(first, dict) and first.get("type") == "handover"
    assert isinstance(second, handover.HandoverError), second


def _launcher_job(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> tuple[DetachedJob, dict[str, object]]:
    """What the launcher task's tfrun runs for a submitter's ``argv``,
    parsed as tfrun parses it, read back from the handover."""
    from tfmesos.cli.parser import parse_args

    monkeypatch.chdir(tmp_path)
    args, spec = parse_args(argv)
    job = DetachedJob(args.backend, spec, args.options, argv=tuple(argv))
    given = _handover(job, "mesos-job", None)
    there = from_json(str(given["description"]))
    assert isinstance(there.options, MesosOptions)
    return there, given


def test_the_launcher_is_given_the_master_and_principal_of_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "zk").write_text("zk://127.0.0.1:2181/mesos\n")
    monkeypatch.setenv("MESOS_MASTER", f"file://{tmp_path}/zk")
    monkeypatch.setenv("MESOS_PRINCIPAL", "alice")
    monkeypatch.delenv("LIBPROCESS_SSL_ENABLED", raising=False)
    monkeypatch.delenv("SSL_ENABLED", raising=False)
    job, given = _launcher_job(["--detach", "-w", "1", "--", "true"], monkeypatch, tmp_path)
    assert isinstance(job.options, MesosOptions)
    assert job.options.master == "zk://127.0.0.1:2181/mesos"
    assert job.options.principal == "alice"
    assert given["master"] == "zk://127.0.0.1:2181/mesos"


def test_a_master_file_given_with_m_is_read_here(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "master").write_text("10.0.0.1:5050,http://10.0.0.2:5050\n")
    monkeypatch.delenv("MESOS_MASTER", raising=False)
    monkeypatch.setenv("LIBPROCESS_SSL_ENABLED", "1")  # which the launcher's environment lacks
    argv = ["--detach", "-m", f"file://{tmp_path}/master", "-w", "1", "--", "true"]
    job, _ = _launcher_job(argv, monkeypatch, tmp_path)
    assert isinstance(job.options, MesosOptions)
    assert job.options.master == "https://10.0.0.1:5050,http://10.0.0.2:5050"


def test_an_extra_config_is_carried_in_the_spec_and_the_command_left_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "extra.json").write_text('{"env": {"A": "1"}}')
    monkeypatch.setenv("MESOS_MASTER", "127.0.0.1:5050")
    argv = ["--detach", f"-e{tmp_path}/extra.json", "-w", "1", "python", "x.py", "--events", "e"]
    job, given = _launcher_job(argv, monkeypatch, tmp_path)
    assert dict(job.spec.env) == {"A": "1"}
    assert given["files"] == {}
    assert "extra.json" not in str(given["description"])
    assert {task.cmd for task in job.spec.tasks()} == {"python x.py --events e"}
