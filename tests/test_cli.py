from __future__ import annotations

import json
import os
import re
import resource
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, JobProcesses, one_error_line, run_tfrun, runs_in
from tfmesos import SpecError
from tfmesos.cli import parser
from tfmesos.cli.main import main as tfrun_main
from tfmesos.cli.parser import build_parser, parse_args
from tfmesos.common import taskenv
from tfmesos.spec import ClusterSpec, Job, parse_volume

ORIGINAL_FLAGS = [
    "-w",
    "-s",
    "-m",
    "-n",
    "-C",
    "-f",
    "-Cw",
    "-Gw",
    "-Mw",
    "-Cs",
    "-Gs",
    "-Ms",
    "-v",
    "-V",
    "-r",
    "-e",
    "--worker-logs",
]


@pytest.mark.e2e
def test_help_documents_every_flag() -> None:
    result = run_tfrun("--help")
    assert result.returncode == 0
    for flag in [
        *ORIGINAL_FLAGS,
        "--backend",
        "--timeout",
        "--image",
        "{ps_hosts}",
        "{task_index}",
    ]:
        assert flag in result.stdout, flag


@pytest.mark.parametrize(
    ("argv", "same_as"), [(["help"], ["--help"]), (["help", "logs"], ["logs", "--help"])]
)
def test_tfrun_help_is_tfrun_dash_dash_help(
    argv: list[str], same_as: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: tfrun help said "-w is required", exit 2.
    with pytest.raises(SystemExit) as asked:
        tfrun_main(same_as)
    expected = capsys.readouterr().out
    with pytest.raises(SystemExit) as helped:
        tfrun_main(argv)
    assert (helped.value.code, asked.value.code) == (0, 0)
    assert capsys.readouterr().out == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-s", "1", "--", "true"], "-w is required"),
        (["--", "true"], "-w is required"),
        # -s may be left out, but not by a command that names its ps tasks.
        (["-w", "2", "--", "echo", "{ps_hosts}"], r"uses \{ps_hosts\}: .*with -s N"),
        (
            ["-w", "1", "--max-restarts", "x", "--", "true"],
            r"--max-restarts must be a whole number from 0 to 1000, not 'x'",
        ),
        (
            ["-w", "1", "--max-restarts", "1001", "--", "true"],
            r"--max-restarts must be a whole number from 0 to 1000, not '1001'",
        ),
        (
            ["-w", "1", "--chdir", "/does/not/exist", "--", "true"],
            "--chdir: /does/not/exist is not",
        ),
        # The user's flag, and what it takes: never argparse's "argument
        # -w/--nworker: invalid _positive_int value", which names a helper.
        (
            ["-w", "x", "-s", "1", "--", "true"],
            r"tfrun: error: -w/--nworker must be a whole number, 1 or more \(0 with --chief\), "
            "not 'x' ",
        ),
        (
            ["-w", "1", "-s", "-1", "--", "true"],
            r"error: -s/--nserver must be a whole number \(0 or more\), not '-1' ",
        ),
        (
            ["-w", "1", "-s", "0", "-Cw", "0", "--", "true"],
            r"error: -Cw/--worker-cpus must be a number above 0, not '0' ",
        ),
        (
            ["-w", "1", "-s", "0", "--timeout", "soon", "--", "true"],
            r"error: --timeout must be a number above 0, not 'soon' ",
        ),
        (
            ["-w", "1", "-s", "0", "-Gw", "1.5", "--", "true"],
            r"error: -Gw/--worker-gpus must be a whole number \(0 or more\), not '1.5' ",
        ),
        (["-w", "1", "-s", "0"], "no command given"),
        (["-w", "0", "-s", "1", "--", "true"], r"-w must be 1 or more, not 0"),
        (
            ["-w", "1", "-s", "0", "--", "echo", "{worker_index}"],
            r"unknown placeholder \{worker_index\}",
        ),
        (["-w", "2", "-s", "0", "--worker-logs", "5", "--", "true"], "no worker 5"),
        (["-w", "1", "-s", "0", "--worker-logs", "a", "--", "true"], "is neither a worker index"),
        (["-w", "1", "-s", "1", "--worker-logs", "ps:1", "--", "true"], "no ps 1 in a job of 1"),
        (["-w", "1", "--worker-logs", "chief:0", "--", "true"], "there is no chief: give --chief"),
        (
            ["-w", "1", "--worker-logs", "worker:5", "--", "true"],
            r"no worker 5 in a job of 1 worker \(see",
        ),
        (
            ["-w", "1", "-s", "0", "--backend", "mesos", "-V", "nope", "--", "true"],
            "must be /host/path:/container/path",
        ),
        # A Mesos flag given to another backend is named, with its backend.
        (
            ["-w", "1", "-s", "0", "--backend", "local", "--image", "img", "--", "true"],
            "--image is a Mesos flag: it needs --backend mesos",
        ),
        (
            ["-w", "1", "-s", "0", "--backend", "slurm", "-r", "ml", "--", "true"],
            "-r is a Mesos flag: it needs --backend mesos",
        ),
        (
            ["-w", "1", "-s", "0", "-V", "/a:/b", "--", "true"],
            "-V is a Mesos flag: it needs --backend mesos",
        ),
        # Off, an option that is on by default is given too.
        (
            ["-w", "1", "-s", "0", "--no-checkpoint", "--", "true"],
            "--no-checkpoint is a Mesos flag: it needs --backend mesos",
        ),
        (
            ["-w", "1", "-s", "0", "--backend", "mesos", "--partition", "gpu", "--", "true"],
            "--partition is a Slurm flag: it needs --backend slurm",
        ),
        (
            ["-w", "1", "-s", "0", "--backend", "mesos", "-C", "docker", "--", "true"],
            "the Docker containerizer runs Docker images only: give --image",
        ),
        (
            [
                "-w",
                "1",
                "-s",
                "0",
                "-Gw",
                "1",
                "-m",
                "h:5050",
                "-C",
                "docker",
                "--image",
                "i",
                "--",
                "true",
            ],
            "GPUs only to tasks of the Mesos containerizer",
        ),
        (["-w", "1", "-s", "0", "-e", "/does/not/exist", "--", "true"], "cannot read"),
        (["-w", "1", "-s", "0", "--backend", "k8s", "--", "true"], "invalid choice"),
        (["-w", "1", "-s", "0", "--bogus", "--", "true"], "unknown flag --bogus"),
        # The nearest flag is suggested; an unknown flag is named before a
        # missing one; an abbreviation is refused, never taken for a flag.
        (
            ["-w", "1", "-s", "0", "--wroker-logs", "0", "--", "true"],
            r"unknown flag --wroker-logs \(did you mean --worker-logs\?\)",
        ),
        (
            ["--nworkers", "2", "-s", "0", "--", "true"],
            r"unknown flag --nworkers \(did you mean --nworker\?\)",
        ),
        (
            ["--nwork", "1", "-s", "0", "--", "true"],
            r"unknown flag --nwork \(did you mean --nworker\?\)",
        ),
        (
            ["-w", "1", "-s", "0", "--mast=x", "--", "true"],
            r"unknown flag --mast \(did you mean --master\?\)",
        ),
        # Flags of srun, Ray and TF's scripts: what tfrun takes instead, not
        # a far-fetched name (before: --gpus said --user, --nodes --qos).
        (["-w", "1", "--gpus", "2", "--", "true"], r"no --gpus \(as srun has\): give -Gw"),
        (["-w", "1", "--cpus", "2", "--", "true"], r"no --cpus \(as Ray has\): give -Cw"),
        (["-w", "1", "--mem", "2", "--", "true"], r"no --mem \(as srun has\): give -Mw"),
        (["-w", "1", "--nodes", "2", "--", "true"], r"no --nodes \(as srun has\): .*-w N"),
        (["-w", "1", "--ntasks", "2", "--", "true"], r"no --ntasks \(as srun has\): give -w N"),
        (["-w", "1", "--ps", "2", "--", "true"], r"no --ps \(as TensorFlow scripts.*give -s N"),
        # A flag of the command's own, typed before the -- (before: "did
        # you mean --qos?").
        (
            ["-w", "2", "--epochs", "5", "--", "python", "train.py"],
            r"unknown flag --epochs: if it is the command's, put it after --",
        ),
    ],
)
@pytest.mark.e2e
def test_bad_usage_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = run_tfrun(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tfrun: error: ")
    assert re.search(message, lines[0]), lines[0]


def test_a_bare_number_for_n_is_refused_unless_given_as_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # srun's -n is its task count; tfrun's names the job. Before: taken as
    # the name, with a warning, and the job ran.
    for argv in (["-n", "4"], ["-n4"], ["-n", " 4"]):
        said = refused_usage([*argv, "-w", "1", "--", "true"], capsys)
        assert "srun's -n (its number of tasks) is tfrun's -w (-w 4)" in said
        assert "give --name" in said
    args, _ = parse_args(["--name", "4", "-w", "1", "--", "true"])
    assert args.name == "4" and capsys.readouterr().err == ""
    args, _ = parse_args(["-n", "run4", "-w", "1", "--", "true"])
    assert args.name == "run4"


def test_worker_logs_takes_any_task_by_name_and_all() -> None:
    # Before: "--worker-logs: 'ps:0' is not a worker index".
    _, spec = parse_args(["-w", "2", "-s", "1", "--worker-logs", "ps:0,1", "--", "true"])
    assert spec.forward_logs == frozenset({"ps:0", "worker:1"})
    _, spec = parse_args(["-w", "2", "-s", "1", "--worker-logs", "all", "--", "true"])
    assert spec.forward_logs == frozenset({"ps:0", "worker:0", "worker:1"})


@pytest.mark.e2e
def test_tfrun_says_whose_output_it_shows_and_can_show_a_ps() -> None:
    result = run_tfrun("-w", "1", "-s", "1", "--worker-logs", "ps:0", "--", "echo from {job_name}")
    assert result.returncode == 0, result.stderr
    assert "[ps:0] from ps" in result.stdout and "worker" not in result.stdout
    assert "showing ps:0's output here; every other task's is only in its log" in result.stderr
    result = run_tfrun("-w", "2", "--", "true")
    assert "showing worker:0's output here" in result.stderr


def test_a_bad_placeholder_starts_nothing(job_procs) -> None:  # type: ignore[no-untyped-def]
    result = run_tfrun("-w", "1", "-s", "0", "--", "touch", "/tmp/x-{nope}", env=job_procs.env())
    assert result.returncode == 2
    assert job_procs.alive() == []


def test_command_words_are_kept_and_a_single_word_is_a_shell_line() -> None:
    _, spec = parse_args(["-w", "1", "-s", "0", "--", "python", "-c", "print('a b')"])
    assert spec.jobs[1].cmd == "python -c 'print('\"'\"'a b'\"'\"')'"
    _, spec = parse_args(["-w", "1", "-s", "0", "--", "echo a && echo b"])
    assert spec.jobs[1].cmd == "echo a && echo b"


@pytest.mark.parametrize("spelling", ["kebab", "original"])
def test_the_originals_snake_case_flags_have_kebab_case_spellings(
    tmp_path: Path, spelling: str
) -> None:
    # Before: only --extra_config, --containerizer_type, --force_pull_image.
    config = tmp_path / "extra.json"
    config.write_text(json.dumps({"env": {"A": "1"}}))
    flags = ["--extra-config", "--containerizer-type", "--force-pull-image"]
    if spelling == "original":
        flags = [flag.replace("-", "_").replace("__", "--") for flag in flags]
    extra, containerizer, force = flags
    where = ["-m", "h:5050", "--image", "i", containerizer, "docker", force]
    args, spec = parse_args([*where, extra, str(config), "-w", "1", "--", "true"])
    assert spec.env == {"A": "1"}
    assert args.options.containerizer == "DOCKER" and args.options.force_pull_image


def test_tfruns_multi_word_flags_take_their_underscore_spellings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # As torchrun users type them. Before: --max_restarts was refused
    # ("did you mean --max-restarts?") while --nproc_per_node was taken.
    flags = ["--max-restarts", "1", "--log-dir", "/tmp", "--worker-logs", "all", "--chief"]
    flags += ["--chief-cpus", "2", "--nproc-per-task", "2", "-w", "2", "--", "true"]
    kebab, spec = parse_args(flags)
    snake, same = parse_args(
        ["--" + f[2:].replace("-", "_") if f[:2] == "--" else f for f in flags]
    )
    assert same == spec and vars(snake) | {"name_flag": None} == vars(kebab) | {"name_flag": None}
    assert (snake.max_restarts, snake.log_dir, snake.chief_cpus) == (1, "/tmp", 2.0)
    # Only the shown spelling's default: one without the flag is as before.
    assert parse_args(["-w", "1", "--", "true"])[0].max_restarts == 0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    assert "--max_restarts" not in capsys.readouterr().out


def test_the_version_has_one_source() -> None:
    from importlib.metadata import version

    import tfmesos

    project = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in project
    assert 'version = {attr = "tfmesos.__version__"}' in project
    assert version("tfmesos") == tfmesos.__version__


def test_original_flags_map_to_the_spec(tmp_path: Path) -> None:
    config = tmp_path / "extra.json"
    config.write_text(
        json.dumps({"initializer": "echo in", "finalizer": "echo out", "env": {"A": "1"}})
    )
    args, spec = parse_args(
        [
            "-w",
            "3",
            "-s",
            "2",
            "-Cw",
            "2",
            "-Gw",
            "1",
            "-Mw",
            "512",
            "-Cs",
            "0.5",
            "-Ms",
            "256",
            "-r",
            "ml",
            "-V",
            "/a:/b:ro",
            "-C",
            "mesos",
            "-f",
            "-n",
            "myjob",
            "-e",
            str(config),
            "--worker-logs",
            "0,2",
            "-m",
            "zk://h:2181/mesos",
            "--",
            "train",
        ]
    )
    ps, worker = spec.jobs
    assert (ps.name, ps.num, ps.cpus, ps.mem, ps.gpus) == ("ps", 2, 0.5, 256.0, 0)
    assert (worker.name, worker.num, worker.cpus, worker.mem, worker.gpus) == (
        "worker",
        3,
        2.0,
        512.0,
        1,
    )
    options = args.options
    assert options.role == "ml" and options.containerizer == "MESOS" and options.force_pull_image
    assert options.volumes[0].host_path == "/a" and options.volumes[0].read_only
    assert options.master == "zk://h:2181/mesos"
    assert spec.name == "myjob"
    assert (spec.initializer, spec.finalizer, dict(spec.env)) == ("echo in", "echo out", {"A": "1"})
    assert spec.forward_logs == frozenset({"worker:0", "worker:2"})
    assert args.backend == "mesos"


def test_backend_defaults_to_local_without_a_master(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MESOS_MASTER", raising=False)
    assert parse_args(["-w", "1", "-s", "0", "--", "x"])[0].backend == "local"
    monkeypatch.setenv("MESOS_MASTER", "h:5050")
    assert parse_args(["-w", "1", "-s", "0", "--", "x"])[0].backend == "mesos"


def test_parser_has_no_surprise_flags() -> None:
    assert set(ORIGINAL_FLAGS) <= set(build_parser().flags)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "-w",
                "-s",
                "-Cw",
                "-Mw",
                "-Gw",
                "-V",
                "-e",
                "--worker-logs",
                "--timeout",
                "-m",
                "--",
                "x",
                "1",
                "-1",
                "0.5",
                "/a:/b",
                "*",
                "{x}",
                "{task_index}",
                "",
            ]
        ),
        max_size=10,
    )
)
def test_any_argument_list_parses_or_exits_2_never_a_traceback(argv: list[str]) -> None:
    try:
        parse_args(argv)
    except SystemExit as exc:
        assert exc.code in (0, 2)  # noqa: PT017 - any outcome but a traceback is fine


