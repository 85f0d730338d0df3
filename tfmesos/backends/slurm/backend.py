"""The Slurm backend: the job's remote tasks as one Slurm allocation.

Each round of launches (every task at the start; a round's relaunches after)
is one ``sbatch`` job asking for all of them at once, so that they start
together. Its script (:mod:`tfmesos.slurm.jobscript`) starts each task's
agent as a job step; ``squeue`` tells what the job waits for and how it
ended, ``scancel`` ends it, and a watchdog (:mod:`tfmesos.slurm.watchdog`)
cancels it if tfrun is killed outright. Inside a detached job's allocation
(:mod:`tfmesos.slurm.allocation`) nothing is sbatched: each round's job
script is a process of the launcher's."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfmesos.backends.base import (
    Backend,
    BackendAttached,
    BackendFailed,
    EventSink,
    Launch,
    TaskEnded,
    TaskPlaced,
    advertised_host,
    agent_command,
    make_log_dir,
)
from tfmesos.backends.slurm import options as slurm_options
from tfmesos.common import exported, rundirs
from tfmesos.common.aio import reap
from tfmesos.common.pathtext import shown_path
from tfmesos.common.proctree import STARTED_HERE, bootstrap_command
from tfmesos.common.tasklog import log_name
from tfmesos.errors import EXIT_USAGE, ResourceError, SpecError, TFMesosError
from tfmesos.rendezvous import protocol
from tfmesos.rendezvous.reports import Disconnected, Message, Registered, RendezvousEvent
from tfmesos.slurm import allocation as slurm_allocation
from tfmesos.slurm.commands import (
    ENDS,
    SQUEUE_FORMAT,
    JobStatus,
    Shape,
    explain_reason,
    job_groups,
    literal_filename,
    never_runs,
    parse_squeue,
    sbatch_argv,
    srun_prefix,
)
from tfmesos.spec import ClusterSpec

__all__ = ["SlurmBackend"]

logger = logging.getLogger("tfmesos")

POLL_PENDING = 2.0
"""Seconds between squeue calls while a job waits in the queue or its script
has not dialled in."""
POLL_RUNNING = 10.0
"""...and once it runs: its script's connection says most of what happens."""
COMMAND_TIMEOUT = 60.0
"""The longest an sbatch, squeue or scancel may take (a busy controller)."""
CANCEL_WAIT = 20.0
"""At the end, how long to wait for a cancelled job to have released its
allocation (its tasks stop within the agents' 5 s grace)."""
FINISH_WAIT = 3.0
"""At the end, how long a job whose every task has ended gets to end by
itself before it is cancelled."""
PLAN_END = "TFMESOS_PLAN"


@dataclass
class _Job:
    job_id: str
    peer_id: str
    launches: list[Launch]
    status: JobStatus | None = None
    script_seen: bool = False
    """Its script has dialled in (once: it is admitted only once)."""
    script_connected: bool = False
    ended_tasks: set[str] = field(default_factory=set)
    over: bool = False
    """Slurm says it has ended (or no longer knows it)."""
    never: bool = False
    """Slurm will never start it (:func:`never_runs`): cancelled, and said."""
    script: asyncio.subprocess.Process | None = None
    """Inside the job's own allocation: its job script, a process of ours."""


