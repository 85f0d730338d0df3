"""The sweeper (tfmesos/agent/sweeper.py): what a launcher that dies outright
leaves of the tasks it ran itself is SIGKILLed; a launcher that says goodbye
leaves everything alone. Real processes, the sweeper as the local backend
starts it (tfmesos.backends.local.directtask.Sweeper's command line)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from tfmesos.backends.local.forkstart import OWN_PROCESS_GROUP
from tfmesos.common.proctree import bootstrap_command

pytestmark = pytest.mark.e2e

SLEEPER = "import os, sys, time; print('up', flush=True); time.sleep(600)"
LEAVER = "import os, sys, time; os.setsid(); print('up', flush=True); time.sleep(600)"


@contextlib.contextmanager
def _sleeper(code: str, mark: str, own_group: bool = True) -> Iterator[subprocess.Popen[bytes]]:
    """A process carrying ``TFMESOS_TASK_ID=mark``, in a group of its own (as
    a task's command is) unless not ``own_group``, once it is up; killed
    at the end whatever happened."""
    env = {**os.environ, "TFMESOS_TASK_ID": mark}
    group = OWN_PROCESS_GROUP if own_group else {}
    with subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, env=env, **group
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == b"up\n"
            yield proc
        finally:
            proc.kill()


def _sweeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(bootstrap_command("tfmesos.agent.sweeper"), stdin=subprocess.PIPE)


def _gone(pid: int, timeout: float = 10.0) -> bool:
    """Whether ``pid`` has exited (a zombie counts: it runs no more) within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


def test_its_stdin_ending_without_goodbye_kills_the_groups_and_what_carries_a_task_id() -> None:
    # The command in its group; a helper of another task that left its group
    # (setsid), found by its mark; a process of no task, left alone.
    mark, other = f"sweep-{os.getpid()}", f"other-{os.getpid()}"
    with (
        _sleeper(SLEEPER, mark) as command,
        _sleeper(LEAVER, mark, own_group=False) as leaver,  # a group leader cannot setsid
        _sleeper(SLEEPER, other) as bystander,
        _sweeper() as sweeper,
    ):
        assert sweeper.stdin is not None
        sweeper.stdin.write(f"carries TFMESOS_TASK_ID={mark}\ngroup {command.pid}\n".encode())
        sweeper.stdin.close()  # as the launcher's death closes it
        assert sweeper.wait(timeout=30) == 0
        assert _gone(command.pid), "the command's group outlived the launcher"
        assert _gone(leaver.pid), "a process that carries the task's id outlived the launcher"
        assert command.wait() == leaver.wait() == -9
        assert bystander.poll() is None, "a process of no task of the job was killed"


@pytest.mark.parametrize(
    "said",
    [
        # The launcher ended normally.
        "carries TFMESOS_TASK_ID={mark}\ngroup {pid}\nbye\n",
        # The group is over: its number may be another group's by then.
        "group {pid}\ndone {pid}\n",
    ],
    ids=["goodbye", "group-done"],
)
def test_what_it_was_told_is_over_is_left_alone(said: str) -> None:
    mark = f"alone-{os.getpid()}"
    with _sleeper(SLEEPER, mark) as command, _sweeper() as sweeper:
        assert sweeper.stdin is not None
        sweeper.stdin.write(said.format(mark=mark, pid=command.pid).encode())
        sweeper.stdin.close()
        assert sweeper.wait(timeout=30) == 0
        assert command.poll() is None


def test_what_moved_to_another_group_of_the_commands_session_is_killed_too() -> None:
    # A command leads its session (tfmesos.agent.supervisor). Its helper
    # moved to a group of its own in that session, cleared its environment
    # (no task id to find it by), and outlived the command that started it.
    helper = "import os, time; os.setpgid(0, 0); print('up', flush=True); time.sleep(600)"
    leader = (
        "import subprocess, sys\n"
        f"helper = subprocess.Popen(['env', '-i', sys.executable, '-c', {helper!r}],"
        " stdout=subprocess.PIPE)\n"
        "assert helper.stdout.readline() == b'up\\n'\n"
        "print(helper.pid, flush=True)\n"
    )
    mark = f"session-{os.getpid()}"
    env = {**os.environ, "TFMESOS_TASK_ID": mark}
    with subprocess.Popen(
        [sys.executable, "-c", leader], stdout=subprocess.PIPE, env=env, start_new_session=True
    ) as command:
        assert command.stdout is not None
        helper_pid = int(command.stdout.readline())
        try:
            assert command.wait(timeout=30) == 0  # the helper lives on, alone in the session
            assert os.getsid(helper_pid) == command.pid != os.getpgid(helper_pid)
            with _sweeper() as sweeper:
                assert sweeper.stdin is not None
                sweeper.stdin.write(
                    f"carries TFMESOS_TASK_ID={mark}\ngroup {command.pid}\n".encode()
                )
                sweeper.stdin.close()
                assert sweeper.wait(timeout=30) == 0
            assert _gone(helper_pid), "a helper in the command's session outlived the launcher"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(helper_pid, 9)
