"""A user's path as tfrun's messages show it: quoted as ``repr`` quotes it when it
holds a newline, tab or other control character (which would break or fake the
message's line), else as it is, so it can be copied. Stdlib only.
"""

from __future__ import annotations

import os

__all__ = ["shown_path"]


def shown_path(path: str | os.PathLike[str]) -> str:
    """``path`` as it is when every character in it prints as itself;
    otherwise quoted, with each control character (or one that is not
    printable: an undecodable byte, a non-ASCII space) escaped:
    ``'/tmp/a\\nb'``."""
    text = os.fspath(path)
    return text if text.isprintable() else repr(text)
