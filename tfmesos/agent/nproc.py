"""Several processes per task (``tfrun --nproc-per-task N``): their ranks, and the
runner that starts them: ``python -m tfmesos.agent.nproc``.

A task is what torchrun calls a node: this runner starts its command N times,
each with its ``LOCAL_RANK`` and ``RANK`` (:func:`process_environment`) and
its own TensorFlow worker (:func:`tfmesos.common.taskenv.process_cluster`),
all in the task's process group so that stopping the task reaches them all.
The first failure stops the others; the runner ends as that process did and
reports its local rank (:data:`ENV_REPORT_FD`) for the verdict. Standard
library only."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from tfmesos.common import clusterfile, proctree, taskenv
from tfmesos.common.tasklog import TaskLog
from tfmesos.rendezvous import protocol

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ENV_INDEX_MARK",
    "ENV_LOGS",
    "ENV_LOG_MAX",
    "ENV_NAME",
    "ENV_NPROC",
    "ENV_REPORT_FD",
    "RANKED",
    "log_path",
    "main",
    "process_command",
    "process_environment",
    "runner_environment",
]

ENV_NPROC = "TFMESOS_NPROC"
"""How many processes the task runs: set for the runner alone."""
ENV_INDEX_MARK = "TFMESOS_NPROC_INDEX_MARK"
"""What stands for ``{task_index}`` in :data:`~tfmesos.rendezvous.protocol.ENV_COMMAND`: each process's
own TensorFlow task index replaces it (a random word, which no command
holds by chance)."""
ENV_NAME = "TFMESOS_NPROC_TASK"
"""The task's name, ``worker:1``: each process's prefix is ``[worker:1.K]``."""
ENV_LOGS = "TFMESOS_NPROC_LOGS"
"""Where each process's own log goes, ``{}`` standing for its local rank;
empty: nowhere but the task's."""
ENV_LOG_MAX = "TFMESOS_NPROC_LOG_MAX"
"""The cap on each process's log, as the task's (:class:`tfmesos.common.tasklog.TaskLog`)."""
ENV_REPORT_FD = "TFMESOS_NPROC_REPORT_FD"
"""A pipe the runner writes the local rank of the process that failed to."""
_RUNNER_ONLY = (
    ENV_NPROC,
    protocol.ENV_COMMAND,
    ENV_INDEX_MARK,
    ENV_NAME,
    ENV_LOGS,
    ENV_LOG_MAX,
    ENV_REPORT_FD,
)

RANKED = ("RANK", "ROLE_RANK", "JAX_PROCESS_ID", "TFMESOS_TASK_INDEX")
"""The task's variables that are its local rank 0's: each process adds its
own local rank to them (and to ``TF_CONFIG``'s task index)."""

READ_SIZE = 1 << 16
MAX_PENDING_LINE = 1 << 16
POLL_INTERVAL = 0.2
"""How often the runner looks whether a process exited that closed its output."""
PIPE_GRACE = 1.0
"""How long a process's output may stay open once every process has exited."""


def process_environment(task_env: Mapping[str, str], local_rank: int) -> dict[str, str]:
    """One process's environment, from its task's: ``LOCAL_RANK`` is its
    own, and ``RANK``, ``ROLE_RANK`` and ``JAX_PROCESS_ID`` (the task's local
    rank 0's) grow by it: ``RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK``,
    as torchrun's."""
    env = dict(task_env)
    for name in _RUNNER_ONLY:
        env.pop(name, None)
    for name in RANKED:
        if name in task_env:
            env[name] = str(int(task_env[name]) + local_rank)
    env["LOCAL_RANK"] = str(local_rank)
    tf_config = task_env.get("TF_CONFIG")
    if tf_config:
        env["TF_CONFIG"] = taskenv.process_tf_config(tf_config, local_rank)
    cluster_file = task_env.get(clusterfile.ENV_CLUSTER_FILE)
    if cluster_file:  # --cluster-file: each process's own (clusterfile.move_to_file)
        env[clusterfile.ENV_CLUSTER_FILE] = clusterfile.process_path(cluster_file, local_rank)
    error_file = env.get("TORCHELASTIC_ERROR_FILE", "")
    if os.path.basename(error_file).startswith("tfmesos-error-"):  # the agent's: one a process
        env["TORCHELASTIC_ERROR_FILE"] = f"{error_file[: -len('.json')]}.{local_rank}.json"
    return env


