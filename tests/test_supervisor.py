"""One run of a command under the agent's supervision (:class:`CommandRun`),
driven by a loop written here: real processes, no launcher."""

from __future__ import annotations

import os
import selectors
import signal
import sys
import time
from collections.abc import Callable

import pytest

from tests.conftest import ROOT
from tfmesos.agent.supervisor import CommandRun
from tfmesos.common import proctree
from tfmesos.rendezvous import protocol

pytestmark = pytest.mark.e2e  # every test here starts processes

# A stand-in for tfmesos.agent.tfserver: it says it listens the way the server
# does, down the descriptor the agent hands it, after its last line (as the
# server prints its address first: a stop may come as soon as it says so),
# then serves until stopped.
SERVER = (
    "import os, signal; print('starting', flush=True); print('listening', flush=True); "
    f"fd = int(os.environ.pop({protocol.ENV_READY_FD!r})); os.write(fd, b'1'); os.close(fd); "
    "signal.pause()"
)
DIES_FIRST = "print('cannot bind', flush=True); raise SystemExit(3)"


def _start(
    code: str, output: list[bytes], on_ready: Callable[[], None]
) -> tuple[CommandRun, selectors.BaseSelector]:
    selector = selectors.DefaultSelector()
    run = CommandRun(
        [sys.executable, "-c", code],
        dict(os.environ),
        str(ROOT),
        selector,
        emit=output.append,
        note=lambda text: output.append(text.encode()),
        on_ready=on_ready,
    )
    return run, selector


def _drive(run: CommandRun, selector: selectors.BaseSelector) -> list[float | None]:
    """The agent's loop, less its own keys; the timeouts it waited with
    before the command was stopped."""
    timeouts = []
    while not run.poll():
        timeout = run.timeout()
        if run.stop_deadline is None:
            timeouts.append(timeout)
        for key, _ in selector.select(timeout):
            assert key.data is run
            run.handle(key.fd)
    return timeouts


def test_a_server_is_ready_when_it_says_so_and_is_waited_for_without_polling() -> None:
    output: list[bytes] = []
    said_ready: list[bool] = []

    def on_ready() -> None:
        said_ready.append(run.exited_at is None)
        run.stop()  # ready is what this test waited for

    run, selector = _start(SERVER, output, on_ready)
    timeouts = _drive(run, selector)
    code = run.close()
    run.proc.wait()
    assert said_ready == [True]
    assert code == -signal.SIGTERM
    assert b"".join(output) == b"starting\nlistening\n"
    probe = proctree.open_pidfd(os.getpid())
    if probe is None:
        pytest.skip("no pidfd on this system: the loop polls the exit status, by design")
    os.close(probe)
    # Until the stop, nothing to wake for but an event: no periodic wake-up
    # (which once dialled the server's port every 100 ms to see it listen).
    assert timeouts
    assert set(timeouts) == {None}


def test_a_server_that_exits_before_it_listens_is_never_ready() -> None:
    output: list[bytes] = []
    said_ready: list[bool] = []
    run, selector = _start(DIES_FIRST, output, lambda: said_ready.append(True))
    _drive(run, selector)
    code = run.close()
    run.proc.wait()
    assert code == 3
    assert said_ready == []
    assert output == [b"cannot bind\n"]
    assert selector.get_map() == {}  # every descriptor of the run let go


def _run_line(
    line: str, env: dict[str, str], cwd: str | None, death_signal: bool = True
) -> tuple[int, bytes]:
    """A shell command line run as the agent runs it (as the launcher runs
    it itself: without ``death_signal``): its status and output."""
    output: list[bytes] = []
    selector = selectors.DefaultSelector()
    run = CommandRun(
        line,
        env,
        cwd,
        selector,
        emit=output.append,
        note=lambda t: output.append(t.encode()),
        death_signal=death_signal,
    )
    _drive(run, selector)
    code = run.close()
    run.proc.wait()
    return code, b"".join(output)


