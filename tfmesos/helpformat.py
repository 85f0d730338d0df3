"""tfrun's help formatter: argparse's, without ``shutil`` in every tfrun.

argparse's formatter imports ``shutil`` (and with it ``bz2`` and ``lzma``)
for the terminal's width; ``tfrun`` builds its parser on every run, and only
``--help`` needs a width (docs/benchmarks.md, "The fixed cost").
"""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["HelpFormatter"]


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's, with the terminal's width found as ``shutil`` finds it
    (``$COLUMNS``, then the terminal, then 80) without importing ``shutil``
    (and with it bz2 and lzma) in every tfrun for a width only help needs."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=_terminal_columns() - 2)


def _terminal_columns() -> int:
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    stdout = sys.__stdout__
    try:
        return (stdout is not None and os.get_terminal_size(stdout.fileno()).columns) or 80
    except (ValueError, OSError):
        return 80