def process_command(task_env: Mapping[str, str], local_rank: int) -> str:
    """The command line of the task's process of ``local_rank``: the task's,
    its ``{task_index}`` (:data:`ENV_INDEX_MARK`) the process's own."""
    command = task_env[protocol.ENV_COMMAND]
    mark = task_env.get(ENV_INDEX_MARK)
    if mark:
        index = int(task_env.get("TFMESOS_TASK_INDEX") or 0) + local_rank
        command = command.replace(mark, str(index))
    return command


def log_path(task_log: str | None, sandbox: str | None) -> str:
    """Where each process's log goes, ``{}`` for its local rank: beside the
    task's log (``worker.1.local-rank-{}.log``), else in the Mesos sandbox;
    empty where the task keeps no log."""
    if task_log and task_log != os.devnull:
        stem = task_log[: -len(".log")] if task_log.endswith(".log") else task_log
        return stem.replace("{", "{{").replace("}", "}}") + ".local-rank-{}.log"
    if sandbox:
        return os.path.join(sandbox.replace("{", "{{").replace("}", "}}"), "local-rank-{}.log")
    return ""


def runner_environment(
    env: dict[str, str],
    nproc: int,
    command: str,
    task_name: str,
    logs: str,
    log_max: str,
    index_mark: str = "",
) -> list[str]:
    """Set what the runner reads in ``env``; return its argv."""
    env[ENV_NPROC] = str(nproc)
    env[protocol.ENV_COMMAND] = command
    if index_mark:
        env[ENV_INDEX_MARK] = index_mark
    env[ENV_NAME] = task_name
    env[ENV_LOGS] = logs
    env[ENV_LOG_MAX] = log_max
    return proctree.bootstrap_command("tfmesos.agent.nproc")


class _Process:
    """One of the task's processes: its output, its log, its end."""

    def __init__(
        self, local_rank: int, proc: subprocess.Popen[bytes], prefix: bytes, log: TaskLog | None
    ) -> None:
        self.local_rank = local_rank
        self.proc = proc
        self.prefix = prefix
        self.log = log
        self.pending = b""
        assert proc.stdout is not None
        self.pipe: int | None = proc.stdout.fileno()
        os.set_blocking(self.pipe, False)
        self.returncode: int | None = None

    def forward(self, data: bytes, final: bool = False) -> None:
        data = self.pending + data
        cut = data.rfind(b"\n") + 1
        if (final and cut < len(data)) or (cut == 0 and len(data) >= MAX_PENDING_LINE):
            data += b"\n"
            cut = len(data)
        self.pending = data[cut:]
        whole = data[:cut]
        if not whole:
            return
        if self.log is not None:
            self.log.write(whole)
        body = whole[:-1]
        _write_out(self.prefix + body.replace(b"\n", b"\n" + self.prefix) + b"\n")


def _write_out(data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(1, view) :]
        except OSError:
            return  # nobody reads: the processes' logs keep it


def _note(text: str) -> None:
    _write_out(f"[tfmesos agent] {text}\n".encode())


def _start(command: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        command,
        shell=True,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # In the runner's process group (the task's), SIGKILLed should the
        # runner die outright.
        preexec_fn=proctree.dying_with_parent,
    )


def _others(count: int) -> str:
    return "other process" if count == 1 else f"{count} other processes"


