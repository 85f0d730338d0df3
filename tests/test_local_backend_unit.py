"""The local backend on its own, without a launcher: what it gives each task."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tfmesos import ClusterSpec, Job
from tfmesos.backends.base import BackendEvent, Launch, TaskEnded
from tfmesos.backends.local import LocalBackend

pytestmark = pytest.mark.e2e  # every test here starts processes


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
