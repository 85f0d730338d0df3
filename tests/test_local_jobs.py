"""Whole ``tfrun`` jobs on the local backend, with plain Python commands.

These exercise the launcher, the agent and the local backend for real: real
processes, real sockets, real signals. TensorFlow jobs are in test_examples.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.conftest import (
    PY,
    ROOT,
    JobProcesses,
    Tfrun,
    is_agent,
    popen_tfrun,
    py,
    run_tfrun,
    runs_in,
    start_tfrun,
    tfrun_argv,
    wait_until,
)
from tests.jobevents import JobEvents


def test_each_task_gets_its_placeholders_and_environment(job_procs: JobProcesses) -> None:
    code = (
        "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], "
        "'env': {k: v for k, v in os.environ.items() if k.startswith(('TFMESOS_', 'TF_CONFIG'))}}))"
    )
    result = run_tfrun(
        "-w",
        "2",
        "-s",
        "1",
        "--worker-logs",
        "*",
        "--",
        *py(code),
        "{ps_hosts}",
        "{worker_hosts}",
        "{job_name}",
        "{task_index}",
        env=job_procs.env(),
    )
    assert result.returncode == 0, result.stderr
    seen = {}
    for line in result.stdout.splitlines():
        prefix, _, body = line.partition(" ")
        seen[prefix] = json.loads(body)
    assert set(seen) == {"[worker:0]", "[worker:1]"}  # ps output is not forwarded
    w1 = seen["[worker:1]"]
    ps_hosts, worker_hosts, job, index = w1["argv"]
    assert (job, index) == ("worker", "1")
    assert len(ps_hosts.split(",")) == 1 and len(worker_hosts.split(",")) == 2
    assert len({*ps_hosts.split(","), *worker_hosts.split(",")}) == 3  # three distinct ports
    env = w1["env"]
    assert env["TFMESOS_PS_HOSTS"] == ps_hosts and env["TFMESOS_WORKER_HOSTS"] == worker_hosts
    assert env["TFMESOS_JOB_NAME"] == "worker" and env["TFMESOS_TASK_INDEX"] == "1"
    assert env["TFMESOS_DISTRIBUTED"] == "1"
    assert "TFMESOS_SECRET" not in env
    tf_config = json.loads(env["TF_CONFIG"])
    assert tf_config["task"] == {"type": "worker", "index": 1}
    assert tf_config["cluster"]["worker"] == worker_hosts.split(",")
    assert job_procs.wait_gone(5) == []


def assert_failed(events: JobEvents, task: str, status: int) -> None:
    """The job failed because ``task`` exited with ``status``, and tfrun
    exits with it."""
    failed = events.exited()[task]
    assert (failed["exit_code"], failed["signal"], failed["action"]) == (status, None, "fail job")
    assert failed["host"] == "127.0.0.1"
    verdict = events.verdict()
    assert (verdict["result"], verdict["exit_status"]) == ("failed", status), verdict


def test_a_failing_ps_fails_the_job(job_procs: JobProcesses, job_events: JobEvents) -> None:
    code = "import sys, time; sys.exit(9) if '{job_name}' == 'ps' else time.sleep(60)"
    result = run_tfrun(*job_events.flag, "-w", "1", "-s", "1", "--", *py(code), env=job_procs.env())
    assert result.returncode == 9, result.stderr
    assert_failed(job_events, "ps:0", 9)
    assert job_procs.wait_gone(5) == []


def test_the_job_ends_when_workers_end_and_ps_are_stopped(job_procs: JobProcesses) -> None:
    code = (
        "import time; time.sleep(3600 if '{job_name}' == 'ps' else 0.5); print('done {job_name}')"
    )
    result = run_tfrun(
        "-w", "2", "-s", "2", "--worker-logs", "*", "--", *py(code), env=job_procs.env()
    )
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [
        "[worker:0] done worker",
        "[worker:1] done worker",
    ]
    assert job_procs.wait_gone(5) == []


# Worker 0 prints 100,000 lines (7 MB) and waits; worker 1 fails after 1 s.
FLOOD_THEN_FAIL = (
    "import sys, time\n"
    "if '{task_index}' == '1':\n"
    "    time.sleep(1); sys.exit(3)\n"
    "w = sys.stdout.write\n"
    "for i in range(100_000): w(f'line {{i}} ' + 'x' * 60 + '\\n')\n"
    "time.sleep(60)\n"
)


def popen_two_workers(code: str, job_procs: JobProcesses, *, show: str = "*") -> Tfrun:
    """tfrun -w 2 -s 0 running ``code``, the output of the workers ``show``
    names forwarded, its stdout piped and left to the caller to read (or not)."""
    return popen_tfrun(
        "-w", "2", "-s", "0", "--worker-logs", show, "--", *py(code), env=job_procs.env()
    )


def worker_1_failed(proc: Tfrun) -> None:
    """Return once tfrun has seen worker 1 fail (it cannot end meanwhile:
    nobody reads its stdout)."""
    proc.events.wait_for("task_exited", proc, where=lambda e: e["task"] == "worker:1", timeout=60)


def test_a_stalled_terminal_does_not_stall_the_launcher(job_procs: JobProcesses) -> None:
    # Nobody reads tfrun's stdout while worker 0 floods it: the launcher must
    # still see worker 1 fail and end the job, and then write out, in order,
    # every line it had taken from worker 0.
    proc = popen_two_workers(FLOOD_THEN_FAIL, job_procs)
    assert proc.stdout is not None
    worker_1_failed(proc)
    stdout = proc.stdout.read()
    assert proc.wait(timeout=60) == 3, proc.said()
    assert_failed(proc.events, "worker:1", 3)
    lines = stdout.splitlines()
    assert len(lines) > 1000  # more than the pipe and the buffers held at the failure
    assert lines == [f"[worker:0] line {i} " + "x" * 60 for i in range(len(lines))]
    assert job_procs.wait_gone(5) == []


def test_a_stalled_terminal_holds_back_only_the_tasks_it_shows(job_procs: JobProcesses) -> None:
    # Only worker 0's output is shown (the default). Worker 1 prints as much,
    # unseen, then fails: with nobody reading tfrun's stdout, the launcher
    # must still take in worker 1's output, and so see it fail.
    code = (
        "import sys, time\n"
        "w = sys.stdout.write\n"
        "for i in range(100_000): w(f'line {{i}} ' + 'x' * 60 + '\\n')\n"
        "sys.stdout.flush()\n"
        "sys.exit(3) if '{task_index}' == '1' else time.sleep(60)\n"
    )
    proc = popen_two_workers(code, job_procs, show="0")
    worker_1_failed(proc)
    assert proc.events.exited()["worker:1"]["exit_code"] == 3


def test_at_the_jobs_end_output_waits_for_the_reader_until_a_signal(
    job_procs: JobProcesses,
) -> None:
    # The job ended well (every worker exited 0) but tfrun's stdout is not
    # read: it waits to write worker 0's output, as `cat` would. SIGTERM then
    # drops that output, says where the full output is, and tfrun exits with
    # the job's own status. (Each worker's output fits in what the pipes
    # and tfrun's buffer hold, so that the workers can end.)
    code = (
        "import sys\n"
        "w = sys.stdout.write\n"
        "for i in range(5_000): w(f'line {{i}} ' + 'x' * 60 + '\\n')\n"
    )
    proc = popen_two_workers(code, job_procs)
    proc.events.wait_for("job_stopping", proc)
    # Every task is gone once teardown is done; tfrun itself is left
    # writing to a pipe nobody reads.
    assert job_procs.wait_gone(20, exclude=proc.pid) == []
    assert proc.poll() is None, "tfrun ended without writing what it had"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0, proc.said()
    assert proc.events.verdict()["exit_status"] == 0
    # The wording a user sees (the one check of the message that says output
    # was dropped, which has no event): how much, and where all of it is.
    said = proc.said()
    [started] = proc.events.of("job_started")
    assert re.search(
        r"SIGTERM received while stopping: dropped [0-9.]+ [KM]?i?B of the tasks' output not "
        rf"yet written; the full output of each task is in {re.escape(started['log_dir'])}$",
        said,
        re.MULTILINE,
    ), said


# Ignores SIGTERM and prints without end: only its agent's SIGKILL, at the
# end of its grace, stops it.
STUBBORN_FLOOD = (
    "import signal, sys\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "while True: sys.stdout.write('{job_name} ' + 'x' * 100 + '\\n')\n"
)


def _wait_until_backed_up(pipe: int, proc: Tfrun) -> None:
    """Return once half the pipe waits to be read: with nobody reading, its
    writer is stalled or soon will be. (Writes that do not fill a page leave
    room no later write takes: a stalled pipe may hold less than its size.)"""
    size = fcntl.fcntl(pipe, fcntl.F_GETPIPE_SZ)
    while struct.unpack("i", fcntl.ioctl(pipe, termios.FIONREAD, b"\0" * 4))[0] < size // 2:
        assert proc.poll() is None, proc.said()
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["sigterm", "failure"])
def test_stopping_never_waits_for_a_stalled_reader(
    job_procs: JobProcesses, tmp_path: Path, how: str
) -> None:
    # Nobody reads tfrun's stdout (tfrun ... > fifo), worker 0 floods it and
    # ignores SIGTERM. A signal, or worker 1 failing, must stop the job all
    # the same: the agents still hear "stop" (their output is taken in, and
    # dropped), kill what ignores SIGTERM at the end of their own grace, and
    # tfrun exits with what was not written dropped and one line saying where
    # the full output is.
    go, logs, script = tmp_path / "fail now", tmp_path / "logs", tmp_path / "task.py"
    # A script file, not -c: a simple command line is exec'ed, so the agent
    # is its parent and it gets the agent's signals, with no shell between.
    script.write_text(
        STUBBORN_FLOOD.replace("{job_name}", "worker")
        if how == "sigterm"
        # Worker 1 fails once the test says so: when the reader is stalled.
        else "import os, sys, time\n"
        "if sys.argv[1] == '1':\n"
        f"    while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
        "    sys.exit(3)\n" + STUBBORN_FLOOD.replace("{job_name}", "worker")
    )
    workers = "1" if how == "sigterm" else "2"
    proc = popen_tfrun(
        "--log-dir", str(logs), "-w", workers, "-s", "0", "--", PY, str(script), "{task_index}",
        env=job_procs.env(),
    )  # fmt: skip
    assert proc.stdout is not None
    _wait_until_backed_up(proc.stdout.fileno(), proc)
    if how == "sigterm":
        proc.send_signal(signal.SIGTERM)
    else:
        go.touch()
    # A hang guard, not a bound: before, tfrun waited for the reader.
    status = proc.wait(timeout=60)
    assert status == (143 if how == "sigterm" else 3), proc.said()
    verdict = proc.events.verdict()
    if how == "sigterm":
        assert (verdict["result"], verdict["signal"]) == ("interrupted", "SIGTERM"), verdict
    else:
        assert_failed(proc.events, "worker:1", 3)
    assert verdict["exit_status"] == status
    # Worker 0's agent killed it at the end of its grace, not tfrun later.
    log = (logs / "worker.0.log").read_bytes()
    assert b"did not stop within 5s of SIGTERM: killed" in log
    assert job_procs.wait_gone(5) == []


def test_the_verdict_comes_after_the_tasks_last_output(
    job_procs: JobProcesses, job_events: JobEvents
) -> None:
    code = (
        "import sys, time\n"
        "if '{task_index}' == '1':\n"
        "    print('last words', flush=True); time.sleep(0.5); sys.exit(3)\n"
        "time.sleep(60)\n"
    )
    result = subprocess.run(
        tfrun_argv(*job_events.flag, "-w", "2", "-s", "0", "--worker-logs", "*", "--", *py(code)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=job_procs.env(),
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 3
    lines = result.stdout.splitlines()
    said = job_events.verdict()["message"].splitlines()[0]
    verdict = next(i for i, line in enumerate(lines) if said in line)
    assert lines.index("[worker:1] last words") < verdict
    assert verdict == len(lines) - 1 or all(not x.startswith("[worker:") for x in lines[verdict:])


def test_a_reader_that_goes_away_costs_the_output_not_the_job(job_procs: JobProcesses) -> None:
    # As with `tfrun ... | head -1`: the job runs to its end, and says once why
    # the rest of its output is gone, with no traceback.
    code = "import time\nfor i in range(50): print(i, flush=True); time.sleep(0.02)"
    proc = popen_two_workers(code, job_procs)
    assert proc.stdout is not None
    proc.stdout.close()
    _, said = proc.communicate(timeout=120)
    assert proc.returncode == 0, said
    assert proc.events.verdict()["result"] == "succeeded"
    # The wording a user sees (the one check of this message): said once.
    assert said.count("cannot write the tasks' output any more") == 1, said
    assert "Traceback" not in said and "Exception ignored" not in said, said
    assert job_procs.wait_gone(5) == []


def test_a_command_that_closes_its_output_is_waited_for(job_procs: JobProcesses) -> None:
    # As a program that sends its own stdout and stderr to a log file does:
    # the agent sees its pipe close, and must wait for the exit all the same.
    code = "import os, sys, time; os.close(1); os.close(2); time.sleep(6); sys.exit(4)"
    started = time.monotonic()
    result = run_tfrun("-w", "1", "-s", "0", "--", *py(code), env=job_procs.env())
    assert result.returncode == 4, result.stderr  # its own status, not 137 from a SIGKILL
    assert time.monotonic() - started >= 6
    assert job_procs.wait_gone(5) == []


def test_what_a_command_leaves_running_ends_with_it(job_procs: JobProcesses) -> None:
    # A helper started in the background, one that even ignores SIGTERM.
    code = (
        "import signal, subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)'])\n"
        "subprocess.Popen(['sleep', '300'])\n"
    )
    result = run_tfrun("-w", "1", "-s", "1", "--", *py(code), env=job_procs.env())
    assert result.returncode == 0, result.stderr
    assert job_procs.wait_gone(5) == []


@pytest.mark.parametrize(("command", "status"), [("exit 3", 3), ("cd / && exit 5", 5)])
def test_shell_builtins_run_as_written(job_procs: JobProcesses, command: str, status: int) -> None:
    result = run_tfrun("-w", "1", "-s", "0", "--", command, env=job_procs.env())
    assert result.returncode == status, result.stderr


def test_unforwarded_output_is_kept_in_the_task_log(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    result = run_tfrun(
        "-w",
        "2",
        "-s",
        "0",
        "--log-dir",
        str(tmp_path),
        "--",
        *py("print('hello from {task_index}')"),
        env=job_procs.env(),
    )
    assert result.returncode == 0, result.stderr
    assert "[worker:1]" not in result.stdout
    logs = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert any(n.startswith("worker.1.") and "hello from 1" in t for n, t in logs.items()), logs


def test_initializer_finalizer_and_env_from_extra_config(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    config = tmp_path / "extra.json"
    config.write_text(
        json.dumps(
            {
                "initializer": "echo init $GREETING",
                "finalizer": "echo final",
                "env": {"GREETING": "hi"},
            }
        )
    )
    result = run_tfrun(
        "-w", "1", "-s", "0", "-e", str(config), "--", "echo main $GREETING", env=job_procs.env()
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "[worker:0] init hi",
        "[worker:0] main hi",
        "[worker:0] final",
    ]


def test_an_initializers_helpers_live_until_the_task_is_done(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    # A helper the initializer leaves in the background (a sidecar) is there
    # for the command, and is ended with the task, not before.
    marker = tmp_path / "helper-was-here"
    config = tmp_path / "extra.json"
    helper = f"import time; time.sleep(1); open({str(marker)!r}, 'w'); time.sleep(300)"
    config.write_text(json.dumps({"initializer": f"{PY} -c {shlex.quote(helper)} &"}))
    command = f"import os, sys, time; time.sleep(3); sys.exit(0 if os.path.exists({str(marker)!r}) else 5)"
    result = run_tfrun(
        "-w", "1", "-s", "0", "-e", str(config), "--", *py(command), env=job_procs.env()
    )
    assert result.returncode == 0, result.stderr
    assert job_procs.wait_gone(5) == []


def test_asking_for_more_than_the_machine_has_is_a_clear_error(job_procs: JobProcesses) -> None:
    # Bad usage (exit 2), in plain units and grammar, saying what to do.
    result = run_tfrun("-w", "1", "-s", "0", "-Cw", "100000", "--", "true", env=job_procs.env())
    assert result.returncode == 2
    assert re.search(
        r"task worker:0 asks for 100000 CPUs, and this machine has \d+: ask for less with -Cw, "
        r"or run the job on a cluster \(-m MASTER for Mesos, --backend slurm\)",
        result.stderr,
    ), result.stderr
    result = run_tfrun("-w", "1", "-s", "0", "-Mw", "99999999", "--", "true", env=job_procs.env())
    assert result.returncode == 2
    assert re.search(
        r"task worker:0 asks for 95\.4 TiB of memory, and this machine has [\d.]+ GiB: "
        r"ask for less with -Mw \(MiB\)",
        result.stderr,
    ), result.stderr
    result = run_tfrun(
        "-w", "1", "-s", "0", "-Gw", "1", "--", "true", env=job_procs.env(CUDA_VISIBLE_DEVICES="")
    )
    assert result.returncode == 2
    assert (
        "task worker:0 asks for 1 GPU, and this machine has none: give -Gw 0, "
        "or run the job on a cluster with GPUs (-m MASTER for Mesos, --backend slurm)"
        in result.stderr
    )
    assert job_procs.alive() == []


RUN_BY: dict[str, tuple[dict[str, str], Callable[[int], int]]] = {
    # How a local task runs, and the job's processes beside tfrun for n tasks.
    "launcher": ({}, lambda n: n + 1),  # each command, and the sweeper
    "forked-agents": ({"TFMESOS_LOCAL_AGENTS": "1"}, lambda n: 2 * n + 1),  # + the fork server
    "agent-interpreters": ({"TFMESOS_NO_FORK_SERVER": "1"}, lambda n: 2 * n),
}
"""tfrun runs a plain local task itself; agents run it with TFMESOS_LOCAL_AGENTS
(forked by the fork server) or TFMESOS_NO_FORK_SERVER (each its own interpreter)."""


def _start_long_job(job_procs: JobProcesses, run_by: str = "launcher") -> Tfrun:
    extra, processes = RUN_BY[run_by]
    proc, _ = start_tfrun(
        "-w",
        "2",
        "-s",
        "1",
        "--",
        *py("import time; print('up', flush=True); time.sleep(600)"),
        env=job_procs.env(**extra),
    )
    # Wait for the commands themselves, and whatever runs them.
    wait_until(
        lambda: len(job_procs.alive(exclude=proc.pid)) >= processes(3), "the job's processes up"
    )
    assert len(job_procs.alive(exclude=proc.pid)) == processes(3), job_procs.alive(exclude=proc.pid)
    return proc


@pytest.mark.parametrize("run_by", list(RUN_BY))
def test_killing_the_launcher_outright_leaves_no_task(job_procs: JobProcesses, run_by: str) -> None:
    # Tasks tfrun runs itself: its sweeper ends them; agents: their death signal.
    proc = _start_long_job(job_procs, run_by)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert job_procs.wait_gone(10) == [], "tasks outlived a SIGKILLed launcher"


@pytest.mark.parametrize("run_by", list(RUN_BY))
def test_each_task_leads_a_session_of_its_own(job_procs: JobProcesses, run_by: str) -> None:
    # Under autogroup each session is a CPU share of its own: as under
    # torchrun, a job of three tasks holds three beside other programs, not
    # one. The session is the command's group too, by which it is stopped.
    extra, _ = RUN_BY[run_by]
    code = (
        "import os; me = os.getpid(); "
        "print('session', os.getsid(0) == me == os.getpgrp(), os.getsid(0), flush=True)"
    )
    env = job_procs.env(**extra)
    result = run_tfrun("-w", "3", "-s", "0", "--worker-logs", "all", "--", *py(code), env=env)
    assert result.returncode == 0, result.stderr
    said = re.findall(r"session (True|False) (\d+)", result.stdout)
    assert [leads for leads, _ in said] == ["True"] * 3, result.stdout
    sessions = {int(sid) for _, sid in said}
    assert len(sessions) == 3 and os.getsid(0) not in sessions, said
    assert job_procs.wait_gone(5) == []


def test_each_task_gets_gpus_of_its_own(job_procs: JobProcesses) -> None:
    # The machine's GPUs as CUDA_VISIBLE_DEVICES names them; no real GPU is
    # needed to check that tfrun hands them out one task each.
    code = "import os; print('gpus=' + os.environ['CUDA_VISIBLE_DEVICES'])"
    result = run_tfrun(
        "-w",
        "2",
        "-s",
        "1",
        "-Gw",
        "1",
        "--worker-logs",
        "*",
        "--",
        *py(code),
        env=job_procs.env(CUDA_VISIBLE_DEVICES="3,5"),
    )
    assert result.returncode == 0, result.stderr
    seen = sorted(line.split(" ", 1)[1] for line in result.stdout.splitlines())
    assert seen == ["gpus=3", "gpus=5"]


FAKE_NVIDIA_SMI = """#!/bin/sh
# Answers the one query tfmesos makes as nvidia-smi does on a two-GPU host,
# and records each call.
echo "$*" >> "$0.calls"
[ "$*" = "--query-gpu=index --format=csv,noheader" ] || exit 6
printf '0\\n1\\n'
"""


@pytest.mark.parametrize("gpus_per_worker", [0, 1])
def test_gpus_are_found_with_nvidia_smi_only_when_asked_for(
    job_procs: JobProcesses, tmp_path: Path, gpus_per_worker: int
) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI)
    smi.chmod(0o755)
    env = job_procs.env(PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    code = "import os; print('gpus=' + os.environ['CUDA_VISIBLE_DEVICES'])"
    result = run_tfrun(
        *("-w", "2", "-s", "1", "-Gw", str(gpus_per_worker), "--worker-logs", "*", "--"),
        *py(code),
        env=env,
    )
    assert result.returncode == 0, result.stderr
    seen = sorted(line.split(" ", 1)[1] for line in result.stdout.splitlines())
    calls = tmp_path / "nvidia-smi.calls"
    if gpus_per_worker:
        assert seen == ["gpus=0", "gpus=1"]
        assert calls.read_text() == "--query-gpu=index --format=csv,noheader\n"
    else:
        assert seen == ["gpus=", "gpus="]  # hidden from tasks that asked for none
        assert not calls.exists(), "nvidia-smi ran for a job that asked for no GPU"


def test_more_gpus_in_all_than_the_machine_has_is_refused(job_procs: JobProcesses) -> None:
    result = run_tfrun(
        "-w",
        "3",
        "-s",
        "0",
        "-Gw",
        "1",
        "--",
        "true",
        env=job_procs.env(CUDA_VISIBLE_DEVICES="0,1"),
    )
    assert result.returncode == 2
    assert "the tasks ask for 3 GPUs in all, and this machine has 2" in result.stderr
    assert job_procs.alive() == []


@pytest.mark.parametrize("run_by", list(RUN_BY))
def test_the_secret_is_in_no_command_line_no_log_and_not_in_the_command_env(
    job_procs: JobProcesses, run_by: str
) -> None:
    extra, expected = RUN_BY[run_by]
    proc = popen_tfrun(
        "-v",
        "-w",
        "1",
        "-s",
        "1",
        "--",
        *py("import time; time.sleep(600)"),
        env=job_procs.env(**extra),
    )
    try:
        deadline = time.monotonic() + 30
        # Both commands, and what runs them.
        while len(job_procs.alive(exclude=proc.pid)) < expected(2):
            assert time.monotonic() < deadline, job_procs.alive(exclude=proc.pid)
            time.sleep(0.1)
        processes = job_procs.alive(exclude=proc.pid)
        holders = [p for p in processes if "TFMESOS_SECRET" in p.environ()]
        # A forked agent gets it through the server's pipe, an agent started
        # as an interpreter through a pipe it inherits: it is in no process's
        # environment as the kernel shows it, not even the agent's.
        assert holders == []
        for p in [*processes, psutil.Process(proc.pid)]:
            cmdline = " ".join(p.cmdline())
            assert not re.search(r"\b[0-9a-f]{64}\b", cmdline), cmdline
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    # No 64-hex-digit token (the secret's form) in what tfrun said.
    assert not re.search(r"\b[0-9a-f]{64}\b", out + err)
    assert job_procs.wait_gone(5) == []


def test_the_rendezvous_can_run_over_tls(job_procs: JobProcesses, tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=tfmesos-test",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    result = run_tfrun(
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
        "-w",
        "2",
        "-s",
        "1",
        "--worker-logs",
        "*",
        "--",
        *py("print('over tls {job_name}:{task_index}')"),
        env=job_procs.env(),
    )
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [
        "[worker:0] over tls worker:0",
        "[worker:1] over tls worker:1",
    ]
    assert job_procs.wait_gone(5) == []


def test_a_failing_chief_fails_the_job(job_procs: JobProcesses, job_events: JobEvents) -> None:
    code = "import sys, time; sys.exit(7) if '{job_name}:{task_index}' == 'worker:0' else time.sleep(60)"
    result = run_tfrun(*job_events.flag, "-w", "2", "-s", "1", "--", *py(code), env=job_procs.env())
    assert result.returncode == 7, result.stderr
    assert_failed(job_events, "worker:0", 7)
    assert job_procs.wait_gone(5) == []


@pytest.mark.parametrize(
    "command",
    [
        py("import time; time.sleep(600)"),  # quoted: through sh -c 'exec ...'
        ["sleep", "600"],  # plain words: exec'd by the agent (setpriv where there is one)
    ],
    ids=["shell", "plain"],
)
def test_an_agent_killed_outright_takes_its_command_with_it(
    job_procs: JobProcesses, command: list[str]
) -> None:
    env = job_procs.env(TFMESOS_LOCAL_AGENTS="1")
    proc, _ = start_tfrun("-w", "1", "-s", "1", "--", *command, env=env)
    deadline = time.monotonic() + 10
    while True:  # both agents up, each with its command started
        agents = [p for p in job_procs.alive(exclude=proc.pid) if is_agent(p)]
        commands = [c for a in agents for c in a.children()]
        if len(commands) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(agents) == 2
    assert len(commands) == 2  # the command itself, not a shell around it
    agents[0].kill()  # as the OOM killer would
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, err
    # Its task ended as SIGKILL ends a command, and failed the job.
    [killed] = [e for e in proc.events.exited().values() if e["action"] == "fail job"]
    assert killed["signal"] == "SIGKILL" or killed["exit_code"] == 137, killed
    assert job_procs.wait_gone(5) == []


def test_the_chief_beside_a_mesos_job_is_checked_against_this_machine(
    job_procs: JobProcesses, job_events: JobEvents
) -> None:
    # No master answers at 127.0.0.1:1: the checks come before any contact.
    no_gpu = job_procs.env(CUDA_VISIBLE_DEVICES="")
    mesos = ("-m", "127.0.0.1:1", "--timeout", "2", "-w", "2", "-s", "0")
    result = run_tfrun(*mesos, "-Gw", "1", "--", "true", env=no_gpu)
    assert result.returncode == 2
    assert (
        "task worker:0 asks for 1 GPU, and this machine has none "
        "(the chief runs on this machine, beside tfrun): run tfrun on a machine with a GPU, "
        "or give -Gw 0" in result.stderr
    )
    # CPUs and memory are Mesos's to reserve; here they only earn a warning.
    result = run_tfrun(*job_events.flag, *mesos, "-Cw", "100000", "--", "true", env=no_gpu)
    verdict = job_events.verdict()
    assert (verdict["result"], verdict["exit_status"]) == ("never up", 124), verdict
    assert result.returncode == 124
    # The wording of these warnings (their one check): a warning, no refusal.
    assert "task worker:0 asks for 100000 CPUs, and this machine has" in result.stderr
    assert "(the chief runs on this machine, beside tfrun): ask for less with -Cw" in result.stderr
    assert "running it anyway" in result.stderr
    assert job_procs.wait_gone(5) == []


def test_the_fork_server_killed_outright_takes_its_agents_with_it(
    job_procs: JobProcesses,
) -> None:
    env = job_procs.env(TFMESOS_LOCAL_AGENTS="1")
    proc, _ = start_tfrun("-w", "1", "-s", "1", "--", *py("import time; time.sleep(600)"), env=env)
    deadline = time.monotonic() + 10
    while len(job_procs.alive(exclude=proc.pid)) < 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    servers = [p for p in job_procs.alive(exclude=proc.pid) if p.name() == "tfmesos-forks"]
    assert len(servers) == 1
    assert sorted(is_agent(c) for c in servers[0].children()) == [True, True]
    servers[0].kill()  # as the OOM killer would
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, err
    assert proc.events.verdict()["exit_status"] == proc.returncode
    # No event says the fork server died (its tasks' read as killed by
    # SIGTERM): the one check of this message's wording is also the only sign.
    assert "the agents' fork server exited" in err, err
    assert job_procs.wait_gone(5) == []


def _agents_with_tree(job_procs: JobProcesses, exclude: int, below: int) -> list[psutil.Process]:
    """The job's agents, once one has ``below`` live processes under it."""
    agents = [p for p in job_procs.alive(exclude=exclude) if is_agent(p)]
    try:
        if agents and len(agents[0].children(recursive=True)) >= below:
            return agents
    except psutil.Error:
        pass
    return []


