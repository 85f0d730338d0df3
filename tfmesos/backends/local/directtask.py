"""A local task the launcher runs itself: the agent's part, in-process.

For a short task a separate agent costs more than the command, so a plain
replica-mode task (no initializer or finalizer) is run by the launcher with the
same command line, supervision (:class:`tfmesos.agent.supervisor.CommandRun`),
log and events as an agent would give it, without a socket between. Should the
launcher die outright, :mod:`tfmesos.agent.sweeper` ends its tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from typing import Any

from tfmesos.agent.supervisor import CommandRun, task_command
from tfmesos.backends.base import InProcessRendezvous
from tfmesos.backends.local.forkstart import OWN_PROCESS_GROUP
from tfmesos.common import procfs, proctree
from tfmesos.common.tasklog import TaskLog
from tfmesos.rendezvous import protocol
from tfmesos.rendezvous.reports import Connection, Disconnected, Exited, Message, Output, Registered

__all__ = ["DirectTask", "Sweeper"]

logger = logging.getLogger("tfmesos")

LEFTOVER_GRACE = 2.0
"""As the agent's: what the command left running gets this long between
SIGTERM and SIGKILL once it has exited."""
LEFTOVER_POLL = 0.02

_OWN_CHILDREN = proctree.STARTED_HERE
"""The launcher's children it started itself (the commands not yet reaped,
the sweeper, ...), as opposed to orphans handed to it: only the latter are
read when a task ends, not every running command at every task's end."""
_TASK_MARK = f"{protocol.ENV_TASK_ID}=".encode()


