"""What a task runs, and one run of it: the agent's supervision of a command.

:func:`task_command` turns the launcher's cluster message into the command
and its environment. :class:`CommandRun` is one command from its start to
the last of its output: it forwards the output a whole line at a time, stops
the command (SIGTERM to its process group, SIGKILL after ``STOP_GRACE``), and
in fine-grained mode says when the TensorFlow server listens. The agent's
event loop waits on the run's descriptors beside its own and hands it theirs.

Standard library only: the agent imports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from tfmesos.agent import nproc as nproc_runner
from tfmesos.agent import oomkills
from tfmesos.common import clusterfile, exported, proctree, taskenv
from tfmesos.common.shell import exec_if_simple, plain_argv, shell_environment
from tfmesos.rendezvous import protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, BinaryIO, Protocol

    class Watcher(Protocol):
        """What :class:`CommandRun` needs of a selector."""

        def register(self, fileobj: int, events: int, data: Any = None) -> Any: ...

        def unregister(self, fileobj: int) -> Any: ...


__all__ = ["CommandRun", "Spawned", "task_command"]

READ_SIZE = 1 << 16
MAX_PENDING_LINE = 1 << 16
"""A line longer than this is sent in pieces rather than held back."""
PIPE_GRACE = 1.0
"""How long the output pipe may stay open once the command has exited: a
grandchild that left the group may hold it open forever."""
POLL_INTERVAL = 0.1
"""Where there is no pidfd to wake on the command's exit, how often its
status is looked at."""


def task_command(
    message: dict[str, Any], environ: dict[str, str]
) -> tuple[str | list[str], dict[str, str]]:
    """The child to run and its environment, from the launcher's cluster message."""
    cluster = message["cluster_def"]
    job_name = str(message["job_name"])
    task_index = int(message["task_index"])
    # The job's processes per task; a task other than a worker's (TensorFlow's
    # chief, ps or evaluator) runs one, whatever the workers run.
    job_nproc = int(message.get("nproc") or 1)
    nproc = taskenv.processes_of(job_name, job_nproc)
    env = dict(environ)
    base = env.get(protocol.ENV_BASE)
    for name in protocol.AGENT_ONLY:
        env.pop(name, None)
    # What the task's host gives with what tfrun's environment carried
    # (--export), then the job's own (-e, env=), then the launcher's.
    carried = {str(k): str(v) for k, v in (message.get("exported") or {}).items()}
    env = exported.task_base(env, base, carried)
    env.update({str(k): str(v) for k, v in (message.get("env") or {}).items()})
    env.update(
        taskenv.task_environment(
            cluster,
            job_name,
            task_index,
            run_id=str(message.get("run_id") or ""),
            restart=int(message.get("restart") or 0),
            max_restarts=int(message.get("max_restarts") or 0),
            nproc=job_nproc,
        )
    )
    server = message.get("server") or {}
    # The task's CPUs shared among its processes.
    cpus = float(server.get("cpus") or 1) / nproc
    for name, value in taskenv.default_environment(cpus).items():
        env.setdefault(name, value)
    command = message.get("cmd")
    if message.get("cluster_file"):
        # tfrun --cluster-file: every address in a file, none in the
        # environment (tfmesos.common.clusterfile).
        # With several processes, a file each (each its own task index).
        clusterfile.move_to_file(
            env, environ.get(protocol.ENV_LOG_FILE), environ.get("MESOS_SANDBOX"), nproc
        )
    if command is None:
        env[protocol.ENV_SERVER_DEF] = json.dumps(message.get("server") or {})
        return [sys.executable, "-m", "tfmesos.agent.tfserver"], env
    env.setdefault(ERROR_FILE, new_error_file())
    values = taskenv.placeholder_values(cluster, job_name, task_index, job_nproc)
    mark = ""
    if nproc > 1 and "task_index" in taskenv.placeholders_in(str(command)):
        # Each process's own {task_index}: the runner puts it in place of this.
        mark = values["task_index"] = f"@tfmesos-task-index-{os.urandom(8).hex()}@"
    line = exec_if_simple(taskenv.fill_placeholders(str(command), values))
    if nproc > 1:
        # Several processes, each a TensorFlow worker of its own: the runner
        # starts them (tfmesos.agent.nproc), each with its own TF_CONFIG index.
        logs = nproc_runner.log_path(
            environ.get(protocol.ENV_LOG_FILE), environ.get("MESOS_SANDBOX")
        )
        name = f"{job_name}:{task_index}"
        cap = environ.get(protocol.ENV_LOG_MAX, "")
        argv = nproc_runner.runner_environment(env, nproc, line, name, logs, cap, mark)
        return argv, env
    return line, env