# A shell line (not exec'ed: the shell stays) whose sleeper is the shell's
# child; and an exec'ed command that forks ordinary children and one that
# leaves its session.
BEHIND_A_SHELL = f"{PY} -c 'import time; time.sleep(1000)'; echo after"
FORKS_CHILDREN = (
    "import subprocess, sys, time\n"
    "subprocess.Popen(['sleep', '1000'])\n"
    "subprocess.Popen([sys.executable, '-c', 'import os, time; os.setsid(); time.sleep(1000)'])\n"
    "time.sleep(1000)\n"
)


@pytest.mark.parametrize("fork_server", [True, False], ids=["forked-agents", "agent-interpreters"])
@pytest.mark.parametrize(
    ("command", "below"),
    [([BEHIND_A_SHELL], 2), (py(FORKS_CHILDREN), 3)],
    ids=["behind-a-shell", "forks-children"],
)
def test_an_agent_killed_outright_leaves_nothing_its_command_started(
    job_procs: JobProcesses, fork_server: bool, command: list[str], below: int
) -> None:
    how = {"TFMESOS_LOCAL_AGENTS": "1"} if fork_server else {"TFMESOS_NO_FORK_SERVER": "1"}
    proc, _ = start_tfrun("-w", "1", "-s", "0", "--", *command, env=job_procs.env(**how))
    agents = wait_until(
        lambda: _agents_with_tree(job_procs, proc.pid, below), "the command's processes up"
    )
    agents[0].kill()  # as the OOM killer would
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 137, err
    # The backend, not the agent, reports this end: as the status SIGKILL
    # gives (its task_exited has no signal, since a backend's report carries none).
    killed = proc.events.exited()["worker:0"]
    assert (killed["exit_code"], killed["action"]) == (137, "fail job"), killed
    assert job_procs.wait_gone(10) == [], "processes of a task outlived its agent"


