"""The in-task agent: ``python -m tfmesos.agent``.

It runs inside every task and needs only the standard library, so any image
with a Python 3 can host it. It authenticates to the launcher's rendezvous,
waits for the cluster definition, runs the user's command (or a TensorFlow
server) in its own process group, streams its output back, and reports the exit
status.

It exits, taking its child with it, when the connection closes or fails (the
launcher's host acknowledged nothing for ``protocol.SILENCE_LIMIT``); a launcher
that is only silent, its host answering, is waited for. Output the launcher
cannot take waits here (up to ``protocol.UNSENT_MAX``). The parts live beside it
(:mod:`tfmesos.rendezvous.client`, :mod:`tfmesos.agent.supervisor`); the
contract is :mod:`tfmesos.rendezvous.protocol`.
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from tfmesos.agent.supervisor import CommandRun, Spawned, task_command
from tfmesos.common import proctree
from tfmesos.common.ports import NoFreePort, port_is_free, reserve_ports
from tfmesos.common.tasklog import TaskLog
from tfmesos.rendezvous import protocol
from tfmesos.rendezvous.client import (
    AgentConfig,
    AgentError,
    NoHello,
    RendezvousClient,
    Unresolvable,
)

if TYPE_CHECKING:
    import socket
    from collections.abc import Mapping
    from typing import Any

__all__ = ["Agent", "main"]

LEFTOVER_GRACE = 2.0
"""When the agent is done, how long what its commands left running below it
gets between SIGTERM and SIGKILL."""
OOM_LINGER = 10.0
"""In a Mesos container, how long the agent waits, after reporting a command
the kernel killed for exceeding the container's memory, before it exits:
the containerizer that enforces the limit ends the container and reports
the limit (TASK_FAILED, REASON_CONTAINER_LIMITATION_MEMORY) unless the
executor sees the agent exit first and reports a plain failure."""


ACK_POLL = 0.05
"""How often the agent, its exit reported, looks whether the launcher's host
has acknowledged all it sent."""


def _unacknowledged(fd: int) -> int:
    """Bytes sent on socket ``fd`` not yet acknowledged (``SIOCOUTQ``); 0 where
    unknown."""
    try:
        import fcntl
        import termios

        buffer = fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0\0\0\0")
    except (ImportError, OSError):
        return 0
    return int.from_bytes(buffer, sys.byteorder, signed=True)


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.selector = selectors.DefaultSelector()
        self.signal_received: int | None = None
        self.client = RendezvousClient(
            config, self.selector, lambda: self.signal_received, queued=True
        )
        self.launcher_lost = False
        """The connection to the launcher failed (its host acknowledged
        nothing for ``config.silence_limit``, or reset it): it is taken for
        gone. Silence alone never is: a frozen launcher's kernel, or this
        agent's after a freeze of its own, still answers."""
        self._silence_said = False
        """The silence now going on has been warned of."""
        self._children: list[subprocess.Popen[bytes] | Spawned] = []
        """Commands that have exited, not yet reaped (see finish())."""
        self.stop_requested = False
        """The launcher said stop, or went away."""
        self.last_signal: int | None = None
        """The signal that killed the last command run, if one did."""
        self.out_of_memory = False
        """The kernel's OOM killer killed the last command run (its cgroup's count)."""
        self.failed_process: int | None = None
        self.error: str | None = None
        """The last command's exception, from torch's error file."""
        """The local rank of the last command's process that failed first,
        where it ran several (``tfrun --nproc-per-task``)."""
        self._wakeup_r, self._wakeup_w = os.pipe()
        os.set_blocking(self._wakeup_w, False)
        os.set_blocking(self._wakeup_r, False)  # drained whether or not it holds bytes
        self.log = TaskLog.from_environ(os.environ)

    # -- signals -----------------------------------------------------------

    def install_signal_handlers(self) -> None:
        signal.set_wakeup_fd(self._wakeup_w)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        self.selector.register(self._wakeup_r, selectors.EVENT_READ, "signal")

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.signal_received is None:
            self.signal_received = signum

    def _drain_wakeup(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self._wakeup_r, 64)

    # -- running the commands --------------------------------------------------

    def run_child(
        self,
        argv: str | list[str],
        env: Mapping[str, str],
        cwd: str | None,
        server: bool = False,
    ) -> int:
        """Run one command to its end, streaming its output; return its status.

        ``server``: the command is the TensorFlow server; tell the launcher
        once it listens.
        """
        command = CommandRun(
            argv,
            env,
            cwd,
            self.selector,
            emit=self.emit,
            note=self.note,
            on_ready=(lambda: self.client.send_json({"type": protocol.READY})) if server else None,
        )
        if any(m["type"] == protocol.STOP for m in self.client.backlog):
            self.stop_requested = True
        self.client.backlog.clear()
        # A stop that came while an earlier command (the initializer) ran
        # holds for this one too.
        if self.stop_requested or self.signal_received is not None or self.client.closed:
            command.stop()
        while not command.poll():
            wait = self.client.beat_due()
            due = command.timeout()
            for key, mask in self.selector.select(wait if due is None else min(due, wait)):
                if key.data is command:
                    command.handle(key.fd)
                elif key.data == "signal":
                    self._drain_wakeup()
                    command.stop()
                elif key.data == "launcher" and self.client.channel is not None:
                    self._from_launcher(mask)
            self.keep_in_touch()
            if self.stop_requested:
                command.stop()
        returncode = command.close()
        # Reaped in finish(), after what is left in its group is ended.
        self._children.append(command.proc)
        self.last_signal = -returncode if returncode < 0 else None
        self.out_of_memory = command.out_of_memory
        self.failed_process = command.failed_process
        self.error = command.error
        return 128 - returncode if returncode < 0 else returncode

    def _from_launcher(self, mask: int) -> None:
        """The launcher's socket is ready: send what waits, read what came."""
        if mask & selectors.EVENT_WRITE:
            self.client.flush()
        if mask & selectors.EVENT_READ and self.client.channel is not None:
            messages = self.client.receive()
            if self.client.closed or any(m["type"] == protocol.STOP for m in messages):
                self.stop_requested = True

    def keep_in_touch(self) -> None:
        """Send heartbeats; say once when the launcher has been silent for
        ``silence_limit`` while its connection stands, and stop the command
        once the connection has failed."""
        self.client.beat()
        if self.client.closed:
            self._lost_launcher()
            return
        silent = self.client.silent_for()
        if silent < self.config.silence_limit:
            self._silence_said = False
        elif not self._silence_said:
            self._silence_said = True
            print(
                f"[tfmesos agent] heard nothing from tfrun for {silent:.0f}s, but its host "
                "still acknowledges this connection: tfrun (or this task) was paused or is "
                "busy, so the task goes on; it stops if tfrun's host stops answering for "
                f"{self.config.silence_limit:g}s",
                file=sys.stderr,
                flush=True,
            )

    def _lost_launcher(self) -> None:
        """The connection failed rather than closed: say why, once, and stop."""
        channel = self.client.channel
        if self.launcher_lost or channel is None or channel.failure is None:
            return
        self.launcher_lost = self.stop_requested = True
        host, port = self.config.launcher
        print(
            f"[tfmesos agent] lost tfrun (its rendezvous at {host}:{port}): "
            f"{self.client.lost_because()}; stopping the task (SIGTERM to its processes, "
            f"SIGKILL after {protocol.STOP_GRACE:g}s)",
            file=sys.stderr,
            flush=True,
        )

    def _wait_for_room(self) -> None:
        """Too much waits for the launcher: let the command wait (its output
        unread) until the launcher takes some, is gone, or says stop."""
        while (
            self.client.unsent > protocol.UNSENT_MAX
            and not self.client.closed
            and not self.launcher_lost
            and not self.stop_requested
            and self.signal_received is None
        ):
            channel = self.client.channel
            assert channel is not None
            readable, writable, _ = select.select(
                [channel.sock], [channel.sock], [], protocol.BEAT_INTERVAL
            )
            mask = (selectors.EVENT_READ if readable else 0) | (
                selectors.EVENT_WRITE if writable else 0
            )
            if mask:
                self._from_launcher(mask)
            self.keep_in_touch()

    def deliver(self) -> None:
        """Once the exit report is queued: send what waits, close the sending
        side, and wait until the launcher's host has acknowledged it all, for
        as long as the connection stands (TCP resends meanwhile; the kernel
        fails it once the host has acknowledged nothing for the limit)."""
        client = self.client
        shut = False
        signalled = False
        self._drain_wakeup()  # a signal before now was the command's
        while client.channel is not None and not client.closed:
            if not client.unsent and not shut:
                client.shutdown()
                shut = True
            sock = client.channel.sock.fileno()
            if shut and _unacknowledged(sock) == 0:
                return
            if signalled:
                why = f"stopped by signal {self.signal_received}"
                print(
                    f"[tfmesos agent] {why}: gave up delivering the rest of the task's output "
                    f"and its exit status to tfrun ({client.unsent} bytes not sent yet; all of "
                    "the output is in this task's log)",
                    file=sys.stderr,
                    flush=True,
                )
                return
            if shut:
                left = ACK_POLL  # no descriptor wakes on an acknowledgement
            else:
                client.beat()
                left = client.beat_due()
            readable, writable, _ = select.select(
                [sock, self._wakeup_r], [sock] if client.unsent else [], [], max(left, 0.0)
            )
            if self._wakeup_r in readable:
                self._drain_wakeup()
                readable.remove(self._wakeup_r)
                signalled = True
            if writable:
                client.flush()
            if readable:
                client.receive()
        channel = client.channel
        if channel is not None and channel.failure is not None:
            print(
                f"[tfmesos agent] lost tfrun: {client.lost_because()}; gave up delivering the "
                f"rest of the task's output and its exit status ({client.unsent} bytes not sent "
                "yet; all of the output is in this task's log)",
                file=sys.stderr,
                flush=True,
            )

    def finish(self) -> None:
        """End whatever the commands left running below this agent (its
        subreaper), even helpers that left with ``setsid``, and reap the
        commands. On Mesos the containerizer would end them; locally nobody
        else would."""
        if not proctree.end_descendants(LEFTOVER_GRACE):
            proctree.end_groups([proc.pid for proc in self._children], LEFTOVER_GRACE)
        for proc in self._children:
            proc.wait()
        self._children.clear()
        # Orphans of the commands were handed to us (subreaper): reap them.
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass

    # -- output and reports ----------------------------------------------------

    def emit(self, data: bytes) -> None:
        # The task's own stdout is its sandbox log: everything lands there even
        # when the launcher does not print it. A log that fails (its disk is
        # full) costs the log, never the output sent on, nor the task.
        problem = self.log.write(data)
        self.client.send_output(data)
        if problem is not None:
            self.client.send_json({"type": protocol.LOG_FAILED, "problem": problem})
        if self.client.unsent > protocol.UNSENT_MAX:
            self._wait_for_room()

    def note(self, text: str) -> None:
        self.emit(f"[tfmesos agent] {text}\n".encode())

    def report_exit(
        self,
        code: int,
        killed_by: int | None = None,
        out_of_memory: bool = False,
        local_rank: int | None = None,
        error: str | None = None,
    ) -> None:
        """Tell the launcher how the task ended: status, the killing signal,
        whether the OOM killer sent it, the signal this agent got, and
        ``local_rank`` (the first of several processes to fail). In a Mesos
        container an OOM kill waits ``OOM_LINGER`` so the containerizer's
        update, naming the limit, comes first."""
        message: dict[str, Any] = {
            "type": protocol.EXIT,
            "code": code,
            "output_bytes": self.client.output_bytes,
        }
        if local_rank is not None:
            message["local_rank"] = local_rank
        if error is not None:
            message["error"] = error
        if killed_by is not None:
            message["signal"] = killed_by
        if self.signal_received is not None:
            message["agent_signal"] = self.signal_received
        if out_of_memory:
            message["out_of_memory"] = True
        self.client.send_json(message)
        self.deliver()
        if out_of_memory and "MESOS_EXECUTOR_ID" in os.environ:
            self._linger(OOM_LINGER)

    def _linger(self, seconds: float) -> None:
        """Wait ``seconds`` for whoever enforces the task's limits to end it,
        or for a signal."""
        deadline = time.monotonic() + seconds
        while self.signal_received is None and (left := deadline - time.monotonic()) > 0:
            if select.select([self._wakeup_r], [], [], left)[0]:
                self._drain_wakeup()


