"""``tfrun``'s entry point: :func:`tfmesos.cli.main` inside the signal promises
that the command line makes and that no code inside ``main`` can keep.

A Ctrl-C, SIGTERM or SIGHUP before the job's event loop handles it ends
tfrun with 130, 143 or 129 and nothing left behind, not a traceback (one
ignored at the start, as under ``nohup``, stays ignored). Once ``main`` has
returned, no signal changes its status: Python's finalization would put the
default handlers back, so they are ignored there.

Kept tiny, and importing only what the interpreter has loaded already: what
runs before the ``try`` is the window in which Ctrl-C is Python's own."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["main", "run"]

_STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""As tfmesos.errors.INTERRUPTING_SIGNALS, which is not imported here."""


def main() -> None:
    """The ``tfrun`` console script."""
    sys.exit(run())


def run(cli_main: Callable[[], int] | None = None) -> int:
    """Run ``cli_main`` (:func:`tfmesos.cli.main`, imported here unless given)
    and return its status, after which SIGINT, SIGTERM and SIGHUP are ignored
    for the rest of the process: call it only as the whole program."""
    from tfmesos.errors import SignalInterrupt  # cli imports it in any case

    def interrupt(signum: int, frame: object) -> None:
        raise SignalInterrupt(signum)

    for stopping in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(stopping) is signal.SIG_DFL:
            signal.signal(stopping, interrupt)
    try:
        try:
            if cli_main is None:
                from tfmesos.cli.main import main as imported

                cli_main = imported
            status = cli_main()
        except SystemExit as exc:  # argparse's 0 and 2
            status = exc.code if isinstance(exc.code, int) else 1 if exc.code else 0
    except KeyboardInterrupt as exc:
        stopped_by = exc.signum if isinstance(exc, SignalInterrupt) else signal.SIGINT
        for signum in _STOPPING:  # a second signal is the same stop
            signal.signal(signum, signal.SIG_IGN)
        _clean_up()
        status = 128 + stopped_by
    for signum in _STOPPING:
        signal.signal(signum, signal.SIG_IGN)
    return status


def _clean_up() -> None:
    """What a job interrupted before its event loop had made: the local
    backend's fork server, started before the launcher's imports, and run
    directories that no backend has let go of (one that kept nothing goes)."""
    import contextlib

    forkstart = sys.modules.get("tfmesos.backends.local.forkstart")
    rundirs = sys.modules.get("tfmesos.common.rundirs")
    try:
        if forkstart is not None:
            forkstart.discard()
        if rundirs is not None:
            for run_dir in rundirs.held():
                rundirs.release(run_dir)
    except Exception as exc:  # said in one line: Ctrl-C was asked for
        print(f"tfrun: stopping after Ctrl-C: {exc!r}", file=sys.stderr, flush=True)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or broken: nothing more to say
            stream.flush()