class DirectTask:
    """One attempt at a local task, run by the launcher: :meth:`begin` at
    launch registers it at once (as its agent would once it dialled in);
    the cluster message starts its command; ``on_end(task, status,
    reported)`` is called once, when everything of it is over (``reported``:
    its exit was delivered, as an agent's exit report is)."""

    def __init__(
        self,
        task_id: str,
        *,
        host: str,
        port: int,
        environ: dict[str, str],
        log_fd: int | None,
        log_path: str,
        log_max: int,
        rendezvous: InProcessRendezvous,
        sweeper: Sweeper | None,
        on_end: Callable[[DirectTask, int, bool], None],
    ) -> None:
        self.task_id = task_id
        self.host = host
        self.port = port
        self._environ = environ
        """The environment an agent would start with (its own settings are
        dropped by task_command, as the agent drops them)."""
        self._log_fd = log_fd
        self._log = None if log_fd is None else TaskLog(log_path, log_max, (log_fd,))
        self._log_max = log_max
        self._rendezvous = rendezvous
        self._sweeper = sweeper
        self._on_end = on_end
        self._loop = asyncio.get_running_loop()
        self._connection: DirectConnection | None = None
        self.run: CommandRun | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._paused = False
        """Its output is not read while the launcher catches up (flow)."""
        self._stop_asked = False
        self.cluster_pending = False
        """The cluster message came, and its command starts on the loop's next turn."""
        self._finished = False
        self.ended: asyncio.Future[int] = self._loop.create_future()
        """Resolves to the status reported once the task is over."""

    # -- registering -------------------------------------------------------

    def begin(self) -> None:
        """What the agent does before its command: register. (Its port was
        found free by the backend's allocator a moment ago: the agent checks
        again because it starts later, this does not.)"""
        if not self._rendezvous.admit(self.task_id):
            self._fail("the launcher refused this task: not expected now")
            return
        self._connection = DirectConnection(self)
        address = f"{self.host}:{self.port}"
        self._rendezvous.deliver(Registered(self.task_id, address, self._connection))

    def _fail(self, problem: str) -> None:
        """Ended before its command started: logged, status 1, as an agent's
        error."""
        self._write_log(f"[tfmesos agent] {problem}\n".encode())
        self._end(1)

    # -- the command -------------------------------------------------------

    def start_command(self, message: Mapping[str, Any]) -> None:
        """The cluster message came: run the command, as the agent runs it."""
        if self._finished or self.run is not None:
            return
        environ = self._environ
        if self._log is not None and (
            (message.get("nproc") or 1) != 1 or message.get("cluster_file")
        ):
            # Where the processes' own logs go (tfmesos.agent.nproc), and the
            # cluster file (tfmesos.common.clusterfile), as the agent is told.
            environ = {**environ, protocol.ENV_LOG_FILE: str(self._log.path)}
            environ[protocol.ENV_LOG_MAX] = str(self._log_max)
        try:
            argv, env = task_command(dict(message), environ)
            cwd = message.get("cwd")
            if cwd is not None and not os.path.isdir(cwd):
                here = os.getcwd()
                self._note(f"working directory {cwd} does not exist here; running in {here}")
                cwd = None
            self.run = CommandRun(
                argv,
                env,
                cwd,
                _LoopWatcher(self),
                emit=self._emit,
                note=self._note,
                death_signal=self._sweeper is None,
            )
        except Exception:  # where an agent would die with its traceback in its log
            import traceback

            self._write_log(traceback.format_exc().encode())
            self._note("cannot start the command (the traceback is in this task's log)")
            self._end(1)
            return
        _OWN_CHILDREN.add(self.run.pid)
        if self._sweeper is not None:
            self._sweeper.started(self.run.pid, f"{protocol.ENV_TASK_ID}={self.task_id}")
        if self._stop_asked:
            self.run.stop()
        self._check()

    def stop(self, before_cluster: str = "the launcher stopped this task") -> None:
        """SIGTERM to the command's group, SIGKILL after the grace. Before
        the cluster message, the task ends there, as its agent does, saying
        ``before_cluster`` in its log; with the message on its way (it is
        taken on the loop's next turn), the command is stopped as it starts."""
        self._stop_asked = True
        if self._finished:
            return
        if self.run is not None:
            self.run.stop()
            self._check()
        elif not self.cluster_pending:
            self._fail(before_cluster)

    def _ready(self, fd: int) -> None:
        """One of the run's descriptors is readable."""
        assert self.run is not None
        self.run.handle(fd)
        self._check()

    def _check(self) -> None:
        """Do what the run says is due; finish once it is over."""
        run = self.run
        if run is None or self._finished or self._paused:
            return  # paused: looked at again once its output is read on
        if run.poll():
            self._finished = True
            if self._timer is not None:
                self._timer.cancel()
            self._finish()
            return
        timeout = run.timeout()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if timeout is not None:
            self._timer = self._loop.call_later(timeout, self._check)

    def _finish(self) -> None:
        run = self.run
        assert run is not None
        returncode = run.close()
        pid = run.pid
        if self._sweeper is not None:
            self._sweeper.done(pid)
        run.proc.wait()  # exited: at once. Its group number stays taken while members are left.
        _OWN_CHILDREN.discard(pid)
        leftovers = _Leftovers(pid, self.task_id)
        if self._sweeper is not None:
            for stray in strays():
                self._sweeper.stray(stray)
        if leftovers.left():
            self._loop.create_task(self._report_after(leftovers, returncode))
        else:  # the usual end: one read of this process's children, no task
            self._report(returncode)

    async def _report_after(self, leftovers: _Leftovers, returncode: int) -> None:
        await leftovers.end()
        self._report(returncode)

    def _report(self, returncode: int) -> None:
        """The exit, as the agent reports it once all its commands left is over."""
        status = 128 - returncode if returncode < 0 else returncode
        killed_by = -returncode if returncode < 0 else None
        out_of_memory = self.run is not None and self.run.out_of_memory
        local_rank = None if self.run is None else self.run.failed_process
        error = None if self.run is None else self.run.error
        self._rendezvous.deliver(
            Exited(self.task_id, status, killed_by, None, out_of_memory, local_rank, error)
        )
        self._end(status, reported=True)

    def _end(self, status: int, reported: bool = False) -> None:
        self._finished = True
        if self._connection is not None:
            self._connection.closed = True
            self._rendezvous.deliver(Disconnected(self.task_id))
        if self._log_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._log_fd)
            self._log_fd = None
        if not self.ended.done():
            self.ended.set_result(status)
        self._on_end(self, status, reported)

    # -- output --------------------------------------------------------------

    def _emit(self, data: bytes) -> None:
        problem = self._write_log(data)
        self._rendezvous.deliver(Output(self.task_id, data))
        if problem is not None:
            self._rendezvous.deliver(
                Message(self.task_id, {"type": protocol.LOG_FAILED, "problem": problem})
            )
        if not self._paused and self._rendezvous.held(self.task_id):
            # The launcher's flow: a task whose output is shown waits for the
            # terminal. Its pipe is not read meanwhile, which slows the command.
            self._pause(asyncio.ensure_future(self._rendezvous.flow(self.task_id)))

    def _pause(self, waiting: asyncio.Future[None]) -> None:
        run = self.run
        if run is None or run.output_fd is None:
            waiting.cancel()
            return
        self._paused = True
        fd = run.output_fd
        self._loop.remove_reader(fd)

        def resume(_: asyncio.Future[None]) -> None:
            self._paused = False
            if self.run is not None and self.run.output_fd == fd and not self._finished:
                self._loop.add_reader(fd, self._ready, fd)

        waiting.add_done_callback(resume)

    def _note(self, text: str) -> None:
        self._emit(f"[tfmesos agent] {text}\n".encode())

    def _write_log(self, data: bytes) -> str | None:
        if self._log is None:
            return None
        return self._log.write(data)


