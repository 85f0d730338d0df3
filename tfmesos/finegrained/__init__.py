"""Fine-grained (in-graph) mode: ``with tfmesos.cluster(jobs) as c: ...``.

The remote tasks are plain TensorFlow gRPC servers; the user's own program
builds the graph and drives them through ``c.targets``. The launcher runs its
event loop in a background thread for the life of the ``with`` block.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any

from tfmesos.backends import BackendOptions, backend_options, choose_backend, create_backend
from tfmesos.common.ports import reserve_port
from tfmesos.errors import (
    EXIT_NEVER_UP,
    ClusterStartError,
    JobFailedError,
    ResourceError,
    SpecError,
    TFMesosError,
    interrupted_status,
)
from tfmesos.finegrained.tfcontext import forget_servers
from tfmesos.launcher import Launcher
from tfmesos.launcher.console import binary_stream
from tfmesos.launcher.events import NO_EVENTS, Events, open_events
from tfmesos.spec import CHIEF_JOB, EVALUATOR_JOB, ClusterSpec, Job, coerce_jobs

__all__ = ["Cluster", "cluster"]

logger = logging.getLogger("tfmesos")

JobsArg = Job | Mapping[str, Any] | Iterable[Job | Mapping[str, Any]]


class Cluster:
    """A running set of TF servers. Use :func:`cluster`, which stops it for you."""

    def __init__(
        self,
        spec: ClusterSpec,
        backend: str,
        options: BackendOptions,
        events: Events = NO_EVENTS,
    ) -> None:
        self.spec = spec
        self.events = events
        self._chief = spec.has_job(CHIEF_JOB)
        """A ``chief`` job: this program, TF's coordinator, which no task runs."""
        if self._chief:
            served = tuple(job for job in spec.jobs if job.name != CHIEF_JOB)
            spec = dataclasses.replace(spec, jobs=served)
        self._backend = create_backend(backend, spec, options)
        self._launcher = Launcher(
            spec, self._backend, output=binary_stream(sys.stderr), events=events
        )
        self._chief_port: socket.socket | None = None
        """The chief's port, held until the servers are up."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="tfmesos-launcher", daemon=True
        )
        self._watch: concurrent.futures.Future[None] | None = None
        self.failure: TFMesosError | None = None
        """Set when a task failed while the block ran."""

    @property
    def targets(self) -> dict[str, str]:
        """``{'/job:worker/task:0': 'grpc://host:port', ...}``"""
        return self._launcher.targets

    @property
    def cluster_def(self) -> dict[str, list[str]]:
        """``{'worker': ['host:port', ...], ...}``, in task order."""
        return {job: list(addrs) for job, addrs in self._launcher.cluster_def.items()}

    def cluster_spec(self) -> Any:
        """The cluster as a ``tf.train.ClusterSpec`` (imports TensorFlow)."""
        import tensorflow as tf

        return tf.train.ClusterSpec(self.cluster_def)

    def cluster_resolver(self) -> Any:
        """A cluster resolver for TF2 strategies, the local program being the
        coordinator: ``tf.distribute.experimental.ParameterServerStrategy(
        c.cluster_resolver())``."""
        import tensorflow as tf

        if self._chief:
            # The program is the chief: TF's coordinator serves at the chief's
            # address, which every server's cluster definition holds.
            return tf.distribute.cluster_resolver.SimpleClusterResolver(
                self.cluster_spec(), task_type=CHIEF_JOB, task_id=0, rpc_layer=self.spec.protocol
            )
        return tf.distribute.cluster_resolver.SimpleClusterResolver(
            self.cluster_spec(), rpc_layer=self.spec.protocol
        )

    def start(self) -> None:
        if self._chief:
            # A port below the ephemeral range, held (no task's port check
            # takes it) until every server is up, then let go for the
            # program's own server to bind.
            port, self._chief_port = reserve_port()
            address = f"{self._backend.rendezvous_host}:{port}"
            self._launcher.set_outside({CHIEF_JOB: [address]})
        self._thread.start()
        try:
            self._call(self._launcher.start())
        except BaseException:
            self.stop()
            raise
        finally:
            self._release_chief_port()
        self._watch = asyncio.run_coroutine_threadsafe(self._launcher.watch(), self._loop)
        self._watch.add_done_callback(self._on_watch_done)

    def _on_watch_done(self, watch: concurrent.futures.Future[None]) -> None:
        if watch.cancelled():
            return
        error = watch.exception()
        if isinstance(error, TFMesosError):
            self.failure = error
            logger.error("%s", error)

    def _release_chief_port(self) -> None:
        if self._chief_port is not None:
            self._chief_port.close()
            self._chief_port = None

    def stop(self) -> None:
        self._release_chief_port()
        if self._loop.is_closed():
            return
        # While the servers still answer: TF's context would otherwise try
        # them at exit, and log each failure (tfmesos/finegrained/tfcontext.py).
        forget_servers(self._launcher.cluster_def)
        if self._watch is not None:
            self._watch.cancel()
        if self._thread.is_alive():
            try:
                self._call(self._launcher.stop())
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join()
        self._loop.close()

    def _call(self, coroutine: Any) -> Any:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise


def _quiet_logging(quiet: bool) -> None:
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[tfmesos] %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.WARNING if quiet else logging.INFO)


@contextmanager
def cluster(
    jobs: JobsArg,
    *,
    master: str | None = None,
    name: str | None = None,
    role: str | None = None,
    quiet: bool = False,
    volumes: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    containerizer_type: str | None = None,
    force_pull_image: bool = False,
    protocol: str = "grpc",
    extra_config: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    backend: str | None = None,
    log_dir: str | None = None,
    image: str | None = None,
    checkpoint: bool | None = None,
    user: str | None = None,
    slurm: Mapping[str, Any] | None = None,
    max_restarts: int = 0,
    events: str | os.PathLike[str] | IO[str] | None = None,
    export: str = "ALL",
    cluster_file: bool = False,
) -> Iterator[Cluster]:
    """Start a TF server per task; yield the running :class:`Cluster`; stop them.

    ``master=None`` (and no ``MESOS_MASTER``) runs the servers on this machine;
    ``backend="slurm"`` (or ``slurm={...}``: ``partition``, ``account``,
    ``qos``, ``time``, ``sbatch_args``) runs them as one Slurm job. Leaving the
    block in any way stops every task; leaving it normally after a task failed
    raises that failure.

    ``max_restarts=N``: a worker's server that dies is started again at the
    same address, up to N times, so TF2's ``ClusterCoordinator`` carries on; a
    ps never is (:mod:`tfmesos.launcher.relaunch`). ``export`` and ``env``: the
    servers' environment, as ``tfrun --export`` and ``-e``.
    ``cluster_file=True``: the cluster definition in a file, for clusters too
    large for the environment. ``events``: a path or open text file for the
    event stream (docs/running.md, "The event stream")."""
    # Each backend takes what is its own of these (BackendOptions.from_given);
    # the registry says whose each is, and which choose a backend.
    given: dict[str, Any] = {
        "master": master,
        "log_dir": log_dir,
        "checkpoint": checkpoint,
        "user": user,
        "role": role,
        "volumes": volumes,
        "containerizer_type": containerizer_type,
        "image": image,
        "force_pull_image": force_pull_image,
        "slurm": slurm,
    }
    backend = choose_backend(backend, given, as_flags=False)
    extra = dict(extra_config or {})
    unknown = sorted(set(extra) - {"initializer", "finalizer"})
    if unknown:
        raise SpecError(f"unknown extra_config key {unknown[0]!r} (known: initializer, finalizer)")
    spec = ClusterSpec(
        jobs=coerce_jobs(jobs),
        name=name or f"[tfmesos] {os.path.abspath(sys.argv[0]) if sys.argv[0] else 'python'}",
        cwd=os.getcwd(),
        env=dict(env or {}),
        initializer=extra.get("initializer"),
        finalizer=extra.get("finalizer"),
        forward_logs=frozenset(),
        start_timeout=timeout,
        protocol=protocol,
        max_restarts=max_restarts,
        export=export,
        cluster_file=cluster_file,
    )
    for job in spec.jobs:
        if job.cmd is not None:
            raise SpecError(
                f"job {job.name!r} has a cmd: fine-grained mode runs TF servers; use tfrun"
            )
        if job.name == EVALUATOR_JOB:
            raise SpecError(
                "job 'evaluator': TF's evaluator runs a program of its own, not a server "
                "the program drives; use tfrun --evaluator"
            )
    _quiet_logging(quiet)
    options = backend_options(backend, **given)
    options.check_spec(spec)
    sink = NO_EVENTS if events is None else open_events(events)
    try:
        running = Cluster(spec, backend, options, sink)
        failure: BaseException | None = None
        try:
            running.start()
            try:
                yield running
            finally:
                running.stop()
            failure = running.failure
        except BaseException as exc:
            failure = exc
            raise
        finally:
            _report_verdict(sink, failure)
        if running.failure is not None:
            raise running.failure
    finally:
        sink.close()


def _report_verdict(events: Events, failure: BaseException | None) -> None:
    """The cluster's last event: how the block ended (its status as tfrun's
    would be: :mod:`tfmesos.errors`)."""
    status, result, message = 0, "succeeded", ""
    if isinstance(failure, JobFailedError):
        status, result, message = failure.exit_code, "failed", str(failure)
    elif isinstance(failure, ClusterStartError):
        status, result, message = EXIT_NEVER_UP, "never up", str(failure)
    elif isinstance(failure, SpecError | ResourceError):
        status, result, message = failure.exit_status, "refused", str(failure)
    elif isinstance(failure, TFMesosError):
        status, result, message = failure.exit_status, "error", str(failure)
    elif isinstance(failure, KeyboardInterrupt):
        signum = getattr(failure, "signum", signal.SIGINT)  # SignalInterrupt's, or Ctrl-C's
        status, result, message = interrupted_status(signum), "interrupted", "interrupted"
    elif isinstance(failure, SystemExit):
        # The program ends as it asked, with the status Python gives it.
        code = failure.code
        status = code if isinstance(code, int) else 0 if code is None else 1
        result = "succeeded" if status == 0 else "failed"
        message = f"the block called sys.exit({code!r})"
    elif failure is not None:
        # The block's own exception: the cluster was fine, the program was not.
        status, result, message = 1, "error", f"the block raised {type(failure).__name__}"
    stopped_by = None
    if isinstance(failure, KeyboardInterrupt):
        stopped_by = signal.Signals(getattr(failure, "signum", signal.SIGINT)).name
    events.emit(
        "job_verdict", exit_status=status, result=result, message=message, signal=stopped_by
    )
