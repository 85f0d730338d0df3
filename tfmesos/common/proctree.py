"""Starting and ending the processes tfmesos runs, written once: the command line
of a standard-library-only program (:func:`bootstrap_command`), binding a
process's life to its parent's, signalling that tolerates a process gone or not
ours, waiting for an exit without reaping it or a thread, and ending a whole
tree whatever its groups and sessions. Standard library only, and light at
import: the agent imports it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from typing import TYPE_CHECKING

from tfmesos.common import procfs

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = [
    "STARTED_HERE",
    "become_subreaper",
    "bootstrap_command",
    "death_signal_program",
    "dying_with_parent",
    "end_descendants",
    "end_groups",
    "exit_with_parent",
    "group_has_live_members",
    "kill_carriers",
    "kill_until_gone",
    "live_descendants",
    "open_pidfd",
    "own_session_dying_with_parent",
    "peek_exit_status",
    "signal_group",
    "signal_pid",
    "wait_for_exit",
]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
"""The folder that holds this ``tfmesos`` package."""


# -- Starting ---------------------------------------------------------------------


STARTED_HERE: set[int] = set()
"""The children this process started itself and waits for (a local task's
command, the sweeper, an agent, Slurm's watchdog), as opposed to orphans
handed to it as their subreaper: only the latter are a task's leftovers."""


def bootstrap_command(module: str, call: str = "main()") -> list[str]:
    """This Python, without ``site``, running ``module``'s ``call`` from this
    package and exiting with what it returns. These programs need only the
    standard library and this package, so ``site`` is pure start-up cost."""
    source = (
        f"import sys; sys.path.insert(0, {_PACKAGE_ROOT!r}); "
        f"from {module} import main; sys.exit({call})"
    )
    return [sys.executable, "-S", "-c", source]


# -- Binding lives ----------------------------------------------------------------


_libc: Any = None


def libc() -> Any:
    """The C library through ctypes (Linux only), loaded once and kept:
    loading it defines a class, which each forked agent and each command's
    ``preexec_fn`` would otherwise do again after the fork."""
    global _libc
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None)
    return _libc


def _prctl(option: int, value: int) -> None:
    libc().prctl(option, value, 0, 0, 0)


def become_subreaper() -> None:
    """Have the processes this one's children orphan handed to it rather
    than to init, so that what they leave behind stays below it."""
    if sys.platform.startswith("linux"):
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def exit_with_parent(parent_pid: int) -> bool:
    """Ask Linux to send this process SIGTERM when ``parent_pid``, its
    parent, dies, even by SIGKILL. False if the parent had died already
    (before the request took effect); elsewhere than Linux, nothing is asked."""
    if not sys.platform.startswith("linux"):
        return True
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    return os.getppid() == parent_pid


def own_session_dying_with_parent() -> None:
    """For ``preexec_fn``: put the child in a session of its own, and so in a
    process group of its own too (its ID the child's), so that stopping the
    group reaches its children too; and have it SIGKILLed if its parent dies
    outright. A session, not only a group: where the kernel groups scheduling
    by session (autogroup), each is a CPU share of its own, as each process
    torchrun starts is."""
    os.setsid()
    if sys.platform.startswith("linux"):
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def dying_with_parent() -> None:
    """For ``preexec_fn``: SIGKILL the child if its parent dies outright."""
    if sys.platform.startswith("linux"):
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_SETPRIV_PLACES = ("/usr/bin/setpriv", "/bin/setpriv")
_SETPRIV_PDEATHSIG_SINCE = (2, 33)
"""util-linux's setpriv has ``--pdeathsig`` from this version on."""
_death_signal_program: str | None = None
_death_signal_looked_for = False