class SlurmBackend(Backend):
    name = "slurm"
    options_type = slurm_options.SlurmOptions

    def __init__(
        self,
        spec: ClusterSpec,
        *,
        partition: str | None = None,
        account: str | None = None,
        qos: str | None = None,
        time: str | None = None,
        sbatch_args: Sequence[str] | str | None = None,
        log_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(spec)
        given: dict[str, Any] = {
            k: v
            for k, v in (
                ("partition", partition),
                ("account", account),
                ("qos", qos),
                ("time", time),
                ("sbatch_args", sbatch_args),
            )
            if v is not None
        }
        self.options = slurm_options.validate(given)
        missing = [c for c in ("sbatch", "squeue", "scancel") if shutil.which(c) is None]
        if missing:
            raise SpecError(
                f"the slurm backend needs Slurm's commands on PATH ({', '.join(missing)} not "
                "found): run tfrun on a machine that can submit jobs (a login node)"
            )
        self.host = advertised_host()
        if log_dir and "\\" in str(log_dir):
            raise SpecError(
                f"--log-dir: Slurm cannot write to {shown_path(log_dir)}: sbatch and srun drop a "
                "backslash from a file name (and stop reading %j in it); choose a directory "
                "without one"
            )
        if not log_dir and "\\" in str(rundirs.runs_root()):
            # Said before the run's directory is made, naming where its path
            # comes from: no --log-dir was given.
            raise SpecError(
                f"Slurm cannot write the run's logs under {shown_path(rundirs.runs_root())} "
                "($XDG_STATE_HOME/tfmesos/runs): sbatch and srun drop a backslash from a file "
                "name (and stop reading %j in it); give --log-dir a directory without one, or "
                "set XDG_STATE_HOME to one"
            )
        self.log_dir: Path = Path(log_dir) if log_dir else rundirs.new_run_dir()
        self._own_run = not log_dir
        """The run directory is this backend's own, let go when it closes."""
        self.log_max = rundirs.task_log_max()
        self._sink: EventSink | None = None
        self._jobs: dict[str, _Job] = {}
        self._by_peer: dict[str, _Job] = {}
        self._by_task: dict[str, _Job] = {}
        self._killed: set[str] = set()
        self._poller: asyncio.Task[None] | None = None
        self._poll_now = asyncio.Event()
        self._changed = asyncio.Event()
        """Set when a job script reports a step's end or goes away."""
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._closed = False
        self._inside = slurm_allocation.inside()
        """The allocation this launcher runs in (a detached job's), if any."""
        self._watchers: list[asyncio.Task[None]] = []

    # -- Backend ---------------------------------------------------------

    @property
    def rendezvous_host(self) -> str:
        return self.host

    def logs_location(self) -> str:
        return shown_path(self.log_dir)

    async def start(self, sink: EventSink) -> None:
        self._sink = sink
        make_log_dir(self.log_dir)
        if self._inside is None:  # inside, the allocation ends with this launcher
            self._watchdog = _start_watchdog()
            self._poller = asyncio.create_task(self._poll())
        if not self.spec.replica:  # in replica mode the chief, beside tfrun, says it
            logger.info("the full output of each task goes to %s", shown_path(self.log_dir))

    async def launch(self, launch: Launch) -> None:
        await self.launch_many([launch])

    async def launch_many(self, launches: Sequence[Launch]) -> None:
        if not launches:
            return
        tasks = [launch.task for launch in launches]
        groups = job_groups(tasks)
        het = len(groups) > 1
        peer_id = f"slurm-job-script.{uuid.uuid4().hex}"
        steps = []
        for group, (_, positions) in enumerate(groups):
            for position in positions:
                launch = launches[position]
                steps.append([launch.task_id, launch.task.name, group])
        env = dict(launches[0].env)
        secret = env.pop(protocol.ENV_SECRET)
        env.pop(protocol.ENV_TASK_ID, None)
        tls_cert = env.get(protocol.ENV_TLS_CERT)
        env.update(
            {
                protocol.ENV_PORT: "0",  # each agent takes a port of its own on its node
                # ... or a block, its processes' (--nproc-per-task): every
                # agent of the job takes as many as its largest task needs.
                protocol.ENV_PORT_COUNT: str(max(task.ports for task in tasks)),
                protocol.ENV_SECRET_FD: "0",  # the secret comes on its stdin
                protocol.ENV_LOG_MAX: str(self.log_max),
                # sbatch carried tfrun's environment to the node: the task
                # keeps Slurm's word of it; the rest comes as --export says.
                protocol.ENV_BASE: exported.ELSEWHERE,
            }
        )
        srun = [
            srun_prefix(shape, group if het else None)
            if self._inside is None
            else srun_prefix(self._fitting(shape, launches), None)
            for group, (shape, _) in enumerate(groups)
        ]
        plan = {
            "launcher": env[protocol.ENV_LAUNCHER],
            "peer_id": peer_id,
            "secret": secret,
            "tls_cert": tls_cert,
            "log_dir": str(self.log_dir),
            "env": env,
            "srun": srun,
            "agent": agent_command(),
            "steps": steps,
        }
        if self._inside is not None:
            await self._start_inside(plan, peer_id, launches)
            return
        argv = sbatch_argv(
            [(shape, len(positions)) for shape, positions in groups],
            name=_job_name(self.spec.name),
            output=literal_filename(str(self.log_dir)) + "/slurm-%j.out",
            cwd=self.spec.cwd,
            options=self.options,
        )
        job_id = await self._submit(argv, _script(plan), _names(launches))
        job = _Job(job_id, peer_id, list(launches))
        self._jobs[job_id] = job
        self._by_peer[peer_id] = job
        for launch in launches:
            self._by_task[launch.task_id] = job
        if self._watchdog is not None and self._watchdog.stdin is not None:
            with contextlib.suppress(OSError):
                self._watchdog.stdin.write(f"+{job_id}\n".encode())
                self._watchdog.stdin.flush()
        shapes = "; ".join(f"{len(positions)} x {_describe(shape)}" for shape, positions in groups)
        logger.info(
            "Slurm: submitted job %s (%s%s) for %s",
            job_id,
            "heterogeneous, " if het else "",
            shapes,
            _names(launches),
        )
        assert self._sink is not None
        names = [task.name for task in tasks]
        self._sink(BackendAttached(self.name, {"job_id": job_id, "tasks": names}))
        # A job Slurm queues but can never start (more CPUs than any node
        # of its partition has) shows why at once: not waited for.
        status: JobStatus | None = None
        with contextlib.suppress(TFMesosError):  # the poller looks again
            status = (await self._squeue([job])).get(job_id)
        if status is not None and never_runs(status):
            job.status = status
            raise ResourceError(await self._never(job, status))
        self._poll_now.set()

    def _fitting(self, shape: Shape, launches: Sequence[Launch]) -> Shape:
        """``shape``, which a slot of the job's own allocation must hold."""
        assert self._inside is not None
        if not self._inside.fits(shape):
            raise ResourceError(
                f"the job's allocation (Slurm job {self._inside.job_id}) has no room for "
                f"{_names(launches)} ({_describe(shape)}; each slot: {_describe(self._inside.slot)})"
            )
        return shape

    async def _start_inside(
        self, plan: dict[str, Any], peer_id: str, launches: Sequence[Launch]
    ) -> None:
        """Start a round of tasks in the job's own allocation: the job
        script as a process of ours, in a session of its own (so that a stop
        reaches its srun steps), its own lines in ``slurm-JOBID.out``."""
        assert self._inside is not None
        assert self._sink is not None
        job_id = self._inside.job_id
        output = self.log_dir / f"slurm-{job_id}.out"
        try:
            fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        except OSError:
            fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        try:
            script = await asyncio.create_subprocess_exec(
                *bootstrap_command("tfmesos.slurm.jobscript"),
                stdin=subprocess.PIPE,
                stdout=fd,
                stderr=fd,
                start_new_session=True,
            )
        except OSError as exc:
            raise TFMesosError(
                f"cannot start the job script in Slurm job {job_id}: {exc}"
            ) from None
        finally:
            os.close(fd)
        STARTED_HERE.add(script.pid)
        assert script.stdin is not None
        with contextlib.suppress(OSError):
            script.stdin.write(json.dumps(plan, separators=(",", ":")).encode())
            await script.stdin.drain()
            script.stdin.close()
        job = _Job(job_id, peer_id, list(launches), JobStatus("RUNNING", "", self._inside.nodes))
        job.script = script
        self._jobs[f"{job_id}/{len(self._jobs)}"] = job
        self._by_peer[peer_id] = job
        for launch in launches:
            self._by_task[launch.task_id] = job
        self._watchers.append(asyncio.create_task(self._watch_script(job)))
        logger.info(
            "Slurm: starting %s in this job's allocation (job %s)", _names(launches), job_id
        )
        self._sink(
            BackendAttached(self.name, {"job_id": job_id, "tasks": [t.task.name for t in launches]})
        )

    async def _watch_script(self, job: _Job) -> None:
        """A round's job script, inside the allocation: once it has exited,
        and said what it had to (its connection closed), any of its tasks
        not reported ended ends with it."""
        assert job.script is not None
        code = await job.script.wait()
        STARTED_HERE.discard(job.script.pid)
        deadline = time.monotonic() + FINISH_WAIT
        while job.script_connected and time.monotonic() < deadline:
            self._changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), deadline - time.monotonic())
        job.over = True
        self._changed.set()
        for launch in job.launches:
            if launch.task_id in job.ended_tasks:
                continue
            job.ended_tasks.add(launch.task_id)
            self._ended(
                launch,
                "ENDED",
                None,
                f"its job script ended (status {code}) before its step did: job {job.job_id}",
                job,
            )

    async def _never(self, job: _Job, status: JobStatus) -> str:
        """Cancel a job Slurm will never start; what to tell the user."""
        job.never = True
        await self._cancel([job])
        return (
            f"Slurm will never run the job for {_names(job.launches)}: job {job.job_id} is "
            f"pending ({explain_reason(status.reason)}); it was cancelled"
        )

    async def _submit(self, argv: list[str], script: str, names: str) -> str:
        logger.debug("Slurm: %s", " ".join(argv))
        code, out, err = await _run(argv, stdin=script)
        if code != 0:
            problem = _sbatch_error(err) or f"sbatch exited with status {code}"
            if "Unable to contact slurm controller" in problem or "Socket timed out" in problem:
                raise TFMesosError(f"Slurm refused the job for {names}: {problem}")
            # The request itself: a partition, account or size Slurm will never grant.
            raise ResourceError(f"Slurm refused the job for {names}: {problem}")
        job_id = out.strip().split(";", 1)[0]
        if not job_id.isdigit():
            raise TFMesosError(f"sbatch said {out.strip()!r}, not a job id")
        return job_id

    async def kill(self, task_id: str) -> None:
        self._killed.add(task_id)
        job = self._by_task.get(task_id)
        if job is None or job.over:
            return
        # A job none of whose tasks is wanted any more goes at once.
        if all(t.task_id in self._killed or t.task_id in job.ended_tasks for t in job.launches):
            await self._cancel([job])

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._poller is not None:
            # Told, not only cancelled: on Python 3.11 a cancellation that
            # comes as an awaited command ends can be lost in asyncio.wait_for,
            # and the poller would go on (and this wait with it) for ever.
            self._poll_now.set()
            self._poller.cancel()
            await reap(self._poller, COMMAND_TIMEOUT)
        live = [job for job in self._jobs.values() if not job.over]
        # The launcher closes the backend once its tasks are over: their
        # steps end, each job's script reports them and ends its job. That is
        # given a moment, so that a job that went well ends COMPLETED, not
        # CANCELLED; what is left then is cancelled.
        finishing = [j for j in live if j.script_connected]
        if finishing:
            deadline = time.monotonic() + FINISH_WAIT
            while time.monotonic() < deadline and any(
                j.script_connected and len(j.ended_tasks) < len(j.launches) for j in finishing
            ):
                self._changed.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), deadline - time.monotonic())
            await self._wait_released(finishing, FINISH_WAIT, warn=False)
        live = [job for job in live if not job.over]
        if live:
            await self._cancel(live)
            await self._wait_released(live, CANCEL_WAIT)
        for watcher in self._watchers:  # every job script is gone: nothing left to say
            watcher.cancel()
            await reap(watcher, COMMAND_TIMEOUT)
        if self._watchdog is not None:
            with contextlib.suppress(OSError, ValueError):
                assert self._watchdog.stdin is not None
                self._watchdog.stdin.write(b"done\n")
                self._watchdog.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(self._watchdog.wait, 5)
            STARTED_HERE.discard(self._watchdog.pid)
        if self._own_run:
            rundirs.release(self.log_dir)

    def admit(self, peer_id: str) -> bool:
        job = self._by_peer.get(peer_id)
        return job is not None and not job.script_seen and not job.over

    def on_peer(self, event: RendezvousEvent) -> None:
        job = self._by_peer.get(event.task_id)
        if job is None:
            return
        if isinstance(event, Registered):
            job.script_connected = job.script_seen = True
            logger.debug("Slurm: job %s's script dialled in", job.job_id)
            self._placed(job, job.status)
        elif isinstance(event, Message) and event.message.get("type") == protocol.STEP_ENDED:
            task_id = str(event.message.get("task_id"))
            code = event.message.get("code")
            launch = next((t for t in job.launches if t.task_id == task_id), None)
            if launch is None or task_id in job.ended_tasks:
                return
            job.ended_tasks.add(task_id)
            self._changed.set()
            status = code if isinstance(code, int) else None
            self._ended(
                launch, "exited", status, f"ended: its Slurm step exited with status {status}", job
            )
        elif isinstance(event, Disconnected):
            # The job script's end: the job is ending. squeue says why.
            job.script_connected = False
            self._changed.set()
            self._poll_now.set()

    def progress(self) -> str:
        parts = []
        for job in self._jobs.values():
            if job.over:
                continue
            status = job.status
            if status is None:
                parts.append(f"Slurm job {job.job_id} submitted")
            elif status.pending:
                parts.append(f"Slurm job {job.job_id} is pending ({explain_reason(status.reason)})")
            elif not job.script_seen:
                parts.append(
                    f"Slurm job {job.job_id} is {status.state.lower()} on {status.nodes}; "
                    "its script has not dialled in yet"
                )
            else:
                parts.append(f"Slurm job {job.job_id} is {status.state.lower()} on {status.nodes}")
        return "; ".join(parts)

    # -- watching the jobs ----------------------------------------------------

    async def _poll(self) -> None:
        while not self._closed:
            live = [job for job in self._jobs.values() if not job.over]
            if live and not self._closed:
                try:
                    await self._look(live)
                except TFMesosError as exc:
                    logger.warning("Slurm: %s", exc)
            settled = all(j.script_seen and j.status and not j.status.pending for j in live)
            if self._closed:
                return
            self._poll_now.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(
                    self._poll_now.wait(), POLL_RUNNING if settled else POLL_PENDING
                )

    async def _squeue(self, jobs: Sequence[_Job]) -> dict[str, JobStatus]:
        ids = ",".join(job.job_id for job in jobs)
        code, out, err = await _run(["squeue", "-h", "-t", "all", "-j", ids, "-o", SQUEUE_FORMAT])
        if code != 0 and "Invalid job id" not in err:
            raise TFMesosError(f"squeue failed: {' '.join(err.split()) or f'status {code}'}")
        return parse_squeue(out)

    async def _look(self, jobs: Sequence[_Job]) -> None:
        seen = await self._squeue(jobs)
        for job in jobs:
            status = seen.get(job.job_id)
            before = job.status
            if status is None:
                # Gone from squeue: ended longer ago than MinJobAge.
                status = JobStatus("ENDED", "", before.nodes if before else "")
            job.status = status
            if never_runs(status) and not job.never:
                assert self._sink is not None
                self._sink(BackendFailed(await self._never(job, status), EXIT_USAGE))
                continue
            if status.active:
                if before is not None and before.pending and not status.pending:
                    logger.info("Slurm: job %s runs on %s", job.job_id, status.nodes)
                    self._placed(job, status)
                elif before is None and not status.pending:
                    self._placed(job, status)
                if status.pending and (before is None or before.reason != status.reason):
                    logger.debug(
                        "Slurm: job %s is pending: %s", job.job_id, explain_reason(status.reason)
                    )
                continue
            job.over = True
            what = ENDS.get(status.state, f"its Slurm job ended ({status.state})")
            if not job.script_seen and status.state in ("FAILED", "COMPLETED"):
                what += " before its script reached tfrun"
            detail = f"{what}: job {job.job_id}" + (
                f", reason {status.reason}" if status.reason not in ("", "None") else ""
            )
            for launch in job.launches:
                if launch.task_id in job.ended_tasks:
                    continue
                job.ended_tasks.add(launch.task_id)
                self._ended(launch, status.state, None, detail, job)

    def _placed(self, job: _Job, status: JobStatus | None) -> None:
        if status is None or not status.nodes or status.pending:
            return
        single = "," not in status.nodes and "[" not in status.nodes
        if not single:
            return  # each task's node is the one its agent registers from
        assert self._sink is not None
        for launch in job.launches:
            self._sink(TaskPlaced(launch.task_id, status.nodes))

    def _ended(self, launch: Launch, state: str, code: int | None, message: str, job: _Job) -> None:
        assert self._sink is not None
        host = job.status.nodes if job.status and "," not in job.status.nodes else ""
        self._sink(
            TaskEnded(
                launch.task_id, state, code, message, host, self._log_tail(launch.task_id, job)
            )
        )

    def _log_tail(self, task_id: str, job: _Job, size: int = 2048) -> tuple[str, ...]:
        """The task's last lines, where this machine can read its log (a
        shared filesystem, or a one-node cluster); else the job's output."""
        for path in (self.log_dir / log_name(task_id), self.log_dir / f"slurm-{job.job_id}.out"):
            try:
                with open(path, "rb") as log:
                    log.seek(max(0, log.seek(0, os.SEEK_END) - size))
                    data = log.read()
            except OSError:
                continue
            lines = data.decode("utf-8", "replace").splitlines()[-10:]
            if lines:
                return tuple(lines)
        return ()

    async def _cancel(self, jobs: Sequence[_Job]) -> None:
        if self._inside is not None:
            for job in jobs:  # its srun steps pass SIGTERM on to their tasks
                if job.script is not None and job.script.returncode is None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(job.script.pid, signal.SIGTERM)
            return
        ids = [job.job_id for job in jobs]
        code, _, err = await _run(["scancel", *ids])
        if code != 0:
            logger.warning(
                "Slurm: scancel %s failed: %s", " ".join(ids), " ".join(err.split()) or code
            )

    async def _wait_released(self, jobs: Sequence[_Job], wait: float, warn: bool = True) -> None:
        """Wait until Slurm has the jobs' allocations back (their tasks have
        stopped), so that tfrun's end means the resources are free."""
        if self._inside is not None:
            await self._wait_scripts(jobs, wait, warn)
            return
        deadline = time.monotonic() + wait
        waiting = list(jobs)
        while waiting and time.monotonic() < deadline:
            try:
                seen = await self._squeue(waiting)
            except TFMesosError:
                return
            waiting = [j for j in waiting if j.job_id in seen and seen[j.job_id].active]
            if waiting:
                await asyncio.sleep(0.25)
        for job in jobs:
            job.over = job not in waiting
        if waiting and warn:
            logger.warning(
                "Slurm: job %s still holds its allocation %gs after scancel",
                ", ".join(j.job_id for j in waiting),
                wait,
            )

    async def _wait_scripts(self, jobs: Sequence[_Job], wait: float, warn: bool) -> None:
        """Inside the allocation: wait for the jobs' scripts (and so their
        steps) to end; after a stop (``warn``), what is left after ``wait``
        is killed, and said."""
        scripts = [job.script for job in jobs if job.script is not None]
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(s.wait() for s in scripts)), wait)
        left = [s for s in scripts if s.returncode is None]
        if not warn:
            for job in jobs:
                job.over = job.script is None or job.script.returncode is not None
            return
        for script in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(script.pid, signal.SIGKILL)
        if left:
            logger.warning("Slurm: a job script still ran %gs after it was stopped: killed", wait)
        for job in jobs:
            job.over = True


