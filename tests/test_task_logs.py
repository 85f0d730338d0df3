"""A task's log on a disk that fills up, loses its directory or runs out of
inodes, and the Slurm job script's lines on a full disk: each costs the
job nothing, and is said once per task."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, JobProcesses, run_tfrun, tfrun_argv
from tests.jobevents import JobEvents

PY = sys.executable


def every_task_exited_0(events: JobEvents, tasks: int) -> None:
    """Each of the job's ``tasks`` ran once and exited 0, and the job succeeded."""
    exits = [(e["exit_code"], e["action"]) for e in events.of("task_exited")]
    assert exits == [(0, "finish")] * tasks, events.of("task_exited")
    assert events.verdict()["result"] == "succeeded"


def _full_disk_wrapper() -> list[str]:
    """``unshare`` for a mount namespace of the test's own, where a small
    tmpfs is mounted (and vanishes with it): as root, or as anyone where
    user namespaces are allowed. Skipped, saying why, where neither is."""
    unshare = shutil.which("unshare")
    if unshare is None:
        reason = "a full filesystem is a small tmpfs mounted with unshare(1), not installed"
        print(f"\nskipping: {reason}", file=sys.stderr)
        pytest.skip(reason)
    argv = [unshare, "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        argv[1:1] = ["--user", "--map-root-user"]
    probe = subprocess.run(
        [*argv, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if probe.returncode != 0:
        reason = f"cannot mount a small tmpfs to fill ({probe.stderr.strip()})"
        print(f"\nskipping: {reason}", file=sys.stderr)
        pytest.skip(reason)
    return argv


def test_a_full_log_disk_is_said_once_per_task_and_costs_neither_the_task_nor_its_output(
    job_procs: JobProcesses, job_events: JobEvents, tmp_path: Path
) -> None:
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    disk.mkdir()
    kept.mkdir()
    lines = 3000  # 50 bytes each: 150 KB a task, on a 64 KiB disk
    code = (
        "import os\n"
        "i = os.environ['TFMESOS_TASK_INDEX']\n"
        f"for n in range({lines}): print('worker %s line %05d ' % (i, n) + 'x' * 24)\n"
        "print('worker %s END' % i)\n"
    )
    # In the namespace: the full disk mounted at DISK; after tfrun, what
    # the disk held is copied out, as the namespace takes the mount with it.
    script = (
        'mount -t tmpfs -o size=64k tfmesos-full "$0" || exit 97\n'
        '"$@"; code=$?\ncp -a "$0/." "$KEPT/"\nexit $code\n'
    )
    argv = [
        *_full_disk_wrapper(), "sh", "-c", script, str(disk),
        *tfrun_argv(*job_events.flag, "--log-dir", str(disk), "-w", "2", "-s", "0",
                    "--worker-logs", "*", "--", PY, "-c", code),
    ]  # fmt: skip
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=180, cwd=ROOT,
        env=job_procs.env(KEPT=str(kept)),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    # Every line reached the terminal, from both tasks.
    for index in range(2):
        got = [line for line in result.stdout.splitlines() if line.startswith(f"[worker:{index}] ")]
        assert len(got) == lines + 1, (index, len(got))
        assert got[-1] == f"[worker:{index}] worker {index} END"
    # One warning a task, naming the task, its log and that the disk is full.
    warned = re.findall(
        r"^\[tfrun\] task (worker:\d) on \S+ cannot write its log (\S+) \(No space left on "
        r"device: the log disk is full \(the filesystem at (\S+)\)\); what the log holds is kept",
        result.stderr,
        re.M,
    )
    assert sorted(w[0] for w in warned) == ["worker:0", "worker:1"], result.stderr
    assert all(Path(log).parent == disk and at == str(disk) for _, log, at in warned)
    every_task_exited_0(job_events, 2)
    assert "Traceback" not in result.stdout + result.stderr
    # The last line names the place and does not claim it holds everything.
    last = result.stderr.splitlines()[-1]
    assert last.startswith("[tfrun] the full output of each task is in "), last
    assert last.endswith(
        ", but for what could not be kept of worker:0, worker:1's (see the warnings above)"
    ) or last.endswith(
        ", but for what could not be kept of worker:1, worker:0's (see the warnings above)"
    ), last
    # What was written before the disk filled is kept: each log is the start
    # of its task's output (one task may have filled the disk before the
    # other wrote a byte), and together they fill the disk.
    held = 0
    for task, log, _ in warned:
        text = (kept / Path(log).name).read_text()
        index = task.split(":")[1]
        whole = "".join(f"worker {index} line {n:05d} {'x' * 24}\n" for n in range(lines))
        assert whole.startswith(text), (log, text[:200])
        held += len(text)
    assert held > 48 * 1024, held
    assert job_procs.wait_gone(10) == []


def test_a_log_whose_directory_is_removed_is_given_up_with_one_warning(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    # The command removes its own log directory, then prints past the cap:
    # the rotation finds no directory. Before, the agent wrote on, uncapped
    # and unsaid, into a file nobody could find.
    logs = tmp_path / "logs"
    code = (
        f"import shutil; shutil.rmtree({str(logs)!r})\n"
        "for n in range(1000): print('line %05d ' % n + 'x' * 40)\n"
        "print('END')\n"
    )
    result = run_tfrun(
        "--log-dir", str(logs), "-w", "1", "--", PY, "-c", code,
        env=job_procs.env(TFMESOS_TASK_LOG_MAX="8K"), timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    got = [line for line in result.stdout.splitlines() if line.startswith("[worker:0] ")]
    assert len(got) == 1001 and got[-1] == "[worker:0] END", got[-3:]
    warned = re.findall(
        r"^\[tfrun\] task worker:0 on \S+ cannot write its log (\S+) \(No such file or "
        r"directory: its directory (\S+) was removed\); ",
        result.stderr,
        re.M,
    )
    assert len(warned) == 1, result.stderr
    assert Path(warned[0][0]).parent == logs and warned[0][1] == str(logs)
    assert "Traceback" not in result.stdout + result.stderr
    assert job_procs.wait_gone(10) == []


def test_a_log_that_cannot_rotate_for_want_of_an_inode_stays_under_its_cap(
    job_procs: JobProcesses, job_events: JobEvents, tmp_path: Path
) -> None:
    # A tmpfs with room for its root and one file: the rotation moves the log
    # to FILE.1 and cannot make a new FILE. Before, the agent wrote on into
    # FILE.1, past the cap, and said nothing.
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    disk.mkdir()
    kept.mkdir()
    code = "for n in range(1000): print('line %05d ' % n + 'x' * 40)\nprint('END')\n"
    script = (
        'mount -t tmpfs -o size=1m,nr_inodes=2 tfmesos-inodes "$0" || exit 97\n'
        '"$@"; code=$?\ncp -a "$0/." "$KEPT/"\nexit $code\n'
    )
    argv = [
        *_full_disk_wrapper(), "sh", "-c", script, str(disk),
        *tfrun_argv(*job_events.flag, "--log-dir", str(disk), "-w", "1", "--", PY, "-c", code),
    ]  # fmt: skip
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=180, cwd=ROOT,
        env=job_procs.env(KEPT=str(kept), TFMESOS_TASK_LOG_MAX="8K"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    got = [line for line in result.stdout.splitlines() if line.startswith("[worker:0] ")]
    assert len(got) == 1001 and got[-1] == "[worker:0] END", got[-3:]
    every_task_exited_0(job_events, 1)
    warned = re.findall(
        r"^\[tfrun\] task worker:0 on \S+ cannot write its log (\S+) \(No space left on "
        r"device: the log disk is full \(the filesystem at (\S+)\)\); what the log holds is kept",
        result.stderr,
        re.M,
    )
    assert len(warned) == 1, result.stderr
    log = kept / Path(warned[0][0]).name
    # The log keeps its name and what it held, within half the cap.
    assert sorted(p.name for p in kept.iterdir()) == [log.name], list(kept.iterdir())
    assert 0 < log.stat().st_size <= 4096, log.stat().st_size
    assert log.read_text().startswith("line 00")
    assert job_procs.wait_gone(10) == []


@pytest.mark.parametrize("fork_server", [True, False], ids=["fork-server", "no-fork-server"])
def test_a_log_that_cannot_be_made_is_said_once_per_task_and_costs_the_task_nothing(
    job_procs: JobProcesses, job_events: JobEvents, tmp_path: Path, fork_server: bool
) -> None:
    # A tmpfs with an inode for its root only: no task's log can be made.
    # Before, each agent died opening it (a traceback, three starts, exit
    # 124), or tfrun did (exit 125) without the fork server.
    disk = tmp_path / "disk"
    disk.mkdir()
    script = 'mount -t tmpfs -o size=1m,nr_inodes=1 tfmesos-noinode "$0" || exit 97\nexec "$@"\n'
    argv = [
        *_full_disk_wrapper(), "sh", "-c", script, str(disk),
        *tfrun_argv(*job_events.flag, "--log-dir", str(disk), "-w", "2", "--worker-logs", "*",
                    "--", "echo hello from {task_index}"),
    ]  # fmt: skip
    env = job_procs.env() if fork_server else job_procs.env(TFMESOS_NO_FORK_SERVER="1")
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for index in range(2):
        assert f"[worker:{index}] hello from {index}" in result.stdout.splitlines(), result.stdout
    every_task_exited_0(job_events, 2)  # no agent died opening its log, none was relaunched
    warned = re.findall(
        r"^\[tfrun\] task (worker:\d) on \S+ cannot write its log (\S+) \(No space left on "
        r"device: the log disk is full \(the filesystem at (\S+)\)\); ",
        result.stderr,
        re.M,
    )
    assert sorted(w[0] for w in warned) == ["worker:0", "worker:1"], result.stderr
    assert all(Path(log).parent == disk and at == str(disk) for _, log, at in warned)
    assert "Traceback" not in result.stdout + result.stderr
    assert "but for what could not be kept of worker:" in result.stderr.splitlines()[-1]
    assert job_procs.wait_gone(10) == []


@pytest.mark.e2e
def test_the_slurm_job_scripts_lines_on_a_full_disk_cost_the_job_nothing() -> None:
    # The job script's own lines go to slurm-JOBID.out in the log directory;
    # on a full disk (here /dev/full) it died of them (exit 1), and Slurm's
    # job failed before any task ran, three times: exit 124.
    code = (
        "from tfmesos.slurm.jobscript import report\n"
        "report('one'); report('two')\n"
        "import sys; sys.stderr.write('went on\\n')\n"
    )
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [PY, "-c", code], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60, cwd=ROOT
        )
    assert result.returncode == 0, result.stderr
    assert result.stderr == "went on\n", result.stderr


def test_a_tasks_log_is_named_by_its_task_run_and_attempt_with_nothing_random() -> None:
    from tfmesos.common.tasklog import log_name, new_task_id

    first, again = new_task_id("worker", 1), new_task_id("worker", 1)
    assert first != again  # ids stay apart from any other job's on a node
    assert log_name(first) == log_name(again) == "worker.1.log"
    assert log_name(new_task_id("ps", 0, attempt=2)) == "ps.0.attempt-2.log"
    assert log_name(new_task_id("worker", 3, restart=1)) == "worker.3.restart-1.log"
    assert log_name(new_task_id("chief", 0, 2, 3)) == "chief.0.restart-2.attempt-3.log"
    assert log_name("t1") == "t1.log"  # an id made otherwise names its log whole