@given(st.text(max_size=40))
def test_volume_parsing_is_a_volume_or_a_spec_error(text: str) -> None:
    try:
        volume = parse_volume(text)
    except SpecError:
        return
    assert volume.host_path.startswith("/")
    assert volume.container_path.startswith("/")


@pytest.mark.e2e
def test_version_names_the_release_and_the_protocol() -> None:
    from tfmesos.rendezvous import protocol

    result = run_tfrun("--version")
    assert result.returncode == 0
    assert re.fullmatch(
        rf"tfrun \S+, rendezvous protocol {protocol.PROTOCOL_VERSION}\n", result.stdout
    ), result.stdout


def _run_tfrun_capped(*args: str, env: dict[str, str] | None = None, nproc: int | None = None):  # type: ignore[no-untyped-def]
    """tfrun with at most 1 GiB of address space (a check that builds a list
    per task must fail here, not take the machine's memory), and optionally a
    soft process limit."""
    import resource
    import subprocess

    from tests.conftest import ROOT, tfrun_argv

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        if nproc is not None:
            hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, hard))

    return subprocess.run(
        tfrun_argv(*args),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
        preexec_fn=limits,
    )


def _one_line_error(result, pattern: str) -> None:  # type: ignore[no-untyped-def]
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tfrun: error: ")
    assert re.search(pattern, lines[0]), lines[0]


