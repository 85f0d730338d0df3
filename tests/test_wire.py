from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tfmesos.rendezvous import protocol


def test_frames_survive_any_cut() -> None:
    stream = protocol.encode_json({"type": "a", "n": 1}) + protocol.encode_frame(
        protocol.OUTPUT, b"x\ny\n"
    )
    for cut in range(len(stream) + 1):
        decoder = protocol.FrameDecoder()
        frames = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        assert frames == [(protocol.JSON, b'{"type":"a","n":1}'), (protocol.OUTPUT, b"x\ny\n")]
        assert decoder.pending == 0


def test_oversized_frame_is_refused_from_its_header() -> None:
    decoder = protocol.FrameDecoder(max_frame=10)
    with pytest.raises(protocol.FrameError, match="out of bounds"):
        decoder.feed(struct.pack(">I", 1 << 30))


def test_unknown_kind_and_bad_json_are_frame_errors() -> None:
    with pytest.raises(protocol.FrameError, match="unknown frame kind"):
        protocol.FrameDecoder().feed(struct.pack(">I", 2) + b"Zx")
    for payload in (b"\xff", b"[1]", b'{"type": 3}', b"{"):
        with pytest.raises(protocol.FrameError):
            protocol.parse_json(payload)


def test_proof_is_bound_to_purpose_and_parts() -> None:
    secret = b"s" * 32
    assert protocol.proof(secret, "register", "n", "t") != protocol.proof(
        secret, "cluster", "n", "t"
    )
    assert protocol.proof(secret, "register", "n", "t") != protocol.proof(
        b"x" * 32, "register", "n", "t"
    )
    assert protocol.proof_matches(
        protocol.proof(secret, "a", "b"), protocol.proof(secret, "a", "b")
    )
    assert not protocol.proof_matches(protocol.proof(secret, "a", "b"), None)


@given(
    st.lists(st.tuples(st.sampled_from([protocol.JSON, protocol.OUTPUT]), st.binary(max_size=300))),
    st.lists(st.integers(min_value=1, max_value=64), min_size=1),
)
def test_round_trip_through_random_chunking(
    frames: list[tuple[bytes, bytes]], sizes: list[int]
) -> None:
    stream = b"".join(protocol.encode_frame(kind, payload) for kind, payload in frames)
    decoder = protocol.FrameDecoder()
    decoded: list[tuple[bytes, bytes]] = []
    position = 0
    index = 0
    while position < len(stream):
        size = sizes[index % len(sizes)]
        decoded += decoder.feed(stream[position : position + size])
        position += size
        index += 1
    assert decoded == frames


@given(st.binary(max_size=2000))
def test_garbage_gives_frames_or_a_frame_error_never_anything_else(data: bytes) -> None:
    decoder = protocol.FrameDecoder(max_frame=1000)
    try:
        for kind, payload in decoder.feed(data):
            assert kind in (protocol.JSON, protocol.OUTPUT)
            if kind == protocol.JSON:
                with contextlib.suppress(protocol.FrameError):
                    protocol.parse_json(payload)
    except protocol.FrameError:
        pass
    assert decoder.pending <= 1000 + 5


@pytest.mark.unit
def test_the_agents_log_settings_are_named_as_the_agents_not_as_a_second_user_setting() -> None:
    # TFMESOS_LOG_MAX beside the user's TFMESOS_TASK_LOG_MAX read as a second
    # knob for the same cap; the backend sets these for the agent alone.
    for name in (protocol.ENV_LOG_FILE, protocol.ENV_LOG_MAX):
        assert name.startswith("TFMESOS_AGENT_"), name
        assert name in protocol.AGENT_ONLY
    assert protocol.ENV_LOG_MAX.endswith("_BYTES")