def _start(
    argv: str | list[str],
    env: dict[str, str],
    cwd: str | None,
    pass_fds: tuple[int, ...],
    death_signal: bool = True,
) -> subprocess.Popen[bytes] | Spawned:
    """The command started as the agent's child, its output on one pipe.

    A command line of plain words is exec'd as ``sh -c`` would exec it (the
    same argv, PATH and environment), without the shell's own start in every
    task; one that cannot be exec'd so (not found, not executable, a script
    without ``#!``) is handed to the shell after all, which says so in its
    own words or runs the script, as it always did.

    The command leads a session of its own, and so a process group of its
    own (its ID the command's), which is how it is stopped: where the kernel
    groups scheduling by session (autogroup), each task is then a CPU share of
    its own beside other programs, as each process torchrun starts is, rather
    than all of a job's tasks sharing the launcher's one.

    ``death_signal``: the command is SIGKILLed should its parent die
    outright. Without it (the launcher runs the command, and a sweeper of
    its own ends what it leaves: :mod:`tfmesos.agent.sweeper`) nothing runs
    between the fork and the exec, so ``subprocess`` can ``vfork``.
    """
    options: dict[str, Any] = {
        "stdin": subprocess.DEVNULL,
        "stdout": subprocess.PIPE,
        "stderr": subprocess.STDOUT,
        "cwd": cwd,
        "pass_fds": pass_fds,
        "preexec_fn": proctree.own_session_dying_with_parent,
    }
    if not death_signal:
        del options["preexec_fn"]
        options["start_new_session"] = True
    if isinstance(argv, str):
        words = plain_argv(argv)
        direct_env = shell_environment(env, cwd) if words is not None else None
        if words is not None and direct_env is not None:
            wrapper = proctree.death_signal_program() if sys.version_info >= (3, 11) else None
            if not death_signal:
                wrapper = None
            if wrapper is not None and _execable(words[0], direct_env, cwd):
                # The parent-death signal asked for by setpriv, which execs
                # the command in place: no Python in the child, so vfork.
                del options["preexec_fn"]
                options["start_new_session"] = True
                return subprocess.Popen(
                    [wrapper, "--pdeathsig", "KILL", "--", *words], env=direct_env, **options
                )
            if not death_signal and cwd is None and not pass_fds:
                spawned = _spawn(words, direct_env)
                if spawned is not None:
                    return spawned
            try:
                return subprocess.Popen(words, env=direct_env, **options)
            except OSError:
                pass  # the shell's turn: its message, its exit status
        return subprocess.Popen(argv, shell=True, env=env, **options)
    return subprocess.Popen(argv, env=env, **options)


class Spawned:
    """A command started by :func:`_spawn`: what :class:`CommandRun` and its
    callers use of a ``Popen``."""

    __slots__ = ("pid", "returncode", "stdout")

    def __init__(self, pid: int, stdout: BinaryIO) -> None:
        self.pid = pid
        self.stdout: BinaryIO | None = stdout
        self.returncode: int | None = None

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


_inherited: list[int] | None = None
"""The descriptors above 2 this process may hand down (inherited by it; all
it opens itself are not), looked for once: ``posix_spawn`` closes them in
the child, as ``Popen``'s ``close_fds`` does."""