@pytest.mark.parametrize(
    "counts",
    [
        ("-w", "99999999999999999999", "-s", "0"),
        ("-w", "100000000", "-s", "0"),
        ("-w", "1", "-s", "100000000"),
        ("-w", "6000", "-s", "6000", "-m", "127.0.0.1:1", "--reconnect-timeout", "2"),
    ],
    ids=["huge", "100M-workers", "100M-ps", "mesos-cap"],
)
def test_task_counts_past_the_limit_are_one_line_and_exit_2(job_procs, counts) -> None:  # type: ignore[no-untyped-def]
    result = _run_tfrun_capped(*counts, "--", "true", env=job_procs.env())
    _one_line_error(result, r"at most 10000 tasks")
    assert job_procs.alive() == []


def test_a_local_job_must_fit_the_process_limit(job_procs) -> None:  # type: ignore[no-untyped-def]
    # Each task is an agent and its command: 60 tasks need 120 processes.
    result = _run_tfrun_capped("-w", "60", "-s", "0", "--", "true", env=job_procs.env(), nproc=100)
    _one_line_error(result, r"60 tasks.*RLIMIT_NPROC.*100")
    assert job_procs.alive() == []


def test_a_log_dir_that_cannot_be_used_is_one_line_and_exit_2(job_procs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for log_dir in (a_file, a_file / "below", Path("/proc/tfmesos-cannot-be-made")):
        result = run_tfrun(
            "-w", "1", "-s", "0", "--log-dir", str(log_dir), "--", "true", env=job_procs.env()
        )
        _one_line_error(result, rf"--log-dir: cannot use {re.escape(str(log_dir))}: ")
    assert job_procs.alive() == []


def test_a_command_too_long_for_a_task_is_refused_before_start(job_procs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Linux takes at most 128 KiB in one argument: the shell's command line.
    words = ["echo", "x" * 100_000, "y" * 100_000]
    result = run_tfrun("-w", "1", "-s", "0", "--timeout", "60", "--", *words, env=job_procs.env())
    _one_line_error(result, r"the command is 200\d\d\d bytes; .* at most 131066 bytes")
    # The message each task receives (command, environment, initializer and
    # finalizer, the cluster's addresses) must fit in one 1 MiB frame.
    config = tmp_path / "extra.json"
    config.write_text(json.dumps({"env": {f"BIG{i}": "x" * 100_000 for i in range(11)}}))
    result = run_tfrun(
        "-w",
        "1",
        "-s",
        "0",
        "--timeout",
        "60",
        "-e",
        str(config),
        "--",
        "true",
        env=job_procs.env(),
    )
    _one_line_error(result, r"1 MiB \(1048576 bytes\)")
    assert job_procs.alive() == []


@pytest.mark.e2e
def test_verbose_is_tfmesos_own_detail_only() -> None:
    result = run_tfrun("-v", "-w", "1", "-s", "0", "--", "true")
    assert result.returncode == 0, result.stderr
    assert "Using selector" not in result.stderr  # asyncio's debug line
    assert "task worker:0 finished" in result.stderr


@pytest.mark.e2e
def test_help_names_what_tensorflow_pytorch_and_jax_tasks_get() -> None:
    result = run_tfrun("--help")
    assert result.returncode == 0
    opening = result.stdout.split("\n\n")[1]
    for framework in ("TensorFlow", "PyTorch", "JAX"):
        assert framework in opening, opening
    # Every variable a task is given, as taskenv gives it.
    cluster = {"ps": ["h:1"], "worker": ["h:2", "h:3"]}
    names = {
        *taskenv.task_environment(cluster, "worker", 1),
        *taskenv.default_environment(1),
        taskenv.ENV_RESTART,
        "CUDA_VISIBLE_DEVICES",
    }
    names.discard("PYTHONUNBUFFERED")
    missing = sorted(n for n in names if not re.search(rf"\b{n}\b", result.stdout))
    assert missing == []
    # What torchrun's flags are here, and that -s may be left out.
    for said in ("--no-python", "--tee", "--redirects", "tfrun -w 4 -- python train.py"):
        assert said in result.stdout, said
    assert "usage: tfrun -w N [-s N]" in result.stdout


def test_a_torchrun_line_runs_without_s(job_procs) -> None:  # type: ignore[no-untyped-def]
    code = "import os; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])"
    result = run_tfrun(
        "-w", "2", "--worker-logs", "*", "--", "python", "-c", code, env=job_procs.env()
    )
    assert result.returncode == 0, result.stderr
    assert sorted(line.split(" ", 1)[1] for line in result.stdout.splitlines()) == [
        "rank 0 of 2",
        "rank 1 of 2",
    ]
    assert job_procs.wait_gone(10) == []


_CWD = "import os; print(os.environ['TFMESOS_JOB_NAME'], os.getcwd())"

_PS_FIRST = """
import glob, os, sys, time
print(sys.argv[1], flush=True)
# The ps is stopped once the workers are done: they wait until it has spoken.
while os.environ["TFMESOS_JOB_NAME"] == "worker" and not any(
    open(log).read() for log in glob.glob(os.path.join(os.environ["LOGS"], "ps.0.log"))
):
    time.sleep(0.05)
"""
"""Prints its argument; a worker then waits until ps:0's log holds its line."""


def test_chdir_runs_each_task_in_dir(job_procs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    where = tmp_path / "run here"
    where.mkdir()
    logs = tmp_path / "logs"
    script = tmp_path / "ps_first.py"
    script.write_text(_PS_FIRST)
    line = "import os, runpy, sys; sys.argv = ['', os.environ['TFMESOS_JOB_NAME'] + ' ' + os.getcwd()]; "
    line += f"runpy.run_path({str(script)!r})"
    result = run_tfrun(
        "-w", "2", "-s", "1", "--worker-logs", "*", "--log-dir", str(logs),
        "--chdir", str(where), "--", "python", "-c", line,
        env=job_procs.env(LOGS=str(logs)),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [
        f"[worker:0] worker {where}",
        f"[worker:1] worker {where}",
    ]
    ps_log = logs / "ps.0.log"
    assert f"ps {where}" in ps_log.read_text()
    # A relative DIR is this directory's.
    result = run_tfrun(
        "-w", "1", "--chdir", "run here", "--", "python", "-c", _CWD,
        env=job_procs.env(), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"[worker:0] worker {where}"]


def test_chdir_runs_each_mesos_task_in_dir(mesos, job_procs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    where = tmp_path / "here"
    where.mkdir()
    result = run_tfrun(
        "-m", mesos.url, "-w", "2", "-s", "1", "--worker-logs", "*",
        "--chdir", str(where), "--", "python", "-c", _CWD,
        env=job_procs.env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # worker:1 ran on an agent (the test master's, or real Mesos's, whose
    # command executor starts it in its sandbox), worker:0 beside tfrun.
    assert sorted(result.stdout.splitlines()) == [
        f"[worker:0] worker {where}",
        f"[worker:1] worker {where}",
    ]


def test_chdir_runs_each_slurm_task_in_dir(job_procs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import sys

    from tests.conftest import slurm_problem

    problem = slurm_problem()
    if problem is not None and os.environ.get("CI"):
        pytest.fail(f"CI runs scripts/start-slurm, yet {problem}")
    if problem is not None:
        print(f"\nskipping the Slurm --chdir test: {problem}", file=sys.stderr)
        pytest.skip(problem)
    where = tmp_path / "on the nodes"
    where.mkdir()
    result = run_tfrun(
        "--backend", "slurm", "--timeout", "120", "-w", "2", "--worker-logs", "*",
        "--log-dir", str(tmp_path / "logs"), "--chdir", str(where), "--", "python", "-c", _CWD,
        env=job_procs.env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # worker:1 ran as a step of the Slurm job, worker:0 beside tfrun.
    assert sorted(result.stdout.splitlines()) == [
        f"[worker:0] worker {where}",
        f"[worker:1] worker {where}",
    ]


def test_chdir_is_the_slurm_jobs_directory() -> None:
    # Not looked for here: it is a directory of the cluster's nodes.
    _, spec = parse_args(
        ["--backend", "slurm", "-w", "1", "--chdir", "/on/the/nodes", "--", "true"]
    )
    assert spec.cwd == "/on/the/nodes"


def test_worker_logs_none_keeps_the_output_in_the_files_only(job_procs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "ps_first.py"
    script.write_text(_PS_FIRST)
    code = "import os, runpy, sys; env = os.environ; "
    code += "sys.argv = ['', 'said by ' + env['TFMESOS_JOB_NAME'] + ' ' + env['RANK']]; "
    code += f"runpy.run_path({str(script)!r})"
    for choice, shown in (("none", []), ("*", ["said by worker 0", "said by worker 1"])):
        logs = tmp_path / choice.replace("*", "all")
        result = run_tfrun(
            "-w", "2", "-s", "1", "--worker-logs", choice, "--log-dir", str(logs),
            "--", "python", "-c", code,
            env=job_procs.env(LOGS=str(logs)),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert sorted(line.split("] ", 1)[1] for line in result.stdout.splitlines()) == shown
        kept = sorted(line for log in logs.glob("*.log") for line in log.read_text().splitlines())
        assert [line for line in kept if line.startswith("said by")] == [
            "said by ps 2",
            "said by worker 0",
            "said by worker 1",
        ]


# -- a refused job leaves nothing on disk --------------------------------------------


def test_a_job_refused_after_the_log_dirs_check_leaves_no_log_dir(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    # --log-dir's check ran first and made the directory; TFMESOS_TASK_LOG_MAX's
    # (as a backend's own, Slurm's of a backslash) refused the job after it.
    log_dir = tmp_path / "made" / "logs"
    result = run_tfrun(
        "--log-dir", str(log_dir), "-w", "1", "--", "true",
        env=job_procs.env(TFMESOS_TASK_LOG_MAX="1"), timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "TFMESOS_TASK_LOG_MAX" in one_error_line(result.stderr)
    assert list(tmp_path.iterdir()) == []
    assert job_procs.alive() == []


def test_a_log_dir_below_a_file_is_refused_and_what_exists_is_left_as_it_was(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "a-file").write_text("")
    log_dir = tmp_path / "kept" / "new" / "a-file" / "logs"
    (tmp_path / "kept" / "new").mkdir()
    (tmp_path / "kept" / "new" / "a-file").write_text("")
    result = run_tfrun(
        "--log-dir", str(log_dir), "-w", "1", "--", "true", env=job_procs.env(), timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert one_error_line(result.stderr) == (
        f"tfrun: error: --log-dir: cannot use {log_dir}: Not a directory (see tfrun --help)"
    )
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "kept", "kept/a-file", "kept/new", "kept/new/a-file",
    ]  # fmt: skip


def test_an_empty_log_dir_is_refused_not_taken_as_this_directory(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    result = run_tfrun("--log-dir", "", "-w", "1", "--", "true", env=job_procs.env(), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert one_error_line(result.stderr) == (
        "tfrun: error: --log-dir: the directory's name is empty (see tfrun --help)"
    )
    assert list(tmp_path.iterdir()) == []


# -- bad input refused in one line, exit 2, before anything starts ---------------


def refused_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What tfrun says refusing ``argv``: one line, exit 2."""
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert said.startswith("tfrun: error: ")
    assert said.count("\n") == 1, said
    return said


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["-w", "1", "--wroker-logs", "0", "--", "true"], "unknown flag --wroker-logs (did you"),
        (
            ["-w", "x", "--", "true"],
            "-w/--nworker must be a whole number, 1 or more (0 with --chief), not 'x'",
        ),
        (["-w", "1", "-Gw", "1.5", "--", "true"], "-Gw/--worker-gpus must be a whole number"),
        (["-w", "1", "--max-restarts", "x", "--", "true"], "--max-restarts must be a whole"),
    ],
)
def test_the_one_line_does_not_depend_on_argparses_language(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """argparse translates its own words (gettext): tfrun read them back,
    matching "unrecognized arguments: " and "argument ", and said argparse's
    words where a translation had them otherwise (issue #47)."""
    import argparse

    monkeypatch.setattr(argparse, "_", lambda text: f"<<{text}>>")
    assert said in refused_usage(argv, capsys)


def test_tfrun_uses_argparse_only_through_its_public_api() -> None:
    """No private name of argparse's (``_ArgumentGroup``, a parser's
    ``_option_string_actions`` or ``_actions``) in the package."""
    private = re.compile(r"argparse\._[A-Za-z]|\._option_string_actions\b|\._actions\b")
    found = [
        f"{path.relative_to(ROOT)}: {match.group()}"
        for path in sorted((ROOT / "tfmesos").rglob("*.py"))
        for match in private.finditer(path.read_text())
    ]
    assert not found, found


@pytest.mark.parametrize("text", ["2_0", "\u0663", "1_0", "\uff12", "+2"])
def test_counts_are_plain_ascii_digits(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    # int() takes 2_0 (20 workers) and Arabic-Indic digits.
    for flag in ("-w", "-s", "-Gw", "--max-restarts"):
        argv = ["-w", "1", flag, text, "--", "true"] if flag != "-w" else [flag, text, "--", "true"]
        said = refused_usage(argv, capsys)
        assert repr(text) in said


@pytest.mark.parametrize("text", ["-1", "0"])
def test_w_says_what_it_takes_whatever_it_refuses(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: -w -1 said "0 or more", and -w 0 was then refused.
    said = refused_usage(["-w", text, "--", "true"], capsys)
    assert "1 or more" in said and "0 or more" not in said
    assert "--chief" in said


@pytest.mark.parametrize("text", ["1_0", "\u0663", "2\u0660"])
def test_numbers_are_plain_ascii(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    refused_usage(["-w", "1", "-Cw", text, "--", "true"], capsys)


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
    said = refused_usage([flag, "4", "--", "python", "train.py"], capsys)
    assert f"tfrun has no {flag}" in said
    assert hint in said
    assert "did you mean" not in said


def test_a_python_file_as_the_command_says_to_write_python(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    for command in (["train.py"], ["train.py", "--lr", "1"], ["train.py --lr 1"], ["./train.py"]):
        said = refused_usage(["-w", "4", "--chdir", str(tmp_path), "--", *command], capsys)
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
    said = refused_usage(["-w", "1", "-n", name, "--", "true"], capsys)
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
    said = refused_usage(
        ["-w", "1", "-e", write(tmp_path, json.dumps(config)), "--", "true"], capsys
    )
    assert where in said
    assert "lone surrogate" in said


def test_a_json_nested_past_the_parsers_depth_is_invalid_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "[" * 100_000 + "]" * 100_000)
    said = refused_usage(["-w", "1", "-e", path, "--", "true"], capsys)
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
        said = refused_usage(["-w", "1", "-e", "/dev/zero", "--", "true"], capsys)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert "/dev/zero is larger than 4 MiB" in said


def test_an_extra_config_at_the_bound_is_read(tmp_path: Path) -> None:
    padding = " " * (parser.MAX_EXTRA_CONFIG - len('{"env": {}}'))
    assert parser.read_extra_config(write(tmp_path, '{"env": {}}' + padding)) == (None, None, {})
    with pytest.raises(SpecError, match="larger than"):
        parser.read_extra_config(write(tmp_path, '{"env": {}}' + padding + " "))


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
    log = kept / "worker.0.log"
    assert "real output" in log.read_text()


def test_parse_args_is_a_sequence_of_named_steps() -> None:
    """parse_args was one function of cyclomatic complexity 28, just under
    the layer test's cap of 30 (issue #47): now each check is a step of its
    own, and parse_args only calls them in the order the user is told."""
    from radon.complexity import cc_visit

    blocks = {block.name: block for block in cc_visit((ROOT / "tfmesos/cli/parser.py").read_text())}
    assert blocks["parse_args"].complexity <= 5
