"""A detached job's description (tfmesos.backends.jobspec): the spec and the
backend's options as typed JSON with a version, read back as they were, and
one of another version refused in one line. No process."""

from __future__ import annotations

import json

import pytest

from tfmesos.backends.jobs import DetachedJob
from tfmesos.backends.jobspec import VERSION, from_json, to_json
from tfmesos.backends.local.options import LocalOptions
from tfmesos.backends.mesos.options import MesosOptions
from tfmesos.backends.slurm.options import SlurmOptions
from tfmesos.errors import SpecError
from tfmesos.spec import ClusterSpec, Job, Volume

pytestmark = pytest.mark.unit


def _spec() -> ClusterSpec:
    return ClusterSpec(
        jobs=(Job("ps", 1, cmd="serve"), Job("worker", 2, cpus=0.5, gpus=1, cmd="train")),
        name="job é",
        replica=True,
        env={"A": "1", "BYTES": "\udcff"},
        forward_logs=frozenset({"worker:0", "ps:0"}),
        start_timeout=30.0,
        export="ALL,MYSECRET=x",
    )


@pytest.mark.parametrize(
    ("backend", "options"),
    [
        (
            "mesos",
            MesosOptions(
                master="zk://h:2181/mesos",
                volumes=(Volume("/data", "/data", read_only=True),),
                role="ml",
            ),
        ),
        ("slurm", SlurmOptions(partition="debug", sbatch_args=("--exclusive",))),
    ],
)
def test_a_job_reads_back_as_it_was_written(backend: str, options: object) -> None:
    job = DetachedJob(backend, _spec(), options, verbose=True, events="/tmp/e")  # type: ignore[arg-type]
    text = to_json(job)
    assert text.isascii()
    assert json.loads(text)["version"] == VERSION
    back = from_json(text)
    assert back == job
    assert back.spec.exported == job.spec.exported


def test_the_users_argv_is_never_in_the_description() -> None:
    job = DetachedJob("local", _spec(), LocalOptions(), argv=("--export", "ALL,MYSECRET=x"))
    assert "argv" not in json.loads(to_json(job))


@pytest.mark.parametrize("version", [None, 0, VERSION + 1, "1"])
def test_another_version_is_refused_in_one_line(version: object) -> None:
    record = json.loads(to_json(DetachedJob("mesos", _spec(), MesosOptions())))
    record["version"] = version
    with pytest.raises(SpecError) as refused:
        from_json(json.dumps(record))
    said = str(refused.value)
    assert "\n" not in said
    assert f"is version {version!r}, and this tfmesos reads version {VERSION} only" in said


@pytest.mark.parametrize(
    "text", ["", "[]", '{"version": 1}', '{"version": 1, "backend": "nosuch"}']
)
def test_a_description_that_is_none_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(SpecError) as refused:
        from_json(text)
    assert "\n" not in str(refused.value)
