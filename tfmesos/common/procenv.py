"""Finding processes by an entry of their environment, in ``/proc``.

Apart from :mod:`tfmesos.common.procfs` so that :mod:`tfmesos.agent.sweeper`, which needs
only this, imports nothing but ``os`` for it.
"""

from __future__ import annotations

import os

__all__ = ["with_any_environment"]


def with_any_environment(entries: set[bytes]) -> list[int]:
    """The pids of the processes whose environment, as they started with it,
    holds any of ``entries`` (each ``b"NAME=value"``): those this process may
    read (its user's). Raises OSError where there is no /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                data = environ.read()
        except OSError:  # gone meanwhile, or another user's
            continue
        if not entries.isdisjoint(data.split(b"\0")):
            found.append(int(entry))
    return found
