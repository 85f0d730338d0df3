"""Several processes per task (``tfrun --nproc-per-task N``, torchrun's
``--nproc_per_node``): each process gets the variables torchrun gives its
processes, variable by variable; a real DDP job trains to the same weights
as under torchrun; a failing process fails its task, and is named; each
process's output is named and kept in its own log. Locally, through the test
master and real Mesos, and on Slurm."""

from __future__ import annotations

import asyncio
import io
import json
import re
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.conftest import (
    FOUR_WORKERS,
    MWMS,
    ROOT,
    JobProcesses,
    check_four_tensorflow_workers,
    run_tfrun,
    tfrun_argv,
)
from tests.jobevents import JobEvents
from tests.mesos_clusters import MesosUnderTest
from tfmesos import SpecError
from tfmesos.agent import nproc as runner
from tfmesos.agent.supervisor import task_command
from tfmesos.cli.parser import parse_args
from tfmesos.common import clusterfile
from tfmesos.common.ports import PortAllocator, port_is_free, reserve_ports
from tfmesos.common.taskenv import process_cluster, rank_environment, task_environment
from tfmesos.launcher.attempts import Attempt
from tfmesos.launcher.output import OutputRouter
from tfmesos.launcher.verdict import describe_exit
from tfmesos.mesos.placement import OfferCapacity
from tfmesos.rendezvous import protocol
from tfmesos.rendezvous.reports import Exited
from tfmesos.spec import ClusterSpec, Job

PY = sys.executable
TORCHRUN = (PY, "-m", "torch.distributed.run")

# Every variable a launcher set (all of them where BEFORE does not say what
# was there before: a Mesos task does not get the submitting environment), as
# one JSON line: one write(2), so that the lines of processes sharing a pipe
# cannot interleave.
ENV_DUMP = (
    "import json, os; skip = json.loads(os.environ.get('BEFORE', '[]')); "
    "os.write(1, (json.dumps({k: v for k, v in os.environ.items() if k not in skip}) "
    "+ '\\n').encode())"
)

DIFFER_ON_PURPOSE = {
    # tfrun's rendezvous is its own, not torchrun's: the address and port of
    # rank 0's task (a host name on Mesos), checked apart below.
    "MASTER_ADDR",
    "MASTER_PORT",
    # The task's job ("worker"), where torchrun has its one role, "default".
    "ROLE_NAME",
    # The job's own id, where torchrun says "none" without --rdzv-id.
    "TORCHELASTIC_RUN_ID",
    # No agent hosts a store: rank 0 starts torch's TCP store itself.
    "TORCHELASTIC_USE_AGENT_STORE",
    # A file of each process's own, torchrun's and tfrun's alike: the paths differ.
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_SIGNALS_TO_HANDLE",
}
MUST_MATCH = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "OMP_NUM_THREADS",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
}
"""What torchrun sets that tfrun must set alike: at least these."""


