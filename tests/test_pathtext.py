"""A user's path as tfrun shows it: as it is, or quoted where a character
in it would not print as itself (tfmesos/common/pathtext.py)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.conftest import ROOT, JobProcesses, tfrun_argv


@pytest.mark.unit
def test_a_path_is_shown_as_it_is_unless_a_character_in_it_would_not_print_as_itself() -> None:
    from tfmesos.common.pathtext import shown_path

    assert shown_path("/tmp/my logs/run 1") == "/tmp/my logs/run 1"
    assert shown_path("/tmp/Ärger") == "/tmp/Ärger"
    assert shown_path("/tmp/a\nb") == "'/tmp/a\\nb'"
    assert shown_path("/tmp/a\tb\x1b[31m") == "'/tmp/a\\tb\\x1b[31m'"
    assert shown_path("/tmp/\udcff") == "'/tmp/\\udcff'"  # an undecodable byte


@pytest.mark.unit
def test_tfruns_refusals_show_a_path_with_a_newline_quoted_on_one_line(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], tfrun_in_process: None
) -> None:
    from tfmesos.cli import main as cli
    from tfmesos.cli import parser

    a_file = tmp_path / "f\nile"
    a_file.write_text("")
    refusals = {
        "--log-dir": f"--log-dir: cannot use {str(a_file)!r}: it is not a directory",
        "--chdir": f"--chdir: {str(a_file)!r} is not a directory",
        "-e": f"-e: {str(a_file)!r} is not valid JSON",
    }
    for flag, said in refusals.items():
        a_file.write_text("" if flag != "-e" else "{")
        with pytest.raises(SystemExit) as refused:
            parser.parse_args([flag, str(a_file), "-w", "1", "--", "true"])
        assert refused.value.code == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert said in line, line
    # --events is opened once the job is parsed.
    missing = tmp_path / "no\ndir" / "events"
    assert cli.main(["-m", "127.0.0.1:1", "--events", str(missing), "-w", "1", "--", "true"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"tfrun: error: --events: cannot write {str(missing)!r}: "), line


@pytest.mark.unit
def test_where_the_local_and_slurm_backends_keep_the_logs_is_shown_quoted(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tfmesos.backends.local.backend import LocalBackend
    from tfmesos.backends.slurm.backend import SlurmBackend
    from tfmesos.spec import ClusterSpec, Job

    where = tmp_path / "a\nb"
    job = ClusterSpec((Job("worker", 1),))
    assert LocalBackend(job, log_dir=where).logs_location() == repr(str(where))
    # Slurm's commands as if on PATH: nothing is run.
    monkeypatch.setattr(
        "tfmesos.backends.slurm.backend.shutil.which", lambda name: f"/usr/bin/{name}"
    )
    assert SlurmBackend(job, log_dir=where).logs_location() == repr(str(where))


@pytest.mark.unit
def test_each_backend_says_where_its_own_logs_are_kept() -> None:
    """The base class said Mesos's sandboxes, a word wrong for any backend
    that forgot to say its own (issue #47): it has no default now."""
    from tfmesos.backends.base import Backend

    assert "logs_location" in Backend.__abstractmethods__


def test_the_mesos_backends_files_are_shown_quoted(tmp_path: Any) -> None:
    from tfmesos.backends.mesos.options import read_secret
    from tfmesos.errors import SpecError
    from tfmesos.mesos.masters import parse_masters

    odd = tmp_path / "a\nb"
    quoted = repr(str(odd))
    with pytest.raises(SpecError) as secret:
        read_secret(str(odd))
    with pytest.raises(SpecError) as master:
        parse_masters(f"file://{odd}")
    for said in (str(secret.value), str(master.value)):
        assert quoted in said and "\n" not in said, said


@pytest.mark.e2e
def test_a_local_job_with_a_newline_in_its_log_dir_says_where_its_logs_are_on_one_line(
    tmp_path: Any, job_procs: JobProcesses
) -> None:
    where = tmp_path / "a\nb"
    result = subprocess.run(
        tfrun_argv("--log-dir", str(where), "-w", "1", "-s", "0", "--", "true"),
        capture_output=True,
        text=True,
        env=job_procs.env(),
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert f"[tfrun] the full output of each task goes to {str(where)!r}" in lines, lines
    assert f"[tfrun] the full output of each task is in {str(where)!r}" in lines, lines
    assert all(line.startswith("[tfrun] ") for line in lines), lines
    assert (where / "worker.0.0.log").exists() or list(where.iterdir()), "no log kept there"
