"""Running tasks for real: the agent, the command executor and the default executor.

Models the command executor (``src/launcher/executor.cpp``: TASK_STARTING,
TASK_RUNNING, "Command exited with status N", SIGTERM then SIGKILL after the
kill grace period), the default executor of a task group (one task failing or
being killed takes the group down, ``docs/app-framework-development-guide.md``),
the agent's sandbox and ``MESOS_*`` environment (mesos.proto ``CommandInfo``,
``Environment``; ``src/slave/slave.cpp``), the posix launcher's ``os::killtree``
(a task's process group and session die with it), the fetcher
(``src/launcher/fetcher.cpp``) and the KILL and SHUTDOWN calls
(``docs/scheduler-http-api.md``; scheduler.proto ``Call.Kill``; ``Master::kill``).
A reaper process kills every task still alive if the master's process dies
(``reaper.py``); process groups and containers are ``groups.py``'s, the
environment ``environment.py``'s, the fetcher ``fetcher.py``'s and the
memory isolator's measures ``memory.py``'s.
With ``cgroups/mem`` among the agent's isolators, a command task whose process
tree's RSS exceeds its ``mem`` and the executor's 32 MB is killed and reported
as the cgroups memory isolator reports it (:func:`memory_limitation`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import sys
from collections.abc import Callable

from tfmesos.mesos.states import EXECUTOR_MEM
from tfmesos.testing.master.containerizer import (
    LAUNCH_SOURCE,
    ContainerLaunchError,
    Credentials,
    create_sandbox,
    filesystem_isolator,
    task_user,
    volume_mounts,
)
from tfmesos.testing.master.environment import (
    command_environment,
    executor_environment,
    task_environment,
)
from tfmesos.testing.master.fetcher import fetch_uris
from tfmesos.testing.master.groups import REMOVE, ProcessGroups
from tfmesos.testing.master.images import ContainerPlan, plan_container, task_image
from tfmesos.testing.master.memory import MB, MEMORY_POLL, memory_enforced, tree_rss

# Re-exported: tests and the master import them from here, as before the split.
from tfmesos.testing.master.memory import memory_limitation as memory_limitation
from tfmesos.testing.master.memory import stout_bytes as stout_bytes
from tfmesos.testing.master.reaper import Reaper as Reaper
from tfmesos.testing.master.resources import MILLI
from tfmesos.testing.master.schema import JSON, duration_seconds
from tfmesos.testing.master.state import Framework, MasterState, Task
from tfmesos.testing.master.updates import StatusUpdates

logger = logging.getLogger(__name__)


def _is_signal(number: int) -> bool:
    try:
        signal.Signals(number)
    except ValueError:
        return False
    return True


def _describe_exit(returncode: int) -> str:
    """``WSTRINGIFY``: "exited with status N" or "terminated with signal Name"."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    signum = -returncode
    name = signal.strsignal(signum) or f"signal {signum}"
    return f"terminated with signal {name}"