def test_what_leaves_the_tasks_group_ends_with_the_task(job_procs: JobProcesses) -> None:
    # Helpers that leave the command's process group (setsid, setpgid, a
    # daemonising shell), one of them ignoring SIGTERM, each up before the
    # command exits.
    helper = "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    code = (
        "import subprocess, sys\n"
        f"helper = {helper!r}\n"
        "for leave in ('os.setsid()', 'os.setpgid(0, 0)'):\n"
        "    p = subprocess.Popen([sys.executable, '-c', helper + leave + "
        "\"; print('up', flush=True); time.sleep(1000)\"], stdout=subprocess.PIPE)\n"
        "    assert p.stdout.readline() == b'up\\n'\n"
        "subprocess.run(['sh', '-c', 'setsid sleep 1000 >/dev/null 2>&1 &'])\n"
    )
    result = run_tfrun("-w", "1", "-s", "0", "--", *py(code), env=job_procs.env())
    assert result.returncode == 0, result.stderr
    assert job_procs.wait_gone(10) == [], "a helper that left the task's group outlived it"


def test_a_task_killed_by_a_signal_says_so(job_procs: JobProcesses, job_events: JobEvents) -> None:
    code = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    result = run_tfrun(*job_events.flag, "-w", "1", "-s", "0", "--", *py(code), env=job_procs.env())
    assert result.returncode == 139, result.stderr
    killed = job_events.exited()["worker:0"]
    assert (killed["signal"], killed["exit_code"]) == ("SIGSEGV", 139), killed
    assert job_events.verdict()["exit_status"] == 139
    # The wording a user sees (the one check of it): the signal, not the
    # shell's status for it.
    assert "task worker:0 on 127.0.0.1 killed by SIGSEGV" in result.stderr, result.stderr
    assert "status 139" not in result.stderr


