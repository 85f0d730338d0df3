from __future__ import annotations

import dataclasses

import pytest

from tfmesos import ClusterSpec, Job, SpecError
from tfmesos.spec import coerce_jobs, parse_volume


def test_job_is_frozen_and_keeps_the_original_defaults() -> None:
    job = Job("worker", 2)
    assert (job.cpus, job.mem, job.gpus, job.cmd, job.start) == (1.0, 1024.0, 0, None, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.num = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "w", "num": -1}, "num must not be negative"),
        ({"name": "w", "num": 1.5}, "num must be a whole number"),
        ({"name": "w", "num": True}, "num must be a whole number"),
        ({"name": "w", "num": 1, "cpus": 0}, "cpus must be more than 0"),
        ({"name": "w", "num": 1, "mem": float("nan")}, "mem must be a number"),
        ({"name": "w", "num": 1, "gpus": 0.5}, "gpus must be a whole number"),
        ({"name": "w", "num": 1, "start": 2}, "start=2 is not supported"),
        ({"name": "1w", "num": 1}, "must start with a letter"),
        ({"name": "w", "num": 1, "cmd": "x {nope}"}, r"unknown placeholder \{nope\}"),
        ({"name": "w", "num": 1, "cmd": "  "}, "non-empty"),
    ],
)
def test_bad_jobs_are_refused_with_a_clear_message(fields: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        Job(**fields)  # type: ignore[arg-type]


def test_spec_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the type is the point
        Job("w", -1)


def test_jobs_are_coerced_like_the_original() -> None:
    assert coerce_jobs({"name": "ps", "num": 1}) == (Job("ps", 1),)
    assert coerce_jobs(Job("ps", 1)) == (Job("ps", 1),)
    assert coerce_jobs([{"name": "ps", "num": 1}, Job("worker", 2)]) == (
        Job("ps", 1),
        Job("worker", 2),
    )
    with pytest.raises(SpecError, match="unknown job field 'nmu'"):
        coerce_jobs({"name": "ps", "nmu": 1})
    with pytest.raises(SpecError, match="needs at least a 'name' and a 'num'"):
        coerce_jobs({"name": "ps"})


def test_cluster_checks() -> None:
    with pytest.raises(SpecError, match="defined twice"):
        ClusterSpec((Job("a", 1), Job("a", 2)))
    with pytest.raises(SpecError, match="no task to run"):
        ClusterSpec((Job("a", 0),))
    with pytest.raises(SpecError, match="at least one worker"):
        ClusterSpec((Job("ps", 1, cmd="x"), Job("worker", 0, cmd="x")), replica=True)
    with pytest.raises(SpecError, match="only 'chief', 'ps', 'worker' and 'evaluator'"):
        ClusterSpec((Job("master", 1, cmd="x"),), replica=True)
    with pytest.raises(SpecError, match="'chief' has at most one task"):
        ClusterSpec((Job("chief", 2, cmd="x"),), replica=True)
    with pytest.raises(SpecError, match="'evaluator' has at most one task"):
        ClusterSpec((Job("worker", 1, cmd="x"), Job("evaluator", 2, cmd="x")), replica=True)


def test_every_task_of_a_job_runs_and_start_is_refused() -> None:
    spec = ClusterSpec((Job("ps", 1), Job("worker", 3)))
    assert [t.name for t in spec.tasks()] == ["ps:0", "worker:0", "worker:1", "worker:2"]
    assert spec.tasks()[2].target == "/job:worker/task:1"
    # The original's start=1 listed tasks 1 and 2 at indices 0 and 1 of the
    # cluster definition: every task would have dialled the wrong peer.
    with pytest.raises(SpecError, match="start=1 is not supported"):
        Job("worker", 3, start=1)


def test_volumes() -> None:
    assert parse_volume("/a:/b").read_only is False
    assert parse_volume("/a:/b:ro").read_only is True
    for bad in ("a:/b", "/a", "/a:/b:xx", "/a:/b:/c"):
        with pytest.raises(SpecError, match="must be /host/path:/container/path"):
            parse_volume(bad)


@pytest.mark.parametrize("bad", [-1, 1001, 1.5, True])
def test_a_bad_max_restarts_names_the_flag_and_the_keyword(bad: object) -> None:
    # cluster(max_restarts=...) reaches the same check as tfrun --max-restarts:
    # the message must read right to either user.
    with pytest.raises(SpecError, match=r"^--max-restarts / max_restarts= must be a whole number"):
        ClusterSpec(jobs=(Job("worker", 1),), max_restarts=bad)  # type: ignore[arg-type]
