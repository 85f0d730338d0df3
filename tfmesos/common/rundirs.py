"""Where the local backend keeps each run's task logs, and for how long.

Each run gets a directory under ``$XDG_STATE_HOME/tfmesos/runs``, named by
its start time; the newest ``TFMESOS_KEEP_RUNS`` are kept, pruned when a run
starts and when it ends. A run still going holds a lock on its directory, so
that another tfrun's clean-up never removes it; a run that kept nothing
leaves no directory. ``latest`` links to the newest run, replaced by a
rename so that no reader sees it missing."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import time
from pathlib import Path
from typing import IO

from tfmesos.errors import SpecError

__all__ = [
    "KEEP_RUNS",
    "TASK_LOG_MAX",
    "adopt",
    "hand_over",
    "held",
    "keep_runs",
    "new_run_dir",
    "release",
    "runs_root",
    "task_log_max",
]

logger = logging.getLogger("tfmesos")

ENV_KEEP_RUNS = "TFMESOS_KEEP_RUNS"
ENV_TASK_LOG_MAX = "TFMESOS_TASK_LOG_MAX"
TASK_LOG_MIN = 1024
"""The smallest cap on a task's log (0 is none)."""
KEEP_RUNS = 20
TASK_LOG_MAX = 50 << 20
LOCK = ".lock"
LATEST = "latest"
"""The link to the newest run's directory, beside the runs."""
RECORDS = ("events.jsonl", "job.json")
"""What tfrun keeps of every run for ``tfrun list`` (tfmesos.cli.detach): a run
that kept nothing else kept nothing (:func:`release`)."""
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}

_held: dict[Path, IO[bytes]] = {}
"""The locks of this process's runs still going, by directory (:func:`release`)."""


def runs_root() -> Path:
    """``$XDG_STATE_HOME/tfmesos/runs``, or ``~/.local/state/tfmesos/runs``
    (the XDG base directory spec ignores a relative XDG_STATE_HOME)."""
    state = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "tfmesos" / "runs"


def keep_runs() -> int:
    text = os.environ.get(ENV_KEEP_RUNS, "").strip()
    if not text:
        return KEEP_RUNS
    # ASCII digits only: int() would take 2_0 (20) and other scripts' digits.
    value = int(text) if text.isascii() and text.isdigit() else 0
    if value < 1:
        raise SpecError(f"{ENV_KEEP_RUNS} must be a whole number of runs, at least 1, not {text!r}")
    return value


def task_log_max() -> int:
    """The cap on each task's log, in bytes; 0 for none."""
    text = os.environ.get(ENV_TASK_LOG_MAX, "").strip()
    if not text:
        return TASK_LOG_MAX
    number, unit = text.rstrip("KkMmGgBiI"), text[len(text.rstrip("KkMmGgBiI")) :]
    unit = unit.upper().removesuffix("B").removesuffix("I")
    if not (number.isascii() and number.isdigit()) or unit not in _UNITS:
        raise SpecError(
            f"{ENV_TASK_LOG_MAX} must be a size such as 50M, 1G or 65536 (0 for no cap), "
            f"not {text!r}"
        )
    cap = int(number) * _UNITS[unit]
    if 0 < cap < TASK_LOG_MIN:
        # A log and its rotated half under a few bytes would rotate at every
        # byte; below two the halves are empty and the cap would be none.
        raise SpecError(f"{ENV_TASK_LOG_MAX} must be 0 (no cap) or at least 1K, not {text!r}")
    return cap


def new_run_dir() -> Path:
    """A new directory for this run's logs, locked until :func:`release` (or
    this process's end); runs past the newest ``keep_runs()`` are removed.
    Falls back to a new temporary directory where the state directory cannot
    be used."""
    keep = keep_runs()
    root = runs_root()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    try:
        root.mkdir(parents=True, exist_ok=True)
        run = _new_dir(root, f"{stamp}-")
        lock = open(run / LOCK, "wb")  # noqa: SIM115 - held until release()
        fcntl.flock(lock, fcntl.LOCK_EX)
    except OSError as exc:
        import tempfile

        fallback = Path(tempfile.mkdtemp(prefix="tfmesos-"))
        logger.warning(
            "cannot keep the logs in %s (%s); they go to %s, which nothing cleans up",
            root,
            exc.strerror or exc,
            fallback,
        )
        return fallback
    _held[run] = lock
    _link_latest(root, run.name)
    # Not counting this run, which may yet be refused and keep nothing: a
    # refused job must not cost a real run its logs (release prunes again).
    _prune(root, keep + 1, run)
    return run


def adopt(run: Path, held_by: int | None = None) -> None:
    """Take the lock of ``run``, a run's directory that another process made
    (a detached Slurm job's submitter) and that this one now runs, waiting
    for its maker to let go of it; released by :func:`release`. Raises
    OSError where it cannot be locked. ``held_by``: a descriptor this
    process inherited that holds the lock already (the local daemon's, kept
    through its ``exec``)."""
    if held_by is not None:
        _held[run] = os.fdopen(held_by, "ab")
        return
    lock = open(run / LOCK, "ab")  # noqa: SIM115 - held until release()
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
    except OSError:
        lock.close()
        raise
    _held[run] = lock


