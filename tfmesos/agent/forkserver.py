"""The local backend's fork server: one interpreter that has imported the agent
and forks a child per task, cheaper than a new interpreter each. Standard
library only.

Protocol, one JSON object per line. Requests on stdin::

    {"task_id": ..., "env": {...}, "cwd": ... or null, "log": path}

Replies on stdout::

    {"ready": N}                           the server (pid N) takes requests
    {"started": task_id, "pid": N}         the agent runs
    {"failed": task_id, "error": "..."}    it could not be forked
    {"exited": N, "status": S}             agent N ended; S as Popen.returncode

Each child is set up as a separately started agent would be. As subreaper, the
server kills what an agent killed outright leaves; it ends with its stdin.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import selectors
import signal
import sys
from typing import TYPE_CHECKING

from tfmesos.agent.main import main as agent_main
from tfmesos.common import procfs, proctree
from tfmesos.rendezvous import protocol

if TYPE_CHECKING:
    from typing import Any

__all__ = ["main"]

_PR_SET_NAME = 15


def main(launcher_pid: int) -> int:
    if not proctree.exit_with_parent(launcher_pid):
        return 1
    _name_process(b"tfmesos-forks")
    proctree.become_subreaper()
    # Looked for once here rather than in every agent it forks.
    proctree.death_signal_program()
    wakeup_r, wakeup_w = os.pipe()
    os.set_blocking(wakeup_r, False)
    os.set_blocking(wakeup_w, False)
    signal.set_wakeup_fd(wakeup_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ, "requests")
    selector.register(wakeup_r, selectors.EVENT_READ, "children")
    _reply({"ready": os.getpid()})
    pending = b""
    agents: set[int] = set()
    while True:
        for key, _ in selector.select():
            if key.data == "children":
                _drain(wakeup_r)
                _reap(agents)
                _end_orphans(agents)
                continue
            data = os.read(0, 1 << 16)
            if not data:  # the launcher closed us: what is left gets SIGTERM
                # Without the interpreter's teardown of ~90 modules: the
                # launcher waits for this exit, the last step of every local
                # job, and nothing here is buffered (replies are os.write's).
                os._exit(0)
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    pid = _start(json.loads(line), (wakeup_r, wakeup_w))
                    if pid is not None:
                        agents.add(pid)


def _start(request: dict[str, Any], server_fds: tuple[int, int]) -> int | None:
    task_id = str(request["task_id"])
    env = {str(k): str(v) for k, v in request["env"].items()}
    env[protocol.ENV_PARENT_PID] = str(os.getpid())  # the child's parent is this server
    # What the server holds goes to the collector's permanent generation: a
    # child's collections then never touch (and copy) the pages of the
    # objects it inherited. ~5 ms of CPU per agent (docs/benchmarks.md, "The
    # fixed cost").
    gc.freeze()
    try:
        pid = os.fork()
    except OSError as exc:
        _reply({"failed": task_id, "error": str(exc)})
        return None
    if pid == 0:
        _become_agent(request, env)  # never returns
    # Also here, as shells do, so that the group exists before the launcher
    # hears of the agent and may signal it.
    with contextlib.suppress(OSError):  # it has exec'ed or exited meanwhile
        os.setpgid(pid, pid)
    _reply({"started": task_id, "pid": pid})
    return pid


def _become_agent(request: dict[str, Any], env: dict[str, str]) -> None:
    code = 1
    try:
        os.setpgid(0, 0)
        # Its command line is the server's: the name tells it apart in ps/top.
        _name_process(b"tfmesos-agent")
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        _close_inherited()  # the server's pipes and selector
        if request.get("cwd"):
            os.chdir(request["cwd"])
        _become_environment(env)
        code = agent_main(env)
    except BaseException:
        import traceback  # here: the server does not need it (~5 ms to import)

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # nothing more can be said
                stream.flush()
        os._exit(code)


def _become_environment(env: dict[str, str]) -> None:
    """Make ``env`` this process's environment, changing only what differs from
    the server's: each putenv and unsetenv scans the whole C environment."""
    environ = os.environ
    for name in [name for name in environ if name not in env]:
        del environ[name]
    for name, value in env.items():
        if environ.get(name) != value:
            environ[name] = value


def _name_process(name: bytes) -> None:
    """Set the name ps, top and /proc/PID/comm show (at most 15 bytes)."""
    if not sys.platform.startswith("linux"):
        return
    proctree.libc().prctl(_PR_SET_NAME, name[:15], 0, 0, 0)


def _close_inherited() -> None:
    """Close every descriptor above stderr, listed rather than ranged over (limits
    reach millions)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        os.closerange(3, 1 << 16)
        return
    for fd in fds:
        if fd > 2:
            with contextlib.suppress(OSError):  # the listing's own, already gone
                os.close(fd)


def _reap(agents: set[int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in agents:  # not an orphan of a dead agent's
            agents.discard(pid)
            _reply({"exited": pid, "status": os.waitstatus_to_exitcode(status)})


def _end_orphans(agents: set[int]) -> None:
    """Kill every child of this server that is not one of its agents, with all
    below it: what an agent that died outright left here. Their own orphans
    come here in turn."""
    try:
        orphans = [pid for pid in procfs.children(os.getpid()) if pid not in agents]
    except OSError:  # no /proc: the launcher looks for them by their task id
        return
    for orphan in orphans:
        try:
            below = [p.pid for p in procfs.descendants(orphan)]
        except OSError:
            below = []
        for pid in [orphan, *below]:
            proctree.signal_pid(pid, signal.SIGKILL)


def _reply(message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode()
    try:
        while data:
            data = data[os.write(1, data) :]
    except BrokenPipeError:  # the launcher is gone; PDEATHSIG will end us
        pass


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
