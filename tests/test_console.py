"""The console writer: tasks' output leaves the event loop, in order, bounded."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import threading
from pathlib import Path

import pytest

from tests.conftest import until
from tfmesos.launcher.console import ConsoleWriter, binary_stream, use_colour


class GatedStream(io.BytesIO):
    """A stream whose writes wait until the test opens the gate, like a paused terminal."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()
        """A write has begun: the console's thread is held at the gate."""
        self.writes = 0

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.entered.set()
        self.gate.wait()
        self.writes += 1
        return super().write(data)


def test_chunks_come_out_whole_and_in_order() -> None:
    out = io.BytesIO()

    async def main() -> None:
        console = ConsoleWriter(out, high_water=1 << 10)
        for i in range(20_000):
            console.write(b"line %d\n" % i)
            await console.writable()
        await console.aclose()

    asyncio.run(main())
    assert out.getvalue().splitlines() == [b"line %d" % i for i in range(20_000)]


def test_a_stalled_stream_never_blocks_the_loop_and_bounds_the_buffer() -> None:
    out = GatedStream()
    high_water = 64 << 10

    async def main() -> None:
        console = ConsoleWriter(out, high_water=high_water)
        produced = 0

        async def producer() -> None:
            nonlocal produced
            chunk = b"x" * 4095 + b"\n"
            for _ in range(1000):  # 4 MiB in all
                await console.writable()
                console.write(chunk)
                produced += len(chunk)

        writer = asyncio.create_task(producer())
        # While the stream is stalled, the loop keeps running (these turns
        # of it come, not "until the terminal wakes up"; the guard: a hang),
        # and the producer fills the buffer to its mark.
        await until(lambda: console.full, "the producer to fill the buffer past its mark")
        assert not writer.done()  # the producer waits for room...
        assert console.buffered <= high_water + 4096  # ...with the buffer bounded
        assert produced <= high_water + 4096
        out.gate.set()
        await asyncio.wait_for(writer, 30)
        await console.aclose()

    asyncio.run(main())
    assert len(out.getvalue()) == 1000 * 4096
    assert out.writes < 1000  # chunks that queued up meanwhile went out together


