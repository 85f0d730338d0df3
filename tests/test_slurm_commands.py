"""The Slurm backend's command lines and its reading of squeue, without Slurm;
and how tfrun's flags choose it."""

from __future__ import annotations

import pytest

from tfmesos.backends.slurm.options import SlurmOptions, validate
from tfmesos.cli.parser import parse_args
from tfmesos.errors import SpecError
from tfmesos.slurm.commands import (
    JobStatus,
    Shape,
    explain_reason,
    job_groups,
    parse_squeue,
    sbatch_argv,
    srun_prefix,
)
from tfmesos.spec import TaskSpec


def task(job: str, index: int, cpus: float = 1.0, mem: float = 1024.0, gpus: int = 0) -> TaskSpec:
    return TaskSpec(job_name=job, index=index, cpus=cpus, mem=mem, gpus=gpus, cmd="true")


def test_a_shape_asks_for_whole_cpus_and_memory_per_cpu() -> None:
    assert Shape.of(task("ps", 0, cpus=0.5, mem=1000)) == Shape(1, 1000, 0)
    assert Shape.of(task("worker", 0, cpus=2.5, mem=1000)) == Shape(3, 334, 0)
    assert Shape.of(task("worker", 0, cpus=4, mem=8192, gpus=2)).options() == [
        "--cpus-per-task=4",
        "--mem-per-cpu=2048M",
        "--gpus-per-task=2",
    ]


def test_tasks_of_one_shape_make_a_plain_job() -> None:
    groups = job_groups([task("ps", 0), task("worker", 1), task("worker", 2)])
    assert groups == [(Shape(1, 1024, 0), [0, 1, 2])]
    argv = sbatch_argv(
        [(shape, len(positions)) for shape, positions in groups],
        name="[tfrun] train",
        output="/logs/slurm-%j.out",
        cwd="/work",
        options={"partition": "gpu", "time": "1:00:00", "sbatch_args": ("--constraint=a100",)},
    )
    assert argv == [
        "sbatch",
        "--parsable",
        "--job-name=[tfrun] train",
        "--output=/logs/slurm-%j.out",
        "--open-mode=append",
        "--export=ALL",
        "--no-requeue",
        "--chdir=/work",
        "--ntasks=3",
        "--cpus-per-task=1",
        "--mem-per-cpu=1024M",
        "--partition=gpu",
        "--time=1:00:00",
        "--constraint=a100",
    ]


def test_tasks_of_several_shapes_make_a_heterogeneous_job() -> None:
    tasks = [task("ps", 0), task("worker", 1, cpus=4, gpus=1), task("worker", 2, cpus=4, gpus=1)]
    groups = job_groups(tasks)
    assert [positions for _, positions in groups] == [[0], [1, 2]]
    argv = sbatch_argv(
        [(shape, len(positions)) for shape, positions in groups],
        name="job",
        output="out",
        cwd=None,
        options={"account": "ml"},
    )
    split = argv.index(":")
    assert argv[split - 4 : split] == [
        "--ntasks=1",
        "--cpus-per-task=1",
        "--mem-per-cpu=1024M",
        "--account=ml",
    ]
    assert argv[split + 1 :] == [
        "--ntasks=2",
        "--cpus-per-task=4",
        "--mem-per-cpu=256M",
        "--gpus-per-task=1",
        "--account=ml",
    ]
    assert srun_prefix(groups[1][0], 1)[:5] == [
        "srun",
        "--het-group=1",
        "--ntasks=1",
        "--nodes=1",
        "--exact",
    ]
    assert "--het-group=0" not in srun_prefix(groups[0][0], None)


def test_squeue_is_read_job_by_job() -> None:
    jobs = parse_squeue(
        "12|PENDING|Resources|\n"
        "13|RUNNING|None|node1\n"
        "14+0|RUNNING|None|node1\n"
        "14+1|PENDING|Priority|\n"
        "15+0|COMPLETED|None|node2\n"
        "15+1|TIMEOUT|TimeLimit|node3\n"
        "garbage\n"
    )
    assert jobs["12"] == JobStatus("PENDING", "Resources", "")
    assert jobs["13"].state == "RUNNING" and jobs["13"].active
    assert jobs["14"] == JobStatus("PENDING", "Priority", "node1")
    assert jobs["15"] == JobStatus("TIMEOUT", "TimeLimit", "node2,node3")
    assert not jobs["15"].active


