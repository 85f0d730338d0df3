from __future__ import annotations

import json

import pytest

from tfmesos.agent import exec_if_simple
from tfmesos.taskenv import fill_placeholders, placeholder_values, placeholders_in, task_environment

CLUSTER = {"ps": ["h1:1"], "worker": ["h2:2", "h3:3"]}


def test_placeholders_are_filled_per_task() -> None:
    values = placeholder_values(CLUSTER, "worker", 1)
    command = "train --ps {ps_hosts} --workers {worker_hosts} --job {job_name} --index {task_index}"
    assert fill_placeholders(command, values) == (
        "train --ps h1:1 --workers h2:2,h3:3 --job worker --index 1"
    )


def test_other_braces_are_left_alone() -> None:
    command = "python -c \"d = {'a': {'b': 1}}; print(d)\" ${HOME} {{task_index}} {task_index}"
    assert placeholders_in(command) == ["task_index"]
    filled = fill_placeholders(command, placeholder_values(CLUSTER, "ps", 0))
    assert filled == "python -c \"d = {'a': {'b': 1}}; print(d)\" ${HOME} {task_index} 0"


def test_unknown_placeholder_is_a_key_error_naming_it() -> None:
    with pytest.raises(KeyError, match=r"\{worker_index\}"):
        fill_placeholders("x {worker_index}", placeholder_values(CLUSTER, "ps", 0))


def test_environment_has_the_originals_variables_and_tf_config() -> None:
    env = task_environment(CLUSTER, "worker", 1)
    assert env["TFMESOS_PS_HOSTS"] == "h1:1"
    assert env["TFMESOS_WORKER_HOSTS"] == "h2:2,h3:3"
    assert env["TFMESOS_JOB_NAME"] == "worker"
    assert env["TFMESOS_TASK_INDEX"] == "1"
    assert env["TFMESOS_DISTRIBUTED"] == "1"
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"ps": ["h1:1"], "worker": ["h2:2", "h3:3"]},
        "task": {"type": "worker", "index": 1},
    }


def test_tf_config_leaves_out_empty_jobs() -> None:
    env = task_environment({"ps": [], "worker": ["h:1"]}, "worker", 0)
    assert json.loads(env["TF_CONFIG"])["cluster"] == {"worker": ["h:1"]}
    assert env["TFMESOS_PS_HOSTS"] == ""


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("python train.py --x 1", "exec python train.py --x 1"),
        ("python -c 'print(1)' > out.txt", "exec python -c 'print(1)' > out.txt"),
        ('python -c "a(); b()"', 'exec python -c "a(); b()"'),
        ("prepare&&train", "prepare&&train"),
        ("python x.py --at=$(date)", "python x.py --at=$(date)"),
        ("python 'unbalanced", "python 'unbalanced"),
        ("prepare && train", "prepare && train"),
        ("a; b", "a; b"),
        ("a | b", "a | b"),
        ("(cd x; y)", "(cd x; y)"),
        ("FOO=1 python x", "FOO=1 python x"),
        ("if true; then x; fi", "if true; then x; fi"),
        ("echo `date`", "echo `date`"),
        ("exec python x", "exec python x"),
        ("exit 3", "exit 3"),
        ("cd /data", "cd /data"),
        (". ./env.sh", ". ./env.sh"),
        ("ulimit -n 4096", "ulimit -n 4096"),
        ("time python train.py", "time python train.py"),
        ("[[ -f x ]]", "[[ -f x ]]"),
        ("pushd /data", "pushd /data"),
    ],
)
def test_a_simple_command_is_execed_and_anything_else_left_alone(
    command: str, expected: str
) -> None:
    assert exec_if_simple(command) == expected
