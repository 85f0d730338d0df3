"""How a ``tfrun`` job ends, as its user sees it: the verdict when it
succeeds, a task's "finished" after its last line, coloured prefixes on a
terminal only, and exit statuses that say who failed. The scenarios of the
first section run on every backend (the ``job_backend`` fixture): every
output line arrives, a failing worker fails the job naming it, a signal to
tfrun stops every task, and nothing is left behind."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import pty
import re
import signal
import subprocess
import time

import psutil
import pytest

from tests.conftest import (
    EVERY_BACKEND,
    PY,
    ROOT,
    JobBackend,
    JobProcesses,
    py,
    run_tfrun,
    start_tfrun,
    tfrun_argv,
    wait_until,
)
from tests.jobevents import JobEvents
from tfmesos import ClusterSpec, Job
from tfmesos.backends.local.backend import LocalBackend

ESC = "\x1b["


# -- on every backend --------------------------------------------------------


@pytest.mark.parametrize(
    ("job_backend", "workers"),
    [("local", 4), ("test-master", 4), ("slurm", 3)],  # three fit Slurm's node
    indirect=["job_backend"],
)
def test_no_output_line_is_lost(
    job_backend: JobBackend, job_procs: JobProcesses, workers: int
) -> None:
    lines = 1_000_000 // workers  # a million lines from all the tasks, most of them remote
    code = (
        "import sys\n"
        f"w = sys.stdout.write\nfor i in range({lines}): w(f'{{task_index}} line {{{{i}}}}\\n')\n"
        "sys.stdout.write('no newline at the end')"
    )
    result = run_tfrun(
        *job_backend.flags, "-w", str(workers), "-s", "0", "--worker-logs", "*", "--", *py(code),
        env=job_procs.env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for index in range(workers):
        got = [line for line in result.stdout.splitlines() if line.startswith(f"[worker:{index}] ")]
        expected = [f"[worker:{index}] {index} line {i}" for i in range(lines)]
        assert got[:-1] == expected  # all of them, in order
        assert got[-1] == f"[worker:{index}] no newline at the end"
    assert job_procs.wait_gone(10) == []


@pytest.mark.parametrize("job_backend", EVERY_BACKEND, indirect=True)
def test_a_failing_worker_fails_the_job_naming_it(
    job_backend: JobBackend, job_procs: JobProcesses, job_events: JobEvents
) -> None:
    code = (
        "import sys, time\n"
        "if '{job_name}:{task_index}' == 'worker:1':\n"
        "    time.sleep(1); print('about to fail', flush=True); print('boom', file=sys.stderr)\n"
        "    sys.exit(3)\n"
        "time.sleep(3600)\n"  # past run_tfrun's hang guard: the others must be stopped
    )
    result = run_tfrun(
        *job_backend.flags, *job_events.flag, "-w", "2", "-s", "1", "--", *py(code),
        env=job_procs.env(),
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    verdict = job_events.verdict()
    assert (verdict["result"], verdict["exit_status"]) == ("failed", 3), result.stderr
    failed = job_events.exited()["worker:1"]
    assert (failed["exit_code"], failed["signal"], failed["action"]) == (3, None, "fail job")
    host = failed["host"]
    assert host == (job_backend.host or host) and host, failed  # on Slurm, its node
    # The wording a user sees (the one check of a failed task's verdict):
    # the task, its host, its status and its last output.
    said = result.stderr[result.stderr.index("job failed:") :]
    assert said.startswith(f"job failed: task worker:1 on {host} exited with status 3"), said
    assert "| about to fail" in said and "| boom" in said, said
    # tfrun exits once the backend has let go of the job.
    job_backend.assert_left_nothing(job_events)
    assert job_procs.wait_gone(10) == []


SIGNALS_ON = {
    "local": (signal.SIGINT, signal.SIGTERM, signal.SIGHUP),
    "test-master": (signal.SIGINT, signal.SIGTERM),
    "real-mesos": (signal.SIGINT, signal.SIGTERM),
    "slurm": (signal.SIGTERM,),
}


def commands_up(job_procs: JobProcesses, code: str) -> int:
    """How many of the job's processes run ``python -c code`` (not the
    shells or agents that start them)."""
    found = 0
    for proc in job_procs.alive():
        with contextlib.suppress(psutil.Error):
            found += proc.cmdline()[1:] == ["-c", code]
    return found


@pytest.mark.parametrize(
    ("job_backend", "signum"),
    [
        pytest.param(backend, signum, id=f"{backend}-{signum.name}")
        for backend in EVERY_BACKEND
        for signum in SIGNALS_ON[backend]
    ],
    indirect=["job_backend"],
)
def test_a_signal_stops_every_task(
    job_backend: JobBackend, job_procs: JobProcesses, signum: signal.Signals
) -> None:
    code = "import time; print('up', flush=True); time.sleep(600)"
    proc, _ = start_tfrun(
        *job_backend.flags, "-w", "2", "-s", "1", "--", *py(code), env=job_procs.env()
    )
    wait_until(lambda: commands_up(job_procs, code) == 3, "every task's command up")
    proc.send_signal(signum)
    status = 128 + signum
    assert proc.wait(timeout=60) == status
    verdict = proc.events.verdict()
    assert (verdict["result"], verdict["exit_status"], verdict["signal"]) == (
        "interrupted",
        status,
        signum.name,
    ), verdict
    assert job_procs.wait_gone(15) == []
    job_backend.assert_left_nothing(proc.events)


def read_slowly(proc: subprocess.Popen[bytes], pause: float = 0.002) -> list[str]:
    """All of a process's stdout, read a little at a time, like a terminal
    slower than the job's output."""
    assert isinstance(proc.stdout, io.BufferedReader)
    chunks = []
    while data := proc.stdout.read1(16 << 10):
        chunks.append(data)
        time.sleep(pause)
    return b"".join(chunks).decode().splitlines()


