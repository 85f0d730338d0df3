"""The local backend: every task a child process of the launcher, on this machine.

A plain replica-mode task is run by the launcher itself, with no agent
(:mod:`tfmesos.backends.local.directtask`; the sweeper ends its commands
should the launcher die); any other task has an agent, as on a cluster.
Each agent and each command runs in a process group of its own, bound to
its parent's life (:mod:`tfmesos.common.proctree`), so that a signal
reaches one task only. What an agent killed outright leaves, the fork server
(a subreaper) and the backend kill."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from tfmesos.backends.base import (
    NOT_PLACED,
    Backend,
    EventSink,
    InProcessRendezvous,
    Launch,
    TaskEnded,
    TaskPlaced,
    make_log_dir,
)
from tfmesos.backends.base import agent_command as default_agent_command
from tfmesos.backends.local.directtask import DirectTask, Sweeper, end_strays
from tfmesos.backends.local.forking import (
    OWN_PROCESS_GROUP,
    AgentProcess,
    ForkServer,
    ForkServerGone,
    exit_status,
)
from tfmesos.backends.local.forkstart import (
    NO_FORK_SERVER,
    raise_open_file_limit,
    runs_tasks_itself,
)
from tfmesos.backends.local.options import LocalOptions
from tfmesos.common import exported, rundirs
from tfmesos.common.pathtext import shown_path
from tfmesos.common.ports import PortAllocator
from tfmesos.common.proctree import (
    become_subreaper,
    kill_carriers,
    signal_group,
)
from tfmesos.common.resources import GpuAllocator, format_mib, local_task_limit, machine_resources
from tfmesos.common.tasklog import describe_failure, log_name
from tfmesos.errors import ResourceError
from tfmesos.rendezvous import protocol
from tfmesos.spec import ClusterSpec, TaskSpec

__all__ = ["LocalBackend", "LocalOptions"]

logger = logging.getLogger("tfmesos")

KILL_GRACE = protocol.STOP_GRACE + 2.0
"""Seconds between SIGTERM to an agent and SIGKILL: the agent's own grace for
its child, plus a margin for it to report."""
GPU_RELEASE_WAIT = KILL_GRACE + 5.0
END_ROUNDS = 500
"""At most this many sweeps for the processes of an agent killed outright
(each kills what it finds; a process stuck in the kernel may take a few)."""
"""How long a relaunch waits for an earlier attempt of its task to give back its GPUs."""
EARLIER_ATTEMPT_WAIT = GPU_RELEASE_WAIT
"""How long a relaunch at an address (``launch_at``) waits for the attempt it
replaces to end and give its port back."""


def _count(amount: float, unit: str) -> str:
    """``1 GPU``, ``2 GPUs``, ``0.5 CPUs``."""
    return f"{amount:g} {unit}" + ("" if amount == 1 else "s")


ON_A_CLUSTER = "run the job on a cluster (-m MASTER for Mesos, --backend slurm)"
"""What a local job that asks for more than this machine has can do instead,
in tfrun's words: every cluster backend, not one a user may not have."""
ON_A_CLUSTER_WITH_GPUS = "run the job on a cluster with GPUs (-m MASTER for Mesos, --backend slurm)"


