"""A user's path as tfrun's messages show it. Stdlib only.

A name may hold any byte but NUL and ``/``: a newline in a ``--log-dir``
printed as it is breaks the message's line in two, and the second half reads
as a line of its own; a tab or an escape sequence passes for something else.
Such a name is shown quoted, as Python's ``repr`` quotes it; any other, as it
is, so that the common path can be copied from the message unchanged.
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
