"""Bad input that tfrun must refuse in one line, exit 2, before anything
starts (issue 27: found by the adversarial run)."""

from __future__ import annotations

import json
import os
import resource
from pathlib import Path

import pytest

from tests.conftest import run_tfrun, runs_in
from tfmesos import SpecError, cli
from tfmesos.cli import parse_args
from tfmesos.spec import ClusterSpec, Job


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What tfrun says refusing ``argv``: one line, exit 2."""
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert said.startswith("tfrun: error: ")
    assert said.count("\n") == 1, said
    return said


@pytest.mark.parametrize("text", ["2_0", "\u0663", "1_0", "\uff12", "+2"])
def test_counts_are_plain_ascii_digits(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    # int() takes 2_0 (20 workers) and Arabic-Indic digits.
    for flag in ("-w", "-s", "-Gw", "--max-restarts"):
        argv = ["-w", "1", flag, text, "--", "true"] if flag != "-w" else [flag, text, "--", "true"]
        said = refused(argv, capsys)
        assert repr(text) in said


@pytest.mark.parametrize("text", ["1_0", "\u0663", "2\u0660"])
def test_numbers_are_plain_ascii(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    refused(["-w", "1", "-Cw", text, "--", "true"], capsys)


@pytest.mark.parametrize(
    ("flag", "hint"),
    [
        ("--nnodes", "give -w N"),
        ("--node_rank", "RANK"),
        ("--master_addr", "MASTER_ADDR"),
    ],
)
def test_torchruns_flags_point_to_tfruns_way(
    flag: str, hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    said = refused([flag, "4", "--", "python", "train.py"], capsys)
    assert f"tfrun has no {flag}" in said
    assert hint in said
    assert "did you mean" not in said


def test_a_python_file_as_the_command_says_to_write_python(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    for command in (["train.py"], ["train.py", "--lr", "1"], ["train.py --lr 1"], ["./train.py"]):
        said = refused(["-w", "4", "--chdir", str(tmp_path), "--", *command], capsys)
        word = command[0].split()[0]
        assert f"write python {word}" in said
    # One that runs as it is given is left alone: executable, with its #!,
    # named by a path; and python train.py, of course.
    script.write_text("#!/usr/bin/env python3\n")
    script.chmod(0o755)
    parse_args(["-w", "1", "--chdir", str(tmp_path), "--", "./train.py"])
    parse_args(["-w", "1", "--chdir", str(tmp_path), "--", "python", "train.py"])
    # Not a file here (a cluster's path, another directory): not tfrun's to judge.
    parse_args(["-w", "1", "--chdir", str(tmp_path), "--", "other.py"])


@pytest.mark.parametrize("name", ["two\nlines", "esc\x1b[31mred", "bad\udc80byte", "tab\there"])
def test_a_name_that_is_not_one_line_of_text_is_refused(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    said = refused(["-w", "1", "-n", name, "--", "true"], capsys)
    assert "-n/--name" in said


def test_a_name_of_text_is_taken() -> None:
    _, spec = parse_args(["-w", "1", "-n", "my job: é ✓", "--", "true"])
    assert spec.name == "my job: é ✓"


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "extra.json"
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("config", "where"),
    [
        ({"env": {"X": "\udc80"}}, "'env' 'X'"),
        ({"env": {"\udcff": "v"}}, "'env' name"),
        ({"initializer": "echo \udc99"}, "'initializer'"),
    ],
)
def test_a_lone_surrogate_in_the_extra_config_is_refused_naming_its_key(
    tmp_path: Path, config: dict[str, object], where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    said = refused(["-w", "1", "-e", write(tmp_path, json.dumps(config)), "--", "true"], capsys)
    assert where in said
    assert "lone surrogate" in said


def test_a_json_nested_past_the_parsers_depth_is_invalid_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "[" * 100_000 + "]" * 100_000)
    said = refused(["-w", "1", "-e", path, "--", "true"], capsys)
    assert "is not valid JSON: nested too deeply" in said


def test_an_extra_config_without_end_is_refused_at_the_bound(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # /dev/zero was read until the OOM killer came (22 GB). The address space
    # is capped at 1 GiB over what this process holds while it is read, so
    # that a read without a bound fails this test with MemoryError, not the
    # machine.
    vm_kib = next(
        int(line.split()[1])
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmSize:")
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, ((vm_kib << 10) + (1 << 30), hard))
    try:
        said = refused(["-w", "1", "-e", "/dev/zero", "--", "true"], capsys)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert "/dev/zero is larger than 4 MiB" in said


def test_an_extra_config_at_the_bound_is_read(tmp_path: Path) -> None:
    padding = " " * (cli.MAX_EXTRA_CONFIG - len('{"env": {}}'))
    assert cli.read_extra_config(write(tmp_path, '{"env": {}}' + padding)) == (None, None, {})
    with pytest.raises(SpecError, match="larger than"):
        cli.read_extra_config(write(tmp_path, '{"env": {}}' + padding + " "))


def test_an_environment_from_os_environ_with_a_byte_not_utf8_is_sized_not_a_traceback() -> None:
    # surrogateescape's \udc80 is the byte 0x80, which an environment holds:
    # sizing it raised UnicodeEncodeError.
    spec = ClusterSpec(jobs=(Job("worker", 1, cmd="true"),), env={"X": "\udc80"})
    assert spec.env["X"] == "\udc80"


@pytest.mark.e2e
def test_a_job_refused_after_its_run_directory_was_made_leaves_none(tmp_path: Path) -> None:
    # A job this machine can never hold is refused by the local backend once
    # it has made its run's directory: it left the directory, with its .lock,
    # and two such jobs with TFMESOS_KEEP_RUNS=2 removed a real run's logs.
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path), "TFMESOS_KEEP_RUNS": "2"}
    runs = tmp_path / "tfmesos" / "runs"
    real = run_tfrun("-w", "1", "--", "echo real output", env=env, timeout=120)
    assert real.returncode == 0, real.stderr
    (kept,) = runs_in(runs)
    for _ in range(2):
        too_big = run_tfrun("-w", "2", "-Cw", "100000", "--", "true", env=env, timeout=120)
        assert too_big.returncode == 2, too_big.stderr
        assert too_big.stderr.count("\n") == 1, too_big.stderr
    assert runs_in(runs) == [kept]
    (log,) = kept.glob("worker.0.*.log")
    assert "real output" in log.read_text()
