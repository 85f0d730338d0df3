"""Every command the README shows runs as written, on a fresh copy of the project.

The shell and Python snippets of the README and of the pages it leads to
(``tests/conftest.py``'s ``GUIDE``) are run in order, in one shell, as a
new user would type them: the first creates a virtual environment and
installs the project, the ones after use it. A snippet that cannot run here
(it needs a Mesos cluster, or a registry to push to) says why in an HTML
comment on the line before it, and the cheap test below holds every other
snippet to being run.

The run itself is heavy (it installs TensorFlow, torch and JAX into a new
virtual environment and trains four times): it is marked ``heavy``, and CI
runs it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import GUIDE, ROOT, JobProcesses
from tfmesos.common import procfs

_SNIPPET = re.compile(
    r"(?:<!-- (?P<note>[^\n]*?) -->\n)?```(?P<lang>sh|python)\n(?P<body>.*?)```", re.S
)
NOT_RUN = "not run by tests/test_readme.py: "


def readme_snippets() -> list[tuple[str, str, str | None]]:
    """(language, body, why it is not run or None) of each snippet of the
    README and the pages it leads to (``GUIDE``), in reading order."""
    found = []
    for page in GUIDE:
        found += _snippets((ROOT / page).read_text())
    return found


def _snippets(text: str) -> list[tuple[str, str, str | None]]:
    found = []
    for match in _SNIPPET.finditer(text):
        note = match.group("note")
        why = note.removeprefix(NOT_RUN) if note and note.startswith(NOT_RUN) else None
        found.append((match.group("lang"), match.group("body"), why))
    return found


def test_every_readme_snippet_is_run_or_says_why_not() -> None:
    snippets = readme_snippets()
    run = [body for _, body, why in snippets if why is None]
    # The first job, the fine-grained example and the test master's job at least.
    assert len(run) >= 3, snippets
    assert "tfrun -w 2 -s 1" in run[0]
    for _, body, why in snippets:
        assert why is None or why.strip(), body


def fresh_copy(destination: Path) -> None:
    """The project's files as a clone of this tree would have them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = ROOT / os.fsdecode(name)
        if source.is_file():
            target = destination / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def script(snippets: list[tuple[str, str, str | None]], directory: Path) -> str:
    """One shell script: each shell snippet as it is, each Python one as a file run
    by the environment's ``python``."""
    lines = ["set -e"]
    for number, (lang, body, why) in enumerate(snippets):
        if why is not None:
            continue
        lines.append(f"echo '=== README snippet {number}' >&2")
        if lang == "sh":
            lines.append(body)
        else:
            path = directory / f"readme_snippet_{number}.py"
            path.write_text(body)
            lines.append(f"python {path}")
    return "\n".join(lines) + "\n"


@pytest.mark.heavy
def test_the_readme_runs_as_written(tmp_path: Path, job_procs: JobProcesses) -> None:
    project = tmp_path / "tfmesos"
    fresh_copy(project)
    snippets = readme_snippets()
    env = job_procs.env()
    # A new user's shell: not inside this test run's virtual environment.
    env.pop("VIRTUAL_ENV", None)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    result = subprocess.run(
        ["bash", "-c", script(snippets, tmp_path)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    # Both MNIST jobs trained (here and through the test master), and the
    # fine-grained example and plus.py added 10 and 32.
    assert len(re.findall(r"validation cross entropy = [\d.]+", output)) >= 2, output[-6000:]
    assert re.findall(r"^42$", result.stdout, re.M) == ["42", "42"], result.stdout[-3000:]
    # The DDP example trained under torchrun and under tfrun; JAX's psum was exact.
    assert len(re.findall(r"final loss = [\d.]+", output)) >= 2, output[-6000:]
    assert "[worker:0] psum = [3, 6, 9, 12]" in result.stdout, result.stdout[-3000:]
    assert [p.cmdline() for p in job_procs.wait_gone(30)] == []


def run_block(body: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run a README block under ``set -e`` in a session of its own; its output
    goes to files, not pipes: a failed step ends the block before its ``kill
    $!``, and the master it left would hold a pipe open, so that reading to
    the end waited for the test's timeout. Whatever the block left running
    is killed once it has ended."""
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            ["bash", "-c", "set -e\n" + body],
            cwd=ROOT,
            env=env,
            stdout=stdout,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=900)  # a hang guard
            if code == 0:
                # What the block stopped (its master, after `kill $!`) ends
                # by itself, saying where it kept the sandboxes.
                deadline = time.monotonic() + 60
                while in_session(proc.pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(proc.args, code, out.read_text(), err.read_text())


def in_session(session: int) -> list[int]:
    """The live processes of ``session`` (zombies are over)."""
    return [p.pid for p in procfs.processes() if p.session == session and p.state != "Z"]


def test_the_test_master_block_runs_as_written_with_5050_taken(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    """The README's "Trying it without a cluster" block, in this checkout's
    environment: its ``pip install`` left out (this environment has the
    extra), and the rest as written, while Mesos's port 5050 is taken (by
    this test, unless something else holds it already): the block's master
    takes a free port and its tfrun finds it, never talking to 5050's holder
    (issue 40, item 15). The first thing a new user sees must not be
    "Cannot connect"; and after the block's ``kill``, every task's output is
    in the run directory tfrun named last."""
    blocks = [body for lang, body, why in readme_snippets() if "tfmesos.testing.master" in body]
    block = next(body for body in blocks if "mnist_replica.py" in body and "kill $!" in body)
    lines = block.splitlines()
    assert lines[0] == "pip install '.[mesos]'", block
    body = "\n".join(lines[1:])
    holder = socket.socket()
    with contextlib.suppress(OSError):  # already taken: as good
        holder.bind(("127.0.0.1", 5050))
        holder.listen()
    address = ROOT / "master.address"
    try:
        env = job_procs.env()
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
        result = run_block(body, env, tmp_path)
    finally:
        holder.close()
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "Cannot connect" not in output and "re-subscribing" not in output, output[-6000:]
    assert not address.exists(), "the master removes its address file when it stops"
    assert re.findall(r"validation cross entropy = [\d.]+", output), output[-6000:]
    assert re.findall(r"^42$", result.stdout, re.M) == ["42"], result.stdout[-3000:]
    # The MNIST job's last line names its run directory: every task's log is there.
    named = re.findall(r"the full output of each task is in (\S+)", result.stderr)
    assert named, result.stderr[-3000:]
    logs = {path.name.split(".")[0] + ":" + path.name.split(".")[1]
            for path in Path(named[0]).glob("*.log")}  # fmt: skip
    assert logs == {"ps:0", "worker:0", "worker:1"}, (logs, result.stderr[-3000:])
    assert "sandboxes are kept in" in result.stdout, result.stdout[-3000:]
    kept = re.findall(r"sandboxes are kept in (\S+)", result.stdout)
    for directory in kept:
        shutil.rmtree(directory, ignore_errors=True)
    assert [p.cmdline() for p in job_procs.wait_gone(30)] == []