def _spawn(words: list[str], env: dict[str, str]) -> Spawned | None:
    """``words`` started with ``posix_spawn``, in a session of its own,
    its output on a pipe, ``SIGPIPE`` and ``SIGXFSZ`` at their defaults (as
    ``Popen``'s ``restore_signals``): half a ``Popen``'s CPU in the parent,
    most of which is ``Popen`` turning the environment into bytes in Python
    (docs/benchmarks.md, "The fixed cost"). None where it cannot be (the
    program not found on the environment's ``PATH``, not executable, a
    script without ``#!``): ``Popen`` then tries, and the shell after it."""
    global _inherited
    program = _program(words[0], env)
    if program is None or not hasattr(os, "posix_spawn"):
        return None
    if _inherited is None:
        _inherited = []
        with contextlib.suppress(OSError):
            for name in os.listdir("/proc/self/fd"):
                with contextlib.suppress(OSError):
                    if int(name) > 2 and os.get_inheritable(int(name)):
                        _inherited.append(int(name))
    read_end, write_end = os.pipe()
    actions: list[tuple[Any, ...]] = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, write_end, 1),
        (os.POSIX_SPAWN_DUP2, write_end, 2),
        *((os.POSIX_SPAWN_CLOSE, fd) for fd in _inherited),
    ]
    try:
        pid = os.posix_spawn(
            program,
            words,
            env,
            file_actions=actions,
            setsid=True,
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
        )
    except OSError:
        os.close(read_end)
        return None
    finally:
        os.close(write_end)
    return Spawned(pid, open(read_end, "rb", buffering=0))


def _program(word: str, env: dict[str, str], cwd: str | None = None) -> str | None:
    """The file ``word`` names, found as the shell finds it (through the
    environment's ``PATH`` where it has no slash, from ``cwd``), if it may
    be executed."""
    here = cwd or "."
    places = (
        [word] if "/" in word else [os.path.join(d or ".", word) for d in env["PATH"].split(":")]
    )
    for place in places:
        path = os.path.join(here, place)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _execable(word: str, env: dict[str, str], cwd: str | None) -> bool:
    """Whether the program ``word`` names (:func:`_program`) is a file an
    ``exec`` runs as it is: an executable that starts as a binary or a ``#!``
    script does. Anything else (not found, not executable, a script the
    shell would read itself) is the shell's to start, and to explain."""
    path = _program(word, env, cwd)
    if path is None:
        return False
    try:
        with open(path, "rb") as program:
            start = program.read(4)
    except OSError:
        return False
    return start == b"\x7fELF" or start[:2] == b"#!"


