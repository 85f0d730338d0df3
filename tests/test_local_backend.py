"""The local backend on its own, without a launcher: what it gives each task."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from tfmesos import ClusterSpec, Job
from tfmesos.backends.base import BackendEvent, Launch, TaskEnded
from tfmesos.backends.local.backend import LocalBackend


@pytest.mark.e2e  # it starts the task's command
def test_a_gpu_task_gets_its_gpus_whether_or_not_check_ran_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The machine's GPUs as CUDA_VISIBLE_DEVICES names them: no real GPU needed.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    spec = ClusterSpec((Job("worker", 1, gpus=1, cmd="x"),), replica=True)
    backend = LocalBackend(
        spec, log_dir=tmp_path, agent_command=["sh", "-c", 'echo "gpus=$CUDA_VISIBLE_DEVICES"']
    )

    async def scenario() -> TaskEnded:
        ended: asyncio.Queue[TaskEnded] = asyncio.Queue()

        def sink(event: BackendEvent) -> None:
            if isinstance(event, TaskEnded):
                ended.put_nowait(event)

        await backend.start(sink)
        try:
            # No check(): a launch stands on its own.
            await backend.launch(Launch("t1", spec.tasks()[0], {}))
            return await ended.get()
        finally:
            await backend.close()

    end = asyncio.run(scenario())
    assert end.exit_code == 0
    assert (tmp_path / "t1.log").read_text().splitlines() == ["gpus=3"]


# -- what a local or Slurm user is told to do --------------------------------------

ON_A_CLUSTER = "(-m MASTER for Mesos, --backend slurm)"


@pytest.fixture
def a_small_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine as the local backend sees it: 2 CPUs, 1 GiB, one GPU."""
    from tfmesos.common.resources import MachineResources

    small = MachineResources(cpus=2, mem_mib=1024.0, gpus=("0",))
    monkeypatch.setattr("tfmesos.backends.local.backend.machine_resources", lambda gpus=True: small)


def refusal(job: Any, *, chief_only: bool = False) -> str:
    from tfmesos.backends.local.backend import LocalBackend
    from tfmesos.errors import ResourceError

    backend = LocalBackend(job, log_dir="/nowhere", chief_only=chief_only)
    tasks = [t for t in job.tasks() if not chief_only or t.name == "worker:0"]
    with pytest.raises(ResourceError) as refused:
        backend.check(tasks)
    return str(refused.value)


def test_a_local_job_too_large_is_told_of_every_cluster_backend_not_mesos_alone(
    a_small_machine: None,
) -> None:
    """Before: "or run the job on a Mesos cluster (-m)", "or give a Mesos
    master", to users who may have only Slurm."""
    from tfmesos.spec import ClusterSpec, Job

    def replica(**asks: Any) -> Any:
        return ClusterSpec((Job("worker", 2, cmd="true", **asks),), replica=True)

    assert refusal(replica(cpus=64)).endswith(
        f"ask for less with -Cw, or run the job on a cluster {ON_A_CLUSTER}"
    )
    assert refusal(replica(mem=4096)).endswith(
        f"ask for less with -Mw (MiB), or run the job on a cluster {ON_A_CLUSTER}"
    )
    assert refusal(replica(gpus=2)).endswith(
        f"give -Gw 0, or run the job on a cluster with GPUs {ON_A_CLUSTER}"
    )
    # Each task fits, all of them together do not.
    assert refusal(replica(gpus=1)).endswith(
        f"ask for fewer, or run the job on a cluster {ON_A_CLUSTER}"
    )
    # tfmesos.cluster(): its own arguments, not tfrun's flags.
    servers = ClusterSpec((Job("ps", 1, cpus=64),))
    assert refusal(servers).endswith(
        "ask for less (cpus= of job 'ps'), or run the job on a cluster "
        "(master= for Mesos, backend='slurm')"
    )


def test_the_chief_of_a_job_on_a_cluster_is_told_of_tfruns_machine_not_of_mesos(
    a_small_machine: None, caplog: pytest.LogCaptureFixture
) -> None:
    """The chief runs beside tfrun for a Mesos job and a Slurm job alike."""
    from tfmesos.backends.local.backend import LocalBackend
    from tfmesos.spec import ClusterSpec, Job

    gpus = ClusterSpec((Job("worker", 2, cmd="true", gpus=2),), replica=True)
    said = refusal(gpus, chief_only=True)
    assert said.endswith(
        "(the chief runs on this machine, beside tfrun): "
        "run tfrun on a machine with a GPU, or give -Gw 0"
    ), said
    cpus = ClusterSpec((Job("worker", 2, cmd="true", cpus=64),), replica=True)
    with caplog.at_level(logging.WARNING, logger="tfmesos"):
        LocalBackend(cpus, log_dir="/nowhere", chief_only=True).check(cpus.tasks()[:1])
    assert caplog.messages[-1].endswith(
        "(the chief runs on this machine, beside tfrun): ask for less with -Cw, "
        "or run tfrun on a machine with more; running it anyway"
    ), caplog.messages
    assert "Mesos" not in said + caplog.text
