"""The cluster definition in a file (``tfrun --cluster-file``), for a job too
large for the environment.

Linux takes at most 128 KiB in one environment string (``NAME=VALUE`` and its
NUL: ``MAX_ARG_STRLEN``), and ``TF_CONFIG`` and the ``TFMESOS_*_HOSTS`` list
every task's address: 520 tasks on 253-character host names are past it, and
every command would fail with "Argument list too long". The launcher refuses
such a job before any command starts (:func:`tfmesos.launcher.message.check_environment`);
with ``--cluster-file`` each task's agent writes ``TF_CONFIG``'s JSON to a
file of the task's own instead, and names it in ``TFMESOS_CLUSTER_FILE``::

    os.environ["TF_CONFIG"] = open(os.environ["TFMESOS_CLUSTER_FILE"]).read()

:data:`FILE_VARIABLES` are then not set at all: a program reads one place,
whatever the job's size. The file's ``cluster`` holds every job's addresses,
which is what the ``TFMESOS_*_HOSTS`` lists join with commas.

Standard library only: the in-task agent imports it.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, MutableMapping

__all__ = [
    "ENV_CLUSTER_FILE",
    "FILE_VARIABLES",
    "FLAG",
    "move_to_file",
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


def move_to_file(env: MutableMapping[str, str], task_log: str | None, sandbox: str | None) -> str:
    """Write ``env``'s ``TF_CONFIG`` (made for the task, or, where the task
    has none, as with ``--nproc-per-task``, made from the ``*_HOSTS``) to the
    task's cluster file, readable by its user alone; take
    :data:`FILE_VARIABLES` out of ``env`` and name the file in it. Return
    the path. An ``OSError`` where the file cannot be written."""
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
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
    for name in FILE_VARIABLES:
        env.pop(name, None)
    env[ENV_CLUSTER_FILE] = path
    return path


def tf_config(environ: Mapping[str, str]) -> str:
    """``TF_CONFIG``'s JSON, from the environment or from the cluster file it
    names (``--cluster-file``); a ``KeyError`` naming ``TF_CONFIG`` where it
    has neither."""
    path = environ.get(ENV_CLUSTER_FILE)
    if "TF_CONFIG" not in environ and path:
        with open(path, encoding="utf-8") as file:
            return file.read()
    return environ["TF_CONFIG"]
