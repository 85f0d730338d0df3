"""Make TensorFlow's eager context let go of a ``cluster()`` block's servers
before they stop.

A program driving the servers keeps a remote context on each; when a
``tf.function`` is freed (at the latest at exit) TF removes it remotely, and
once the servers are gone that logs "Failed to remove function remotely" per
server, hundreds of lines after a successful run. :func:`forget_servers`
updates the context's cluster without them while they still answer, so nothing
is sent later. Nothing is imported: a program without TensorFlow or a remote
cluster is left alone.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["forget_servers"]

logger = logging.getLogger("tfmesos")


def forget_servers(cluster_def: Mapping[str, Sequence[str]]) -> bool:
    """Drop from TF's eager context every job whose tasks all are among
    ``cluster_def``'s addresses (never the program's own); return whether it
    changed. Failures are logged, never raised."""
    if "tensorflow" not in sys.modules:
        return False
    ours = {address for addresses in cluster_def.values() for address in addresses}
    if not ours:
        return False
    try:
        from tensorflow.python.eager import context

        server_def = context.get_server_def()
        if server_def is None:
            return False
        kept = [job for job in server_def.cluster.job if not _all_ours(job, ours, server_def)]
        if len(kept) == len(server_def.cluster.job):
            return False
        updated = type(server_def)()
        updated.CopyFrom(server_def)
        del updated.cluster.job[:]
        for job in kept:
            updated.cluster.job.add().CopyFrom(job)
        # Filters can only be set when a cluster is first connected; TF
        # warns of any in an update.
        updated.ClearField("cluster_device_filters")
        context.context().update_server_def(updated)
    except Exception as error:
        logger.debug("TensorFlow's context kept the cluster's servers: %r", error)
        return False
    return True


def _all_ours(job: object, ours: set[str], server_def: object) -> bool:
    if getattr(job, "name", None) == getattr(server_def, "job_name", None):
        return False
    tasks: Iterable[str] = getattr(job, "tasks", {}).values()
    addresses = set(tasks)
    return bool(addresses) and addresses <= ours