def test_an_agent_stopped_by_sigterm_says_so(job_procs: JobProcesses) -> None:
    proc, _ = start_tfrun(
        *("-w", "1", "-s", "0", "--"),
        *py("import time; time.sleep(1000)"),
        env=job_procs.env(TFMESOS_LOCAL_AGENTS="1"),
    )
    agents = wait_until(lambda: _agents_with_tree(job_procs, proc.pid, 1), "the command up")
    agents[0].terminate()
    _, err = proc.communicate(timeout=60)
    # A task's 143 would read as tfrun's own SIGTERM: a task's failure is 1.
    assert proc.returncode == 1, err
    killed = proc.events.exited()["worker:0"]
    assert (killed["signal"], killed["action"]) == ("SIGTERM", "fail job"), killed
    verdict = proc.events.verdict()
    assert (verdict["result"], verdict["exit_status"], verdict["signal"]) == ("failed", 1, None)
    assert job_procs.wait_gone(10) == []


def test_sighup_stops_every_task_like_sigterm(job_procs: JobProcesses) -> None:
    proc = _start_long_job(job_procs)
    proc.send_signal(signal.SIGHUP)  # the terminal closed
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 129, err
    verdict = proc.events.verdict()
    assert (verdict["result"], verdict["signal"], verdict["exit_status"]) == (
        "interrupted",
        "SIGHUP",
        129,
    )
    assert job_procs.wait_gone(10) == []