class CommandRun:
    """One command, run as the agent's child in a process group of its own.

    The agent's loop::

        run = CommandRun(argv, env, cwd, selector, emit, note)
        while not run.poll():
            for key, _ in selector.select(run.timeout()):
                if key.data is run:
                    run.handle(key.fd)
                ...  # the agent's own keys; run.stop() to stop the command
        returncode = run.close()

    ``on_ready``: fine-grained mode, where the command is ``tfmesos.agent.tfserver``;
    called once the server listens (it writes a byte down a pipe it inherits,
    :data:`tfmesos.rendezvous.protocol.ENV_READY_FD`), unless the command has exited by then.
    ``death_signal``: as :func:`_start` says. ``selector``: anything that
    registers and unregisters descriptors as a selector does (the launcher's
    event loop, for the tasks it runs itself).
    """

    def __init__(
        self,
        argv: str | list[str],
        env: Mapping[str, str],
        cwd: str | None,
        selector: Watcher,
        emit: Callable[[bytes], None],
        note: Callable[[str], None],
        on_ready: Callable[[], None] | None = None,
        death_signal: bool = True,
    ) -> None:
        self._selector = selector
        self._emit = emit
        self._note = note
        self._on_ready = on_ready
        child_env = dict(env)
        self._oom_kills = oomkills.oom_kills()
        """The OOM kills in this process's memory cgroup before the command."""
        self.out_of_memory = False
        """After :meth:`close`: the command was SIGKILLed, not by this run, while
        the kernel's OOM killer ended a process in its memory cgroup."""
        ready_write: int | None = None
        self._ready: int | None = None
        """The read end of the readiness pipe, until the server writes to it or exits."""
        if on_ready is not None:
            self._ready, ready_write = os.pipe()
            child_env[protocol.ENV_READY_FD] = str(ready_write)
        self.failed_process: int | None = None
        """After :meth:`close`: the local rank of the task's process that
        failed first, where the command is several (:mod:`tfmesos.agent.nproc`)."""
        self.error: str | None = None
        """After :meth:`close`, for a command that failed: the exception a
        ``@record`` program wrote to ``TORCHELASTIC_ERROR_FILE``."""
        self._error_file = ours_error_file(child_env)
        self._processes = child_count(child_env)
        self._report: int | None = None
        report_write: int | None = None
        if nproc_runner.ENV_NPROC in child_env:
            self._report, report_write = os.pipe()
            os.set_blocking(self._report, False)
            child_env[nproc_runner.ENV_REPORT_FD] = str(report_write)
        pass_fds = tuple(fd for fd in (ready_write, report_write) if fd is not None)
        try:
            self.proc = _start(argv, child_env, cwd, pass_fds, death_signal)
        except BaseException:
            for fd in (self._ready, self._report):
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            for fd in (ready_write, report_write):
                if fd is not None:
                    os.close(fd)
        assert self.proc.stdout is not None
        self._pipe: int | None = self.proc.stdout.fileno()
        """The command's output (stdout and stderr), until it is closed."""
        os.set_blocking(self._pipe, False)
        self._pending = b""
        """Output read but not forwarded: the start of a line."""
        self._exit_watch = proctree.open_pidfd(self.proc.pid)
        """A pidfd that wakes the loop when the command exits, so that one that
        closed or redirected its output is still waited for as long as it runs,
        without polling; None once it has woken it."""
        self._polled = self._exit_watch is None
        """No pidfd on this system: the loop wakes every ``POLL_INTERVAL``."""
        self.stop_deadline: float | None = None
        """When the command was stopped: the moment SIGKILL follows SIGTERM."""
        self.killed = False
        self.exited_at: float | None = None
        for fd in (self._pipe, self._exit_watch, self._ready):
            if fd is not None:
                selector.register(fd, selectors.EVENT_READ, self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def output_fd(self) -> int | None:
        """The command's output pipe, until it is read to its end."""
        return self._pipe

    def stop(self) -> None:
        """SIGTERM the command's group, once; SIGKILL follows after ``STOP_GRACE``."""
        if self.stop_deadline is None:
            proctree.signal_group(self.pid, signal.SIGTERM)
            self.stop_deadline = time.monotonic() + protocol.STOP_GRACE

    def poll(self) -> bool:
        """Do what time has made due (SIGKILL after the grace), then say
        whether the run is over: the command has exited and its output is all
        read, or the pipe has had its grace since the exit."""
        now = time.monotonic()
        if self.stop_deadline is not None and not self.killed and now >= self.stop_deadline:
            proctree.signal_group(self.pid, signal.SIGKILL)
            self.killed = True
            if self.exited_at is None:
                self._note(
                    f"the command did not stop within {protocol.STOP_GRACE:g}s of SIGTERM: killed"
                )
        if self.exited_at is None and proctree.peek_exit_status(self.pid) is not None:
            self.exited_at = now
        return self.exited_at is not None and (
            self._pipe is None or now - self.exited_at >= PIPE_GRACE
        )

    def timeout(self) -> float | None:
        """How long the loop may wait for an event before :meth:`poll` has
        something to do; None: until an event."""
        if self._polled:
            return POLL_INTERVAL
        deadlines = []
        if self.stop_deadline is not None and not self.killed:
            deadlines.append(self.stop_deadline)
        if self.exited_at is not None:
            deadlines.append(self.exited_at + PIPE_GRACE)
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - time.monotonic())

    def handle(self, fd: int) -> None:
        """One of this run's descriptors is readable."""
        if fd == self._pipe:
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:
                return
            if not data:  # the command closed its output; it may run on
                self._selector.unregister(fd)
                self._pipe = None
                return
            self._pending = self._forward(self._pending + data)
        elif fd == self._exit_watch:
            self._selector.unregister(fd)
            os.close(fd)
            self._exit_watch = None
        elif fd == self._ready:
            got = b""
            with contextlib.suppress(OSError):
                got = os.read(fd, 64)
            self._selector.unregister(fd)
            os.close(fd)
            self._ready = None
            # Nothing read: the server exited (or closed the pipe) before it listened.
            if got and self._on_ready is not None and self.exited_at is None:
                self._on_ready()

    def _forward(self, data: bytes) -> bytes:
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            if len(data) < MAX_PENDING_LINE:
                return data
            cut = len(data)
        self._emit(data[:cut])
        return data[cut:]

    def close(self) -> int:
        """Forward what is left of the output, let go of the descriptors, and
        return the command's status as ``Popen.returncode`` gives it.

        The command is not reaped: while its exited leader is a zombie, no
        other process group can take its number, so what is left in its
        group can still be signalled without hitting a stranger."""
        if self._pending:
            self._emit(self._pending)
            self._pending = b""
        for fd in (self._pipe, self._exit_watch, self._ready):
            if fd is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(fd)
        for fd in (self._exit_watch, self._ready):
            if fd is not None:
                os.close(fd)
        self._pipe = self._exit_watch = self._ready = None
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        if self._report is not None:
            got = b""
            with contextlib.suppress(OSError):
                got = os.read(self._report, 64)
            os.close(self._report)
            self._report = None
            if got.strip().isdigit():
                self.failed_process = int(got.strip())
        returncode = proctree.peek_exit_status(self.pid)
        assert returncode is not None
        if self._error_file is not None:
            if returncode != 0:
                self.error = read_error_file(self._error_file, self.failed_process)
            _remove_error_files(self._error_file, self._processes)
        if returncode == -signal.SIGKILL and not self.killed and self._oom_kills is not None:
            counted = (oomkills.oom_kills() or 0) > self._oom_kills
            # The count is the cgroup's: another command's process in it may
            # be the one killed. The kernel's log names the victim, where
            # it can be read; where not, the count is all there is.
            self.out_of_memory = counted and oomkills.killed_by_oom_killer(self.pid) is not False
        return returncode


