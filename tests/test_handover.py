"""The handover of a detached Mesos job (tfmesos.backends.mesos.handover):
the submitter gives what the launcher task needs only to a peer that proves
the job's one-time key, sealed so that only that key opens it; and the
flags the launcher must not take from the submitter are dropped
(tfmesos.backends.mesos.detached). Real sockets on 127.0.0.1, no process."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tfmesos.backends.mesos import handover
from tfmesos.backends.mesos.detached import _flag_values, _handover


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


def test_the_submitters_own_flags_stay_behind() -> None:
    flags = ["--detach", "-m", "m:5050", "--events=e.jsonl", "--log-dir", "d", "--ssl-ca", "ca"]
    kept, values = _flag_values(flags, ("--detach", "--events", "--log-dir", "--ssl-ca"))
    assert kept == ["-m", "m:5050"]
    assert values == {"--events": "e.jsonl", "--log-dir": "d", "--ssl-ca": "ca"}


def test_a_proof_or_seal_that_is_not_ascii_is_refused_not_a_traceback() -> None:
    from tfmesos.rendezvous import protocol

    assert not protocol.proof_matches("ab", "é")
    assert not protocol.proof_matches("ab", "\ud800")
    with pytest.raises(handover.HandoverError):
        handover.unseal(os.urandom(32), "a b", {"sealed": "", "mac": "é"})


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
        nonce = os.urandom(16).hex()
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


def _launcher_words(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> tuple[list[str], list[str], dict[str, object]]:
    """What the launcher task's tfrun is given (its flags, its command) for a
    submitter's ``argv``, parsed as tfrun parses it."""
    from tfmesos.cli.parser import parse_args

    monkeypatch.chdir(tmp_path)
    args, _ = parse_args(argv)
    given = _handover(args, argv, "mesos-job", None)
    return list(given["flags"]), list(given["command"]), given


def test_the_launcher_is_given_the_master_and_principal_of_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "zk").write_text("zk://127.0.0.1:2181/mesos\n")
    monkeypatch.setenv("MESOS_MASTER", f"file://{tmp_path}/zk")
    monkeypatch.setenv("MESOS_PRINCIPAL", "alice")
    monkeypatch.delenv("LIBPROCESS_SSL_ENABLED", raising=False)
    monkeypatch.delenv("SSL_ENABLED", raising=False)
    flags, _, given = _launcher_words(["--detach", "-w", "1", "--", "true"], monkeypatch, tmp_path)
    assert flags[flags.index("-m") + 1] == "zk://127.0.0.1:2181/mesos"
    assert flags[flags.index("--principal") + 1] == "alice"
    assert given["master"] == "zk://127.0.0.1:2181/mesos"


def test_a_master_file_given_with_m_is_read_here(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "master").write_text("10.0.0.1:5050,http://10.0.0.2:5050\n")
    monkeypatch.delenv("MESOS_MASTER", raising=False)
    monkeypatch.setenv("LIBPROCESS_SSL_ENABLED", "1")  # which the launcher's environment lacks
    argv = ["--detach", "-m", f"file://{tmp_path}/master", "-w", "1", "--", "true"]
    flags, _, _ = _launcher_words(argv, monkeypatch, tmp_path)
    assert flags.count("-m") == 1
    assert flags[flags.index("-m") + 1] == "https://10.0.0.1:5050,http://10.0.0.2:5050"


def test_an_attached_extra_config_is_carried_and_the_command_left_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "extra.json").write_text('{"env": {"A": "1"}}')
    monkeypatch.setenv("MESOS_MASTER", "127.0.0.1:5050")
    argv = ["--detach", f"-e{tmp_path}/extra.json", "-w", "1", "python", "x.py", "--events", "e"]
    flags, command, given = _launcher_words(argv, monkeypatch, tmp_path)
    assert not any(str(tmp_path) in word for word in flags), flags
    assert given["files"] == {"extra-config.json": ["-e", b'{"env": {"A": "1"}}'.hex()]}
    assert command == ["--", "python", "x.py", "--events", "e"]
