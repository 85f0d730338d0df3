from __future__ import annotations

import json

import pytest

from tfmesos.agent.supervisor import task_command
from tfmesos.common.shell import exec_if_simple
from tfmesos.common.taskenv import (
    default_environment,
    fill_placeholders,
    placeholder_values,
    placeholders_in,
    rank_environment,
    ranks,
    task_environment,
)

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


def test_workers_come_first_in_rank_order_then_the_ps_tasks() -> None:
    assert ranks(CLUSTER) == [("worker", 0), ("worker", 1), ("ps", 0)]
    assert ranks({"worker": ["h:1"], "ps": []}) == [("worker", 0)]
    assert ranks({}) == []


def test_every_task_gets_torchruns_variables_with_worker_0_as_master() -> None:
    env = task_environment(CLUSTER, "worker", 1, run_id="job-1")
    assert {k: env[k] for k in rank_environment(CLUSTER, "worker", 1)} == {
        "RANK": "1",
        "WORLD_SIZE": "3",
        "MASTER_ADDR": "h2",
        "MASTER_PORT": "2",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "3",
        "ROLE_NAME": "worker",
        "ROLE_RANK": "1",
        "ROLE_WORLD_SIZE": "2",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": "job-1",
        "JAX_COORDINATOR_ADDRESS": "h2:2",
        "JAX_NUM_PROCESSES": "3",
        "JAX_PROCESS_ID": "1",
    }


def test_a_ps_task_is_a_rank_after_the_workers_with_its_own_role() -> None:
    env = rank_environment(CLUSTER, "ps", 0)
    assert (env["RANK"], env["WORLD_SIZE"], env["ROLE_NAME"]) == ("2", "3", "ps")
    assert (env["ROLE_RANK"], env["ROLE_WORLD_SIZE"]) == ("0", "1")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("h2", "2")
    assert env["JAX_PROCESS_ID"] == "2"


def test_ranks_are_dense_and_each_task_is_a_node_of_one_process() -> None:
    cluster = {"ps": [f"p{i}:{i}" for i in range(3)], "worker": [f"w{i}:{i}" for i in range(5)]}
    seen = []
    for job, index in ranks(cluster):
        env = rank_environment(cluster, job, index)
        # torchrun's invariant, which launch helpers (Lightning's) rely on.
        rank = int(env["GROUP_RANK"]) * int(env["LOCAL_WORLD_SIZE"]) + int(env["LOCAL_RANK"])
        assert rank == int(env["RANK"]) == int(env["JAX_PROCESS_ID"])
        seen.append(rank)
    assert seen == list(range(8))


def test_an_ipv6_master_address_loses_its_brackets_for_torch_only() -> None:
    env = rank_environment({"worker": ["[::1]:7000", "[::1]:7001"]}, "worker", 1)
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("::1", "7000")
    assert env["JAX_COORDINATOR_ADDRESS"] == "[::1]:7000"


def test_thread_count_defaults_to_the_tasks_whole_cpus() -> None:
    assert default_environment(1)["OMP_NUM_THREADS"] == "1"
    assert default_environment(0.5)["OMP_NUM_THREADS"] == "1"
    assert default_environment(4.7)["OMP_NUM_THREADS"] == "4"
    assert default_environment(2)["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


def test_the_agent_sets_ranks_over_the_users_env_and_defaults_under_it() -> None:
    message = {
        "cluster_def": CLUSTER,
        "job_name": "worker",
        "task_index": 0,
        "run_id": "r1",
        "cmd": "python train.py",
        "env": {"RANK": "7", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"},
        "server": {"cpus": 3.0},
    }
    _, env = task_command(message, {"PATH": "/bin"})
    assert (env["RANK"], env["TORCHELASTIC_RUN_ID"]) == ("0", "r1")
    assert env["OMP_NUM_THREADS"] == "3"
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"  # -e env: the user's own
    _, env = task_command(message, {"PATH": "/bin", "OMP_NUM_THREADS": "8"})
    assert env["OMP_NUM_THREADS"] == "8"


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


def test_every_variable_a_task_is_given_from_its_cluster_is_the_launchers_own() -> None:
    from tfmesos.common import taskenv

    given = set(taskenv.task_environment({"ps": ["h:1"], "worker": ["h:2"]}, "worker", 0))
    given.discard("PYTHONUNBUFFERED")  # always 1, harmless to give
    assert {n for n in given if not n.startswith(taskenv.OWN_PREFIX)} == set(
        taskenv.CLUSTER_VARIABLES
    )
    assert all(taskenv.launchers_own(n) for n in given)
    assert taskenv.launchers_own(taskenv.ENV_RESTART)
    assert not any(taskenv.launchers_own(n) for n in taskenv.default_environment(1))
