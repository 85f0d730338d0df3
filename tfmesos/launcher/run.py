"""Running a whole replica-mode job: launcher, backend, signals, exit status."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tfmesos.backends import BackendOptions, backend_class, create_backend
from tfmesos.common import rundirs
from tfmesos.errors import (
    EXIT_NEVER_UP,
    INTERRUPTING_SIGNALS,
    ClusterStartError,
    JobFailedError,
    interrupted_status,
)
from tfmesos.launcher import Launcher
from tfmesos.launcher.console import use_colour
from tfmesos.launcher.events import NO_EVENTS, Events
from tfmesos.launcher.verdict import duration, ends, paint
from tfmesos.spec import ClusterSpec

__all__ = ["LateSignals", "launcher_factory", "run_replica_job", "run_with_restarts"]

logger = logging.getLogger("tfmesos")

LauncherFactory = Callable[[int], Launcher]
"""Makes the launcher (and its backends) for one run of the job, by its
restart number: 0 for the first."""


def run_replica_job(
    spec: ClusterSpec,
    backend: str,
    options: BackendOptions | None = None,
    *,
    started: float | None = None,
    events: Events = NO_EVENTS,
    late_signals: LateSignals | None = None,
) -> int:
    """Run the job to its end on backend ``backend`` (by its registered name)
    and return ``tfrun``'s exit status (tfmesos.errors says which).
    ``started``: when tfrun started, by ``time.monotonic()``, for the time the
    verdict gives; ``events``: where the job's events go (``--events``);
    ``late_signals``: what handles the interrupting signals once the job is
    over (see :class:`LateSignals`)."""
    started = time.monotonic() if started is None else started
    given = options or backend_class(backend).options_type()
    # A job that may restart makes its run directory here, for all its runs
    # (launcher_factory keeps it), and lets it go when the last run is over.
    chosen = given.for_restarts() if spec.max_restarts else given
    make = launcher_factory(spec, backend, chosen, events)
    try:
        return asyncio.run(
            run_with_restarts(spec, make, started, events=events, late_signals=late_signals)
        )
    finally:
        if late_signals is not None:
            # Where the job never reached its event loop, nothing has handed
            # the signals over yet.
            late_signals.take_over(None)
        if chosen.log_dir and chosen.log_dir != given.log_dir:
            rundirs.release(Path(chosen.log_dir))


def launcher_factory(
    spec: ClusterSpec,
    backend_name: str,
    options: BackendOptions | None = None,
    events: Events = NO_EVENTS,
) -> LauncherFactory:
    """A fresh backend and launcher per run, with the chief here where the backend
    asks."""
    backend_type = backend_class(backend_name)
    given = options or backend_type.options_type()
    tasks = spec.tasks()
    if backend_type.chief_beside_launcher and all(spec.is_chief(task) for task in tasks):
        # Another launcher's way (torchrun's one node): -w 1 meant a node.
        logger.warning(
            "the job's one task, %s, is its chief, which runs here beside tfrun: nothing "
            "runs on %s; give -w 2 or more (with --nproc-per-task N, N processes a task) "
            "to place tasks there",
            tasks[0].name if tasks else "worker:0",
            given.label or backend_name,
        )
    # Every run of the job keeps its logs in the same directory.
    chosen = given.for_restarts() if spec.max_restarts else given

    def make(restart: int) -> Launcher:
        backend = create_backend(backend_name, spec, chosen)
        chief = None
        if backend.chief_beside_launcher:
            from tfmesos.backends.local.backend import LocalBackend

            # Remote tasks must reach the chief: it listens on this host's
            # name. Its log beside the other tasks' where the backend keeps
            # them on this machine.
            chief = LocalBackend(
                spec,
                host=backend.rendezvous_host,
                log_dir=getattr(backend, "log_dir", None) or chosen.log_dir,
                chief_only=True,
            )
        return Launcher(spec, backend, chief_backend=chief, restart=restart, events=events)

    return make


class LateSignals:
    """Interrupting signals that arrive once the job is over, while tfrun reports
    how it ended: taken in, not raised, so the last line is not cut short by a
    KeyboardInterrupt; the verdict is decided already. Until :meth:`take_over`
    the job's event loop handles them; :meth:`restore` puts back what was
    there."""

    def __init__(self) -> None:
        self.received: list[int] = []
        """The signals taken in, in the order they came."""
        self._before = {signum: signal.getsignal(signum) for signum in INTERRUPTING_SIGNALS}

    def _take_in(self, signum: int, frame: object = None) -> None:
        self.received.append(signum)
        logger.debug(
            "%s received once the job was over: tfrun ends as decided",
            signal.Signals(signum).name,
        )

    def take_over(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Handle the signals from now on, in place of ``loop``'s (if any)."""
        for signum in INTERRUPTING_SIGNALS:
            try:
                if loop is not None:
                    # This puts Python's default back (SIGINT's raises):
                    # replaced at once, and one that lands between the two
                    # is taken in here.
                    loop.remove_signal_handler(signum)
                signal.signal(signum, self._take_in)
            except KeyboardInterrupt:
                signal.signal(signum, self._take_in)
                self._take_in(signal.SIGINT)
        # No wakeup descriptor is left behind: the loop's, should a signal
        # have cut its removal short before it let go of it, is read by no
        # one once the loop is over, and a burst of signals filled it, after
        # which CPython 3.11's handler, reporting the failed write, waited on
        # a lock its own thread held: tfrun hung at its end.
        signal.set_wakeup_fd(-1)

    def restore(self) -> None:
        for signum, handler in self._before.items():
            if handler is not None:
                signal.signal(signum, handler)