def _sbatch_error(stderr: str) -> str:
    """What sbatch said went wrong, each thing once: it says the cause, then
    ``Batch job submission failed:`` and the cause again."""
    causes: dict[str, None] = {}
    for line in stderr.splitlines():
        text = line.strip().removeprefix("sbatch: error: ").strip()
        text = text.removeprefix("Batch job submission failed: ").strip()
        if text:
            causes[text] = None
    return "; ".join(causes)


def _names(launches: Sequence[Launch]) -> str:
    """``ps:0, worker:1``, the first ten of many."""
    names = [launch.task.name for launch in launches]
    return ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")


def _describe(shape: Shape) -> str:
    text = f"{shape.cpus} CPU{'s' if shape.cpus != 1 else ''}, {shape.mem_per_cpu * shape.cpus} MiB"
    if shape.gpus:
        text += f", {shape.gpus} GPU{'s' if shape.gpus != 1 else ''}"
    return text


def _job_name(name: str) -> str:
    """The Slurm job's name: the job's, on one line, not too long for squeue."""
    return " ".join(name.split())[:100] or "tfrun"


def _script(plan: dict[str, Any]) -> str:
    """The batch script: the job script module, the plan on its stdin."""
    import json
    import shlex

    body = json.dumps(plan, separators=(",", ":"))
    assert "\n" not in body
    return (
        "#!/bin/sh\n"
        "# tfrun's job script (tfmesos): it starts the job's tasks as job steps,\n"
        "# and ends the job when tfrun goes away.\n"
        f"exec {shlex.join(bootstrap_command('tfmesos.slurm.jobscript'))} <<'{PLAN_END}'\n"
        f"{body}\n"
        f"{PLAN_END}\n"
    )


def _start_watchdog() -> subprocess.Popen[bytes] | None:
    try:
        watchdog = subprocess.Popen(
            bootstrap_command("tfmesos.slurm.watchdog"),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Its own session: Ctrl-C, or a signal to tfrun's group, is not for it.
            start_new_session=True,
        )
    except OSError as exc:
        logger.warning("Slurm: no watchdog (%s): a job outlives a tfrun killed outright", exc)
        return None
    # Not a task's stray, for a chief this process runs (directtask.strays).
    STARTED_HERE.add(watchdog.pid)
    return watchdog


async def _run(argv: Sequence[str], stdin: str | None = None) -> tuple[int, str, str]:
    """Run a Slurm command; its status, stdout and stderr."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:
        raise TFMesosError(f"cannot run {argv[0]}: {exc}") from None
    try:
        out, err = await asyncio.wait_for(
            proc.communicate(stdin.encode() if stdin is not None else None), COMMAND_TIMEOUT
        )
    except asyncio.TimeoutError:
        proc.kill()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), 5.0)
        raise TFMesosError(f"{argv[0]} did not answer within {COMMAND_TIMEOUT:g}s") from None
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