def death_signal_program() -> str | None:
    """util-linux's ``setpriv`` if it supports ``--pdeathsig``, looked up once;
    else None. A command started through it needs no Python between fork and
    exec, so ``subprocess`` can use ``vfork``."""
    global _death_signal_program, _death_signal_looked_for
    if _death_signal_looked_for:
        return _death_signal_program
    _death_signal_looked_for = True
    if not sys.platform.startswith("linux"):
        return None
    import subprocess

    for place in _SETPRIV_PLACES:
        if not os.access(place, os.X_OK):
            continue
        try:
            version = subprocess.run(
                [place, "--version"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                timeout=5,
                check=False,
            ).stdout.decode(errors="replace")
        except (OSError, subprocess.SubprocessError):
            continue
        # "setpriv from util-linux 2.38.1"
        if "util-linux" in version and _version(version.split()[-1]) >= _SETPRIV_PDEATHSIG_SINCE:
            _death_signal_program = place
            return place
    return None


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split(".")[:2]:
        if not part.isdigit():
            return ()
        parts.append(int(part))
    return tuple(parts)


# -- Signalling -------------------------------------------------------------------


def signal_pid(pid: int, sig: int) -> None:
    """Signal one process; one that is gone, or not ours, is passed over."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group; say whether anyone was left in it (a group
    with a member this process may not signal counts as not empty)."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- Waiting ----------------------------------------------------------------------


def open_pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits; None where
    there is none (not Linux >= 5.3, a sandbox without it, the process gone)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


async def wait_for_exit(pid: int, timeout: float | None = None) -> bool | None:
    """Wait in the running loop, without a thread or reaping, until ``pid`` exits:
    True once it has, False after ``timeout``, None at once where there is no
    pidfd (the caller falls back). asyncio's child watcher costs a thread per
    process on Python < 3.12."""
    import asyncio  # here: the agent, which imports this module, has no loop

    pidfd = open_pidfd(pid)
    if pidfd is None:
        return None
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def on_exit() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(pidfd, on_exit)
    try:
        await asyncio.wait_for(exited, timeout)
    except asyncio.TimeoutError:
        return False
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
    return True


def peek_exit_status(pid: int) -> int | None:
    """A child's ``Popen.returncode``, or None while it runs, without reaping it."""
    try:
        result = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped already (SIGCHLD ignored): as Popen does
        return 0
    if result is None:
        return None
    return result.si_status if result.si_code == os.CLD_EXITED else -result.si_status


# -- Ending a tree ----------------------------------------------------------------


def kill_until_gone(find: Callable[[], list[int]], rounds: int | None = None) -> None:
    """SIGKILL what ``find`` lists until it lists nothing (at most ``rounds``
    times): what a round kills, a process forked meanwhile, the next gets.
    A killed process leaves the listing once it is a zombie."""
    done = 0
    live = find()
    while live and (rounds is None or done < rounds):
        for pid in live:
            signal_pid(pid, signal.SIGKILL)
        done += 1
        time.sleep(0.01)
        live = find()


def kill_carriers(name: str, value: str, rounds: int) -> None:
    """SIGKILL every process whose environment has ``name=value`` (a task's
    id, which its agent hands to its commands and they to theirs), until
    none is left: what a task started, in whatever group or session. One
    that cleared its environment escapes this."""

    def find() -> list[int]:
        try:
            found = procfs.with_environment(name, value)
        except OSError:  # no /proc
            return []
        return [pid for pid in found if pid != os.getpid()]

    kill_until_gone(find, rounds=rounds)


def live_descendants(pid: int) -> list[int]:
    """The processes below ``pid`` that have not exited (zombies, such as the
    children it has not reaped yet, do not count). Raises OSError where the
    kernel does not list children."""
    return [p.pid for p in procfs.descendants(pid) if p.state not in ("Z", "X")]


def end_descendants(grace: float) -> bool:
    """End every process below this one, whatever group or session it is in:
    SIGTERM (and SIGCONT, so that a stopped one sees it), one shared
    ``grace`` to exit, then SIGKILL until none is left. Say whether it could:
    where the kernel does not list children, nothing was done."""
    me = os.getpid()
    try:
        live = live_descendants(me)
    except OSError:
        return False
    if not live:
        # The usual end: nothing runs below, and nothing that does not run
        # forks; no second reading of /proc (every agent passes here).
        return True
    for pid in live:
        signal_pid(pid, signal.SIGTERM)
        signal_pid(pid, signal.SIGCONT)
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        time.sleep(0.02)
        live = live_descendants(me)
    # What ignored SIGTERM, and anything forked meanwhile.
    kill_until_gone(lambda: live_descendants(me))
    return True


def end_groups(pgids: list[int], grace: float) -> None:
    """End what is left in process groups: SIGTERM, one shared ``grace`` to
    exit, then SIGKILL."""
    live = [pgid for pgid in pgids if group_has_live_members(pgid)]
    for pgid in live:
        signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        time.sleep(0.02)
        live = [pgid for pgid in live if group_has_live_members(pgid)]
    for pgid in live:
        signal_group(pgid, signal.SIGKILL)


def group_has_live_members(pgid: int) -> bool:
    """Whether a process of the group still runs; zombies do not count."""
    try:
        # A subreaper's orphaned grandchildren are below it: only that small
        # tree is read.
        return any(p.pgrp == pgid and p.state != "Z" for p in procfs.descendants(os.getpid()))
    except OSError:
        pass
    try:
        return any(p.pgrp == pgid and p.state != "Z" for p in procfs.processes())
    except OSError:  # no /proc: ask the kernel, zombies and all
        return signal_group(pgid, 0)
