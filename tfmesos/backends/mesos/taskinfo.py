"""What the Mesos backend tells the master about the job: the ``FrameworkInfo``
it subscribes with and the ``TaskInfo`` of each task (Mesos JSON).

Pure functions of the spec and the options: no process, no master.
"""

from __future__ import annotations

import sys
from typing import Any

from tfmesos.backends.base import Launch
from tfmesos.backends.mesos.options import MesosOptions
from tfmesos.common.exported import IMAGE
from tfmesos.mesos.scheduler import DEFAULT_HEARTBEAT_SECONDS, MISSED_HEARTBEATS
from tfmesos.rendezvous import protocol
from tfmesos.spec import ClusterSpec

__all__ = [
    "FAILOVER_TIMEOUT",
    "failover_timeout_for",
    "framework_capabilities",
    "framework_info",
    "task_info",
]

FAILOVER_TIMEOUT = 60.0
"""The least time the master keeps our tasks if the launcher vanishes without
TEARDOWN (see failover_timeout_for)."""


def failover_timeout_for(reconnect_timeout: float) -> float:
    """The framework's ``failover_timeout``: longer than the launcher may go on
    trying to regain the master. The master's clock starts when it loses the
    framework's connection (``Master::disconnect``, then ``failoverFramework``
    removes the framework and kills its tasks once it runs out); the
    launcher may notice only five missed heartbeats later, and then keeps
    re-subscribing for ``reconnect_timeout``. A shorter failover timeout
    would have the tasks killed while tfrun still says it is re-subscribing."""
    noticing = MISSED_HEARTBEATS * DEFAULT_HEARTBEAT_SECONDS
    return max(FAILOVER_TIMEOUT, noticing + reconnect_timeout + DEFAULT_HEARTBEAT_SECONDS)


def framework_capabilities(spec: ClusterSpec) -> list[dict[str, str]]:
    """MULTI_ROLE always; PARTITION_AWARE, so that an agent that loses contact
    makes its tasks TASK_UNREACHABLE (and a returning task is seen, not silently
    revived: ``docs/high-availability-framework-guide.md``); GPU_RESOURCES only
    when a task asks for GPUs, since a framework that claims it is offered GPU
    agents, which ``docs/gpu-support.md`` keeps for GPU work."""
    capabilities = [{"type": "MULTI_ROLE"}, {"type": "PARTITION_AWARE"}]
    if any(job.gpus for job in spec.jobs):
        capabilities.append({"type": "GPU_RESOURCES"})
    return capabilities


def utf8_text(text: str) -> str:
    """``text`` with what is not UTF-8 replaced (U+FFFD). A command's bytes
    that are not UTF-8 reach Python as lone surrogates (surrogateescape),
    which json.dumps writes as ``\\udcff``: Mesos's JSON parser refuses
    those, and the master the whole SUBSCRIBE ("Failed to parse body into
    JSON"), as it refuses a LAUNCH with such a task name. The default job
    name is made from the command."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def framework_info(
    spec: ClusterSpec, options: MesosOptions, user: str, host: str, principal: str | None
) -> dict[str, Any]:
    """The ``FrameworkInfo`` of a job: its tasks run as ``user``; ``host``
    is the name the tasks dial this machine by."""
    framework: dict[str, Any] = {
        "user": user,
        "name": utf8_text(spec.name),
        "hostname": host,
        "roles": [options.role or "*"],
        "failover_timeout": failover_timeout_for(options.reconnect_timeout),
        # Agents keep checkpointed tasks running across their own restarts.
        "checkpoint": options.checkpoint,
        "capabilities": framework_capabilities(spec),
    }
    if principal:
        framework["principal"] = principal
    return framework


def _volumes(options: MesosOptions) -> list[dict[str, Any]]:
    return [
        {
            "host_path": v.host_path,
            "container_path": v.container_path,
            "mode": "RO" if v.read_only else "RW",
        }
        for v in options.volumes
    ]


def task_info(
    launch: Launch,
    spec: ClusterSpec,
    options: MesosOptions,
    offer: dict[str, Any],
    resources: list[dict[str, Any]],
    port: int,
    user: str | None,
) -> dict[str, Any]:
    """The ``TaskInfo`` (Mesos JSON) that runs ``launch``'s agent on ``offer``,
    in ``options``' container (image, volumes) if any."""
    env = dict(launch.env)
    env[protocol.ENV_HOST] = offer["hostname"]
    env[protocol.ENV_PORT] = str(port)
    env[protocol.ENV_PORT_COUNT] = str(launch.task.ports)
    if options.image:
        # The image's own variables (its PATH) win over tfrun's carried ones.
        env[protocol.ENV_BASE] = IMAGE
    python = "python3" if options.image else sys.executable
    info: dict[str, Any] = {
        "name": f"{utf8_text(spec.name[:60])} {launch.task.target}",
        "task_id": {"value": launch.task_id},
        "agent_id": {"value": offer["agent_id"]["value"]},
        "resources": resources,
        "command": {
            "shell": True,
            "value": f"exec {python} -m tfmesos.agent",
            "environment": {"variables": [{"name": k, "value": v} for k, v in sorted(env.items())]},
        },
    }
    if user is not None:
        info["command"]["user"] = user
    if not options.image and options.volumes:
        # The Mesos containerizer mounts host paths without an image too
        # (filesystem/linux for absolute container paths, filesystem/posix
        # for ones relative to the sandbox): docs/container-volumes.md.
        info["container"] = {"type": "MESOS", "volumes": _volumes(options)}
    if options.image:
        volumes = [
            {"host_path": path, "container_path": path, "mode": "RO"}
            for path in ("/etc/passwd", "/etc/group")
        ] + _volumes(options)
        if options.containerizer == "DOCKER":
            info["container"] = {
                "type": "DOCKER",
                "docker": {
                    "image": options.image,
                    "network": "HOST",
                    "force_pull_image": options.force_pull_image,
                },
                "volumes": volumes,
            }
        else:
            info["container"] = {
                "type": "MESOS",
                "mesos": {
                    "image": {
                        "type": "DOCKER",
                        "docker": {"name": options.image},
                        # "cached" is the opposite of "force pull".
                        "cached": not options.force_pull_image,
                    }
                },
                "volumes": volumes,
            }
    return info