def run_on_a_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run with stdout and stderr on one pseudo-terminal; what it showed."""
    controller, terminal = pty.openpty()
    shown = bytearray()
    try:
        with subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal, env=env, cwd=ROOT
        ) as proc:  # reaped at the end, killed first if a failure left it running
            try:
                os.close(terminal)
                terminal = -1
                while True:
                    try:
                        data = os.read(controller, 1 << 16)
                    except OSError:  # EIO: every writer closed the terminal
                        break
                    if not data:
                        break
                    shown += data
                status = proc.wait(timeout=120)
            finally:
                if proc.poll() is None:
                    proc.kill()
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)
    return status, shown.decode().replace("\r\n", "\n")


# Worker 0 prints ~4 MiB, then a last line, and exits 0.
FLOOD_THEN_LAST_LINE = (
    "import sys\n"
    "w = sys.stdout.write\n"
    "for i in range(40_000): w(f'line {{i}} ' + 'x' * 90 + '\\n')\n"
    "print('last line', flush=True)\n"
)


def test_a_tasks_finished_comes_after_its_last_output_line(job_procs: JobProcesses) -> None:
    # stdout and stderr in one pipe, as on a terminal, read more slowly than
    # the task prints: when the task exits, its last lines still wait in
    # tfrun's console buffer. "finished" was logged to stderr at once, ahead
    # of them; it must wait for them.
    with subprocess.Popen(
        tfrun_argv("-w", "1", "-s", "0", "--", *py(FLOOD_THEN_LAST_LINE)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=job_procs.env(),
        cwd=ROOT,
    ) as proc:  # its pipe closed at the end
        lines = read_slowly(proc)
        assert proc.wait(timeout=60) == 0, lines[-20:]
    last = lines.index("[worker:0] last line")
    finished = next(i for i, line in enumerate(lines) if "task worker:0 finished" in line)
    assert last < finished, lines[finished - 2 : finished + 2]
    assert lines[last + 1 :] == [line for line in lines[last + 1 :] if line.startswith("[tfrun]")]
    assert job_procs.wait_gone(5) == []


def test_a_job_that_succeeds_says_so_last_with_each_tasks_end(
    job_procs: JobProcesses, job_events: JobEvents
) -> None:
    code = "import time; time.sleep(600 if '{job_name}' == 'ps' else 0.2); print('done')"
    result = run_tfrun(*job_events.flag, "-w", "2", "-s", "1", "--", *py(code), env=job_procs.env())
    assert result.returncode == 0, result.stderr
    [stopped] = job_events.of("job_stopped")
    assert stopped["outcomes"] == {
        "ps:0": "stopped by tfrun",
        "worker:0": "exited 0",
        "worker:1": "exited 0",
    }
    # The wording a user sees (the one check of a succeeded job's verdict),
    # last but one: the last line names the logs (test_local_jobs checks it).
    verdict = result.stderr.splitlines()[-2]
    assert re.fullmatch(
        r"\[tfrun\] job succeeded in [0-9hm.]+s: worker:0 and worker:1 exited 0; "
        r"ps:0 stopped by tfrun",
        verdict,
    ), verdict
    assert ESC not in result.stderr and ESC not in result.stdout  # pipes: no colour
    assert job_procs.wait_gone(5) == []


def test_on_a_terminal_prefixes_are_coloured_and_the_end_comes_in_order(
    job_procs: JobProcesses, job_events: JobEvents
) -> None:
    code = "import time; time.sleep(600 if '{job_name}' == 'ps' else 0.2); print('hello')"
    env = {k: v for k, v in job_procs.env().items() if k not in ("NO_COLOR", "TERM")}
    argv = tfrun_argv(*job_events.flag, "-w", "2", "-s", "1", "--worker-logs", "*", "--", *py(code))
    status, shown = run_on_a_terminal(argv, env)
    assert status == 0, shown
    lines = shown.splitlines()
    worker_0 = lines.index(f"{ESC}36m[worker:0]{ESC}0m hello")
    worker_1 = lines.index(f"{ESC}35m[worker:1]{ESC}0m hello")  # a colour of its own
    for task, shown_at in (("worker:0", worker_0), ("worker:1", worker_1)):
        assert lines.index(f"[tfrun] task {task} finished (exit 0)") > shown_at, shown
    # The verdict, last but one, its first words green.
    green = re.fullmatch(
        rf"\[tfrun\] {re.escape(ESC)}1;32m(job succeeded in [^:]+){re.escape(ESC)}0m(.*)", lines[-2]
    )
    assert green is not None, shown
    assert green[1] + green[2] == job_events.verdict()["message"], shown
    assert lines[-1].startswith("[tfrun] the full output of each task is in "), shown
    # NO_COLOR, set to anything, turns colour off on a terminal too.
    status, shown = run_on_a_terminal(argv, {**env, "NO_COLOR": "1"})
    assert status == 0, shown
    assert "[worker:0] hello" in shown.splitlines() and ESC not in shown, shown
    assert job_procs.wait_gone(5) == []


def test_force_color_colours_a_pipe_and_no_color_wins_over_it(job_procs: JobProcesses) -> None:
    args = ("-w", "1", "-s", "0", "--", *py("print('hello')"))
    result = run_tfrun(*args, env=job_procs.env(FORCE_COLOR="1"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{ESC}36m[worker:0]{ESC}0m hello\n"
    result = run_tfrun(*args, env=job_procs.env(FORCE_COLOR="1", NO_COLOR="1"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[worker:0] hello\n"


# -- exit statuses ----------------------------------------------------------


@pytest.mark.parametrize(
    ("task_status", "tfrun_status"),
    [
        (3, 3),  # a task's own status passes through
        (2, 1),  # its argparse: not tfrun's bad usage (2)
        (124, 1),  # not "the cluster never came up"
        (125, 1),  # not "tfrun itself failed"
        (126, 126),  # its command could not run, as timeout(1) says it
        (130, 1),  # not "tfrun was interrupted" (128 + SIGINT)
        (143, 1),  # nor 128 + SIGTERM
        (255, 255),
    ],
)
def test_a_failed_tasks_status_never_reads_as_tfruns_own(
    job_procs: JobProcesses, job_events: JobEvents, task_status: int, tfrun_status: int
) -> None:
    result = run_tfrun(
        *job_events.flag, "-w", "1", "-s", "0", "--", f"exit {task_status}", env=job_procs.env()
    )
    assert result.returncode == tfrun_status, result.stderr
    verdict = job_events.verdict()
    assert (verdict["result"], verdict["exit_status"]) == ("failed", tfrun_status), verdict
    # The task's own status is kept whatever tfrun exits with.
    assert job_events.exited()["worker:0"]["exit_code"] == task_status


def test_a_tasks_own_77_never_reads_as_refused_credentials() -> None:
    """77 is tfrun's own now (the master refused the credentials): a task
    that exits 77 makes tfrun exit 1, as with tfrun's other statuses."""
    from tfmesos.errors import EXIT_NOT_PERMITTED, task_status

    assert EXIT_NOT_PERMITTED == 77
    assert task_status(77) == 1
    assert task_status(78) == 78


