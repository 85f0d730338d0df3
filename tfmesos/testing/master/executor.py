"""Running tasks for real: the agent, the command executor and the default
executor of a task group, as Mesos's ``src/launcher/executor.cpp`` and
``src/slave/slave.cpp`` behave (states, messages, kill grace, sandbox and
``MESOS_*`` environment, a task's group and session killed with it).

The agents have one plain configuration: tasks run as this user, memory is not
enforced, and what real Mesos covers in its own tests (images, the user switch,
volumes, the fetcher) is refused in words that say so, rather than run other
than as asked. docs/test-master.md has the sources.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
from collections.abc import Callable

from tfmesos.testing.master.environment import task_environment
from tfmesos.testing.master.groups import ProcessGroups
from tfmesos.testing.master.schema import JSON, duration_seconds
from tfmesos.testing.master.state import Framework, MasterState, Task
from tfmesos.testing.master.updates import StatusUpdates

logger = logging.getLogger(__name__)


def _describe_exit(returncode: int) -> str:
    """``WSTRINGIFY``: "exited with status N" or "terminated with signal Name"."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    signum = -returncode
    name = signal.strsignal(signum) or f"signal {signum}"
    return f"terminated with signal {name}"


NO_IMAGES = (
    "the tfmesos test master runs no container images: its agents run tasks on "
    "this host only; try image {image!r} on real Mesos (scripts/start-mesos)"
)
"""Why an image task fails to launch on the double (``docs/test-master.md``)."""
NO_URIS = (
    "the tfmesos test master fetches no URIs: its agents have no fetcher; "
    "try the task on real Mesos (scripts/start-mesos)"
)
"""Why a task with ``command.uris`` fails to launch on the double."""


def task_image(info: JSON) -> str | None:
    """The Docker image a task's container names, or None."""
    container: JSON = info.get("container") or {}
    if container.get("type") == "DOCKER":
        return str(container.get("docker", {}).get("image", ""))
    image: JSON = container.get("mesos", {}).get("image") or {}
    if image:
        return str(image.get("docker", {}).get("name", image.get("type", "")))
    return None


def container_refusal(info: JSON) -> str | None:
    """Why the agent would not launch this container (an image, URIs, volumes), or
    None."""
    image = task_image(info)
    if image is not None:
        return NO_IMAGES.format(image=image)
    if info.get("command", {}).get("uris"):
        return NO_URIS
    if (info.get("container") or {}).get("volumes"):
        return "Volumes in ContainerInfo is not supported"
    return None


@dataclasses.dataclass
class _CommandLine:
    """What the task's process executes: ``program`` with ``argv``, in ``env``."""

    program: str
    argv: list[str]
    env: dict[str, str]


class TaskRunner(ProcessGroups):
    """Starts, watches, signals and reports on every task's process group."""

    def __init__(self, state: MasterState, updates: StatusUpdates) -> None:
        super().__init__(state)
        self.updates = updates
        self.started_hooks: list[Callable[[Task], None]] = []
        """Called once a task's process has started (fault injection)."""

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
        # Framework::addExecutor: the sandbox (mode 0750; no user switch).
        task.sandbox.mkdir(parents=True, exist_ok=True)
        task.sandbox.chmod(0o750)
        self.updates.agent_update(task, "TASK_STARTING")
        command_line = self._command_line(task)
        if command_line is None:
            return
        process = await self._spawn(task, command_line)
        if process is None or not await self._started(task, process):
            return
        returncode = await self._wait(task, process)
        if returncode is not None:
            self._report_exit(task, returncode)

    def _launch_failed(self, task: Task, state: str, reason: str, message: str) -> None:
        """The agent's own update on a task whose executor never ran."""
        self.updates.agent_update(
            task, state, source="SOURCE_AGENT", reason=reason, message=message, container=False
        )

    def _refused_at_delivery(self, task: Task) -> bool:
        """Whether the agent ends the task before it starts a process: finalized,
        killed before delivery, an injected launch failure, a custom executor,
        a container it does not launch."""
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
        refusal = task.inject_failure
        if refusal is None and "executor" in task.info:
            refusal = "custom executors are not supported by the tfmesos test master"
        if refusal is None:
            refusal = container_refusal(task.info)
        if refusal is not None:
            self._launch_failed(
                task,
                "TASK_FAILED",
                "REASON_CONTAINER_LAUNCH_FAILED",
                f"Failed to launch container: {refusal}",
            )
            return True
        return False

    def _command_line(self, task: Task) -> _CommandLine | None:
        """What the command executor executes: the shell or the program."""
        command: JSON = task.info.get("command", {})
        value = command.get("value")
        if value is None:
            self.updates.agent_update(
                task,
                "TASK_FAILED",
                message="Failed to launch task subprocess: the command has no 'value'",
            )
            return None
        env = task_environment(self.state, task, command)
        if command.get("shell", True):
            return _CommandLine("/bin/sh", ["sh", "-c", value], env)
        return _CommandLine(value, list(command.get("arguments", [])) or [value], env)

    async def _spawn(self, task: Task, line: _CommandLine) -> asyncio.subprocess.Process | None:
        """Start the task in its own session, output to the sandbox's ``stdout``
        and ``stderr``."""
        try:
            with (
                open(task.sandbox / "stdout", "wb") as out,
                open(task.sandbox / "stderr", "wb") as err,
            ):
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
                )
        except OSError as exc:
            self.updates.agent_update(
                task, "TASK_FAILED", message=f"Failed to launch task subprocess: {exc}"
            )
            return None

    async def _started(self, task: Task, process: asyncio.subprocess.Process) -> bool:
        """Track the group and send TASK_RUNNING; False if the task was finalized
        meanwhile."""
        task.process = process
        task.pid = process.pid
        self.live_groups.add(process.pid)
        if self.reaper is not None:
            self.reaper.track(process.pid)
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

    async def _wait(self, task: Task, process: asyncio.subprocess.Process) -> int | None:
        """Wait for the process and sweep its group; its status, or None if
        finalized."""
        returncode = await process.wait()
        task.returncode = returncode
        if task.kill_timer is not None:
            task.kill_timer.cancel()
            task.kill_timer = None
        self.sweep(process.pid)
        return None if task.finalized else returncode

    def _report_exit(self, task: Task, returncode: int) -> None:
        """The terminal update of a task whose process ended, as the command
        executor words it; a task of a group that did not finish takes the
        group down (default executor)."""
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