async def run_with_restarts(
    spec: ClusterSpec,
    make_launcher: LauncherFactory,
    started: float,
    *,
    events: Events = NO_EVENTS,
    late_signals: LateSignals | None = None,
) -> int:
    """Run the job, again after a failure up to ``spec.max_restarts`` times, with
    a launcher from ``make_launcher``; stop it on SIGINT, SIGTERM or SIGHUP.
    Returns tfrun's exit status. ``late_signals`` takes over those signals as
    the loop ends, so none raises while the verdict is reported."""
    try:
        return await _run_with_restarts(spec, make_launcher, started, events)
    finally:
        if late_signals is not None:
            late_signals.take_over(asyncio.get_running_loop())


class _JobSignals:
    """SIGINT, SIGTERM and SIGHUP while the job runs: the first stops it; one
    while it stops gives up the output nobody reads (never the teardown)."""

    def __init__(self, main: asyncio.Task[int]) -> None:
        self.main = main
        self.received: list[int] = []
        self.stopping = False
        self.launcher: Launcher | None = None

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        # SIGHUP: the terminal closed; the tasks must not outlive it either.
        # One ignored when tfrun started (nohup; SIGINT in a script's background
        # job) stays ignored: before, the loop took it in and stopped the job.
        for signum in INTERRUPTING_SIGNALS:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                loop.add_signal_handler(signum, self._on_signal, signum)

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self.stopping and self.launcher is not None:
            # Teardown itself is never cut short (on Mesos it releases the
            # cluster); what can be given up is output nobody is reading.
            self.launcher.abandon_output(f"{name} received while stopping")
        if not self.received:
            self.received.append(signum)
            if not self.stopping:
                logger.warning("%s received: stopping every task", name)
                self.main.cancel()


@dataclass
class _RunEnd:
    """How one run of the job ended."""

    status: int = 0
    verdict: str = ""
    result: str = "succeeded"
    again: bool = False
    """Whether the job starts again (--max-restarts)."""
    moved: bool = False
    """It starts again off an agent the operator drains: not counted."""
    cause: str = ""
    """Why a run that is restarted ended, in one line."""


async def _run_with_restarts(
    spec: ClusterSpec, make_launcher: LauncherFactory, started: float, events: Events
) -> int:
    main = asyncio.current_task()
    assert main is not None
    signals = _JobSignals(main)
    signals.install(asyncio.get_running_loop())
    causes: list[str] = []
    """Why each run of the job that was restarted ended (--max-restarts)."""
    restart = counted = 0
    """Runs started again, and those that spent --max-restarts (a move off a
    drained agent does not)."""
    while True:
        launcher = signals.launcher = make_launcher(restart)
        end = _RunEnd()
        try:
            end = await _run_once(launcher, spec, restart, counted, events)
        except asyncio.CancelledError:
            if not signals.received:
                raise
        finally:
            signals.stopping = True
            interrupted = list(signals.received)  # a signal after this point changes no verdict
            with contextlib.suppress(asyncio.CancelledError):
                # After a failure or a signal, output a stalled terminal does
                # not take is dropped; at the job's normal end, and before a
                # restart, it is all written.
                drop = bool((end.status and not end.again) or interrupted)
                await asyncio.shield(launcher.stop(drop_stalled_output=drop))
        if end.again:
            causes.append(end.cause)
            restart += 1
            counted += not end.moved
        if end.again and signals.received:
            # Stopped on the way to a restart: Ctrl-C or SIGTERM is never
            # restarted, whenever it comes (before, one during the restart's
            # teardown started the next run, and was then forgotten).
            interrupted = list(signals.received)
        if end.again and not interrupted:
            signals.stopping = False
            continue
        break
    assert signals.launcher is not None
    return _report_verdict(signals.launcher, end, causes, interrupted, started, events)


