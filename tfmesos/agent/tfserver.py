"""``python -m tfmesos.agent.tfserver``: one plain TensorFlow gRPC server.

The agent runs this as its child in fine-grained mode. It is the only part of a
task that imports TensorFlow, and only because it has to.
"""

from __future__ import annotations

import json
import os
import sys

from tfmesos.common import clusterfile
from tfmesos.rendezvous import protocol


def main() -> int:
    settings = json.loads(os.environ.get(protocol.ENV_SERVER_DEF) or "{}")
    ready = os.environ.pop(protocol.ENV_READY_FD, None)
    cluster = json.loads(clusterfile.tf_config(os.environ))["cluster"]
    job_name = os.environ["TFMESOS_JOB_NAME"]
    task_index = int(os.environ["TFMESOS_TASK_INDEX"])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf

    server_def = tf.train.ServerDef(
        cluster=tf.train.ClusterSpec(cluster).as_cluster_def(),
        job_name=job_name,
        task_index=task_index,
        protocol=settings.get("protocol", "grpc"),
    )
    # Honour the job's cpus/gpus as device counts, as the original did.
    if "cpus" in settings:
        server_def.default_session_config.device_count["CPU"] = max(1, int(settings["cpus"]))
    if "gpus" in settings:
        server_def.default_session_config.device_count["GPU"] = int(settings["gpus"])
    # The server listens once this returns (gRPC binds as it is built).
    server = tf.distribute.Server(server_def, start=True)
    print(f"TensorFlow server /job:{job_name}/task:{task_index} at {server.target}", flush=True)
    if ready is not None:
        # The agent tells the launcher this server is up.
        fd = int(ready)
        os.write(fd, b"1")
        os.close(fd)
    server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