def _needs(module: str) -> None:
    pytest.importorskip(module, reason=f"{module} is a test extra: pip install -e '.[test]'")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def run_two_torchruns(
    env: dict[str, str], program: list[str], timeout: float = 300
) -> list[subprocess.CompletedProcess[str]]:
    """``torchrun --nnodes 2 --nproc_per_node 2`` on two "nodes" of this
    machine (a static rendezvous at 127.0.0.1), both running ``program``."""
    port = str(_free_port())
    nodes = [
        subprocess.Popen(
            [
                *TORCHRUN,
                *("--nnodes", "2", "--nproc_per_node", "2", "--node_rank", str(rank)),
                *("--master_addr", "127.0.0.1", "--master_port", port, "--no-python"),
                *program,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for rank in (0, 1)
    ]
    done = []
    for node in nodes:
        out, err = node.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(node.args, node.returncode, out, err))
    return done


def _dump_env(env: dict[str, str]) -> dict[str, str]:
    env = dict(env)
    env.pop("OMP_NUM_THREADS", None)
    env["BEFORE"] = json.dumps([*sorted(env), "BEFORE"])
    return env


def torchrun_variables(env: dict[str, str]) -> dict[str, dict[str, str]]:
    """What each of torchrun's four processes got, by RANK."""
    nodes = run_two_torchruns(env, [PY, "-c", ENV_DUMP])
    found = {}
    for node in nodes:
        assert node.returncode == 0, node.stderr[-3000:]
        for line in node.stdout.splitlines():
            if line.startswith("{"):
                dumped = json.loads(line)
                found[dumped["RANK"]] = dumped
    assert sorted(found) == ["0", "1", "2", "3"], found
    return found


def tfrun_variables(stdout: str) -> dict[str, dict[str, str]]:
    """What each of tfrun's processes got, by the name it printed under."""
    return {
        m.group(1): json.loads(m.group(2))
        for m in re.finditer(r"^\[(worker:\d+\.\d+)\] (\{.*\})$", stdout, re.M)
    }


def assert_same_as_torchruns(
    ours_by_name: Mapping[str, dict[str, str]], theirs_by_rank: Mapping[str, dict[str, str]]
) -> None:
    """tfrun's four processes got what torchrun's did, variable by
    variable, but for :data:`DIFFER_ON_PURPOSE`; and each is named by its
    task and local rank."""
    assert sorted(ours_by_name) == ["worker:0.0", "worker:0.1", "worker:1.0", "worker:1.1"]
    by_rank = {ours["RANK"]: (name, ours) for name, ours in ours_by_name.items()}
    assert sorted(by_rank) == ["0", "1", "2", "3"]
    master = ours_by_name["worker:0.0"]["TFMESOS_WORKER_HOSTS"].split(",")[0]
    for rank, theirs in theirs_by_rank.items():
        name, ours = by_rank[rank]
        assert name == f"worker:{ours['GROUP_RANK']}.{ours['LOCAL_RANK']}"
        compared = set(theirs) - DIFFER_ON_PURPOSE
        assert compared >= MUST_MATCH, MUST_MATCH - compared
        differ = {k: (ours.get(k), theirs[k]) for k in compared if ours.get(k) != theirs[k]}
        assert not differ, f"rank {rank}: tfrun's, torchrun's: {differ}"
        assert set(DIFFER_ON_PURPOSE) - {"TORCHELASTIC_ERROR_FILE"} <= set(theirs) | {
            "TORCHELASTIC_SIGNALS_TO_HANDLE"
        }
        # Rank 0's task's address, the port tfrun gave it; torch's store and
        # JAX's coordinator are there.
        assert f"{ours['MASTER_ADDR']}:{ours['MASTER_PORT']}" == master
        assert ours["JAX_COORDINATOR_ADDRESS"] == master
        assert (ours["JAX_NUM_PROCESSES"], ours["JAX_PROCESS_ID"]) == ("4", rank)
        # Each process is a TensorFlow worker of its own, of index RANK.
        tf_config = json.loads(ours["TF_CONFIG"])
        assert tf_config["task"] == {"type": "worker", "index": int(rank)}
        assert len(set(tf_config["cluster"]["worker"])) == 4


# -- the arithmetic (unit) -------------------------------------------------------


def _torchrun_formula(nodes: int, nproc: int, node: int, local: int) -> dict[str, str]:
    """torchrun's numbers for one process of ``--nnodes nodes
    --nproc_per_node nproc`` (torch/distributed/elastic/agent/server/api.py)."""
    rank = node * nproc + local
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(local),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": str(node),
        "GROUP_WORLD_SIZE": str(nodes),
        "WORLD_SIZE": str(nodes * nproc),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(nodes * nproc),
        "JAX_PROCESS_ID": str(rank),
        "JAX_NUM_PROCESSES": str(nodes * nproc),
    }