ERROR_FILE = "TORCHELASTIC_ERROR_FILE"
"""Where torch's ``@record`` writes the exception that ended a process (as
torchrun sets it for each): read back when the command fails, so that the
verdict names the failing rank's exception, as torchrun's summary does."""
MAX_ERROR = 500
"""The most of that exception's message the exit report carries."""


ERROR_FILE_PREFIX = "tfmesos-error-"


def new_error_file() -> str:
    """A file for a task's command to write its exception to: not made
    (``@record`` makes it), named at random in the temporary directory."""
    import secrets
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"{ERROR_FILE_PREFIX}{secrets.token_hex(8)}.json")


def ours_error_file(env: Mapping[str, str]) -> str | None:
    """``TORCHELASTIC_ERROR_FILE`` where tfmesos chose it (one set in
    tfrun's environment is the user's, read by no one here)."""
    path = env.get(ERROR_FILE, "")
    return path if os.path.basename(path).startswith(ERROR_FILE_PREFIX) else None


def child_count(env: Mapping[str, str]) -> int:
    """How many processes the command is (``tfmesos.agent.nproc``'s, or 1)."""
    count = env.get(nproc_runner.ENV_NPROC, "1")
    return int(count) if count.isdigit() else 1


def error_file_of(path: str, local_rank: int | None) -> str:
    """The file a task's process of ``local_rank`` writes (None: the task's one)."""
    return path if local_rank is None else f"{path[: -len('.json')]}.{local_rank}.json"


def read_error_file(path: str, local_rank: int | None = None) -> str | None:
    """The exception's message in torch's error file (``{"message":
    {"message": "ValueError: ...", "extraInfo": ...}}``), its first line;
    None where there is no such file or it is not torch's."""
    try:
        with open(error_file_of(path, local_rank), "rb") as file:
            data = json.loads(file.read(1 << 20))
    except (OSError, ValueError):
        return None
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, dict):
        message = message.get("message")
    if not isinstance(message, str) or not message.strip():
        return None
    first = message.strip().splitlines()[0]
    return first if len(first) <= MAX_ERROR else first[: MAX_ERROR - 3] + "..."


def _remove_error_files(path: str, processes: int) -> None:
    ranks: list[int | None] = [None] if processes == 1 else list(range(processes))
    for rank in ranks:
        with contextlib.suppress(OSError):  # none written: the usual case
            os.unlink(error_file_of(path, rank))