class LocalBackend(Backend):
    name = "local"
    options_type = LocalOptions
    chief_beside_launcher = False
    """The chief is one of its tasks: every task runs on this machine."""
    rendezvous_bind = "127.0.0.1"
    keeps_addresses = True

    def __init__(
        self,
        spec: ClusterSpec,
        *,
        host: str = "127.0.0.1",
        log_dir: str | os.PathLike[str] | None = None,
        ports: PortAllocator | None = None,
        agent_command: Sequence[str] | None = None,
        chief_only: bool = False,
    ) -> None:
        super().__init__(spec)
        self.chief_only = chief_only
        """Runs only the chief of a job on a cluster (Mesos, Slurm): resources
        are checked more leniently, and what to do is said for tfrun's machine."""
        self.host = host
        self.log_max = rundirs.task_log_max()
        self.log_dir: Path = Path(log_dir) if log_dir else rundirs.new_run_dir()
        self._own_run = not log_dir
        """The run directory is this backend's own, let go when it closes."""
        self._ports = ports or PortAllocator()
        self._gpus: GpuAllocator | None = None
        self._gpus_released = asyncio.Event()
        self.agent_command = list(agent_command or default_agent_command())
        self._sink: EventSink | None = None
        self._procs: dict[str, AgentProcess] = {}
        self._lost_logs: list[str] = []
        """The tasks whose log could not be made (their output reaches tfrun only)."""
        self._fork_server: ForkServer | None = None
        self._use_fork_server = agent_command is None and not os.environ.get(NO_FORK_SERVER)
        self._waiters: set[asyncio.Task[None]] = set()
        self._agent_ended = asyncio.Event()
        """Set whenever an agent has ended and given back what it held."""
        self._rendezvous: InProcessRendezvous | None = None
        self._direct: dict[str, DirectTask] = {}
        """The tasks the launcher runs itself, until each is over."""
        self._sweeper: Sweeper | None = None
        self._environ: dict[str, str] = {}
        """This process's environment, read once: every direct task's starts from it."""
        self._runs_tasks_itself = False
        """Decided at start (:meth:`_decide_runs_tasks_itself`)."""

    @property
    def rendezvous_host(self) -> str:
        return self.host

    def attach_rendezvous(self, rendezvous: InProcessRendezvous) -> None:
        self._rendezvous = rendezvous

    def _decide_runs_tasks_itself(self) -> bool:
        """Whether this job's tasks run in the launcher's process, without
        agents: a local job's own (beside a cluster, the chief keeps its agent),
        started with the backend's own agent command."""
        return (
            self._rendezvous is not None
            and not self.chief_only
            and self._use_fork_server
            and runs_tasks_itself(self.spec)
        )

    def check(self, tasks: Sequence[TaskSpec]) -> None:
        if not self.chief_only:
            problem = local_task_limit(len(tasks), self.spec.nproc)
            if problem is not None:
                raise ResourceError(problem)
        wanted = sum(t.gpus for t in tasks)
        have = machine_resources(gpus=wanted > 0)
        self._gpus = GpuAllocator(have.gpus)
        # Beside a job on a cluster, only the chief runs here: say so, since
        # the user asked the cluster, not this machine, for the resources.
        here = " (the chief runs on this machine, beside tfrun)" if self.chief_only else ""
        if wanted > len(have.gpus) and all(t.gpus <= len(have.gpus) for t in tasks):
            raise ResourceError(
                f"the tasks ask for {_count(wanted, 'GPU')} in all, and this machine has "
                f"{len(have.gpus)} (a GPU is never shared between tasks): ask for fewer, "
                f"or {ON_A_CLUSTER}"
            )
        for task in tasks:
            short = []
            if task.cpus > have.cpus:
                short.append(
                    f"task {task.name} asks for {_count(task.cpus, 'CPU')}, and this machine has "
                    f"{have.cpus}{here}: {self._fewer(task, 'cpus')}"
                )
            if task.mem > have.mem_mib:
                short.append(
                    f"task {task.name} asks for {format_mib(task.mem)} of memory, and this machine "
                    f"has {format_mib(have.mem_mib)}{here}: {self._fewer(task, 'mem')}"
                )
            for shortfall in short:
                if not self.chief_only:
                    raise ResourceError(shortfall)
                # Nothing reserves CPUs or memory here: the chief still runs.
                logger.warning("%s; running it anyway", shortfall)
            if task.gpus > len(have.gpus):
                found = str(len(have.gpus)) if have.gpus else "none"
                raise ResourceError(
                    f"task {task.name} asks for {_count(task.gpus, 'GPU')}, and this machine has "
                    f"{found}{here}: {self._fewer(task, 'gpus')}"
                )

    def _gpu_allocator(self) -> GpuAllocator:
        """The machine's GPUs, looked up on the first launch that needs one
        when check() has not looked already: a launch never depends on it."""
        if self._gpus is None:
            self._gpus = GpuAllocator(machine_resources(gpus=True).gpus)
        return self._gpus

    def _fewer(self, task: TaskSpec, resource: str) -> str:
        """What to do about a task that asks for more than this machine has."""
        # The evaluator takes the workers' flags (tfrun --evaluator).
        letter = {"ps": "s", "worker": "w", "chief": "c", "evaluator": "w"}.get(task.job_name)
        if self.spec.replica and letter is not None:
            flag = {"cpus": "-C", "mem": "-M", "gpus": "-G"}[resource] + letter
            if resource == "gpus" and self.chief_only:
                return f"run tfrun on a machine with a GPU, or give {flag} 0"
            if resource == "gpus":
                return f"give {flag} 0, or {ON_A_CLUSTER_WITH_GPUS}"
            unit = " (MiB)" if resource == "mem" else ""
            if self.chief_only:
                # The job is on a cluster already: only the chief is here.
                return f"ask for less with {flag}{unit}, or run tfrun on a machine with more"
            return f"ask for less with {flag}{unit}, or {ON_A_CLUSTER}"
        less = f"ask for less ({resource}= of job {task.job_name!r})"
        if self.chief_only:
            return f"{less}, or run it on a machine with more"
        return f"{less}, or run the job on a cluster (master= for Mesos, backend='slurm')"

    def lost_logs(self) -> list[str]:
        return list(self._lost_logs)

    def logs_location(self) -> str:
        return shown_path(self.log_dir)

    def task_log(self, task_id: str) -> Path:
        return self.log_dir / log_name(task_id)

    async def start(self, sink: EventSink) -> None:
        self._sink = sink
        make_log_dir(self.log_dir)
        raise_open_file_limit()
        self._runs_tasks_itself = self._decide_runs_tasks_itself()
        if self._runs_tasks_itself:
            self._start_running_tasks_itself()
        elif self._use_fork_server:
            server = ForkServer()
            try:
                await server.start()
            except (OSError, ForkServerGone) as exc:
                logger.debug("no fork server (%s): each agent starts a new interpreter", exc)
            else:
                self._fork_server = server
        logger.info("the full output of each task goes to %s", shown_path(self.log_dir))

    def _start_running_tasks_itself(self) -> None:
        """What the launcher needs to run tasks itself: their leftovers
        handed to it when their parent exits (as an agent is their subreaper),
        and a sweeper should it die outright."""
        self._environ = dict(os.environ)
        with contextlib.suppress(OSError, AttributeError):
            become_subreaper()
        try:
            self._sweeper = Sweeper()
        except OSError as exc:
            logger.debug("no sweeper (%s): tfrun killed outright would leave its tasks", exc)

    async def launch_many(self, launches: Sequence[Launch]) -> None:
        """Through the fork server, every agent's request goes out before the
        first reply is awaited, rather than one round trip after another: the
        server forks the next agent while the first ones dial in. Replies come
        in the order asked, and so do the tasks' placements. A task that
        fails to start still fails the launch, once every other has started."""
        if self._fork_server is None or any(launch.task.gpus for launch in launches):
            await super().launch_many(launches)
            return
        ended = await asyncio.gather(*map(self.launch, launches), return_exceptions=True)
        for end in ended:
            if isinstance(end, BaseException):
                raise end

    async def launch(self, launch: Launch) -> None:
        assert self._sink is not None, "start() first"
        gpus = await self._take_gpus(launch)
        port = self._ports.allocate(launch.task.ports)
        if self._runs_tasks_itself:
            self._start_direct(launch, port, gpus)
            return
        await self._start_holding(launch, port, gpus)

    def _start_direct(self, launch: Launch, port: int, gpus: list[str]) -> None:
        """Run the task in this process: its environment as its agent's
        would be, its log opened here."""
        assert self._sink is not None
        assert self._rendezvous is not None
        env = dict(self._environ)
        env.update(launch.env)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        env[protocol.ENV_BASE] = exported.HERE
        log = self.task_log(launch.task_id)
        log_fd: int | None
        try:
            log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            logger.warning(
                "task %s on %s %s", launch.task.name, self.host, describe_failure(str(log), exc)
            )
            self._lost_logs.append(launch.task.name)
            log_fd = None
        task = DirectTask(
            launch.task_id,
            host=self.host,
            port=port,
            environ=env,
            log_fd=log_fd,
            log_path=str(log),
            log_max=self.log_max,
            rendezvous=self._rendezvous,
            sweeper=self._sweeper,
            on_end=lambda ended, status, reported: self._direct_ended(
                ended, status, gpus, reported
            ),
        )
        self._direct[launch.task_id] = task
        self._sink(TaskPlaced(launch.task_id, self.host))
        task.begin()

    def _direct_ended(self, task: DirectTask, status: int, gpus: list[str], reported: bool) -> None:
        self._ports.release(task.port)
        if self._gpus is not None:
            self._gpus.release(gpus)
            self._gpus_released.set()
        self._direct.pop(task.task_id, None)
        self._agent_ended.set()
        assert self._sink is not None
        self._sink(
            TaskEnded(
                task.task_id,
                "exited",
                status,
                f"exited with status {status}",
                self.host,
                # Its exit, reported, came with every line it printed: the
                # launcher has them all. One that ended before its command
                # started (its agent's error) has only its log to show.
                () if reported else self._log_tail(task.task_id),
            )
        )

    async def launch_at(self, launch: Launch, earlier: str, port: int) -> None:
        assert self._sink is not None, "start() first"
        deadline = time.monotonic() + EARLIER_ATTEMPT_WAIT
        while earlier in self._procs:
            self._agent_ended.clear()
            left = deadline - time.monotonic()
            try:
                await asyncio.wait_for(self._agent_ended.wait(), max(left, 0.0))
            except asyncio.TimeoutError:
                break
        if earlier in self._procs:
            problem = f"its earlier attempt still runs {EARLIER_ATTEMPT_WAIT:g}s after it ended"
        elif not self._ports.claim(port, launch.task.ports):
            problem = f"port {port} on {self.host} is taken by another process"
        else:
            try:
                gpus = await self._take_gpus(launch)
            except BaseException:
                self._ports.release(port)
                raise
            await self._start_holding(launch, port, gpus)
            return
        self._sink(TaskEnded(launch.task_id, NOT_PLACED, None, problem, self.host))

    async def _take_gpus(self, launch: Launch) -> list[str]:
        gpus: list[str] = []
        if launch.task.gpus:
            allocator = self._gpu_allocator()
            # A relaunch can come before the attempt it replaces has exited
            # and given its GPUs back; check() made sure they will suffice.
            deadline = time.monotonic() + GPU_RELEASE_WAIT
            while allocator.free < launch.task.gpus:
                self._gpus_released.clear()
                left = deadline - time.monotonic()
                try:
                    await asyncio.wait_for(self._gpus_released.wait(), max(left, 0.0))
                except asyncio.TimeoutError:
                    raise ResourceError(
                        f"task {launch.task.name}: {launch.task.gpus} GPUs asked, "
                        f"{allocator.free} free; an earlier attempt still holds the rest"
                    ) from None
            gpus = allocator.allocate(launch.task.gpus)
        return gpus

    async def _start_holding(self, launch: Launch, port: int, gpus: list[str]) -> None:
        """Start the agent with the port and GPUs taken for it, giving them
        back should it not start."""
        try:
            await self._start_agent(launch, port, gpus)
        except BaseException:
            self._ports.release(port)
            if self._gpus is not None:
                self._gpus.release(gpus)
            raise

    async def _start_agent(self, launch: Launch, port: int, gpus: list[str]) -> None:
        assert self._sink is not None
        env = dict(os.environ)
        env.update(launch.env)
        # Each task sees only its own GPUs, and a task that asked for none sees
        # none, whether or not this machine has any (the original let every
        # task see, and grab memory on, all of them).
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        env.update(
            {
                protocol.ENV_HOST: self.host,
                protocol.ENV_PORT: str(port),
                protocol.ENV_PORT_COUNT: str(launch.task.ports),
                protocol.ENV_PARENT_PID: str(os.getpid()),
                protocol.ENV_LOG_FILE: str(self.task_log(launch.task_id)),
                protocol.ENV_LOG_MAX: str(self.log_max),
                # tfrun's environment: the task keeps what describes this
                # host; the rest comes as --export says (tfmesos.common.exported).
                protocol.ENV_BASE: exported.HERE,
            }
        )
        log = self.task_log(launch.task_id)
        try:
            # Made here, so that a log that cannot be (no inode or block left
            # for it, a quota) is said as a full disk is, and costs the task
            # nothing: its output goes to tfrun alone.
            os.close(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        except OSError as exc:
            logger.warning(
                "task %s on %s %s", launch.task.name, self.host, describe_failure(str(log), exc)
            )
            self._lost_logs.append(launch.task.name)
            log = Path(os.devnull)
            env[protocol.ENV_LOG_FILE] = os.devnull
            env[protocol.ENV_LOG_MAX] = "0"
        running = await self._spawn(launch.task_id, env, log)
        self._procs[launch.task_id] = running
        self._sink(TaskPlaced(launch.task_id, self.host))
        waiter = asyncio.create_task(self._wait(launch.task_id, running, port, gpus))
        self._waiters.add(waiter)
        waiter.add_done_callback(self._waiters.discard)

    async def _spawn(self, task_id: str, env: dict[str, str], log: Path) -> AgentProcess:
        # The agent starts where its command is to run. Beside a Mesos or
        # Slurm job (the chief) that directory was not checked here: one this
        # machine lacks is the agent's to say, as on any host without it,
        # and it runs the command where tfrun runs.
        cwd = self.spec.cwd if self.spec.cwd and os.path.isdir(self.spec.cwd) else None
        if self._fork_server is not None and self._fork_server.alive:
            try:
                return await self._fork_server.spawn(task_id, env, cwd, log)
            except ForkServerGone as exc:
                logger.warning("%s; agents now start as new interpreters", exc)
        # The secret goes down a pipe the agent inherits, reads and closes
        # before it runs anything: in its environment, its commands could
        # read it in /proc/PID/environ (the environment a process started
        # with, whatever it removes since). A forked agent gets it through
        # the fork server's pipe, and its initial environment is the server's.
        env = dict(env)
        secret = env.pop(protocol.ENV_SECRET, None)
        pass_fds: tuple[int, ...] = ()
        if secret is not None:
            read_end, write_end = os.pipe()
            try:
                os.write(write_end, secret.encode())  # 64 bytes: far below a pipe's buffer
            finally:
                os.close(write_end)
            env[protocol.ENV_SECRET_FD] = str(read_end)
            pass_fds = (read_end,)
        try:
            with open(log, "ab", opener=_private) as log_file:
                proc = subprocess.Popen(
                    self.agent_command,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=cwd,
                    pass_fds=pass_fds,
                    # A process group of its own, so that a signal for the task
                    # reaches only it and Ctrl-C at the terminal reaches only the
                    # launcher. The agent's command leads a session of its own
                    # (tfmesos.agent.supervisor): its CPU share under autogroup.
                    **OWN_PROCESS_GROUP,
                )
        finally:
            for fd in pass_fds:
                os.close(fd)
        exited = asyncio.ensure_future(exit_status(proc))
        return AgentProcess(proc.pid, exited)

    async def _wait(self, task_id: str, running: AgentProcess, port: int, gpus: list[str]) -> None:
        code = await asyncio.shield(running.exited)
        # A command forked but not yet in a group of its own is still in
        # the agent's.
        signal_group(running.pid, signal.SIGKILL)
        if code < 0:
            # Killed outright: it could not end what its commands started.
            await asyncio.to_thread(_end_task_processes, task_id)
        self._ports.release(port)
        if self._gpus is not None:
            self._gpus.release(gpus)
            self._gpus_released.set()
        self._procs.pop(task_id, None)
        self._agent_ended.set()
        if code < 0:
            message = f"killed by {signal.Signals(-code).name}"
            code = 128 - code
        else:
            message = f"exited with status {code}"
        assert self._sink is not None
        self._sink(TaskEnded(task_id, "exited", code, message, self.host, self._log_tail(task_id)))

    def _log_tail(self, task_id: str, size: int = 2048) -> tuple[str, ...]:
        data = b""
        path = self.task_log(task_id)
        # The log, after the end of its rotated part if it was just rotated.
        for part in (path.with_name(path.name + ".1"), path):
            try:
                with open(part, "rb") as log:
                    log.seek(max(0, log.seek(0, os.SEEK_END) - size))
                    data = (data + log.read())[-size:]
            except OSError:
                continue
        return tuple(data.decode("utf-8", "replace").splitlines()[-10:])

    async def kill(self, task_id: str) -> None:
        direct = self._direct.get(task_id)
        if direct is not None:
            await _stop_direct(direct)
        running = self._procs.get(task_id)
        if running is not None:
            await _terminate(running)

    async def close(self) -> None:
        await asyncio.gather(
            *(_terminate(r) for r in list(self._procs.values())),
            *(_stop_direct(t) for t in list(self._direct.values())),
        )
        if self._sweeper is not None:
            await end_strays()  # what hid from its task's group and mark
        for waiter in list(self._waiters):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiter), 1.0)
        if self._sweeper is not None:
            await self._sweeper.close()
        if self._fork_server is not None:
            await self._fork_server.close()
        if self._own_run:
            rundirs.release(self.log_dir)


async def _terminate(running: AgentProcess) -> None:
    """SIGTERM the agent's group, then SIGKILL it if it has not gone in time."""
    pgid = running.pid
    signal_group(pgid, signal.SIGTERM)
    try:
        await asyncio.wait_for(asyncio.shield(running.exited), KILL_GRACE)
    except asyncio.TimeoutError:
        signal_group(pgid, signal.SIGKILL)
        # Bounded: a fork server that stopped answering must not hang teardown.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(running.exited), KILL_GRACE)


async def _stop_direct(task: DirectTask) -> None:
    """Stop a task the launcher runs: as an agent stops its command."""
    task.stop()
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(task.ended), KILL_GRACE)


def _end_task_processes(task_id: str) -> None:
    """Kill every process that carries ``task_id`` in its environment (the
    agent hands it to its commands, and they to theirs), until none is left:
    what the commands of an agent that died outright started, in whatever
    process group or session. One that cleared its environment escapes this;
    the fork server, their subreaper, still gets it."""

    kill_carriers(protocol.ENV_TASK_ID, task_id, END_ROUNDS)


def _private(path: str, flags: int) -> int:
    """Opens a task's log as its user's alone (0600), as every log of a job."""
    return os.open(path, flags, 0o600)