def test_a_reader_that_goes_away_costs_the_output_not_the_job(
    caplog: pytest.LogCaptureFixture,
) -> None:
    read_end, write_end = os.pipe()
    stream = os.fdopen(write_end, "wb")
    os.close(read_end)

    async def main() -> None:
        console = ConsoleWriter(stream, high_water=1 << 10)
        for _ in range(100):
            console.write(b"y" * 100 + b"\n")
            await asyncio.wait_for(console.writable(), 10)  # never stuck
        await console.aclose()

    with caplog.at_level(logging.WARNING, logger="tfmesos"):
        asyncio.run(main())
    warnings = [r.getMessage() for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(warnings) == 1, warnings
    # The stream now points at /dev/null: its own flush at exit cannot fail.
    stream.write(b"more")
    stream.flush()
    stream.close()


def test_close_without_output_starts_no_thread() -> None:
    before = threading.active_count()
    asyncio.run(ConsoleWriter(io.BytesIO()).aclose())
    assert threading.active_count() == before


def test_abandon_lets_close_return_while_the_stream_is_stalled() -> None:
    out = GatedStream()

    async def main() -> ConsoleWriter:
        console = ConsoleWriter(out, high_water=1 << 10)
        console.write(b"stuck\n")
        await until(out.entered.is_set, "the console's thread to block in its write")
        console.write(b"queued\n")
        closing = asyncio.create_task(console.aclose())
        # The scenario: a while (0.1 s) in which the stream stays stalled.
        await asyncio.wait([closing], timeout=0.1)
        assert not closing.done()  # closing waits for the output...
        console.abandon()
        await asyncio.wait_for(closing, 5)  # ...until told to give it up
        console.write(b"after\n")  # dropped
        return console

    console = asyncio.run(main())
    out.gate.set()
    # Once its stalled write returns, the thread ends, having written no more.
    console._thread.join(10)
    assert not console._thread.is_alive(), "the console's thread outlived its stream's stall"
    assert b"queued" not in out.getvalue() and b"after" not in out.getvalue()


def test_writes_go_straight_to_the_file_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "out"
    with path.open("wb") as stream:
        stream.write(b"before\n")  # buffered in the stream object: goes first

        async def main() -> None:
            console = ConsoleWriter(stream)
            for i in range(1000):
                console.write(b"%d\n" % i)
            await console.aclose()

        asyncio.run(main())
    assert path.read_bytes().splitlines() == [b"before"] + [b"%d" % i for i in range(1000)]


def test_a_text_stream_without_a_binary_layer_still_gets_the_output() -> None:
    # Jupyter's sys.stderr is such a stream: no .buffer, no usable fileno.
    class NotebookStream(io.TextIOBase):
        def __init__(self) -> None:
            self.text = ""

        def write(self, text: str) -> int:
            self.text += text
            return len(text)

    notebook = NotebookStream()
    assert not hasattr(notebook, "buffer")

    async def main() -> None:
        console = ConsoleWriter(binary_stream(notebook))  # type: ignore[arg-type]
        console.write("[ps:0] naïve\n".encode())
        await console.aclose()

    asyncio.run(main())
    assert notebook.text == "[ps:0] naïve\n"


def test_a_callback_runs_once_the_output_before_it_is_written() -> None:
    # How "task worker:0 finished" (stderr, said by logging) comes after the
    # task's last line (stdout, written from the console's thread).
    out = GatedStream()
    said: list[tuple[str, int]] = []

    async def main() -> None:
        console = ConsoleWriter(out)
        console.after_written(lambda: said.append(("before any output", out.writes)))
        console.write(b"last line\n")
        console.after_written(lambda: said.append(("finished", out.writes)))
        console.after_written(lambda: said.append(("all finished", out.writes)))
        await until(out.entered.is_set, "the console's thread to block in its write")
        await asyncio.sleep(0)  # a turn for any callback the thread handed the loop
        assert said == [("before any output", 0)]  # the rest waits for the stalled stream
        out.gate.set()
        await console.aclose()  # callbacks run before it returns

    asyncio.run(main())
    assert said == [("before any output", 0), ("finished", 1), ("all finished", 1)]


@pytest.mark.parametrize("how", ["abandon", "reader-gone"])
def test_a_callback_runs_when_the_output_before_it_is_dropped(
    how: str, caplog: pytest.LogCaptureFixture
) -> None:
    said: list[str] = []
    read_end, write_end = os.pipe()
    stream = GatedStream() if how == "abandon" else os.fdopen(write_end, "wb")
    if how == "reader-gone":
        os.close(read_end)

    async def main() -> None:
        console = ConsoleWriter(stream)
        console.write(b"never shown\n")
        console.after_written(lambda: said.append("finished"))
        if how == "abandon":
            assert isinstance(stream, GatedStream)
            await until(stream.entered.is_set, "the console's thread to block in its write")
            console.abandon()
        await asyncio.wait_for(console.aclose(), 5)

    with caplog.at_level(logging.ERROR, logger="tfmesos"):
        asyncio.run(main())
    assert said == ["finished"]
    if how == "abandon":
        stream.gate.set()  # type: ignore[union-attr]
        os.close(read_end)
        os.close(write_end)
    else:
        stream.close()


@pytest.mark.parametrize(
    ("environ", "tty", "coloured"),
    [
        ({}, True, True),
        ({}, False, False),
        ({"NO_COLOR": "1"}, True, False),
        ({"NO_COLOR": ""}, True, True),  # set but empty: not set (no-color.org)
        ({"FORCE_COLOR": "1"}, False, True),
        ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False, False),
        ({"TERM": "dumb"}, True, False),
    ],
)
def test_colour_only_on_a_terminal_unless_no_color_or_force_color_say_otherwise(
    environ: dict[str, str], tty: bool, coloured: bool
) -> None:
    class Stream(io.BytesIO):
        def isatty(self) -> bool:
            return tty

    assert use_colour(Stream(), environ) is coloured