@pytest.mark.parametrize(("nodes", "nproc"), [(1, 1), (2, 2), (3, 4), (1, 8), (5, 1)])
def test_each_process_gets_torchruns_numbers(nodes: int, nproc: int) -> None:
    cluster = {"worker": [f"host{i}:{2000 + i}" for i in range(nodes)]}
    for node in range(nodes):
        task = rank_environment(cluster, "worker", node, nproc=nproc)
        for local in range(nproc):
            ours = runner.process_environment(task, local)
            expected = _torchrun_formula(nodes, nproc, node, local)
            assert {k: ours[k] for k in expected} == expected, (node, local)
            assert ours["MASTER_ADDR"] == "host0" and ours["MASTER_PORT"] == "2000"


def test_the_runners_own_variables_stay_with_it() -> None:
    task = task_environment({"worker": ["a:1"]}, "worker", 0, nproc=2)
    env = dict(task)
    argv = runner.runner_environment(env, 2, "python train.py", "worker:0", "", "0")
    assert "tfmesos.agent.nproc" in argv[-1]
    assert env[protocol.ENV_COMMAND] == "python train.py"
    assert not any(name.startswith("TFMESOS_NPROC") for name in runner.process_environment(env, 1))


def test_each_process_has_a_log_beside_its_tasks() -> None:
    assert runner.log_path("/runs/r/worker.1.log", None) == "/runs/r/worker.1.local-rank-{}.log"
    assert runner.log_path(None, "/sandbox/{x}") == "/sandbox/{{x}}/local-rank-{}.log"
    assert runner.log_path("/dev/null", None) == ""


def test_the_verdict_names_the_process() -> None:
    said = describe_exit(Exited("t", 2, local_rank=3))
    assert said == "exited with status 2 (its process of local rank 3)"


@pytest.mark.parametrize("colour", [False, True])
def test_each_processs_lines_are_shown_under_its_own_name(colour: bool) -> None:
    stream = io.BytesIO()

    async def show() -> None:
        router = OutputRouter(
            stream, ["worker:1"], colour=colour, notes_after_output=False, processes=True
        )
        spec = ClusterSpec((Job("worker", 2, cmd="true"),), replica=True).tasks()[1]
        task = Attempt(spec, "worker.1.1", 1, router.prefix("worker:1"), True)
        router.write(task, b"[worker:1.3] hello\n[tfmesos agent] a note\n[worker:10.1] not ours\n")
        await router.close(drop_stalled=False, where="the run directory")

    asyncio.run(show())
    shown = stream.getvalue()
    if colour:
        assert shown.startswith(b"\x1b[") and b"[worker:1.3]\x1b[0m hello\n" in shown
        shown = re.sub(rb"\x1b\[[0-9;]*m", b"", shown)
    assert shown == (
        b"[worker:1.3] hello\n[worker:1] [tfmesos agent] a note\n[worker:1] [worker:10.1] not ours\n"
    )


