"""RecordIO, the framing of the Mesos event stream (``docs/recordio.md``).

Each record is its length in bytes as ASCII decimal, a newline, then the
record. The decoder takes the stream in chunks of any size.
"""

from __future__ import annotations

__all__ = ["MAX_RECORD", "RecordIODecoder", "RecordIOError", "encode"]

MAX_RECORD = 64 << 20
"""Refuse records larger than this (an OFFERS event of a very large cluster is
a few MiB; 64 MiB means the stream is corrupt)."""
_MAX_HEADER = 20


class RecordIOError(ValueError):
    """The stream is not valid RecordIO."""


def encode(record: bytes) -> bytes:
    return b"%d\n" % len(record) + record


class RecordIODecoder:
    def __init__(self, max_record: int = MAX_RECORD) -> None:
        self.max_record = max_record
        self._buffer = bytearray()
        self._length: int | None = None

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        records: list[bytes] = []
        while True:
            if self._length is None:
                newline = self._buffer.find(b"\n", 0, _MAX_HEADER + 1)
                if newline < 0:
                    if len(self._buffer) > _MAX_HEADER:
                        raise RecordIOError("record length header too long")
                    return records
                header = bytes(self._buffer[:newline])
                if not header.isdigit():
                    raise RecordIOError(f"bad record length {header[:_MAX_HEADER]!r}")
                length = int(header)
                if length > self.max_record:
                    raise RecordIOError(f"record of {length} bytes exceeds {self.max_record}")
                del self._buffer[: newline + 1]
                self._length = length
            if len(self._buffer) < self._length:
                return records
            records.append(bytes(self._buffer[: self._length]))
            del self._buffer[: self._length]
            self._length = None
