"""A task that prints numbered lines as fast as it can: bench/log_forwarding.py's load.

    python bench/emit_lines.py LINES [--size BYTES] [--progress FILE]

Each line is ``L<9-digit number>:`` padded with ``x`` to ``--size`` bytes,
newline included, written to fd 1 in blocks of whole lines (about 64 KiB).
With ``--progress`` the count of bytes written so far is kept, after every
block, in the first 8 bytes of FILE (big-endian), so that a benchmark can see
how far the task has got while its output is still on the way.
"""

from __future__ import annotations

import argparse
import os
import struct

BLOCK = 1 << 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lines", type=int)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--progress", default=None)
    args = parser.parse_args()
    size: int = args.size
    if size < 12:
        parser.error("--size must be at least 12")
    pad = b"x" * (size - 12) + b"\n"
    per_block = max(1, BLOCK // size)
    progress = os.open(args.progress, os.O_RDWR | os.O_CREAT, 0o644) if args.progress else None
    written = 0
    for start in range(0, args.lines, per_block):
        end = min(args.lines, start + per_block)
        block = memoryview(b"".join([b"L%09d:" % i + pad for i in range(start, end)]))
        while block:
            n = os.write(1, block)
            block = block[n:]
            written += n
        if progress is not None:
            os.pwrite(progress, struct.pack(">Q", written), 0)


if __name__ == "__main__":
    main()