@dataclasses.dataclass
class _Launch:
    """What the agent has made ready for a task's command: its sandbox's owner
    and either an image's container or the volumes of a task without one."""

    command: JSON
    credentials: Credentials | None
    plan: ContainerPlan | None = None
    mounts: list[tuple[str, str, bool]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _CommandLine:
    """What the task's process executes: ``program`` with ``argv``, in ``env``,
    with ``switch`` (the user and groups to become, empty: none)."""

    program: str
    argv: list[str]
    env: dict[str, str]
    switch: dict[str, object] = dataclasses.field(default_factory=dict)


class TaskRunner(ProcessGroups):
    """Starts, watches, signals and reports on every task's process group."""

    def __init__(self, state: MasterState, updates: StatusUpdates) -> None:
        super().__init__(state)
        self.updates = updates
        self.started_hooks: list[Callable[[Task], None]] = []
        """Called once a task's process has started (fault injection)."""

    async def _plan_container(
        self,
        task: Task,
        containerizer: str,
        image: str,
        command: JSON,
        credentials: Credentials | None,
    ) -> ContainerPlan:
        """The ``podman run`` of an image task. Raises ContainerLaunchError."""
        if containerizer == "MESOS" and (
            filesystem_isolator(self.state.config) != "filesystem/linux"
        ):
            # PosixFilesystemIsolatorProcess::prepare
            raise ContainerLaunchError("Container root filesystems not supported")
        podman = self.podman()
        if podman is None:
            raise ContainerLaunchError(
                f"cannot provision image '{image}': the tfmesos test master runs image "
                "tasks in containers with podman (and runc), and podman is not installed "
                "here (Debian: apt-get install podman runc); it never runs them on the host"
            )
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            None,
            lambda: plan_container(
                podman,
                containerizer=containerizer,
                image=image,
                info=task.info,
                sandbox=task.sandbox,
                container_id=task.container_id,
                executor_env=executor_environment(self.state, task),
                command_env=command_environment(command),
                role=task.role,
                credentials=credentials,
                label=str(self.state.work_dir_path),
            ),
        )

    async def run_task(self, task: Task) -> None:
        """The agent and the command executor: start, watch, report, clean up."""
        try:
            await self._run(task)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("task %s: the test master failed to run it", task.task_id)
            if not task.terminal:
                self.updates.agent_update(
                    task, "TASK_FAILED", message=f"Test master error: {exc!r}"
                )
        finally:
            if task.pid is not None:
                self.sweep(task.pid)

    async def _run(self, task: Task) -> None:
        """The agent's steps for one task, in order; each step that ends the
        task's launch (an update sent, or the task finalized meanwhile) answers
        None or False and the rest are skipped."""
        await asyncio.sleep(0)
        if self._refused_at_delivery(task):
            return
        launch = await self._prepare_container(task)
        if launch is None or not await self._fetch(task, launch):
            return
        self.updates.agent_update(task, "TASK_STARTING")
        command_line = self._command_line(task, launch)
        if command_line is None:
            return
        process = await self._spawn(task, launch, command_line)
        if process is None or not await self._started(task, process, launch.plan):
            return
        returncode = await self._wait(task, process, launch.plan)
        if returncode is not None:
            self._report_exit(task, returncode, launch.plan)

    def _launch_failed(self, task: Task, state: str, reason: str, message: str) -> None:
        """The agent's own update on a task whose executor never ran."""
        self.updates.agent_update(
            task, state, source="SOURCE_AGENT", reason=reason, message=message, container=False
        )

    def _refused_at_delivery(self, task: Task) -> bool:
        """Whether the agent ends the task before it makes a container: finalized,
        killed before delivery, an injected launch failure, a custom executor."""
        if task.finalized:
            return True
        if task.kill_requested:
            self._launch_failed(
                task,
                "TASK_KILLED",
                "REASON_TASK_KILLED_DURING_LAUNCH",
                "Task killed before delivery to the executor",
            )
            return True
        if task.inject_failure is not None:
            self._launch_failed(
                task,
                "TASK_FAILED",
                "REASON_CONTAINER_LAUNCH_FAILED",
                f"Failed to launch container: {task.inject_failure}",
            )
            return True
        if "executor" in task.info:
            self._launch_failed(
                task,
                "TASK_FAILED",
                "REASON_CONTAINER_LAUNCH_FAILED",
                "Failed to launch container: custom executors are not supported "
                "by the tfmesos test master",
            )
            return True
        return False

    async def _prepare_container(self, task: Task) -> _Launch | None:
        """The sandbox (owned by the task's user) and the container: an image's
        ``podman run``, or the host-path volumes of a task without an image."""
        command: JSON = task.info.get("command", {})
        framework = self.state.frameworks_by_id.get(task.framework_id)
        user = task_user(framework, task.info) if self.state.config.switch_user else None
        try:
            credentials = create_sandbox(task.sandbox, user)
        except ContainerLaunchError as exc:
            # Slave::__run: addExecutor failed, the task is dropped (LOST for
            # frameworks that are not partition-aware), no executor is launched.
            aware = framework is not None and framework.partition_aware
            self._launch_failed(
                task,
                "TASK_DROPPED" if aware else "TASK_LOST",
                "REASON_EXECUTOR_TERMINATED",
                str(exc),
            )
            return None
        launch = _Launch(command, credentials)
        try:
            image = task_image(task.info)
            if image is None:
                isolator = filesystem_isolator(self.state.config)
                launch.mounts = volume_mounts(task.info, task.sandbox, isolator)
            else:
                launch.plan = await self._plan_container(task, *image, command, credentials)
        except ContainerLaunchError as exc:
            self._launch_failed(
                task,
                "TASK_FAILED",
                "REASON_CONTAINER_LAUNCH_FAILED",
                f"Failed to launch container: {exc}",
            )
            return None
        return launch

    async def _fetch(self, task: Task, launch: _Launch) -> bool:
        """The fetcher: the command's URIs into the sandbox; False if it failed
        (or the task was finalized meanwhile)."""
        uris = launch.command.get("uris")
        if not uris:
            return True
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, fetch_uris, uris, task.sandbox)
        except (OSError, ValueError) as exc:
            with open(task.sandbox / "stderr", "ab") as err:
                err.write(f"Failed to fetch: {exc}\n".encode())
            self._launch_failed(
                task,
                "TASK_FAILED",
                "REASON_CONTAINER_LAUNCH_FAILED",
                "Failed to launch container: Failed to fetch all URIs for "
                f"container '{task.container_id}': exited with status 1",
            )
            return False
        if task.finalized:
            return False
        credentials = launch.credentials
        if credentials is not None:
            # The fetcher runs as the task's user (src/launcher/fetcher.cpp).
            for path in [task.sandbox, *task.sandbox.rglob("*")]:
                with contextlib.suppress(OSError):
                    os.lchown(path, credentials.uid, credentials.gid)
        return True

    def _command_line(self, task: Task, launch: _Launch) -> _CommandLine | None:
        """What the command executor executes: the shell or the program, inside
        the container runtime, the launch helper (mounts) or a user switch."""
        command, credentials = launch.command, launch.credentials
        value = command.get("value")
        if value is None:
            self.updates.agent_update(
                task,
                "TASK_FAILED",
                message="Failed to launch task subprocess: the command has no 'value'",
            )
            return None
        if command.get("shell", True):
            program = "/bin/sh"
            argv = ["sh", "-c", value]
        else:
            program = value
            argv = list(command.get("arguments", [])) or [value]
        env = task_environment(self.state, task, command)
        if launch.plan is not None:
            # The container runtime switches the user and sets the environment.
            return _CommandLine(launch.plan.argv[0], launch.plan.argv, launch.plan.env)
        if launch.mounts:
            # A mount namespace of its own: the launch helper mounts, switches
            # user and execs the command (same process, same session).
            spec = {
                "mounts": launch.mounts,
                "program": shutil.which(program, path=env.get("PATH")) or program,
                "argv": argv,
                "uid": credentials.uid if credentials else None,
                "gid": credentials.gid if credentials else None,
                "groups": credentials.groups if credentials else [],
            }
            helper = [sys.executable, "-I", "-c", LAUNCH_SOURCE, json.dumps(spec)]
            return _CommandLine(sys.executable, helper, env)
        if credentials is not None:
            switch: dict[str, object] = {
                "user": credentials.uid,
                "group": credentials.gid,
                "extra_groups": credentials.groups,
            }
            return _CommandLine(program, argv, env, switch)
        return _CommandLine(program, argv, env)

    async def _spawn(
        self, task: Task, launch: _Launch, line: _CommandLine
    ) -> asyncio.subprocess.Process | None:
        """Start the task's process in a session of its own, its output in the
        sandbox's ``stdout`` and ``stderr``."""
        credentials = launch.credentials
        try:
            with (
                open(task.sandbox / "stdout", "wb") as out,
                open(task.sandbox / "stderr", "wb") as err,
            ):
                if credentials is not None:
                    for stream in (out, err):
                        # (The executor writes these: a container's output is piped.)
                        os.fchown(stream.fileno(), credentials.uid, credentials.gid)
                return await asyncio.create_subprocess_exec(
                    line.argv[0],
                    *line.argv[1:],
                    executable=line.program,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    cwd=str(task.sandbox),
                    env=line.env,
                    start_new_session=True,
                    **line.switch,  # type: ignore[arg-type]
                )
        except OSError as exc:
            self.updates.agent_update(
                task, "TASK_FAILED", message=f"Failed to launch task subprocess: {exc}"
            )
            return None

    async def _started(
        self, task: Task, process: asyncio.subprocess.Process, plan: ContainerPlan | None
    ) -> bool:
        """Track the new process group (and container) and send TASK_RUNNING;
        False if the task was finalized while it started (its group killed)."""
        task.process = process
        task.pid = process.pid
        self.live_groups.add(process.pid)
        if self.reaper is not None:
            self.reaper.track(process.pid)
        if plan is not None:
            self.containers[process.pid] = plan.name
            podman = self.podman()
            if self.reaper is not None and podman is not None:
                self.reaper.remove_container(plan.name, podman.command(*REMOVE, plan.name))
        if task.finalized:
            self.signal_group(process.pid, signal.SIGKILL)
            await process.wait()
            return False
        for hook in list(self.started_hooks):
            hook(task)
        self.updates.agent_update(task, "TASK_RUNNING")
        if task.kill_requested:
            self._signal_kill(task)
        return True

    async def _wait(
        self, task: Task, process: asyncio.subprocess.Process, plan: ContainerPlan | None
    ) -> int | None:
        """Wait for the process (watching its memory under ``cgroups/mem``) and
        sweep its group; its exit status, or None if the task was finalized."""
        watch: asyncio.Task[None] | None = None
        milli = task.resources.scalars.get("mem")
        mem = milli / MILLI if milli is not None else None
        if (
            memory_enforced(self.state.config.isolation)
            and plan is None
            and task.group_executor is None
            and mem is not None
        ):
            limit = int((mem + EXECUTOR_MEM) * MB)
            watch = asyncio.get_running_loop().create_task(self._watch_memory(task, limit))
        try:
            returncode = await process.wait()
        finally:
            if watch is not None:
                watch.cancel()
        task.returncode = returncode
        if task.kill_timer is not None:
            task.kill_timer.cancel()
            task.kill_timer = None
        self.sweep(process.pid)
        return None if task.finalized else returncode

    def _report_exit(self, task: Task, returncode: int, plan: ContainerPlan | None) -> None:
        """The terminal update of a task whose process ended, as the command
        executor, the Docker executor or the containerizer words it; a task of
        a group that did not finish takes the group down (default executor)."""
        if task.memory_limited is not None:
            # The containerizer destroyed the container for its limitation
            # (MesosContainerizerProcess::limited): the agent says so.
            message, limitation = task.memory_limited
            self.updates.agent_update(
                task,
                "TASK_FAILED",
                source="SOURCE_AGENT",
                reason="REASON_CONTAINER_LIMITATION_MEMORY",
                message=message,
                limitation=limitation,
                container=False,
            )
            return
        if plan is not None and plan.containerizer == "DOCKER":
            # The Docker executor: `docker wait`'s status, "Container exited with status N".
            message = f"Container {_describe_exit(returncode)}"
        else:
            if plan is not None and returncode > 128 and _is_signal(returncode - 128):
                # podman reports a command killed by signal N as 128 + N.
                returncode = task.returncode = -(returncode - 128)
            message = f"Command {_describe_exit(returncode)}"
        if task.kill_requested:
            state = "TASK_KILLED"
        elif returncode == 0:
            state = "TASK_FINISHED"
        else:
            state = "TASK_FAILED"
        self.updates.agent_update(task, state, message=message)
        if state != "TASK_FINISHED" and task.group_executor is not None:
            # The default executor kills the rest of the group when one task fails.
            for sibling in self._group_siblings(task):
                self._begin_kill(sibling, 0.0)

    async def _watch_memory(self, task: Task, limit: int) -> None:
        """``cgroups/mem``: once the task's processes hold more than ``limit``
        bytes, kill them all (the kernel's OOM killer in the cgroup, then the
        containerizer destroying the container) and note the limitation."""
        while task.returncode is None and task.pid is not None:
            await asyncio.sleep(MEMORY_POLL)
            if task.returncode is not None or task.pid in self.frozen:
                continue
            used = tree_rss(task.pid)
            if used > limit:
                logger.info(
                    "task %s: memory limit exceeded (%d > %d bytes)", task.task_id, used, limit
                )
                task.memory_limited = memory_limitation(limit, used)
                self.signal_group(task.pid, signal.SIGKILL)
                return

    def _group_siblings(self, task: Task) -> list[Task]:
        framework = self.state.frameworks_by_id.get(task.framework_id)
        if framework is None or task.group_executor is None:
            return []
        return [
            t
            for t in framework.tasks.values()
            if t is not task
            and t.group_executor is not None
            and t.executor_id == task.executor_id
            and t.agent_id == task.agent_id
            and not t.terminal
        ]

    def finalize(self, task: Task) -> None:
        """Stop reporting on a task: no more updates, no retries."""
        task.finalized = True
        task.pending.clear()
        if task.retry_handle is not None:
            task.retry_handle.cancel()
            task.retry_handle = None

    def shutdown_task(self, task: Task, grace: float) -> None:
        """Framework removed: SIGTERM the task's group, SIGKILL after ``grace``."""
        self.finalize(task)
        self.updates.release(task)
        if task.process is not None and task.returncode is None and task.pid is not None:
            self.signal_group(task.pid, signal.SIGTERM)
            if self.state.loop is not None:
                if task.kill_timer is not None:
                    task.kill_timer.cancel()
                task.kill_timer = self.state.loop.call_later(
                    max(grace, 0.0), self._kill_group_if_alive, task
                )

    def _kill_group_if_alive(self, task: Task) -> None:
        self.signal_group(task.pid, signal.SIGKILL)

    def _begin_kill(self, task: Task, grace: float) -> None:
        """The command executor's kill: TASK_KILLING if wanted, SIGTERM, SIGKILL after grace."""
        if task.terminal or task.kill_requested:
            return
        task.kill_requested = True
        task.kill_grace = grace
        if task.process is not None and task.returncode is None:
            self._signal_kill(task)

    def _signal_kill(self, task: Task) -> None:
        framework = self.state.frameworks_by_id.get(task.framework_id)
        if framework is not None and "TASK_KILLING_STATE" in framework.capabilities:
            self.updates.agent_update(task, "TASK_KILLING")
        if task.pid is None:
            return
        self.signal_group(task.pid, signal.SIGTERM)
        if self.state.loop is not None:
            task.kill_timer = self.state.loop.call_later(
                max(task.kill_grace, 0.0), self._kill_group_if_alive, task
            )

    def kill(self, framework: Framework, kill: JSON) -> None:
        task_id = kill["task_id"]["value"]
        task = framework.tasks.get(task_id)
        if task is None:
            # Unknown to the master: Mesos answers with an explicit reconciliation.
            self.updates.reconcile(
                framework,
                [
                    {
                        "task_id": kill["task_id"],
                        **({"agent_id": kill["agent_id"]} if "agent_id" in kill else {}),
                    }
                ],
            )
            return
        if "agent_id" in kill and kill["agent_id"]["value"] != task.agent_id:
            return
        agent = self.state.agents_by_id.get(task.agent_id)
        if agent is None or agent.state != "active":
            return
        grace = duration_seconds(kill.get("kill_policy", {}).get("grace_period"))
        grace = task.kill_grace if grace is None else grace
        self._begin_kill(task, grace)
        for sibling in self._group_siblings(task):
            self._begin_kill(sibling, grace)

    def shutdown_executor(self, framework: Framework, shutdown: JSON) -> None:
        executor_id = shutdown["executor_id"]["value"]
        agent_id = shutdown["agent_id"]["value"]
        for task in list(framework.tasks.values()):
            if task.executor_id == executor_id and task.agent_id == agent_id:
                self._begin_kill(task, 0.0)
