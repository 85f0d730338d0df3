"""The launcher: one job from the first launch to the last teardown.

:class:`Launcher` checks, starts and closes the backends, opens the
rendezvous, launches every task, delivers the cluster once every task has
registered, and stops it all, in that order. The job's state is its loop's
(:mod:`tfmesos.launcher.loop`), which is its only writer: the launcher makes
each change through the loop's named methods and reads nothing private. Every
way out of :meth:`Launcher.start`, :meth:`Launcher.wait_for_workers`,
:meth:`Launcher.watch` and :meth:`Launcher.stop` goes through teardown.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, BinaryIO

from tfmesos.backends.base import Backend, Launch, TaskPlaced
from tfmesos.errors import ClusterStartError, JobFailedError, SpecError
from tfmesos.launcher.attempts import Attempt
from tfmesos.launcher.events import NO_EVENTS, Events
from tfmesos.launcher.loop import (
    Event,
    Loop,
    RendezvousFactory,
    real_rendezvous,
)
from tfmesos.rendezvous import protocol
from tfmesos.spec import ClusterSpec, TaskSpec

if TYPE_CHECKING:
    import ssl

    from tfmesos.launcher import relaunch

__all__ = ["Launcher"]

logger = logging.getLogger("tfmesos")


class Launcher:
    """Runs one job: ``await start()``, then ``wait_for_workers()`` (replica
    mode) or ``watch()`` (fine-grained mode), and ``stop()`` at the end.

    The job's sequence is here, and the backends' lifecycle; what happens
    meanwhile, event by event, is its :class:`Loop`'s, which owns the tasks'
    attempts and the job's phase: the launcher asks it, never reaches in."""

    def __init__(
        self,
        spec: ClusterSpec,
        backend: Backend,
        *,
        output: BinaryIO | None = None,
        secret: bytes | None = None,
        chief_backend: Backend | None = None,
        restart: int = 0,
        colour: bool | None = None,
        notes_after_output: bool | None = None,
        rendezvous: RendezvousFactory = real_rendezvous,
        events: Events = NO_EVENTS,
    ) -> None:
        self.spec = spec
        self.backend = backend
        self.chief_backend = chief_backend
        self.restart = restart
        """Which run of the job this is (``--max-restarts``): 0 for the first."""
        self._backend_started = False
        """Whether the backend's start was tried: it is closed at the end."""
        self._chief_started = chief_backend is None
        """Whether the chief's backend has started: only once the cluster
        has placed a first task (see :meth:`start`)."""
        self._loop = Loop(
            spec,
            backend,
            output=output,
            secret=secret,
            chief_backend=chief_backend,
            restart=restart,
            colour=colour,
            notes_after_output=notes_after_output,
            rendezvous=rendezvous,
            events=events,
            after_event=self._after_event,
        )

    @property
    def cluster_def(self) -> dict[str, list[str]]:
        """Each job's task addresses, once the cluster is up."""
        return self._loop.cluster_def

    def set_outside(self, jobs: dict[str, list[str]]) -> None:
        """Put ``jobs``, whose tasks the launcher does not run, first in the
        cluster definition: fine-grained mode's chief, the program itself."""
        self._loop.set_outside(jobs)

    @property
    def run_id(self) -> str:
        return self._loop.run_id

    @property
    def targets(self) -> dict[str, str]:
        return self._loop.targets()

    async def start(self) -> dict[str, list[str]]:
        """Launch every task and bring the cluster up; return its definition."""
        tasks = self.spec.tasks()
        for backend in self._loop.backends():
            backend.check([t for t in tasks if self._loop.backend_for(t) is backend])
        port = os.environ.get(protocol.ENV_RENDEZVOUS_PORT, "")
        await self._loop.open_rendezvous(
            self.backend.rendezvous_bind, int(port) if port.isdigit() else 0, tls_of(self.spec)
        )
        self._backend_started = True
        await self.backend.start(self._loop.on_backend)
        self._emit_started(tasks)
        await self._launch_first(tasks)
        deadline = (
            None if self.spec.start_timeout is None else time.monotonic() + self.spec.start_timeout
        )
        await self._loop.pump(
            self._loop.all_registered, self.spec.start_timeout, self._start_timed_out
        )
        self._loop.deliver_cluster()
        if not self.spec.replica:
            # Fine-grained mode hands out targets: they must answer when it does.
            await self._wait_for_servers(
                None if deadline is None else max(0.1, deadline - time.monotonic())
            )
        return self._loop.cluster_def

    async def _launch_first(self, tasks: list[TaskSpec]) -> None:
        """Launch each task's first attempt; the chief, beside the launcher,
        is held for the cluster's first placement where the cluster runs
        the rest."""
        local = [(task, 1) for task in tasks if self._loop.backend_for(task) is not self.backend]
        if local and len(local) < len(tasks):
            # The chief, beside the launcher, waits for the cluster's first
            # placement (a Mesos offer taken, a Slurm allocation running): a
            # wrong master or a job that never fits starts nothing here.
            remote = []
            for task in tasks:  # in the job's order, which messages keep
                if self._loop.backend_for(task) is self.backend:
                    remote.append(self._loop.new_attempt(task, 1))
                else:
                    self._loop.new_attempt(task, 1, held=True)
            await self.backend.launch_many(remote)
        else:
            if local:
                # A cluster was named (-m, --backend slurm) for a job it has
                # no part in: say so, or a wrong address goes unnoticed.
                chief = "worker 0" if self.spec.ending_job == "worker" else "chief:0"
                logger.warning(
                    "every task of this job runs on this machine (%s, the chief, beside "
                    "tfrun): the %s backend runs none of them",
                    chief,
                    self.backend.name,
                )
            await self._start_chief()
            await self._launch_all([(task, 1) for task in tasks])

    async def _wait_for_servers(self, timeout: float | None) -> None:
        """Fine-grained mode: wait until every TensorFlow server accepts
        connections."""
        try:
            await self._loop.pump(self._loop.all_ready, timeout, self._start_timed_out)
        except JobFailedError as exc:
            # Not retried: every other server already holds the dead
            # one's address in its cluster definition.
            raise ClusterStartError(
                f"{exc.failure.describe()}\nits TensorFlow server died before it accepted "
                "connections",
                exc.failure,
            ) from None
        logger.info("every TensorFlow server accepts connections")

    def _emit_started(self, tasks: list[TaskSpec]) -> None:
        backends: dict[str, list[str]] = {}
        for task in tasks:
            backends.setdefault(self._loop.backend_for(task).name, []).append(task.name)
        # Every backend of a job keeps its logs in one directory (run.py).
        log_dir = next((b.log_dir for b in self._loop.backends() if b.log_dir is not None), None)
        self._loop.emit(
            "job_started",
            restart=self.restart,
            max_restarts=self.spec.max_restarts,
            log_dir=None if log_dir is None else str(log_dir),
            backends=backends,
        )

    async def wait_for_workers(self) -> None:
        """Replica mode: return when every worker has exited 0, or the chief
        where there is one (``tfrun --chief``); raise if any task failed."""
        await self._loop.pump(self._loop.workers_done, None, None)
        rest = self._loop.any_live()
        done = "all workers finished" if self.spec.ending_job == "worker" else "the chief finished"
        self._loop.report_after_output(
            logging.INFO, done + ("; stopping the rest of the job" if rest else "")
        )

    async def watch(self) -> None:
        """Fine-grained mode: run until cancelled; raise when a task fails."""
        await self._loop.pump(lambda: False, None, None)

    async def stop(self, *, drop_stalled_output: bool = False) -> None:
        """Stop every task and release the backend. Safe to call more than once.

        Stopping never waits for the terminal: the tasks' output is taken in
        whether or not it can be shown, so that every agent hears "stop" and
        stops its command within its grace. With ``drop_stalled_output`` (a
        failure, a signal), output the terminal has not taken is dropped
        once it takes nothing for ``OUTPUT_STALL`` seconds; otherwise (the
        job's normal end, every task gone) it is all written first."""
        if self._loop.stopping:
            return
        kills = self._loop.begin_stop()
        try:
            await asyncio.gather(*(backend.kill(task_id) for backend, task_id in kills))
            await self._loop.wait_for_stop()
        finally:
            try:
                if self._backend_started:
                    for backend in self._loop.backends():
                        if backend is not self.chief_backend or self._chief_started:
                            await backend.close()
            finally:
                # The tasks are gone; what they sent last may still be on
                # its way in.
                await self._loop.close(
                    drop_stalled_output=drop_stalled_output, where=self.logs_location()
                )
        self._loop.end_stop()

    def outcomes(self) -> dict[str, str]:
        """How each task ended, in words, by task name, in the job's order:
        ``exited 0``, ``stopped by tfrun``, or how it failed."""
        return self._loop.outcomes()

    def lost_logs(self) -> list[str]:
        """The tasks whose output could not all be kept where
        :meth:`logs_location` says (each was said in a warning), by name."""
        return self._loop.lost_logs()

    def incomplete_output(self) -> dict[str, str]:
        """The tasks whose copy in :meth:`logs_location` lacks some of what
        they printed (tfrun could not hear it all before their end), by name,
        each with where its full output is."""
        return self._loop.incomplete_output()

    def logs_location(self) -> str:
        """Where the full output of every task is kept, for the user."""
        return "; ".join(dict.fromkeys(b.logs_location() for b in self._loop.backends()))

    def abandon_output(self, reason: str) -> None:
        """Drop task output not yet written, so that :meth:`stop` need not
        wait for a terminal that does not read, and say so once, with where
        the full output is."""
        self._loop.abandon_output(reason, self.logs_location())

    async def _launch_all(self, specs: list[tuple[TaskSpec, int]]) -> None:
        """Launch tasks (each with its attempt number) that start together:
        each backend is handed its share at once (``Backend.launch_many``)."""
        shares: dict[int, tuple[Backend, list[Launch]]] = {}
        for spec, attempt in specs:
            backend = self._loop.backend_for(spec)
            shares.setdefault(id(backend), (backend, []))[1].append(
                self._loop.new_attempt(spec, attempt)
            )
        for backend, launches in shares.values():
            await backend.launch_many(launches)

    async def _start_chief(self) -> None:
        """Start the backend of the tasks beside the launcher (the chief), and
        launch those that waited for the cluster's first placement."""
        if self.chief_backend is None or self._chief_started:
            return
        self._chief_started = True
        await self.chief_backend.start(self._loop.on_backend)
        launches = self._loop.launch_held()
        if launches:
            logger.debug("the cluster has its first task placed: starting the chief here")
            await self.chief_backend.launch_many(launches)

    async def _after_event(self, event: Event) -> None:
        if not self._chief_started and not self._loop.stopping and isinstance(event, TaskPlaced):
            await self._start_chief()
        again, at_address = self._loop.take_relaunches()
        if again:
            await self._launch_all(again)
        for earlier, decision in at_address:
            await self._launch_at(earlier, decision)

    async def _launch_at(self, earlier: Attempt, decision: relaunch.RelaunchAt) -> None:
        launch = self._loop.new_attempt(
            earlier.spec, earlier.attempt + 1, keep_address=decision.address
        )
        port = int(decision.address.rpartition(":")[2])
        await self._loop.backend_for(earlier.spec).launch_at(launch, earlier.task_id, port)

    def _start_timed_out(self) -> None:
        waiting = self._loop.waiting()
        detail = self.backend.progress()
        raise ClusterStartError(
            f"the cluster did not come up within {self.spec.start_timeout:g}s: "
            f"still waiting for {', '.join(waiting)}" + (f" ({detail})" if detail else "")
        )


def tls_of(spec: ClusterSpec) -> tuple[ssl.SSLContext, str] | None:
    """The rendezvous's TLS context and the certificate the tasks pin
    (``--tls-cert``), or None."""
    if spec.tls_cert is None:
        return None
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(spec.tls_cert, spec.tls_key)
        with open(spec.tls_cert) as cert:
            return context, cert.read()
    except (OSError, ssl.SSLError) as exc:
        raise SpecError(f"cannot use TLS certificate {spec.tls_cert}: {exc}") from None