def _through_the_shell(line: str, env: dict[str, str], cwd: str) -> tuple[int, bytes]:
    """What ``sh -c LINE`` prints and exits with, in the same place."""
    import subprocess

    done = subprocess.run(
        ["/bin/sh", "-c", line], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    return done.returncode, done.stdout


def test_a_plain_command_line_starts_without_a_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    started: list[object] = []
    real_popen = subprocess.Popen
    proctree.death_signal_program()  # looked for before, as the fork server does

    def recording_popen(args: object, **kwargs: object) -> object:
        started.append(args)
        return real_popen(args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("tfmesos.agent.supervisor.subprocess.Popen", recording_popen)
    code, output = _run_line("exec echo plain words", dict(os.environ), str(ROOT))
    assert (code, output) == (0, b"plain words\n")
    assert len(started) == 1
    # Exec'd as it is, or through setpriv (its parent-death signal): no shell.
    assert started[0] in (
        ["echo", "plain", "words"],
        [proctree.death_signal_program(), "--pdeathsig", "KILL", "--", "echo", "plain", "words"],
    )


@pytest.mark.parametrize(
    ("line", "env_change"),
    [
        ("exec env", {}),  # the environment as sh hands it on: PWD set
        ("exec env", {"PWD": "/nowhere"}),  # a PWD that is not the cwd, put right
        ("exec env", {"BAD.NAME": "1"}),  # a name sh drops
        ("exec no-such-command-here", {}),  # not found: the shell's message and 127
        ("exec ./not-executable", {}),  # found, not executable: 126
        ("exec ./no-shebang", {}),  # a script without #!: sh runs it
    ],
)
@pytest.mark.parametrize("run_by", ["agent", "launcher"])
def test_a_command_line_does_what_sh_c_does_with_it(
    line: str,
    env_change: dict[str, str],
    tmp_path: os.PathLike[str],
    run_by: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The launcher runs a command in its own directory (posix_spawn, where
    # it can) with no parent-death signal; an agent where it is told.
    here = os.fspath(tmp_path)
    monkeypatch.chdir(here)
    with open(os.path.join(here, "not-executable"), "w") as script:
        script.write("echo never\n")
    with open(os.path.join(here, "no-shebang"), "w") as script:
        script.write("echo run by sh; exit 4\n")
    os.chmod(os.path.join(here, "no-shebang"), 0o755)
    env = {"PATH": os.environ["PATH"], "HOME": here, **env_change}
    if run_by == "agent":
        code, output = _run_line(line, env, here)
    else:
        code, output = _run_line(line, env, None, death_signal=False)
    expected_code, expected = _through_the_shell(line, env, here)
    # The order of the variables is the shell's hash order: not a promise.
    assert (code, sorted(output.splitlines())) == (expected_code, sorted(expected.splitlines()))


# A stand-in agent: runs one command line under CommandRun, says its pid, waits.
AGENT_STAND_IN = """
import os, selectors, signal, sys
from tfmesos.agent.supervisor import CommandRun
run = CommandRun(sys.argv[1], dict(os.environ), None, selectors.DefaultSelector(), lambda b: None, print)
print(run.pid, flush=True)
signal.pause()
"""


@pytest.mark.parametrize("line", ["exec sleep 600", "exec sleep '600'"], ids=["plain", "shell"])
def test_a_command_dies_with_its_agent_killed_outright(line: str) -> None:
    import select
    import subprocess

    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT_STAND_IN, line], cwd=ROOT, stdout=subprocess.PIPE
    )
    assert agent.stdout is not None
    command_pid = int(agent.stdout.readline())
    watch = proctree.open_pidfd(command_pid)
    if watch is None:
        agent.kill()
        agent.wait()
        agent.stdout.close()
        pytest.skip("no pidfd on this system to wait on a process that is not a child")
    try:
        # Once the command runs, its death signal is asked for (by the
        # preexec_fn before the exec, or by setpriv before its own exec).
        deadline = time.monotonic() + 30
        while not _cmdline(command_pid).startswith(b"sleep\0") and time.monotonic() < deadline:
            select.select([], [], [], 0.01)
        agent.kill()  # as the OOM killer would: no chance to stop its command
        agent.wait()
        readable, _, _ = select.select([watch], [], [], 30)
        assert readable, "the command outlived its agent killed outright"
    finally:
        os.close(watch)
        agent.stdout.close()
        proctree.signal_pid(command_pid, signal.SIGKILL)


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read()
    except OSError:
        return b""


def test_a_command_the_launcher_runs_inherits_no_descriptor_but_its_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As Popen's close_fds: a descriptor tfrun was handed (one a shell left
    # open, say) is not handed on to the task.
    from tfmesos.agent import supervisor

    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    monkeypatch.setattr(supervisor, "_inherited", None)  # looked for afresh
    try:
        code, output = _run_line(
            "exec ls /proc/self/fd", dict(os.environ), None, death_signal=False
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    assert code == 0
    listed = sorted(int(fd) for fd in output.split())
    assert write_end not in listed
    assert listed[:3] == [0, 1, 2]
