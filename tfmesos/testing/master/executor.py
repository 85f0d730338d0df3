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
A reaper process kills every task still alive if the master's process dies.
With ``cgroups/mem`` among the agent's isolators, a command task whose process
tree's RSS exceeds its ``mem`` and the executor's 32 MB is killed and reported
as the cgroups memory isolator reports it (:func:`memory_limitation`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tfmesos import procfs
from tfmesos.mesos.states import EXECUTOR_MEM
from tfmesos.proctree import signal_group, signal_pid
from tfmesos.testing.master.containerizer import (
    LAUNCH_SOURCE,
    ContainerLaunchError,
    Credentials,
    create_sandbox,
    filesystem_isolator,
    task_user,
    volume_mounts,
)
from tfmesos.testing.master.images import ContainerPlan, Podman, plan_container, task_image
from tfmesos.testing.master.resources import MILLI
from tfmesos.testing.master.schema import JSON, duration_seconds
from tfmesos.testing.master.state import Framework, MasterState, Task, resolve
from tfmesos.testing.master.updates import StatusUpdates

logger = logging.getLogger(__name__)

_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_REAPER_SOURCE = """
import json, os, shutil, signal, subprocess, sys
groups = set()
directories = []
containers = {}
for line in sys.stdin:
    line = line.rstrip("\\n")
    if line[:1] == "+":
        groups.add(int(line[1:]))
    elif line[:1] == "-":
        groups.discard(int(line[1:]))
    elif line[:1] == "d":
        directories.append(line[1:])
    elif line[:1] == "c":
        name, argv = json.loads(line[1:])
        containers[name] = argv
    elif line[:1] == "x":
        containers.pop(line[1:], None)
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
for argv in containers.values():
    try:
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.SubprocessError):
        pass
for directory in directories:
    shutil.rmtree(directory, ignore_errors=True)
"""


class Reaper:
    """A helper process told every live task process group and container. When its
    stdin reaches EOF (the master stopped, or its process died however it died) it
    SIGKILLs the groups still listed and removes the containers, so no task
    outlives a crashed test run."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-c", _REAPER_SOURCE],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )

    def _send(self, line: str) -> None:
        process = self._process
        if process is None or process.stdin is None:
            return
        try:
            process.stdin.write(line.encode("ascii") + b"\n")
            process.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            self._process = None

    @property
    def pid(self) -> int | None:
        """The reaper's own process ID (None once it is gone)."""
        return self._process.pid if self._process is not None else None

    def track(self, pgid: int) -> None:
        self._send(f"+{pgid}")

    def untrack(self, pgid: int) -> None:
        self._send(f"-{pgid}")

    def remove_on_exit(self, directory: Path) -> None:
        if "\n" not in str(directory):
            self._send(f"d{directory}")

    def remove_container(self, name: str, argv: list[str]) -> None:
        """Run ``argv`` (``podman rm -f NAME``) on exit unless :meth:`forget_container`."""
        self._send("c" + json.dumps([name, argv]))

    def forget_container(self, name: str) -> None:
        self._send(f"x{name}")

    async def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError, ValueError):
            if process.stdin is not None:
                process.stdin.close()
        deadline = time.monotonic() + 5
        while process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if process.poll() is None:
            process.kill()
            process.wait()


def killpg(pgid: int, sig: int) -> bool:
    """Signal a task's processes; False if its process group no longer exists.

    Every task starts in a session of its own (its pgid is also its session
    id). Like Mesos, which kills a task's whole process tree (the posix
    launcher's ``os::killtree`` follows groups and sessions; cgroups take the
    container), the signal also reaches processes the task moved into other
    process groups of its session.
    """
    for pid in _session_members(pgid):
        signal_pid(pid, sig)
    return signal_group(pgid, sig)


def _session_members(sid: int) -> list[int]:
    """Processes in session ``sid`` (Linux /proc; elsewhere none are found)."""
    try:
        return [p.pid for p in procfs.processes() if p.session == sid]
    except OSError:
        return []


_REMOVE = ("rm", "--force", "--time", "0", "--ignore")
"""``podman rm`` of a container that is to go now, running or not."""


def _is_signal(number: int) -> bool:
    try:
        signal.Signals(number)
    except ValueError:
        return False
    return True


