"""The remote tasks' output kept in the run directory (tfmesos.mesos.tasklogs):
capped as the local logs are, and a log that cannot be written is said once,
naming the task as every other message does."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tfmesos.mesos.tasklogs import TaskLogs


def test_each_task_s_output_is_kept_in_its_file_under_its_cap(tmp_path: Path) -> None:
    logs = TaskLogs(tmp_path, cap=100)
    for line in range(30):
        logs.write("worker.1.5c5c2854", f"line {line:03}\n".encode(), name="worker:1")
    logs.write("ps.0.restart-1.8b4c6c83", b"ps says\n", name="ps:0")
    logs.close()
    kept = (tmp_path / "worker.1.log.1").read_bytes() + (tmp_path / "worker.1.log").read_bytes()
    assert len(kept) <= 100
    assert kept.endswith(b"line 029\n")
    assert (tmp_path / "ps.0.restart-1.log").read_bytes() == b"ps says\n"


def test_a_log_that_cannot_be_written_is_said_once_naming_the_task(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "not-a-directory"
    directory.write_text("")  # every log under it fails: ENOTDIR, as a full disk would
    logs = TaskLogs(directory)
    with caplog.at_level(logging.WARNING, logger="tfmesos"):
        for _ in range(3):
            logs.write("worker.1.attempt-2.8b4c6c83", b"output\n", name="worker:1")
    logs.close()
    (record,) = caplog.records
    message = record.getMessage()
    assert message.startswith("cannot keep the output of task worker:1 in "), message
    assert "/worker.1.attempt-2.log " in message
    assert logs.lost == ["worker:1"]