async def _run_once(
    launcher: Launcher, spec: ClusterSpec, restart: int, counted: int, events: Events
) -> _RunEnd:
    """One run of the job, up to its workers' end or its failure; ``counted``
    of the restarts before it spent --max-restarts."""
    try:
        await launcher.start()
        await launcher.wait_for_workers()
    except JobFailedError as exc:
        where = f" on {exc.failure.host}" if exc.failure.host else ""
        summary = f"task {exc.failure.task}{where} {exc.failure.reason}"
        # A job that may restart (its program resumes from a checkpoint)
        # moves off a drained agent whatever its budget has left: the
        # operator's maintenance is no failure of the job's.
        moved = exc.failure.drained and spec.max_restarts > 0
        again = moved or counted < spec.max_restarts
        if moved:
            how = f" to start the job again on agents not draining (restart {restart + 1}, not counted against --max-restarts {spec.max_restarts})"
        elif again:
            how = f" to start the job again (restart {counted + 1} of {spec.max_restarts})"
        else:
            how = ""
        # Said at once, in one line; the full verdict, with the task's last
        # output, comes after every task's output is out.
        logger.warning("%s: stopping every task%s", summary, how)
        if again:
            events.emit(
                "job_restart",
                restart=restart + 1,
                max_restarts=spec.max_restarts,
                cause=summary,
                counted=not moved,
            )
        return _RunEnd(exc.exit_code, f"job failed: {exc}", "failed", again, moved, summary)
    except ClusterStartError as exc:
        message = str(exc)
        # "the cluster did not come up within 20s: still waiting for ..."
        # says it once; other reasons get the headline in front.
        if not message.startswith("the cluster did not come up"):
            message = f"the cluster did not come up: {message}"
        return _RunEnd(EXIT_NEVER_UP, message, "never up")
    return _RunEnd()


def _report_verdict(
    launcher: Launcher,
    end: _RunEnd,
    causes: list[str],
    interrupted: list[int],
    started: float,
    events: Events,
) -> int:
    """Log how the job ended and where its output is; return tfrun's exit status."""
    verdict, status, result = end.verdict, end.status, end.result
    if verdict and causes:
        # Each earlier run's cause; the last run's, with its output, is above.
        restarts = f"{len(causes)} restart{'s' if len(causes) > 1 else ''}"
        earlier = "\n".join(f"  run {number}: {cause}" for number, cause in enumerate(causes, 1))
        verdict += f"\nthis was run {len(causes) + 1}, after {restarts}; before it:\n{earlier}"
    # Said after the tasks' last output is out, so that it is the last word,
    # with where the full output of every task is.
    colour = use_colour(sys.stderr)
    succeeded = ""
    if verdict:
        logger.error("%s", paint(verdict, 31, colour))
    elif not interrupted:
        elapsed = duration(time.monotonic() - started)
        summary = ends(launcher.outcomes())
        if causes:
            summary += f" (run {len(causes) + 1}, after {len(causes)} restart{'s' if len(causes) > 1 else ''})"
        succeeded = f"job succeeded in {elapsed}: {summary}"
        logger.info("%s", paint(succeeded, 32, colour))
    _report_where_output_is(launcher, failed=bool(verdict))
    verdict_line = verdict or succeeded
    stopped_by = None
    if interrupted:
        status = interrupted_status(interrupted[0])
        stopped_by = signal.Signals(interrupted[0]).name
        result, verdict_line = "interrupted", verdict or f"tfrun was stopped by {stopped_by}"
    events.emit(
        "job_verdict",
        exit_status=status,
        result=result,
        message=verdict_line,
        signal=stopped_by,
    )
    return status


def _report_where_output_is(launcher: Launcher, failed: bool) -> None:
    lost = launcher.lost_logs()
    incomplete = launcher.incomplete_output()
    if incomplete:
        # What tfrun could not hear before a task's end is not in its copy.
        logger.log(
            logging.ERROR if failed else logging.WARNING,
            "the output of each task is in %s, but for what tfrun could not hear of %s: %s",
            launcher.logs_location(),
            ", ".join(incomplete),
            "; ".join(f"{name}'s full output is in {where}" for name, where in incomplete.items()),
        )
        return
    logger.log(
        logging.ERROR if failed else logging.INFO,
        "the full output of each task is in %s%s",
        launcher.logs_location(),
        f", but for what could not be kept of {', '.join(lost)}'s (see the warnings above)"
        if lost
        else "",
    )