def test_a_command_not_found_is_127_as_the_shell_says(
    job_procs: JobProcesses, job_events: JobEvents
) -> None:
    result = run_tfrun(
        *job_events.flag, "-w", "1", "-s", "0", "--", "no-such-command-here", env=job_procs.env()
    )
    assert result.returncode == 127, result.stderr
    assert job_events.exited()["worker:0"]["exit_code"] == 127
    assert "no-such-command-here: not found" in result.stderr  # the shell's word, in the tail


SLEEPS = (PY, "-c", "import time; time.sleep(30)")


class _NeverStarts(LocalBackend):
    """Accepts launches and starts nothing: the cluster never comes up."""

    async def launch(self, launch: object) -> None:
        return None


class _FailsOnceStarted(LocalBackend):
    """Reports itself failed (as the Mesos backend does when it loses the
    master for good) once the job is running."""

    async def start(self, sink):  # type: ignore[no-untyped-def]
        await super().start(sink)
        from tfmesos.backends.base import BackendFailed

        asyncio.get_running_loop().call_later(1.0, sink, BackendFailed("master gone for good"))


class _Broken(LocalBackend):
    """Fails as a bug in tfrun would."""

    async def start(self, sink):  # type: ignore[no-untyped-def]
        raise RuntimeError("a bug in tfrun")