# What a command can read of its agent and the agent's ancestors, and of
# itself: each one's environment as the kernel shows it (/proc/PID/environ is
# the environment a process started with, whatever it removed since), its
# command line, and its own environment.
SNOOP = (
    "import os, re\n"
    "name = 'TFMESOS_' + 'SECRET'\n"
    "seen, pid = [], os.getpid()\n"
    "while pid > 1:\n"
    "    for what in ('environ', 'cmdline'):\n"
    "        try:\n"
    "            data = open(f'/proc/{{pid}}/' + what, 'rb').read()\n"
    "        except OSError:\n"
    "            continue\n"
    "        tokens = re.findall(rb'[0-9a-f]+', data)\n"
    "        if (name + '=').encode() in data or any(len(t) == 64 for t in tokens):\n"
    "            seen.append(f'{{pid}}/' + what)\n"
    "    pid = int(open(f'/proc/{{pid}}/stat').read().rsplit(')', 1)[1].split()[1])\n"
    "seen += [k for k in os.environ if k == name]\n"
    "print('secret seen in', seen or 'nothing', flush=True)\n"
)


@pytest.mark.parametrize("run_by", list(RUN_BY))
def test_the_command_cannot_read_the_secret_from_its_agent(
    job_procs: JobProcesses, run_by: str
) -> None:
    # Run by tfrun: from tfrun, which holds the secret in its memory alone.
    env = job_procs.env(**RUN_BY[run_by][0])
    result = run_tfrun("-w", "1", "-s", "0", "--", *py(SNOOP), env=env)
    assert result.returncode == 0, result.stderr
    assert "secret seen in nothing" in result.stdout, result.stdout + result.stderr
    assert job_procs.wait_gone(5) == []