def lock_descriptor(run: Path) -> int | None:
    """The descriptor that holds ``run``'s lock here, for a process this one
    becomes (``exec``) to :func:`adopt`; None where none is held."""
    lock = _held.get(Path(run))
    return None if lock is None else lock.fileno()


def hand_over(run: Path) -> None:
    """Let go of ``run`` here without releasing it: a forked child that
    shares its lock (a detached job's daemon) holds it from now on, and this
    process's end, however it comes, neither unlocks nor removes it."""
    lock = _held.pop(Path(run), None)
    if lock is not None:
        lock.close()  # the child's descriptor keeps the lock


def held() -> frozenset[Path]:
    """The run directories this process made and has not released."""
    return frozenset(_held)


def release(run: Path) -> None:
    """The run in ``run`` (from :func:`new_run_dir`) is over: unlock its
    directory, which another tfrun's clean-up may then remove, or remove it
    where it holds nothing but its lock (a job refused before any task ran);
    a run that kept something then counts among the newest kept. Nothing for
    a directory this process holds no lock on; a second call does nothing."""
    run = Path(run)
    lock = _held.pop(run, None)
    if lock is None:
        return
    with lock:  # closed, and with it the lock, at the end
        try:
            held = set(os.listdir(run))
            kept_nothing = LOCK in held and held <= {LOCK, *RECORDS}
            if kept_nothing:
                # Removed while its lock is held: no other tfrun's clean-up
                # is in it meanwhile.
                for record in held - {LOCK}:
                    (run / record).unlink()
                (run / LOCK).unlink()
                run.rmdir()
                _unlink_latest(run)
                return
        except OSError:
            return
    with contextlib.suppress(SpecError, OSError):
        _prune(run.parent, keep_runs(), run)


def _link_latest(root: Path, name: str) -> None:
    """``root/latest`` -> ``name`` (relative: the runs may move together),
    whole or not at all: a new link under a temporary name, renamed over the
    old one, so that a reader never finds it missing or half made."""
    temporary = root / f".{LATEST}.{os.getpid()}"
    try:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        temporary.symlink_to(name)
        os.replace(temporary, root / LATEST)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        logger.debug("cannot link %s to %s: %s", root / LATEST, name, exc)


def _unlink_latest(run: Path) -> None:
    """The run in ``run`` was removed (it kept nothing): where ``latest``
    named it, it names the newest run left, or is removed."""
    root = run.parent
    try:
        if os.readlink(root / LATEST) != run.name:
            return
    except OSError:
        return
    runs = _runs(root)
    if runs:
        _link_latest(root, runs[-1].name)
    else:
        with contextlib.suppress(OSError):
            (root / LATEST).unlink()


_NAME_CHARACTERS = "abcdefghijklmnopqrstuvwxyz0123456789_"
"""Those of ``tempfile.mkdtemp``'s names."""


def _new_dir(root: Path, prefix: str) -> Path:
    """A new directory in ``root`` as ``tempfile.mkdtemp(prefix=prefix, dir=root)``
    makes it (8 random characters after the prefix, mode 0o700), without
    importing tempfile, which imports shutil, bz2, lzma and random
    (docs/benchmarks.md, "The fixed cost")."""
    for _ in range(100):
        name = "".join(_NAME_CHARACTERS[byte % len(_NAME_CHARACTERS)] for byte in os.urandom(8))
        path = root / f"{prefix}{name}"
        try:
            path.mkdir(0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(errno.EEXIST, "no unused name for a new directory", str(root))


def _runs(root: Path) -> list[Path]:
    """The runs' directories in ``root``, oldest first: not ``latest``, nor
    any other link."""
    try:
        # The directory's own entry types: no stat of each run, as Path.is_dir
        # makes; a link (``latest``) is no run.
        with os.scandir(root) as scan:
            names = sorted(entry.name for entry in scan if entry.is_dir(follow_symlinks=False))
    except OSError:
        return []
    return [root / name for name in names]


def _prune(root: Path, keep: int, current: Path) -> None:
    """Remove the oldest runs beyond ``keep`` (this one counted), except any
    still running (their lock is held)."""
    runs = [run for run in _runs(root) if run != current]
    for old in runs[: max(0, len(runs) - (keep - 1))]:
        try:
            with open(old / LOCK, "ab") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                _remove_tree(old)
        except BlockingIOError:
            continue  # another tfrun's run, still going
        except OSError:
            _remove_tree(old)


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _remove_tree(path: Path) -> None:
    """``shutil.rmtree(path, ignore_errors=True)`` as it is done on Linux
    (each directory opened without following a link, and emptied through its
    descriptor), without importing shutil, bz2 and lzma (~3 ms of a tfrun
    that prunes, most of them; docs/benchmarks.md, "The fixed cost")."""
    try:
        top = os.open(path, _DIRECTORY)
    except OSError:
        return  # gone, not a directory, or a link: left as rmtree leaves it
    try:
        _empty(top)
    finally:
        os.close(top)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _empty(directory: int) -> None:
    """Remove what the directory open as ``directory`` holds, as far as can be."""
    try:
        with os.scandir(directory) as scan:
            entries = list(scan)
    except OSError:
        return
    for entry in entries:
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                inner = os.open(entry.name, _DIRECTORY, dir_fd=directory)
                try:
                    _empty(inner)
                finally:
                    os.close(inner)
                os.rmdir(entry.name, dir_fd=directory)
            else:
                os.unlink(entry.name, dir_fd=directory)
