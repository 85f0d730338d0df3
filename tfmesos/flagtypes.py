"""argparse types for tfrun's flags, wherever they are declared (``cli.py``,
each backend's options class).

argparse names the flag in front of what these raise, and names the function
when it raises anything else ("invalid _count value"): each says what its
flags take, and ``tfrun``'s parser puts it after the flag.
"""

from __future__ import annotations

import argparse

__all__ = ["count", "positive_number"]


def count(text: str) -> int:
    """A whole number of 0 or more: tasks, GPUs, restarts."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number (0 or more), not {text!r}")
    return value


def positive_number(text: str) -> float:
    """A finite number above 0: CPUs, MiB, seconds."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number above 0, not {text!r}")
    return value