class DirectConnection(Connection):
    """What the launcher sends the task, taken as its agent takes it."""

    def __init__(self, task: DirectTask) -> None:
        # No socket: the real class's state is not needed.
        self._task = task
        self.closed = False

    def seal(self, message: dict[str, Any]) -> dict[str, Any]:
        return message  # nothing travels: nothing to prove

    def send(self, message: dict[str, Any]) -> None:
        if self.closed:
            return
        kind = message.get("type")
        if kind == protocol.CLUSTER:
            # On the loop's next turn, as a message on a socket would come:
            # the launcher is still handing out the cluster.
            self._task.cluster_pending = True
            asyncio.get_running_loop().call_soon(self._task.start_command, message)
        elif kind == protocol.STOP:
            self._task.stop(f"the launcher stopped this task: {message.get('reason', '')}")

    def close(self) -> None:
        # The launcher is done with the task: to an agent, its connection
        # closing means stop.
        if not self.closed:
            self.closed = True
            self._task.stop("the launcher went away before the cluster was up")


class _LoopWatcher:
    """CommandRun's selector, on the launcher's event loop."""

    def __init__(self, task: DirectTask) -> None:
        self._task = task

    def register(self, fileobj: int, events: int, data: Any = None) -> None:
        self._task._loop.add_reader(fileobj, self._task._ready, fileobj)

    def unregister(self, fileobj: int) -> None:
        self._task._loop.remove_reader(fileobj)


class _Leftovers:
    """What a command left running, ended as its agent ends it: what is in
    its process group, and what left the group and was handed to the
    launcher (a subreaper) when its parent exited, carrying the task's id.
    SIGTERM (and SIGCONT), ``LEFTOVER_GRACE`` to exit, then SIGKILL until
    none is left."""

    def __init__(self, pgid: int, task_id: str) -> None:
        self.pgid = pgid
        self.mark = f"{protocol.ENV_TASK_ID}={task_id}".encode()

    def orphans(self) -> list[int]:
        try:
            children = procfs.children(os.getpid())
        except OSError:
            return []
        return [p for p in children if p not in _OWN_CHILDREN and _carries(p, self.mark)]

    def left(self) -> bool:
        self._reap_dead_members()
        return proctree.signal_group(self.pgid, 0) or bool(self.orphans())

    def _reap_dead_members(self) -> None:
        """Reap group members that exited after their parent: handed to the
        launcher (their subreaper), they stay zombies, and keep the group
        alive, until reaped here."""
        try:
            children = procfs.children(os.getpid())
        except OSError:
            return
        for pid in children:
            if pid in _OWN_CHILDREN:
                continue
            stat = procfs.stat_of(pid)
            if stat is not None and stat.state == "Z" and stat.pgrp == self.pgid:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)

    async def end(self) -> None:
        strays = self.orphans()
        for sig in (signal.SIGTERM, signal.SIGCONT):
            proctree.signal_group(self.pgid, sig)
            for pid in strays:
                _signal_tree(pid, sig)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEFTOVER_GRACE
        while self.left() and loop.time() < deadline:
            await asyncio.sleep(LEFTOVER_POLL)
        rounds = 0
        while self.left() and rounds < 500:
            proctree.signal_group(self.pgid, signal.SIGKILL)
            for pid in self.orphans():
                _signal_tree(pid, signal.SIGKILL)
            rounds += 1
            await asyncio.sleep(0.01)


