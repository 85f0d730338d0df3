"""What a task is told about its cluster: placeholders and environment.

Standard library only: the in-task agent imports this module, and so does the
launcher when it validates a command before anything starts. Keeping both on
one function is what makes the two agree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

__all__ = [
    "ENV_RESTART",
    "PLACEHOLDERS",
    "ClusterDef",
    "fill_placeholders",
    "placeholder_values",
    "placeholders_in",
    "task_environment",
]

ClusterDef = Mapping[str, Sequence[str]]
"""Job name to the ``host:port`` of each of its tasks, in task order."""

PLACEHOLDERS = ("ps_hosts", "worker_hosts", "job_name", "task_index")

ENV_RESTART = "TFMESOS_RESTART"
"""Which run of the job a task belongs to: 0, then 1 after the first restart
(``tfrun --max-restarts``)."""

# `{name}` is a placeholder and `{{name}}` a literal `{name}`. Every other brace
# (a dict in `python -c "..."`, a shell `${x}`, a lone `}}`) is left alone, which
# str.format, used by the original, would have refused or mangled.
_TOKEN = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}|(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")


def placeholders_in(command: str) -> list[str]:
    """The placeholder names a command uses, in order of appearance."""
    return [m.group(2) for m in _TOKEN.finditer(command) if m.group(2)]


def fill_placeholders(command: str, values: Mapping[str, str]) -> str:
    """Replace each ``{name}`` by ``values[name]``; an unknown name is a ``KeyError``."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(1):
            return "{" + match.group(1) + "}"
        name = match.group(2)
        if name not in values:
            known = ", ".join(f"{{{n}}}" for n in values)
            raise KeyError(f"unknown placeholder {{{name}}} (known: {known})")
        return values[name]

    return _TOKEN.sub(substitute, command)


def placeholder_values(cluster: ClusterDef, job_name: str, task_index: int) -> dict[str, str]:
    return {
        "ps_hosts": ",".join(cluster.get("ps", ())),
        "worker_hosts": ",".join(cluster.get("worker", ())),
        "job_name": job_name,
        "task_index": str(task_index),
    }


def task_environment(cluster: ClusterDef, job_name: str, task_index: int) -> dict[str, str]:
    """The variables every task gets: the original's ``TFMESOS_*`` and TF2's ``TF_CONFIG``."""
    values = placeholder_values(cluster, job_name, task_index)
    # TF2 strategies reject a job with no tasks, so empty jobs are left out.
    tf_config = {
        "cluster": {name: list(addrs) for name, addrs in cluster.items() if addrs},
        "task": {"type": job_name, "index": task_index},
    }
    return {
        "TFMESOS_PS_HOSTS": values["ps_hosts"],
        "TFMESOS_WORKER_HOSTS": values["worker_hosts"],
        "TFMESOS_JOB_NAME": job_name,
        "TFMESOS_TASK_INDEX": str(task_index),
        "TFMESOS_DISTRIBUTED": "1",
        "TF_CONFIG": json.dumps(tf_config, separators=(",", ":")),
        # Output goes through a pipe; without this Python would hold it back in
        # 8 KiB blocks and a crash would lose the last lines.
        "PYTHONUNBUFFERED": "1",
    }