def _describe(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def run(environ: dict[str, str]) -> int:
    """Run the task's processes to their end; return the runner's
    ``Popen.returncode``."""
    return _Runner(environ).run()


class _Runner:
    """The task's processes, their output and their end, in one select loop."""

    def __init__(self, environ: dict[str, str]) -> None:
        self.name = environ.get(ENV_NAME, "task")
        self.report_fd = environ.get(ENV_REPORT_FD, "")
        self.received: list[int] = []
        self.failed: _Process | None = None
        self.kill_at: float | None = None
        self.all_exited_at: float | None = None
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.wake_r, selectors.EVENT_READ, None)
        self.processes = [
            self._start(environ, local_rank) for local_rank in range(int(environ[ENV_NPROC]))
        ]

    def _on_signal(self, signum: int, frame: object) -> None:
        # The task is being stopped: its processes, in this group, were sent
        # the signal too. This runner waits for them, and their last words.
        self.received.append(signum)

    def _start(self, environ: dict[str, str], local_rank: int) -> _Process:
        cap_text = environ.get(ENV_LOG_MAX, "")
        logs = environ.get(ENV_LOGS, "")
        log = None
        if logs:
            path = logs.format(local_rank)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            except OSError as exc:
                _note(f"cannot keep {self.name}.{local_rank}'s log in {path}: {exc.strerror}")
            else:
                log = TaskLog(path, int(cap_text) if cap_text.isdigit() else 0, (fd,))
        proc = _start(
            process_command(environ, local_rank), process_environment(environ, local_rank)
        )
        process = _Process(local_rank, proc, f"[{self.name}.{local_rank}] ".encode(), log)
        assert process.pipe is not None
        self.selector.register(process.pipe, selectors.EVENT_READ, process)
        return process

    def run(self) -> int:
        while True:
            now = time.monotonic()
            self._reap()
            if self._finished(now):
                break
            if self.kill_at is not None and now >= self.kill_at:
                for process in self.processes:
                    if process.proc.poll() is None:
                        proctree.signal_pid(process.proc.pid, signal.SIGKILL)
                self.kill_at = None
            self._pump()
        for process in self.processes:
            process.forward(b"", final=True)
        failed = self.failed or next((p for p in self.processes if p.returncode != 0), None)
        if failed is None:
            return 0
        assert failed.returncode is not None
        return failed.returncode

    def _reap(self) -> None:
        """Note each process that exited; stop the others at the first failure."""
        for process in self.processes:
            if process.returncode is not None or process.proc.poll() is None:
                continue
            process.returncode = process.proc.returncode
            if process.returncode != 0 and self.failed is None and not self.received:
                self.failed = process
                # Its last words before the note on its end.
                while process.pipe is not None and _read(self.selector, process):
                    pass
                self.kill_at = _stop_others(self.processes, process, self.name, self.report_fd)

    def _finished(self, now: float) -> bool:
        if any(p.returncode is None for p in self.processes):
            return False
        if all(p.pipe is None for p in self.processes):
            return True
        # What a process left behind may hold its output open: given up on
        # a moment after the last one exited, as the agent does.
        self.all_exited_at = self.all_exited_at or now
        return now - self.all_exited_at >= PIPE_GRACE

    def _pump(self) -> None:
        for key, _ in self.selector.select(POLL_INTERVAL):
            if key.data is None:
                with contextlib.suppress(BlockingIOError):
                    os.read(self.wake_r, 64)
            else:
                _read(self.selector, key.data)


def _read(selector: selectors.BaseSelector, process: _Process) -> bool:
    """Forward what the process's output holds; False once nothing is there."""
    assert process.pipe is not None
    try:
        data = os.read(process.pipe, READ_SIZE)
    except BlockingIOError:
        return False
    if data:
        process.forward(data)
        return True
    process.forward(b"", final=True)
    selector.unregister(process.pipe)
    assert process.proc.stdout is not None
    process.proc.stdout.close()
    process.pipe = None
    return False


def _stop_others(processes: list[_Process], failed: _Process, name: str, report_fd: str) -> float:
    """``failed`` is the task's first process to fail: say which, down the
    report pipe and in the output, and stop the others (SIGTERM to the
    task's group, this runner included, which waits for them); return when
    what is left is SIGKILLed."""
    assert failed.returncode is not None
    if report_fd:
        with contextlib.suppress(OSError):
            os.write(int(report_fd), f"{failed.local_rank}\n".encode())
    others = sum(1 for p in processes if p.proc.poll() is None)
    _note(
        f"{name} (local rank {failed.local_rank}) {_describe(failed.returncode)}"
        + (f": stopping the task's {_others(others)}" if others else "")
    )
    if others:
        proctree.signal_group(os.getpgrp(), signal.SIGTERM)
    return time.monotonic() + protocol.STOP_GRACE


def main() -> int:
    # Several descriptors a process: up to the hard limit, which needs no privilege.
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    returncode = run(dict(os.environ))
    if returncode < 0:
        # Ended as the process that failed did: killed by its signal. SIGKILL's
        # disposition cannot be changed (signal.signal raises), nor needs to be.
        if -returncode != signal.SIGKILL:
            signal.signal(-returncode, signal.SIG_DFL)
        sys.stdout.flush()
        os.kill(os.getpid(), -returncode)
        return 128 - returncode
    return returncode


if __name__ == "__main__":
    sys.exit(main())