def test_each_run_keeps_its_logs_in_the_state_directory_capped_per_task(
    job_procs: JobProcesses, tmp_path: Path, job_events: JobEvents
) -> None:
    # 2 MB from one task, past a cap of 256 KiB: at most the cap stays on
    # disk (the log and one rotated file), ending with its last lines; the
    # run's directory is under XDG_STATE_HOME, and its job_started event
    # names it (tests/test_pathtext.py checks the messages that name it).
    code = (
        "import sys\n"
        "w = sys.stdout.write\n"
        "for i in range(20_000): w(f'line {{i}} ' + 'x' * 90 + '\\n')\n"
        "print('the last line', flush=True)\n"
    )
    env = job_procs.env(XDG_STATE_HOME=str(tmp_path), TFMESOS_TASK_LOG_MAX="256K")
    result = run_tfrun(*job_events.flag, "-w", "1", "-s", "0", "--", *py(code), env=env)
    assert result.returncode == 0, result.stderr
    root = tmp_path / "tfmesos" / "runs"
    [started] = job_events.of("job_started")
    assert started["backends"] == {"local": ["worker:0"]}
    run = Path(started["log_dir"])
    assert runs_in(root) == [run]
    logs = sorted(p for p in run.iterdir() if p.name.startswith("worker.0."))
    assert [p.name for p in logs] == ["worker.0.log", "worker.0.log.1"]
    assert sum(p.stat().st_size for p in logs) <= 256 << 10
    current = logs[0].read_text().splitlines()
    assert current[-2:] == ["line 19999 " + "x" * 90, "the last line"]
    assert job_procs.wait_gone(5) == []