@pytest.mark.parametrize(
    ("backend", "status", "result", "said"),
    [
        (
            _NeverStarts,
            124,
            "never up",
            "the cluster did not come up within 1s: still waiting for worker:0",
        ),
        (
            _FailsOnceStarted,
            125,
            "error",
            "tfrun: error: the local backend failed: master gone for good",
        ),
        (
            _Broken,
            125,
            "error",
            "RuntimeError: a bug in tfrun\ntfrun: error: tfrun itself failed (above)",
        ),
    ],
    ids=["never-up", "tfrun-failed", "tfrun-bug"],
)
@pytest.mark.e2e
def test_what_tfrun_itself_reports_has_statuses_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    job_events: JobEvents,
    backend: type[LocalBackend],
    status: int,
    result: str,
    said: str,
) -> None:
    from tfmesos.cli import main as cli
    from tfmesos.launcher import run

    monkeypatch.setattr(
        run, "create_backend", lambda _, spec, options: backend.from_options(spec, options)
    )
    code = cli.main([*job_events.flag, "-w", "1", "-s", "0", "--timeout", "1", "--", *SLEEPS])
    assert code == status
    verdict = job_events.verdict()
    assert (verdict["result"], verdict["exit_status"]) == (result, status), verdict
    # The wording a user sees (the one check of each of these reports):
    text = capsys.readouterr().err + caplog.text
    assert said in text, text
    # Said once, clearly (issue 40, item 16: not "the cluster did not come
    # up: the cluster was not up after 20s").
    assert text.count("the cluster was not up") == 0, text


def test_the_verdict_names_runs_of_many_tasks_as_ranges() -> None:
    from tfmesos.launcher.verdict import ends as _ends

    outcomes = {"ps:0": "stopped by tfrun", "ps:1": "stopped by tfrun"}
    outcomes.update({f"worker:{i}": "exited 0" for i in range(100)})
    assert _ends(outcomes) == "worker:0-99 exited 0; ps:0 and ps:1 stopped by tfrun"
    outcomes = {f"worker:{i}": "exited 0" for i in (0, 1, 2, 3, 5, 7, 8)}
    assert _ends(outcomes) == "worker:0-3,5,7,8 exited 0"


@pytest.mark.e2e
def test_the_launcher_says_each_tasks_end() -> None:
    job = ClusterSpec((Job("ps", 1, cmd="sleep 600"), Job("worker", 2, cmd="true")), replica=True)

    async def scenario() -> dict[str, str]:
        import io

        from tfmesos.launcher import Launcher

        launcher = Launcher(job, LocalBackend(job), output=io.BytesIO())
        try:
            await launcher.start()
            await launcher.wait_for_workers()
        finally:
            await launcher.stop()
        return launcher.outcomes()

    assert asyncio.run(scenario()) == {
        "ps:0": "stopped by tfrun",
        "worker:0": "exited 0",
        "worker:1": "exited 0",
    }
