"""The kernel's count of out-of-memory kills in this process's memory cgroup.

A SIGKILL may come from anyone; the cgroup's ``oom_kill`` counter
(``memory.oom_control`` in cgroup v1, ``memory.events`` in v2) read before and
after a command says whether the OOM killer acted in between, and the kernel's
log, where readable, says which process it hit (:func:`killed_by_oom_killer`).
Standard library only.
"""

from __future__ import annotations

import os

__all__ = ["counter_path", "killed_by_oom_killer", "oom_kills"]

_UNREAD = ""
_path: str | None = _UNREAD
"""This process's counter file, found once: None where there is none."""


def counter_path(proc: str = "/proc/self") -> str | None:
    """The file holding the OOM-kill count of the memory cgroup that ``proc``
    is in, or None (no memory cgroup mounted where it can be seen, or a
    kernel without the counter). A hierarchy mounted from one of its cgroups
    (a container's view) is followed through the mount's root."""
    try:
        with open(f"{proc}/cgroup") as listing:
            memberships = listing.read().splitlines()
        with open(f"{proc}/mountinfo") as mounts:
            mountinfo = mounts.read().splitlines()
    except OSError:
        return None
    v1 = v2 = None
    for line in memberships:
        controllers, colon, path = line.partition(":")[2].partition(":")
        if not colon:
            continue
        if "memory" in controllers.split(","):
            v1 = path
        elif controllers == "":
            v2 = path
    for line in mountinfo:
        fields, _, tail = line.partition(" - ")
        words, kind = fields.split(), tail.split()
        if len(words) < 5 or len(kind) < 3:
            continue
        root, mount_point = _unescape(words[3]), _unescape(words[4])
        if kind[0] == "cgroup" and v1 is not None and "memory" in kind[2].split(","):
            found = _below(mount_point, root, v1, "memory.oom_control")
        elif kind[0] == "cgroup2" and v2 is not None and v1 is None:
            found = _below(mount_point, root, v2, "memory.events")
        else:
            continue
        if found is not None:
            return found
    return None


def oom_kills(path: str | None = _UNREAD) -> int | None:
    """The count in ``path`` (default: this process's counter), or None if
    unreadable."""
    global _path
    if path == _UNREAD:
        if _path == _UNREAD:
            _path = counter_path()
        path = _path
    if path is None:
        return None
    try:
        with open(path, "rb") as counters:
            text = counters.read()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(b" ")
        if name == b"oom_kill" and value.strip().isdigit():
            return int(value)
    return None


KERNEL_LOG = "/dev/kmsg"


def killed_by_oom_killer(pid: int, log: str = KERNEL_LOG) -> bool | None:
    """Whether the kernel's log says its OOM killer killed ``pid`` (``Killed
    process PID (name)``), or None where the log cannot be read. Read only
    after a SIGKILL the count blames on it: the log can be MiBs."""
    try:
        fd = os.open(log, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    wanted = f"Killed process {pid} (".encode()
    try:
        while True:
            try:
                record = os.read(fd, 8192)  # /dev/kmsg: one record a read
            except BlockingIOError:  # the end of the log
                return False
            except BrokenPipeError:  # overwritten while read: go on from the next
                continue
            except OSError:
                return None
            if not record:
                return False
            if wanted in record:
                return True
    finally:
        os.close(fd)


def _below(mount_point: str, root: str, cgroup: str, name: str) -> str | None:
    """``name`` in ``cgroup``'s directory under ``mount_point``; None if not below
    ``root``."""
    root = root.rstrip("/")
    if cgroup != root and not cgroup.startswith(root + "/"):
        return None
    path = f"{mount_point.rstrip('/')}{cgroup[len(root) :]}/{name}"
    return path if os.path.exists(path) else None


def _unescape(word: str) -> str:
    """A mountinfo path: space, tab, newline and backslash are octal escapes."""
    if "\\" not in word:
        return word
    for code in ("040", "011", "012", "134"):
        word = word.replace("\\" + code, chr(int(code, 8)))
    return word