@pytest.mark.e2e
def test_a_shell_wrapped_task_stops_without_waiting_out_the_leftovers_grace(
    job_procs: JobProcesses,
) -> None:
    from tfmesos.backends.local.directtask import LEFTOVER_GRACE

    # Stopped, the shell dies first; its sleep, handed to tfrun (the
    # tasks' subreaper), dies as a zombie still in the task's group. Before,
    # nothing reaped it, so the group looked alive through the leftovers'
    # grace and 500 rounds of SIGKILL: 7.3 s to stop, against 0.6 s for
    # `exec sleep 30` (issue 40, item 11).
    cmd = "sh -c 'sleep 0.5; [ {task_index} = 1 ] && exit 3; sleep 30'"
    proc = popen_tfrun("-w", "2", "--", cmd, env=job_procs.env())
    proc.communicate(timeout=120)
    assert proc.returncode == 3, proc.said()
    stopping = proc.events.wait_for("job_stopping", proc)["ts"]
    stopped = proc.events.wait_for("job_stopped", proc)["ts"]
    assert stopped - stopping < LEFTOVER_GRACE, (stopped - stopping, proc.said())
    assert job_procs.alive() == []


@pytest.mark.e2e
def test_a_second_ctrl_c_while_stopping_says_so_once_and_names_the_logs_once(
    job_procs: JobProcesses,
) -> None:
    # The tasks ignore SIGTERM, so the stop takes their grace: a second
    # Ctrl-C lands in it. Before: "dropped 0 B of the tasks' output not yet
    # written; the full output of each task is in DIR", then DIR again.
    proc, _ = start_tfrun("-w", "2", "--", "sh -c \"trap '' TERM; sleep 30\"", env=job_procs.env())
    proc.send_signal(signal.SIGINT)
    proc.events.wait_for("job_stopping", proc)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    said = proc.said()
    assert proc.returncode == 130, said
    assert "dropped 0 B" not in said
    assert "SIGINT received while stopping: still stopping every task" in said
    assert said.count("the full output of each task is in") == 1, said
    assert job_procs.alive() == []