def _carries(pid: int, mark: bytes) -> bool:
    """Whether ``pid``, an orphan handed to the launcher, carries ``mark`` in
    its environment. One that has exited (a zombie: it has no environment
    left) is reaped here: only the launcher, its subreaper, can."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            data = environ.read()
    except OSError:
        return False
    if not data:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return mark in data.split(b"\0")


def _signal_tree(pid: int, sig: int) -> None:
    """Signal ``pid`` and everything below it."""
    below: list[int] = []
    with contextlib.suppress(OSError):
        below = [p.pid for p in procfs.descendants(pid)]
    for each in (pid, *below):
        proctree.signal_pid(each, sig)
    if sig == signal.SIGKILL:
        # An orphan handed to the launcher is its child: reap it once dead.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def strays() -> list[int]:
    """Orphans handed to the launcher that no task id marks, outside its process
    group (``setsid env -i helper &``): whose they are cannot be told, so they
    end with the job (:func:`end_strays`)."""
    try:
        children = procfs.children(os.getpid())
    except OSError:
        return []
    own_group = os.getpgrp()
    found = []
    for pid in children:
        if pid in _OWN_CHILDREN:
            continue
        stat = procfs.stat_of(pid)
        if stat is None or stat.pgrp == own_group:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                entries = environ.read().split(b"\0")
        except OSError:  # a zombie's is gone: reaped here, its subreaper
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            continue
        if not any(entry.startswith(_TASK_MARK) for entry in entries):
            found.append(pid)
    return found


async def end_strays() -> None:
    """End the job's strays: SIGTERM, ``LEFTOVER_GRACE``, then SIGKILL until none
    is left."""
    found = strays()
    if not found:
        return
    logger.debug("ending %d processes the tasks left outside their groups", len(found))
    for sig in (signal.SIGTERM, signal.SIGCONT):
        for pid in found:
            _signal_tree(pid, sig)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LEFTOVER_GRACE
    while strays() and loop.time() < deadline:
        await asyncio.sleep(LEFTOVER_POLL)
    for _ in range(500):
        found = strays()
        if not found:
            return
        for pid in found:
            _signal_tree(pid, signal.SIGKILL)
        await asyncio.sleep(0.01)


class Sweeper:
    """The launcher's end of :mod:`tfmesos.agent.sweeper`: started with the first
    task the launcher runs itself, told of each, said goodbye to at the end."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            proctree.bootstrap_command("tfmesos.agent.sweeper"),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Its own group: Ctrl-C at the terminal is the launcher's.
            **OWN_PROCESS_GROUP,
        )
        _OWN_CHILDREN.add(self._proc.pid)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def started(self, pgid: int, entry: str) -> None:
        """A command started, in group ``pgid``, its processes carrying ``entry``."""
        self._tell_sweeper(f"carries {entry}\ngroup {pgid}")

    def done(self, pgid: int) -> None:
        self._tell_sweeper(f"done {pgid}")

    def stray(self, pid: int) -> None:
        """A stray (:func:`strays`), with its start time so a reused pid names no
        stranger."""
        started = procfs.start_time(pid)
        if started is not None:
            self._tell_sweeper(f"stray {pid} {started}")

    def _tell_sweeper(self, line: str) -> None:
        if self._proc is None or self._proc.stdin is None:
            return
        try:
            os.write(self._proc.stdin.fileno(), f"{line}\n".encode())
        except OSError as exc:
            logger.debug("the sweeper is gone (%s): a launcher killed outright leaves tasks", exc)
            self._proc.stdin.close()
            self._proc.stdin = None

    async def close(self) -> None:
        """Say goodbye, and wait for its exit (it reads the word and exits)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                os.write(proc.stdin.fileno(), b"bye\n")
            with contextlib.suppress(OSError):
                proc.stdin.close()
        if await proctree.wait_for_exit(proc.pid, 5.0) is False:
            proc.kill()
        proc.wait()
        _OWN_CHILDREN.discard(proc.pid)