@pytest.mark.parametrize("flag", ["--nproc-per-task", "--nproc-per-node", "--nproc_per_node"])
def test_torchruns_flag_is_tfruns(flag: str) -> None:
    _, spec = parse_args(["-w", "2", flag, "4", "--", "python", "train.py"])
    assert spec.nproc == 4


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1, said
    return said


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "x", "1025"])
def test_a_bad_count_is_refused(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    said = refused(["-w", "1", "--nproc-per-task", text, "--", "true"], capsys)
    assert "--nproc-per-task" in said and "1 to 1024" in said


def test_tensorflows_shapes_are_taken() -> None:
    # Before: every TensorFlow shape (-s, {worker_hosts}, {chief_hosts},
    # --cluster-file) was refused; now each worker process is a TensorFlow
    # worker of its own.
    for args in (
        ["-w", "2", "-s", "1", "--nproc-per-task", "2", "--", "true"],
        ["-w", "1", "--nproc-per-task", "2", "--cluster-file", "--", "true"],
        ["-w", "2", "--nproc-per-task", "2", "--", "echo", "{worker_hosts}", "{task_index}"],
        [
            "--chief",
            "--evaluator",
            "-w",
            "1",
            "--nproc-per-task",
            "2",
            "--",
            "echo",
            "{chief_hosts}",
        ],
    ):
        assert parse_args(args)[1].nproc == 2
    with pytest.raises(SpecError, match="needs replica mode"):
        ClusterSpec(jobs=(Job("worker", 2),), nproc=2)


# -- TensorFlow: each worker process a TensorFlow worker (unit) ----------------------


def _process_envs(
    cluster: dict[str, list[str]], job: str, index: int, nproc: int
) -> list[dict[str, str]]:
    """What each process of task ``job:index`` gets, as the agent and the runner make it."""
    message = {"cluster_def": cluster, "job_name": job, "task_index": index, "nproc": nproc}
    message["cmd"] = "echo {job_name} {task_index} {worker_hosts} {ps_hosts} {chief_hosts}"
    argv, env = task_command(message, {})
    if runner.ENV_NPROC not in env:
        return [{**env, "COMMAND": str(argv)}]
    return [
        {
            **runner.process_environment(env, local),
            "COMMAND": runner.process_command(env, local),
        }
        for local in range(int(env[runner.ENV_NPROC]))
    ]


def test_each_worker_process_is_a_tensorflow_worker_of_its_own() -> None:
    """``-w 2 --nproc-per-task 3`` with a chief, a ps and an evaluator: the
    cluster's ``worker`` list has 2*3 addresses, each process's its own (its
    task's port plus its local rank), and its index is its RANK; the chief,
    the ps and the evaluator are one process each, at their one address."""
    cluster = {
        "chief": ["c:500"],
        "worker": ["h0:100", "h1:200"],
        "ps": ["p:300"],
        "evaluator": ["e:400"],
    }
    workers = ["h0:100", "h0:101", "h0:102", "h1:200", "h1:201", "h1:202"]
    tf_cluster = {"chief": ["c:500"], "worker": workers, "ps": ["p:300"], "evaluator": ["e:400"]}
    seen = []
    for index in (0, 1):
        for local, env in enumerate(_process_envs(cluster, "worker", index, 3)):
            config = json.loads(env["TF_CONFIG"])
            assert config["cluster"] == tf_cluster
            position = config["task"]["index"]
            assert config["task"] == {"type": "worker", "index": index * 3 + local}
            assert str(position) == env["RANK"] == env["TFMESOS_TASK_INDEX"]
            assert config["cluster"]["worker"][position] == f"h{index}:{100 * (index + 1) + local}"
            assert env["TFMESOS_WORKER_HOSTS"] == ",".join(workers)
            assert env["COMMAND"].endswith(
                f"echo worker {position} {','.join(workers)} p:300 c:500"
            )
            seen.append(position)
    assert seen == list(range(6))
    for job in ("chief", "ps", "evaluator"):
        (env,) = _process_envs(cluster, job, 0, 3)
        config = json.loads(env["TF_CONFIG"])
        assert config == {"cluster": tf_cluster, "task": {"type": job, "index": 0}}
        assert env["COMMAND"].endswith(f"echo {job} 0 {','.join(workers)} p:300 c:500")
        # torchrun's ranks need N processes in every task: the workers' alone.
        assert "RANK" not in env and "LOCAL_RANK" not in env, job
    assert process_cluster(cluster, 1) == cluster
    assert process_cluster({"worker": ["[::1]:7000"]}, 2) == {
        "worker": ["[::1]:7000", "[::1]:7001"]
    }


@pytest.mark.parametrize("where", ["log", "sandbox"])
def test_with_the_cluster_file_each_process_has_its_own(tmp_path: Path, where: str) -> None:
    """``--cluster-file``: each worker process's file holds its own task
    index, beside the task's (the task's log, or its Mesos sandbox)."""
    cluster = {"worker": ["h0:100", "h1:200"], "ps": ["p:300"]}
    message = {"cluster_def": cluster, "job_name": "worker", "task_index": 1, "nproc": 2}
    message |= {"cmd": "true", "cluster_file": True}
    environ = (
        {"TFMESOS_AGENT_LOG_FILE": str(tmp_path / "worker.1.1.ab.log")}
        if where == "log"
        else {"MESOS_SANDBOX": str(tmp_path)}
    )
    _, env = task_command(message, environ)
    assert "TF_CONFIG" not in env and "TFMESOS_WORKER_HOSTS" not in env
    paths = []
    for local in (0, 1):
        path = runner.process_environment(env, local)[clusterfile.ENV_CLUSTER_FILE]
        config = json.loads(Path(path).read_text())
        assert config["task"] == {"type": "worker", "index": 2 + local}
        assert config["cluster"]["worker"] == ["h0:100", "h0:101", "h1:200", "h1:201"]
        paths.append(Path(path).name)
    prefix = "worker.1.1.ab." if where == "log" else ""
    assert paths == [f"{prefix}cluster.json", f"{prefix}local-rank-1.cluster.json"]


def test_a_worker_task_takes_a_block_of_ports_on_every_backend() -> None:
    """A worker task of ``--nproc-per-task N`` takes N consecutive ports: from a
    Mesos offer, from the local backend's allocator, and on a Slurm node."""
    spec = ClusterSpec(
        (Job("worker", 2, cmd="true"), Job("ps", 1, cmd="true")), replica=True, nproc=3
    )
    assert [t.ports for t in spec.tasks()] == [3, 3, 1]
    worker = spec.tasks()[0]
    resources = [
        {"name": "cpus", "type": "SCALAR", "scalar": {"value": 4}, "role": "*"},
        {"name": "mem", "type": "SCALAR", "scalar": {"value": 4096}, "role": "*"},
        {
            "name": "ports",
            "type": "RANGES",
            "ranges": {"range": [{"begin": 31000, "end": 31001}, {"begin": 31005, "end": 31008}]},
            "role": "*",
        },
    ]
    offer = {
        "id": {"value": "o"},
        "agent_id": {"value": "a"},
        "hostname": "h",
        "resources": resources,
    }
    capacity = OfferCapacity.of(offer)
    assert capacity.fits(worker)
    taken, port = capacity.take(worker)
    assert port in (31005, 31006)  # only 31005-31008 holds three in a row
    assert taken[-1]["ranges"] == {"range": [{"begin": port, "end": port + 2}]}
    # Six ports left, none three in a row: the other worker does not fit.
    assert capacity.port_count() == 3 and not capacity.fits(spec.tasks()[1])
    assert capacity.fits(spec.tasks()[2])
    allocator = PortAllocator()
    first = allocator.allocate(3)
    assert all(port_is_free(p) for p in range(first, first + 3))
    assert not allocator.claim(first + 2)
    allocator.release(first)
    assert allocator.claim(first + 2)
    start, held = reserve_ports(3)
    try:
        assert not any(port_is_free(p) for p in range(start, start + 3))
    finally:
        for sock in held:
            sock.close()


def test_the_evaluator_is_one_process_whatever_the_workers_run(job_procs: JobProcesses) -> None:
    # Before: --evaluator --nproc-per-task 2 ran two evaluators.
    result = run_tfrun(
        *("--evaluator", "-w", "1", "--nproc-per-task", "2", "--worker-logs", "all"),
        *("--", "echo {job_name} ${LOCAL_RANK:-none}"),
        env=job_procs.env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(line for line in result.stdout.splitlines() if "evaluator" in line) == [
        "[evaluator:0] evaluator none"
    ]
    assert "[worker:0.1] worker 1" in result.stdout


# -- local -------------------------------------------------------------------------


def test_two_by_two_gets_torchruns_variables_locally(job_procs: JobProcesses) -> None:
    _needs("torch")
    env = _dump_env(job_procs.env())
    theirs = torchrun_variables(env)
    result = run_tfrun(
        *("-w", "2", "--nproc-per-task", "2", "--worker-logs", "*", "--", PY, "-c", ENV_DUMP),
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_as_torchruns(tfrun_variables(result.stdout), theirs)
    assert job_procs.wait_gone(5) == []


EPOCHS = "4"


def test_a_two_by_two_ddp_job_trains_to_torchruns_weights(job_procs: JobProcesses) -> None:
    _needs("torch")
    program = [PY, "examples/torch_ddp.py", "--epochs", EPOCHS]
    nodes = run_two_torchruns(job_procs.env(), program)
    theirs = set()
    for node in nodes:
        assert node.returncode == 0, node.stderr[-3000:]
        theirs |= set(re.findall(r"weights sha256 = ([0-9a-f]{64})", node.stdout))
    result = run_tfrun(
        *("-w", "2", "--nproc-per-task", "2", "--worker-logs", "*", "--", *program),
        env=job_procs.env(),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ours = dict(
        re.findall(r"^\[(worker:\d\.\d)\] weights sha256 = ([0-9a-f]{64})$", result.stdout, re.M)
    )
    assert sorted(ours) == ["worker:0.0", "worker:0.1", "worker:1.0", "worker:1.1"], result.stdout
    # Every copy the same, and the same as torchrun's: the same ranks took
    # the same shards and the same steps.
    assert len(theirs) == 1 and set(ours.values()) == theirs
    assert "rank 3 of 4: gloo on cpu" in result.stdout
    assert job_procs.wait_gone(5) == []


def test_a_two_by_two_jax_job_sums_over_four_processes(job_procs: JobProcesses) -> None:
    _needs("jax")
    result = run_tfrun(
        *("-w", "2", "--nproc-per-task", "2", "--worker-logs", "*"),
        *("--", PY, "examples/jax_psum.py"),
        env=job_procs.env(),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sums = dict(re.findall(r"^\[(worker:\d\.\d)\] psum = (.+)$", result.stdout, re.M))
    # Process r sent (r + 1) * [1, 2, 3, 4]: 1 + 2 + 3 + 4 = 10 of each.
    assert sums == {
        name: "[10, 20, 30, 40]"
        for name in ("worker:0.0", "worker:0.1", "worker:1.0", "worker:1.1")
    }, result.stdout[-3000:]
    assert job_procs.wait_gone(5) == []


@pytest.mark.parametrize("file", [[], ["--cluster-file"]], ids=["TF_CONFIG", "cluster file"])
def test_two_by_two_are_four_tensorflow_workers_locally(
    job_procs: JobProcesses, job_events: JobEvents, file: list[str]
) -> None:
    """``tfrun -w 2 --nproc-per-task 2``: MultiWorkerMirroredStrategy sees
    four workers, which all-reduce together; ``--events`` says the cluster
    as TF_CONFIG has it. With ``--cluster-file``, each process reads its own
    file. Before: no process had a TF_CONFIG, and the program failed;
    ``--cluster-file`` was refused."""
    _needs("tensorflow")
    result = run_tfrun(
        *job_events.flag,
        *file,
        *("-w", "2", "--nproc-per-task", "2", "--worker-logs", "*", "--", PY, MWMS),
        env=job_procs.env(),
        timeout=300,
    )
    check_four_tensorflow_workers(result)
    (up,) = job_events.of("cluster_up")
    workers = up["cluster"]["worker"]
    assert len(set(workers)) == 4 and all(address in result.stdout for address in workers)
    assert job_procs.wait_gone(5) == []


def test_a_parameter_server_job_with_a_chief_coordinates_four_workers(
    job_procs: JobProcesses,
) -> None:
    """TF's ParameterServerStrategy deployment with ``--chief -w 2 -s 1
    --nproc-per-task 2``: the chief (one process) coordinates four worker
    processes, each serving at its own address, and one ps. Before: refused
    (``-s``)."""
    _needs("tensorflow")
    program = str(Path(__file__).parent / "programs" / "ps_tfconfig.py")
    result = run_tfrun(
        *("--chief", "-w", "2", "-s", "1", "--nproc-per-task", "2", "--worker-logs", "all"),
        *("--", PY, program, "--steps", "5"),
        env=job_procs.env(),
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    serving = dict(re.findall(r"^\[(\w+:[\d.]+)\] (\w+:\d) serving at ", result.stdout, re.M))
    assert serving == {
        "ps:0": "ps:0",
        **{name: f"worker:{i}" for i, name in enumerate(FOUR_WORKERS)},
    }, result.stdout[-5000:]
    assert re.search(r"^\[chief:0\] trained 5 steps on 4 workers: ", result.stdout, re.M)
    assert job_procs.wait_gone(5) == []


def test_tensorflows_placeholders_name_every_process(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    """The original's shape, ``{ps_hosts} {worker_hosts} {job_name}
    {task_index}``, with a chief and a ps: each worker process is named by
    its own index, the ps and the chief are one process each. (The chief,
    whose end is the job's, waits for the five others to have spoken.)"""
    said = f"{tmp_path}/said"
    command = (
        "echo {job_name} {task_index} {worker_hosts} {ps_hosts} {chief_hosts}"
        f" && mkdir -p {said} && touch {said}/$$"
        f' && while [ {{job_name}} = chief ] && [ "$(ls {said} | wc -l)" -lt 6 ]; do sleep 0.05; done'
    )
    result = run_tfrun(
        *("--chief", "-w", "2", "-s", "1", "--nproc-per-task", "2", "--worker-logs", "all"),
        *("--", command),
        env=job_procs.env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(re.findall(r"^\[(\w+:[\d.]+)\] (\w+ \d .*)$", result.stdout, re.M))
    assert sorted(lines) == ["chief:0", "ps:0", *FOUR_WORKERS], result.stdout
    workers = lines["chief:0"].split()[2].split(",")
    assert len(set(workers)) == 4
    assert lines["ps:0"].split()[:2] == ["ps", "0"]
    for name in FOUR_WORKERS:
        group, local = map(int, name.partition(":")[2].split("."))
        assert lines[name].split()[:3] == ["worker", str(group * 2 + local), ",".join(workers)]
    assert job_procs.wait_gone(5) == []


# Local rank 1 of task worker:1 fails once every process has said hello;
# the others would wait for ever.
FAILING = (
    "import os, sys, time\n"
    "rank, here = os.environ['RANK'], sys.argv[1]\n"
    "print('hello from rank', rank, flush=True)\n"
    "open(os.path.join(here, rank), 'w').close()\n"
    "if rank != '3':\n"
    "    time.sleep(120)\n"
    "while len(os.listdir(here)) < 4:\n"
    "    time.sleep(0.01)\n"
    "print('rank 3 gives up', flush=True)\n"
    "sys.exit(3)\n"
)


def failing(directory: Path) -> list[str]:
    directory.mkdir()
    return [PY, "-c", FAILING, str(directory)]


def _check_failure(result: subprocess.CompletedProcess[str], logs: Path | None) -> None:
    assert result.returncode == 3, result.stdout[-3000:] + result.stderr[-3000:]
    assert "task worker:1" in result.stderr
    assert "exited with status 3 (its process of local rank 1)" in result.stderr
    assert "[worker:1.1] rank 3 gives up" in result.stderr  # the verdict's tail
    assert "worker:1 (local rank 1) exited with status 3" in result.stderr
    assert re.search(r"^\[worker:0\.1\] hello from rank 1$", result.stdout, re.M)
    if logs is not None:
        own = logs / "worker.1.local-rank-1.log"
        assert own.read_text() == "hello from rank 3\nrank 3 gives up\n"
        peer = logs / "worker.1.local-rank-0.log"
        assert peer.read_text() == "hello from rank 2\n"
        task = logs / "worker.1.log"
        assert "[worker:1.1] rank 3 gives up\n" in task.read_text()


def test_a_failing_process_fails_its_task_and_the_job_and_is_named(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    result = run_tfrun(
        *("-w", "2", "--nproc-per-task", "2", "--log-dir", str(logs), "--worker-logs", "*"),
        *("--", *failing(tmp_path / "hello")),
        env=job_procs.env(),
        timeout=60,
    )
    _check_failure(result, logs)
    assert job_procs.wait_gone(5) == []


def test_a_process_killed_by_sigkill_ends_its_task_as_killed_by_it(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    # How the kernel's OOM killer ends a process. The runner cannot take
    # SIGKILL's handler back, and must still end as its process did.
    program = tmp_path / "killed.py"
    program.write_text(
        "import os, signal, time\n"
        "if os.environ['RANK'] == '3':\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "time.sleep(120)\n"
    )
    result = run_tfrun(
        *("-w", "2", "--nproc-per-task", "2", "--", PY, str(program)),
        env=job_procs.env(),
        timeout=60,
    )
    assert result.returncode == 137, result.stdout[-3000:] + result.stderr[-3000:]
    assert "task worker:1 on 127.0.0.1 killed by SIGKILL" in result.stderr
    assert "Traceback" not in result.stderr
    assert job_procs.wait_gone(5) == []


# -- Mesos: the test master and real Mesos -------------------------------------------


def test_two_by_two_on_mesos(
    mesos: MesosUnderTest, job_procs: JobProcesses, tmp_path: Path
) -> None:
    """worker:0 runs beside tfrun, worker:1 in a Mesos task, under its agent."""
    _needs("torch")
    env = _dump_env(job_procs.env())
    theirs = torchrun_variables(env)
    result = run_tfrun(
        *("-m", mesos.url, "-w", "2", "--nproc-per-task", "2", "--worker-logs", "*"),
        *("--", PY, "-c", ENV_DUMP),
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = tfrun_variables(result.stdout)
    assert len(found) == 4, result.stdout[-5000:] + result.stderr[-3000:]
    assert_same_as_torchruns(found, theirs)
    logs = tmp_path / "logs"
    logs.mkdir()
    failed = run_tfrun(
        *("-m", mesos.url, "-w", "2", "--nproc-per-task", "2", "--worker-logs", "*"),
        *("--log-dir", str(logs), "--", *failing(tmp_path / "hello")),
        env=job_procs.env(),
        timeout=120,
    )
    # worker:1's processes' logs, from what its agent sent, in the run's
    # directory as a local task's are.
    _check_failure(failed, logs)
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


def test_two_by_two_are_four_tensorflow_workers_on_mesos(
    mesos: MesosUnderTest, job_procs: JobProcesses
) -> None:
    """worker:1's two processes, in a Mesos task, serve at two consecutive
    ports of its offer, claimed in its TaskInfo. Before: no TF_CONFIG."""
    _needs("tensorflow")
    result = run_tfrun(
        *("-m", mesos.url, "-w", "2", "--nproc-per-task", "2", "--worker-logs", "*"),
        *("--", PY, MWMS),
        env=job_procs.env(),
        timeout=300,
    )
    check_four_tensorflow_workers(result)
    assert [p.cmdline() for p in job_procs.wait_gone(10)] == []


@pytest.mark.parametrize(("nproc", "status"), [(100, 2), (37, 0)])
def test_processes_past_the_descriptor_limit_are_refused_before_anything_starts(
    job_procs: JobProcesses, nproc: int, status: int
) -> None:
    # Before: a traceback of the runner's "Too many open files", as the
    # task's failure (exit 1). 37 processes fit in 128 descriptors.
    limited = ["bash", "-c", 'ulimit -n 128 && exec "$@"', "bash"]
    result = subprocess.run(
        [*limited, *tfrun_argv(), "-w", "2", "--nproc-per-task", str(nproc), "--", "true"],
        capture_output=True,
        text=True,
        env=job_procs.env(),
        timeout=120,
    )
    assert result.returncode == status, result.stderr[-3000:]
    if status:
        [line] = result.stderr.splitlines()
        assert f"--nproc-per-task {nproc} needs about" in line and "ulimit -Hn" in line
    assert "Traceback" not in result.stderr