def run(config: AgentConfig, environ: dict[str, str]) -> int:
    agent = Agent(config)
    agent.install_signal_handlers()
    reserved: list[socket.socket] = []
    if config.port == 0:
        # No port was handed out (Slurm): take them here and say which.
        config.port, reserved = reserve_ports(config.port_count)
    else:
        for port in range(config.port, config.port + config.port_count):
            if not port_is_free(port):
                # Fail before registering, so that the launcher retries us elsewhere.
                raise AgentError(f"port {port} on {config.host} is already in use")
    deadline = time.monotonic() + protocol.CONNECT_TIMEOUT
    redial = False
    while True:
        agent.client.connect(redial)
        try:
            message = agent.client.wait_for_cluster()
            break
        except NoHello:
            # Dropped before a word came back (a flood makes room by closing
            # the oldest handshakes): dial again, as for a lost hello.
            if time.monotonic() > deadline:
                raise
            agent.client.disconnect()
            redial = True
    try:
        argv, env = task_command(message, environ)
    except OSError as exc:  # the cluster file (tfrun --cluster-file)
        raise AgentError(f"cannot write the task's cluster file: {exc}") from None
    for sock in reserved:
        # Let go of the ports right before the commands that bind them run.
        sock.close()
    cwd = message.get("cwd")
    if cwd is not None and not os.path.isdir(cwd):
        agent.note(f"working directory {cwd} does not exist here; running in {os.getcwd()}")
        cwd = None
    extra = message.get("extra_config") or {}
    code = 0
    killed_by: int | None = None
    out_of_memory = False
    failed_process: int | None = None
    error: str | None = None
    try:
        initializer = extra.get("initializer")
        if initializer:
            code = agent.run_child(str(initializer), env, cwd)
            killed_by = agent.last_signal
            if code != 0:
                agent.note(f"initializer exited with status {code}; the command was not run")
        if code == 0:
            server_mode = message.get("cmd") is None
            code = agent.run_child(argv, env, cwd, server=server_mode)
            killed_by = agent.last_signal
            out_of_memory = agent.out_of_memory
            failed_process = agent.failed_process
            error = agent.error
        finalizer = extra.get("finalizer")
        if finalizer:
            final_code = agent.run_child(str(finalizer), env, cwd)
            if final_code != 0:
                agent.note(f"finalizer exited with status {final_code}")
    finally:
        agent.finish()
    agent.report_exit(code, killed_by, out_of_memory, failed_process, error)
    return code


def main(environ: dict[str, str] | None = None) -> int:
    """Run the agent; ``environ``: its environment, when the fork server has it
    already."""
    # An ignored SIGCHLD (inherited through exec) would have the kernel reap
    # the commands before their status could be read.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # A log past the file-size limit (ulimit -f) is an error to report, not
    # a signal that kills the agent; the commands get SIGXFSZ's default back
    # (subprocess's restore_signals).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    environ = dict(os.environ) if environ is None else environ
    try:
        config = AgentConfig.from_environ(environ)
        if config.parent_pid is not None and not proctree.exit_with_parent(config.parent_pid):
            raise AgentError("the launcher exited before the task started")
        proctree.become_subreaper()
        return run(config, environ)
    except Unresolvable as exc:
        print(f"[tfmesos agent] {exc}", file=sys.stderr, flush=True)
        return protocol.UNRESOLVED_STATUS
    except (AgentError, NoFreePort) as exc:
        print(f"[tfmesos agent] {exc}", file=sys.stderr, flush=True)
        return 1
    except protocol.FrameError as exc:
        print(
            f"[tfmesos agent] protocol error from the launcher: {exc}", file=sys.stderr, flush=True
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
