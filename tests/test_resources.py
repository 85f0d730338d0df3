from __future__ import annotations

import pytest

from tfmesos.common import resources
from tfmesos.common.resources import GpuAllocator, machine_resources


@pytest.mark.parametrize(
    ("visible", "gpus"),
    [("0,1", ("0", "1")), ("", ()), ("-1", ()), ("2,-1,3", ("2",)), ("GPU-abc", ("GPU-abc",))],
)
def test_cuda_visible_devices_is_the_users_word(
    monkeypatch: pytest.MonkeyPatch, visible: str, gpus: tuple[str, ...]
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert machine_resources().gpus == gpus


def test_gpu_allocator_never_gives_one_gpu_twice() -> None:
    allocator = GpuAllocator(("0", "1", "2"))
    first = allocator.allocate(2)
    second = allocator.allocate(1)
    assert sorted(first + second) == ["0", "1", "2"]
    with pytest.raises(RuntimeError, match="1 GPUs asked, 0 free"):
        allocator.allocate(1)
    allocator.release(first)
    assert sorted(allocator.allocate(2)) == sorted(first)


def test_machine_has_cpus_and_memory() -> None:
    have = machine_resources()
    assert have.cpus >= 1
    assert have.mem_mib > 100


def test_too_many_local_tasks_are_sent_to_every_cluster_backend_not_mesos_alone() -> None:
    said = resources.local_task_limit(resources.MAX_LOCAL_TASKS + 1)
    assert said is not None
    assert f"at most {resources.MAX_LOCAL_TASKS} tasks" in said
    assert "-m MASTER for Mesos, --backend slurm" in said