def running_with_argv(argv: list[str]) -> list[psutil.Process]:
    """What runs ``argv`` exactly: a helper that cleared its environment
    carries no mark of the job to find it by."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["cmdline"] == argv and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


@pytest.mark.e2e
@pytest.mark.parametrize(
    "when",
    [
        "the job ends",  # its parent, the task's shell, long gone
        "tfrun is killed while its parent runs",
        "tfrun is killed after its parent's task ended",
    ],
)
def test_a_helper_that_leaves_its_group_and_clears_its_environment_ends_with_the_job(
    job_procs: JobProcesses, when: str
) -> None:
    # setsid: a session (and group) of its own; env -i: no task id to find
    # it by. Before, it outlived the job in every case (issue 40, item 6);
    # with an agent per task, its agent, the subreaper, ended it.
    seconds = str(3000 + len(when))  # a sleep no other test runs
    helper = ["sleep", seconds]
    hide = f"setsid env -i {shlex.join(helper)} &"
    if when == "the job ends":
        args = ["-w", "1", "--", f"sh -c '{hide} sleep 1'"]
    elif when == "tfrun is killed while its parent runs":
        args = ["-w", "1", "--", f"sh -c '{hide} exec sleep 300'"]
    else:  # worker 0's task ends, worker 1 keeps the job going
        script = f"[ {{task_index}} = 0 ] && {{ {hide} sleep 0.3; exit 0; }}; exec sleep 300"
        args = ["-w", "2", "--", f"sh -c '{script}'"]
    proc = popen_tfrun(*args, env=job_procs.env())
    if when == "the job ends":
        proc.communicate(timeout=120)
        assert proc.returncode == 0, proc.said()
    else:
        wait_until(lambda: bool(running_with_argv(helper)), "the helper runs")
        if when != "tfrun is killed while its parent runs":
            proc.events.wait_for("task_exited", proc, where=lambda e: e["task"] == "worker:0")
        proc.kill()
        proc.wait()
    wait_until(lambda: not running_with_argv(helper), "the helper is gone")
    wait_until(lambda: not job_procs.alive(), "the job's processes are gone")
