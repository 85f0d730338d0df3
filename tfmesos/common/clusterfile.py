"""The cluster definition in a file (``tfrun --cluster-file``), for a job too
large for the environment.

Linux caps one environment string at 128 KiB (``MAX_ARG_STRLEN``), and
``TF_CONFIG`` lists every task's address; the launcher refuses such a job
(:func:`tfmesos.launcher.message.check_environment`). With ``--cluster-file``
each agent writes ``TF_CONFIG``'s JSON to a file named in
``TFMESOS_CLUSTER_FILE``, and :data:`FILE_VARIABLES` are not set, so a program
reads one place whatever the job's size::

    os.environ["TF_CONFIG"] = open(os.environ["TFMESOS_CLUSTER_FILE"]).read()

Standard library only: the agent imports it.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from tfmesos.common import taskenv

if TYPE_CHECKING:
    from collections.abc import Mapping, MutableMapping

__all__ = [
    "ENV_CLUSTER_FILE",
    "FILE_VARIABLES",
    "FLAG",
    "move_to_file",
    "process_path",
    "tf_config",
]

ENV_CLUSTER_FILE = "TFMESOS_CLUSTER_FILE"
"""The path of the task's cluster file, with ``--cluster-file``."""
FLAG = "--cluster-file"
"""tfrun's flag that asks for it (``cluster_file=True`` in Python)."""
FILE_VARIABLES = ("TF_CONFIG", "TFMESOS_PS_HOSTS", "TFMESOS_WORKER_HOSTS", "TFMESOS_CHIEF_HOSTS")
"""What lists every address: in the file, not the environment, with ``--cluster-file``."""
_NAME = "cluster.json"


def _path(task_log: str | None, sandbox: str | None) -> str:
    """Where the task's file goes: beside its log (``worker.1.cluster.json``,
    in the run's directory), else in its Mesos sandbox, else a new file in
    ``$TMPDIR``."""
    if task_log and task_log != os.devnull:
        stem = task_log[: -len(".log")] if task_log.endswith(".log") else task_log
        return f"{stem}.{_NAME}"
    if sandbox:
        return os.path.join(sandbox, _NAME)
    import tempfile  # here: it imports shutil, and with it bz2 and lzma (tests/test_fixed_cost.py)

    fd, path = tempfile.mkstemp(prefix="tfmesos-", suffix=f".{_NAME}")
    os.close(fd)
    return path


def process_path(path: str, local_rank: int) -> str:
    """The cluster file of a task's process of ``local_rank``
    (``--nproc-per-task``): local rank 0's is the task's, ``X.cluster.json``;
    another's is ``X.local-rank-L.cluster.json`` beside it, as its log is."""
    if not local_rank:
        return path
    stem = path[: -len(_NAME)] if path.endswith(_NAME) else f"{path}."
    return f"{stem}local-rank-{local_rank}.{_NAME}"


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)


def move_to_file(
    env: MutableMapping[str, str], task_log: str | None, sandbox: str | None, nproc: int = 1
) -> str:
    """Write ``env``'s ``TF_CONFIG`` (made for the task, or, where it has
    none, made from the ``*_HOSTS``) to the task's cluster file, readable by
    its user alone; take :data:`FILE_VARIABLES` out of ``env`` and name the
    file in it. Return the path. ``nproc``: the task runs that many
    processes, TensorFlow workers each, and each local rank L but 0 gets a
    file of its own (:func:`process_path`), its task index grown by L. An
    ``OSError`` where a file cannot be written."""
    text = env.get("TF_CONFIG")
    if text is None:
        cluster = {
            job: env[name].split(",")
            for job, name in (
                ("chief", "TFMESOS_CHIEF_HOSTS"),
                ("worker", "TFMESOS_WORKER_HOSTS"),
                ("ps", "TFMESOS_PS_HOSTS"),
            )
            if env.get(name)
        }
        task = {
            "type": env.get("TFMESOS_JOB_NAME", ""),
            "index": int(env.get("TFMESOS_TASK_INDEX") or 0),
        }
        text = json.dumps({"cluster": cluster, "task": task}, separators=(",", ":"))
    path = _path(task_log, sandbox)
    _write(path, text)
    for local_rank in range(1, nproc):
        _write(process_path(path, local_rank), taskenv.process_tf_config(text, local_rank))
    for name in FILE_VARIABLES:
        env.pop(name, None)
    env[ENV_CLUSTER_FILE] = path
    return path


def tf_config(environ: Mapping[str, str]) -> str:
    """``TF_CONFIG``'s JSON, from the environment or the cluster file; else
    ``KeyError``."""
    path = environ.get(ENV_CLUSTER_FILE)
    if "TF_CONFIG" not in environ and path:
        with open(path, encoding="utf-8") as file:
            return file.read()
    return environ["TF_CONFIG"]
