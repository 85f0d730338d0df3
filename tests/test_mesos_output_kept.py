"""Every task's output is kept where tfrun says (issue 27, point 2).

On Mesos each task's output reaches the launcher (forwarded to the terminal or
not) and is written, as it comes, to the run directory its job_started event
and tfrun's last line name, beside the chief's log; the sandboxes are no
longer the only copy. tfrun names only places that exist: the master's web UI
(its backend_attached event's ``web_ui``) only where it serves one (real
Mesos does, the test master does not). The test master's command keeps its
sandboxes when stopped by a signal, and says where.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import MARK, ROOT, JobProcesses, run_tfrun, tfrun_argv
from tests.jobevents import JobEvents
from tests.mesos_clusters import MesosUnderTest

PY = sys.executable
# Each task prints; the ps then says so in a file (the tasks share this
# machine's disk) and serves on; the workers end once it has, so that the job
# does not end, and the ps with it, before the ps has said its line.
PRINT_AND_WAIT = (
    "import os, sys, time\n"
    "print('output of', sys.argv[1], sys.argv[2], flush=True)\n"
    "printed = os.path.join(sys.argv[3], 'ps-printed')\n"
    "if sys.argv[1] == 'ps':\n"
    "    open(printed, 'w').close()\n"
    "    time.sleep(120)\n"
    "deadline = time.monotonic() + 120\n"
    "while not os.path.exists(printed) and time.monotonic() < deadline:\n"
    "    time.sleep(0.05)\n"
)
TASKS = ("ps:0", "worker:0", "worker:1")


def job_args(shared: Path) -> tuple[str, ...]:
    return (
        *("-w", "2", "-s", "1", "--", PY, "-c", PRINT_AND_WAIT),
        *("{job_name}", "{task_index}", str(shared)),
    )


def logs_by_task(directory: Path) -> dict[str, str]:
    """Each task's log in ``directory``, by task name (``ps.0.log``: ps:0)."""
    found: dict[str, str] = {}
    for path in sorted(directory.glob("*.log")):
        job, index = path.name.split(".")[:2]
        found[f"{job}:{index}"] = found.get(f"{job}:{index}", "") + path.read_text()
    return found


def test_every_task_s_output_is_in_the_run_directory_the_last_line_names(
    mesos: MesosUnderTest, job_procs: JobProcesses, tmp_path: Path
) -> None:
    events = JobEvents(tmp_path / "events.jsonl")
    result = run_tfrun("-m", mesos.url, *events.flag, *job_args(tmp_path), env=job_procs.env())
    assert result.returncode == 0, result.stderr
    assert events.verdict()["result"] == "succeeded", result.stderr
    [started] = events.of("job_started")
    assert started["backends"] == {"mesos": ["ps:0", "worker:1"], "local": ["worker:0"]}
    run = Path(started["log_dir"])
    # Where tfrun says, in its last line: the promise this test is about.
    assert result.stderr.splitlines()[-1] == f"[tfrun] the full output of each task is in {run}"
    logs = logs_by_task(run)
    for name in TASKS:
        job, index = name.split(":")
        assert f"output of {job} {index}" in logs.get(name, ""), (name, logs)
    [attached] = events.of("backend_attached")
    framework_id = mesos.framework()["id"]
    assert (attached["backend"], attached["framework_id"]) == ("mesos", framework_id), attached
    assert attached["master"] == mesos.url, attached
    # A web UI only where there is one: real Mesos serves it, the test master
    # not. The link's wording, as the user reads it (its one check).
    if mesos.double is not None:
        assert attached["web_ui"] is None and "web UI" not in result.stderr, result.stderr
    else:
        assert attached["web_ui"] == f"{mesos.url}/#/frameworks/{framework_id}", attached
        assert f"web UI: {attached['web_ui']}\n" in result.stderr, result.stderr
    assert job_procs.wait_gone(10) == []


def _start_master(job_procs: JobProcesses, *flags: str) -> tuple[subprocess.Popen[str], str]:
    master = subprocess.Popen(
        [PY, "-m", "tfmesos.testing.master", "--port", "0", "--agents", "2", "--inherit-env",
         *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=job_procs.env(),
        cwd=ROOT,
    )  # fmt: skip
    try:
        assert master.stdout is not None
        for line in master.stdout:
            found = re.search(r"listening on (http://\S+)", line)
            if found:
                return master, found.group(1)
        raise AssertionError(f"the test master never listened (exit {master.wait()})")
    except BaseException:
        with master:  # its pipe closed and the master reaped
            master.kill()
        raise


def _stop(master: subprocess.Popen[str]) -> str:
    """SIGTERM the master; what it said. Its pipe is closed and it is
    reaped, however this ends (SIGKILL once 60 s have passed)."""
    with master:
        master.send_signal(signal.SIGTERM)
        try:
            out, _ = master.communicate(timeout=60)
        except BaseException:
            master.kill()
            raise
    return out


def test_the_test_master_keeps_its_sandboxes_when_stopped_by_a_signal_and_says_where(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    master, url = _start_master(job_procs)
    events = JobEvents(tmp_path / "events.jsonl")
    try:
        result = subprocess.run(
            tfrun_argv("-m", url, *events.flag, *job_args(tmp_path)),
            capture_output=True,
            text=True,
            env=job_procs.env(),
            cwd=ROOT,
            timeout=300,
        )
    finally:
        said = _stop(master)
    assert result.returncode == 0, result.stderr
    assert events.verdict()["result"] == "succeeded", result.stderr
    found = re.search(r"sandboxes are kept in (\S+)", said)
    assert found, said
    kept = Path(found.group(1))
    sandboxes = "".join(
        path.read_text(errors="replace") for path in kept.rglob("stdout") if path.is_file()
    )
    for job, index in (("ps", "0"), ("worker", "1")):
        assert f"output of {job} {index}" in sandboxes, said
    import shutil

    shutil.rmtree(kept, ignore_errors=True)
    assert job_procs.wait_gone(10) == []


def test_the_test_master_removes_its_sandboxes_when_told_to(job_procs: JobProcesses) -> None:
    master, _ = _start_master(job_procs, "--remove-work-dir")
    said = _stop(master)
    found = re.search(r"sandboxes in (\S+) are removed", said)
    assert found, said
    assert not Path(found.group(1)).exists(), said
    assert MARK  # the master's tasks carry the mark; none ran here
