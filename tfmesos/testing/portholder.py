"""Who holds a TCP port, for the one line a tool prints when its port is taken:
best effort from ``/proc/net/tcp*`` and ``/proc/PID/fd``; unknown where those
cannot be read. Standard library only.
"""

from __future__ import annotations

import os

__all__ = ["port_holder", "port_taken"]

_LISTEN = "0A"
"""``st`` of a listening socket in ``/proc/net/tcp`` (``TCP_LISTEN``)."""


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as rows:
                lines = rows.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            _, _, local_port = fields[1].rpartition(":")
            try:
                if int(local_port, 16) == port and fields[9] != "0":
                    inodes.add(fields[9])
            except ValueError:
                continue
    return inodes


def _command_name(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip() or "?"
    except OSError:
        return "?"


def port_holder(port: int) -> str | None:
    """``"python3 (pid 1840)"``: the process listening on ``port``, or None
    where none is seen (none listens, or it is not this user's to read)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target in wanted:
                return f"{_command_name(pid)} (pid {pid})"
    return None


def port_taken(port: int, address: str = "") -> str:
    """``"port 5050 of 127.0.0.1 is taken (by mesos-master (pid 7))"``, naming the
    holder if known."""
    where = f"port {port}" + (f" of {address}" if address else "")
    holder = port_holder(port)
    return f"{where} is taken" + (f" (by {holder})" if holder else "")
