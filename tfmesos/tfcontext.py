"""TensorFlow's eager context let go of a ``cluster()`` block's servers
before they stop.

A TF2 program that drives the servers (``ParameterServerStrategy``,
``tf.config.experimental_connect_to_cluster``) makes its eager context the
master of a remote context on each of them. When a ``tf.function`` is freed,
at the latest as the interpreter exits, the context removes it on every
remote context it knows (``EagerContext::RemoveFunction``), and once the
servers are gone each removal logs ``Failed to remove function remotely ...
Connection refused`` per server: some 240 lines after a small training, exit
status 0.

:func:`forget_servers` updates the context's cluster to what it was less
the block's servers (``update_server_def``, what
``connect_to_cluster`` calls for a changed cluster), while they still
answer: TF closes its remote contexts there and keeps none, so nothing is
sent to them later. Nothing is imported: a program that has not imported
TensorFlow, or has no remote cluster, is left as it is.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["forget_servers"]

logger = logging.getLogger("tfmesos")


def forget_servers(cluster_def: Mapping[str, Sequence[str]]) -> bool:
    """Drop from TensorFlow's eager context every job whose tasks are all
    among ``cluster_def``'s addresses (never the program's own job); whether
    the context was changed. A failure is logged, never raised: it costs no
    more than the lines this is here to spare."""
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