def _command_environment(command: JSON) -> dict[str, str]:
    """``CommandInfo.environment``'s VALUE variables."""
    env = {}
    for variable in command.get("environment", {}).get("variables", []):
        if variable.get("type", "VALUE") == "VALUE" and "value" in variable:
            env[variable["name"]] = variable["value"]
    return env


MEMORY_POLL = 0.5
"""Seconds between two looks at the RSS of a task's processes under ``cgroups/mem``
(a few /proc reads per process of the task)."""

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_MB = 1 << 20


def memory_enforced(isolation: str | None) -> bool:
    """Whether the agent's ``--isolation`` has the isolator that ends a task
    over its memory (``cgroups/mem``; ``posix/mem``, the default, only measures)."""
    return isolation is not None and "cgroups/mem" in {n.strip() for n in isolation.split(",")}


def tree_rss(pid: int) -> int:
    """Bytes resident in ``pid`` and the processes below it (``/proc/PID/statm``)."""
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [p.pid for p in procfs.descendants(pid)]
    total = 0
    for member in pids:
        try:
            with open(f"/proc/{member}/statm", "rb") as statm:
                total += int(statm.read().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return total


def stout_bytes(count: int) -> str:
    """``Bytes`` as stout prints it: the largest unit that loses nothing (``288MB``)."""
    if count == 0:
        return "0B"
    for unit, name in ((1 << 40, "TB"), (1 << 30, "GB"), (_MB, "MB"), (1 << 10, "KB")):
        if count % unit == 0:
            return f"{count // unit}{name}"
    return f"{count}B"


def memory_limitation(limit: int, used: int) -> tuple[str, JSON]:
    """The message and ``limitation`` of the update that ends a container over
    its ``limit`` bytes, its processes holding ``used``:
    ``MemorySubsystemProcess::oomWaited`` and
    ``Slave::sendExecutorTerminatedStatusUpdate``. "Requested" is the cgroup's
    limit; "Maximum Used" is the cgroup's peak, which the limit caps (the
    kernel stops the allocation there), so a real agent reports the limit
    itself, and so does this; the limited resource is that peak, in MB. Of
    the cgroup's ``memory.stat`` the double knows two lines, the second what
    it measured."""
    peak = min(used, limit)
    message = (
        f"Memory limit exceeded: Requested: {stout_bytes(limit)} Maximum Used: "
        f"{stout_bytes(peak)}\n\nMEMORY STATISTICS: \n"
        f"hierarchical_memory_limit {limit}\ntotal_rss {used}\n\n"
    )
    resource = {"name": "mem", "type": "SCALAR", "scalar": {"value": peak / _MB}}
    return message, {"resources": [resource]}


def _describe_exit(returncode: int) -> str:
    """``WSTRINGIFY``: "exited with status N" or "terminated with signal Name"."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    signum = -returncode
    name = signal.strsignal(signum) or f"signal {signum}"
    return f"terminated with signal {name}"


_ARCHIVES = (".tar", ".tgz", ".tar.gz", ".tbz2", ".tar.bz2", ".txz", ".tar.xz", ".zip")


def fetch_uris(uris: Sequence[JSON], sandbox: Path) -> None:
    """The Mesos fetcher, for local paths, ``file://`` and ``http(s)://`` URIs.

    Each URI lands in the sandbox as ``output_file`` or its basename; then it is
    made executable (``executable``), or unpacked into the sandbox if it is an
    archive (``extract``, default true). Raises OSError or ValueError on failure.
    """
    import gzip
    import urllib.parse
    import urllib.request

    for uri in uris:
        value: str = uri["value"]
        parsed = urllib.parse.urlparse(value)
        name = uri.get("output_file") or os.path.basename(parsed.path.rstrip("/"))
        if not name:
            raise ValueError(f"cannot name the file fetched from {value!r}")
        target = sandbox / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if parsed.scheme in ("http", "https"):
            with urllib.request.urlopen(value, timeout=60) as response, open(target, "wb") as out:
                shutil.copyfileobj(response, out)
        elif parsed.scheme == "file":
            shutil.copyfile(urllib.parse.unquote(parsed.path), target)
        elif parsed.scheme:
            raise ValueError(f"unsupported URI scheme {parsed.scheme!r} in {value!r}")
        else:
            shutil.copyfile(value, target)
        if uri.get("executable", False):
            target.chmod(0o755)
        elif uri.get("extract", True):
            if name.endswith(_ARCHIVES):
                shutil.unpack_archive(str(target), str(sandbox))
            elif name.endswith(".gz"):
                with gzip.open(target, "rb") as packed, open(target.with_suffix(""), "wb") as out:
                    shutil.copyfileobj(packed, out)


class TaskRunner:
    """Starts, watches, signals and reports on every task's process group."""

    def __init__(self, state: MasterState, updates: StatusUpdates) -> None:
        self.state = state
        self.updates = updates
        self.live_groups: set[int] = set()
        """Process groups of tasks that may still have processes."""
        self.reaper: Reaper | None = None
        self.frozen: set[int] = set()
        """Process groups stopped (SIGSTOP) by a partition that cuts their tasks off."""
        self.started_hooks: list[Callable[[Task], None]] = []
        """Called once a task's process has started (fault injection)."""
        self.containers: dict[int, str] = {}
        """The container of each image task's process group (``podman run``'s)."""
        self._podman: Podman | bool | None = False
        """Found on the first image task (False: not looked for yet)."""
        self._container_calls: dict[str, asyncio.Task[None]] = {}
        """The latest podman command sent to each container (they run in order)."""

    def _task_environment(self, task: Task, command: JSON) -> dict[str, str]:
        env = self._executor_environment(task)
        env.update(_command_environment(command))
        env["MESOS_ALLOCATION_ROLE"] = task.role
        return env

    def _executor_environment(self, task: Task) -> dict[str, str]:
        """The agent's environment for the executor: its own (``inherit_env``) and
        the ``MESOS_*`` variables."""
        agent = self.state.agents_by_id[task.agent_id]
        env = dict(os.environ) if self.state.config.inherit_env else {"PATH": _DEFAULT_PATH}
        env.setdefault("PATH", _DEFAULT_PATH)
        agent_ip = resolve(agent.hostname, self.state.config.ip)
        env.update(
            {
                "MESOS_SANDBOX": str(task.sandbox),
                "MESOS_DIRECTORY": str(task.sandbox),
                "MESOS_FRAMEWORK_ID": task.framework_id,
                "MESOS_EXECUTOR_ID": task.executor_id,
                "MESOS_SLAVE_ID": task.agent_id,
                "MESOS_AGENT_ENDPOINT": f"{agent_ip}:{agent.port}",
                "MESOS_SLAVE_PID": f"slave(1)@{agent_ip}:{agent.port}",
                "MESOS_CHECKPOINT": "0",
            }
        )
        return env

    def podman(self) -> Podman | None:
        """The container runtime for image tasks, or None where podman is missing."""
        if self._podman is False:
            self._podman = Podman.find()
        return self._podman if isinstance(self._podman, Podman) else None

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
                executor_env=self._executor_environment(task),
                command_env=_command_environment(command),
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
        await asyncio.sleep(0)
        if task.finalized:
            return
        if task.kill_requested:
            self.updates.agent_update(
                task,
                "TASK_KILLED",
                source="SOURCE_AGENT",
                reason="REASON_TASK_KILLED_DURING_LAUNCH",
                message="Task killed before delivery to the executor",
                container=False,
            )
            return
        if task.inject_failure is not None:
            self.updates.agent_update(
                task,
                "TASK_FAILED",
                source="SOURCE_AGENT",
                reason="REASON_CONTAINER_LAUNCH_FAILED",
                message=f"Failed to launch container: {task.inject_failure}",
                container=False,
            )
            return
        if "executor" in task.info:
            self.updates.agent_update(
                task,
                "TASK_FAILED",
                source="SOURCE_AGENT",
                reason="REASON_CONTAINER_LAUNCH_FAILED",
                message="Failed to launch container: custom executors are not supported "
                "by the tfmesos test master",
                container=False,
            )
            return
        command: JSON = task.info.get("command", {})
        framework = self.state.frameworks_by_id.get(task.framework_id)
        user = task_user(framework, task.info) if self.state.config.switch_user else None
        try:
            credentials = create_sandbox(task.sandbox, user)
        except ContainerLaunchError as exc:
            # Slave::__run: addExecutor failed, the task is dropped (LOST for
            # frameworks that are not partition-aware), no executor is launched.
            aware = framework is not None and framework.partition_aware
            self.updates.agent_update(
                task,
                "TASK_DROPPED" if aware else "TASK_LOST",
                source="SOURCE_AGENT",
                reason="REASON_EXECUTOR_TERMINATED",
                message=str(exc),
                container=False,
            )
            return
        plan: ContainerPlan | None = None
        mounts: list[tuple[str, str, bool]] = []
        try:
            image = task_image(task.info)
            if image is None:
                isolator = filesystem_isolator(self.state.config)
                mounts = volume_mounts(task.info, task.sandbox, isolator)
            else:
                plan = await self._plan_container(task, *image, command, credentials)
        except ContainerLaunchError as exc:
            self.updates.agent_update(
                task,
                "TASK_FAILED",
                source="SOURCE_AGENT",
                reason="REASON_CONTAINER_LAUNCH_FAILED",
                message=f"Failed to launch container: {exc}",
                container=False,
            )
            return
        if command.get("uris"):
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(None, fetch_uris, command["uris"], task.sandbox)
            except (OSError, ValueError) as exc:
                with open(task.sandbox / "stderr", "ab") as err:
                    err.write(f"Failed to fetch: {exc}\n".encode())
                self.updates.agent_update(
                    task,
                    "TASK_FAILED",
                    source="SOURCE_AGENT",
                    reason="REASON_CONTAINER_LAUNCH_FAILED",
                    message="Failed to launch container: Failed to fetch all URIs for "
                    f"container '{task.container_id}': exited with status 1",
                    container=False,
                )
                return
            if task.finalized:
                return
            if credentials is not None:
                # The fetcher runs as the task's user (src/launcher/fetcher.cpp).
                for path in [task.sandbox, *task.sandbox.rglob("*")]:
                    with contextlib.suppress(OSError):
                        os.lchown(path, credentials.uid, credentials.gid)
        self.updates.agent_update(task, "TASK_STARTING")
        value = command.get("value")
        if value is None:
            self.updates.agent_update(
                task,
                "TASK_FAILED",
                message="Failed to launch task subprocess: the command has no 'value'",
            )
            return
        if command.get("shell", True):
            program = "/bin/sh"
            argv = ["sh", "-c", value]
        else:
            program = value
            argv = list(command.get("arguments", [])) or [value]
        env = self._task_environment(task, command)
        switch: dict[str, object] = {}
        if plan is not None:
            # The container runtime switches the user and sets the environment.
            program, argv, env = plan.argv[0], plan.argv, plan.env
        elif mounts:
            # A mount namespace of its own: the launch helper mounts, switches
            # user and execs the command (same process, same session).
            spec = {
                "mounts": mounts,
                "program": shutil.which(program, path=env.get("PATH")) or program,
                "argv": argv,
                "uid": credentials.uid if credentials else None,
                "gid": credentials.gid if credentials else None,
                "groups": credentials.groups if credentials else [],
            }
            program = sys.executable
            argv = [sys.executable, "-I", "-c", LAUNCH_SOURCE, json.dumps(spec)]
        elif credentials is not None:
            switch = {
                "user": credentials.uid,
                "group": credentials.gid,
                "extra_groups": credentials.groups,
            }
        try:
            with (
                open(task.sandbox / "stdout", "wb") as out,
                open(task.sandbox / "stderr", "wb") as err,
            ):
                if credentials is not None:
                    for stream in (out, err):
                        # (The executor writes these: a container's output is piped.)
                        os.fchown(stream.fileno(), credentials.uid, credentials.gid)
                process = await asyncio.create_subprocess_exec(
                    argv[0],
                    *argv[1:],
                    executable=program,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    cwd=str(task.sandbox),
                    env=env,
                    start_new_session=True,
                    **switch,  # type: ignore[arg-type]
                )
        except OSError as exc:
            self.updates.agent_update(
                task, "TASK_FAILED", message=f"Failed to launch task subprocess: {exc}"
            )
            return
        task.process = process
        task.pid = process.pid
        self.live_groups.add(process.pid)
        if self.reaper is not None:
            self.reaper.track(process.pid)
        if plan is not None:
            self.containers[process.pid] = plan.name
            podman = self.podman()
            if self.reaper is not None and podman is not None:
                self.reaper.remove_container(plan.name, podman.command(*_REMOVE, plan.name))
        if task.finalized:
            self.signal_group(process.pid, signal.SIGKILL)
            await process.wait()
            return
        for hook in list(self.started_hooks):
            hook(task)
        self.updates.agent_update(task, "TASK_RUNNING")
        if task.kill_requested:
            self._signal_kill(task)
        watch: asyncio.Task[None] | None = None
        milli = task.resources.scalars.get("mem")
        mem = milli / MILLI if milli is not None else None
        if (
            memory_enforced(self.state.config.isolation)
            and plan is None
            and task.group_executor is None
            and mem is not None
        ):
            limit = int((mem + EXECUTOR_MEM) * _MB)
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
        if task.finalized:
            return
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

    def signal_group(self, pgid: int | None, sig: int) -> None:
        """Signal a task's process group, only while it may still have processes."""
        if pgid is not None and pgid in self.live_groups:
            self._signal(pgid, sig)
            if pgid in self.frozen:
                # Stopped processes see the signal once they run again: destroying
                # a container reaches its processes whatever they are doing.
                self.thaw(pgid)

    def freeze(self, pgid: int | None) -> None:
        """Stop a task's processes (SIGSTOP) until :meth:`thaw` or a signal to kill them."""
        if pgid is not None and pgid in self.live_groups and pgid not in self.frozen:
            self.frozen.add(pgid)
            self._signal(pgid, signal.SIGSTOP)

    def thaw(self, pgid: int | None) -> None:
        if pgid is not None and pgid in self.frozen:
            self.frozen.discard(pgid)
            self._signal(pgid, signal.SIGCONT)

    def _signal(self, pgid: int, sig: int) -> None:
        """A process group's signal; a container's goes to the container (its
        ``podman run`` would pass on only some, and outlive none)."""
        name = self.containers.get(pgid)
        if name is None:
            killpg(pgid, sig)
        elif sig == signal.SIGSTOP:
            self._container_call(name, pgid, "pause")
        elif sig == signal.SIGCONT:
            self._container_call(name, pgid, "unpause")
        else:
            self._container_call(name, pgid, "kill", "--signal", str(int(sig)))

    def _container_call(self, name: str, pgid: int | None, *args: str) -> None:
        """Run ``podman ARGS NAME`` after the container's previous call. While its
        ``podman run`` lives (``pgid``) a refused call is tried again: the
        container may not exist yet."""
        podman = self.podman()
        if podman is None or self.state.loop is None:
            return
        previous = self._container_calls.get(name)

        async def call() -> None:
            if previous is not None:
                with contextlib.suppress(Exception):
                    await previous
            deadline = time.monotonic() + 15.0
            while True:
                process = await asyncio.create_subprocess_exec(
                    *podman.command(*args, name),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.DEVNULL,
                )
                if await process.wait() == 0 or pgid not in self.live_groups:
                    return
                if time.monotonic() > deadline:
                    logger.warning("podman %s %s kept failing", " ".join(args), name)
                    return
                await asyncio.sleep(0.2)

        job = self.state.loop.create_task(call())
        self._container_calls[name] = job

        def done(finished: asyncio.Task[None]) -> None:
            if self._container_calls.get(name) is finished:
                del self._container_calls[name]

        job.add_done_callback(done)

    async def drain_containers(self) -> None:
        """Wait for the podman commands still running (the master stops)."""
        while self._container_calls:
            await asyncio.gather(*list(self._container_calls.values()), return_exceptions=True)

    def sweep(self, pgid: int) -> None:
        """Kill whatever is left in a task's process group (Mesos destroys the container)."""
        if pgid in self.live_groups:
            killpg(pgid, signal.SIGKILL)
            self.live_groups.discard(pgid)
            self.frozen.discard(pgid)
            if self.reaper is not None:
                self.reaper.untrack(pgid)
        name = self.containers.pop(pgid, None)
        if name is not None:
            # Its `podman run` is gone: remove the container, whatever is left of it.
            self._container_call(name, None, *_REMOVE)
            job = self._container_calls.get(name)
            if self.reaper is not None and job is not None:
                reaper = self.reaper
                job.add_done_callback(lambda _: reaper.forget_container(name))

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