def test_a_pending_reason_is_explained_where_known() -> None:
    assert explain_reason("Resources") == "Resources: the resources it asks for are in use"
    assert explain_reason("SomethingNew") == "SomethingNew"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"time": "soon"}, "--time: 'soon' is not a time limit"),
        ({"partition": "a b"}, "--partition: 'a b' is not a Slurm partition name"),
        ({"sbatch_args": "--ntasks=4"}, "tfrun sets --ntasks itself"),
        ({"sbatch_args": "a100"}, "'a100' is not an sbatch option"),
        ({"sbatch_args": "'--comment=x"}, "--sbatch-args: No closing quotation"),
    ],
)
def test_bad_slurm_options_are_refused_before_anything_starts(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        validate(options)


def test_good_slurm_options_pass() -> None:
    assert validate({"time": "2-12:00:00", "sbatch_args": "--constraint=a100 --exclusive"}) == {
        "time": "2-12:00:00",
        "sbatch_args": ("--constraint=a100", "--exclusive"),
    }


def test_a_slurm_flag_chooses_the_slurm_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MESOS_MASTER", raising=False)
    args, _ = parse_args(["-w", "2", "-s", "0", "--partition", "gpu", "--", "true"])
    assert args.backend == "slurm"
    assert args.options == SlurmOptions(partition="gpu")
    args, _ = parse_args(["-w", "2", "-s", "0", "--backend", "slurm", "--", "true"])
    assert args.backend == "slurm" and args.options == SlurmOptions()
    # Even with MESOS_MASTER set: a flag on the command line is the stronger word.
    monkeypatch.setenv("MESOS_MASTER", "m:5050")
    args, _ = parse_args(["-w", "2", "-s", "0", "--qos", "high", "--", "true"])
    assert args.backend == "slurm"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-m", "m:5050", "--partition", "gpu"], "--partition is a Slurm flag and -m a Mesos one"),
        (
            ["--backend", "local", "--time", "10"],
            "--time is a Slurm flag: it needs --backend slurm",
        ),
    ],
)
def test_slurm_flags_with_another_backend_are_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args([*argv, "-w", "1", "-s", "0", "--", "true"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_sbatch_s_refusal_is_said_once() -> None:
    from tfmesos.backends.slurm.backend import _sbatch_error

    assert (
        _sbatch_error(
            "sbatch: error: Memory specification can not be satisfied\n"
            "sbatch: error: Batch job submission failed: Memory specification can not be "
            "satisfied\n"
        )
        == "Memory specification can not be satisfied"
    )
    assert _sbatch_error("sbatch: error: invalid partition specified: nope\n") == (
        "invalid partition specified: nope"
    )


def test_reasons_waiting_cannot_end_are_told_from_the_others() -> None:
    from tfmesos.slurm.commands import JobStatus, never_runs

    assert never_runs(JobStatus("PENDING", "PartitionConfig", ""))
    assert never_runs(JobStatus("PENDING", "QOSMaxCpuPerJobLimit", ""))
    assert not never_runs(JobStatus("PENDING", "Resources", ""))
    assert not never_runs(JobStatus("PENDING", "QOSMaxCpuPerUserLimit", ""))
    assert not never_runs(JobStatus("RUNNING", "PartitionConfig", "n1"))


def test_a_percent_is_handed_to_slurm_as_a_literal_percent() -> None:
    from tfmesos.slurm.commands import literal_filename

    assert literal_filename("/logs/100%/%j x") == "/logs/100%%/%%j x"


def test_a_detached_job_is_one_allocation_of_slots_of_its_largest_shape() -> None:
    from tfmesos.slurm.allocation import LAUNCHER_MEM, Allocation, sbatch_argv

    # The chief (worker 0) beside tfrun: its share and LAUNCHER_MEM more;
    # ps:0 asks for more CPUs. One plain job: a heterogeneous one's parts
    # would each want a node of their own.
    _, spec = parse_args(["--backend", "slurm", "-w", "2", "-s", "1", "-Cs", "2", "--", "true"])
    argv, said = sbatch_argv(spec, output="out", cwd="/here", options={"qos": "long"})
    assert ":" not in argv
    mem = 1024 + LAUNCHER_MEM  # the chief's default memory, and tfrun's
    assert argv[-4:] == [
        "--ntasks=3",
        "--cpus-per-task=2",
        f"--mem-per-cpu={mem // 2}M",
        "--qos=long",
    ]
    slot = Shape(2, mem // 2, 0)
    inside = Allocation("7", slot, "vm")
    assert inside.fits(Shape(2, 512, 0)) and inside.fits(Shape(1, mem, 0))
    assert not inside.fits(Shape(1, mem + 1, 0)) and not inside.fits(Shape(1, 1, 1))
    assert said == '{"slot": [2, 768, 0]}'
