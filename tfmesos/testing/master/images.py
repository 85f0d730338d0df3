"""Tasks that name an image: run for real in a container, with podman and runc.

What an agent does with a ``ContainerInfo`` that has an image, modelled on
apache/mesos (``c1b42f79``):

* **MESOS containers with a Docker image** (``ContainerInfo.mesos.image``).
  The provisioner makes the image's root filesystem; the command task's
  executor then launches the task into it (``src/launcher/executor.cpp``
  ``launchTaskSubprocess``, ``src/slave/containerizer/mesos/launch.cpp``). It
  needs the ``filesystem/linux`` isolator: ``filesystem/posix`` refuses,
  "Container root filesystems not supported"
  (``isolators/filesystem/posix.cpp``). The sandbox is mounted at the agent's
  ``--sandbox_directory``, ``/mnt/mesos/sandbox`` (``src/slave/flags.cpp``),
  which is also ``MESOS_SANDBOX`` and the working directory unless the image
  names one (``containerizer.cpp`` ``_launch``;
  ``isolators/docker/runtime.cpp`` ``getWorkingDirectory``). The environment:
  the executor's, then the image's ``Env``, then ``CommandInfo.environment``
  (``executor.cpp``: "The priority of the environment should be..."). The user
  is the task's user, looked up on the agent *before* the root changes
  (``launch.cpp``: "the current process might no longer have access to
  /etc/passwd and /etc/group on the host"); the image's ``USER`` is ignored
  ("Container user ... is not supported yet", ``runtime.cpp``). Host-path
  volumes go into the root filesystem: an absolute container path is created
  there, a relative one in the sandbox first (``volume/host_path.cpp``). A
  shell command runs as ``/bin/sh -c`` whatever the image's Entrypoint and Cmd
  (``runtime.cpp`` ``getLaunchCommand``). Without the ``network/cni`` and
  ``namespaces/pid`` isolators the container shares the host's network and
  hostname.
* **DOCKER containers** (``src/docker/docker.cpp`` ``RunOptions::create`` and
  ``Docker::run``; ``src/docker/executor.cpp``). ``docker run`` with ``-e``
  for ``CommandInfo.environment`` plus ``MESOS_SANDBOX``,
  ``MESOS_CONTAINER_NAME`` and ``MESOS_ALLOCATION_ROLE`` (and nothing else of
  the agent's), ``-v`` for each volume (a relative container path under the
  mapped sandbox, a relative host path under the sandbox, both relative an
  error) and ``-v SANDBOX:/mnt/mesos/sandbox``, ``--net host``, ``--entrypoint
  /bin/sh ... -c VALUE`` for a shell command, the name ``mesos-<container
  id>`` (``containerizer/docker.cpp`` ``DOCKER_NAME_PREFIX``), no ``-u``: the
  task runs as the image's user, in the image's working directory. Docker
  creates a missing host path. The end is "Container exited with status N"
  (``docker wait``'s status).

Here ``podman --runtime runc run`` is the runtime (``crun`` refuses hybrid
cgroup layouts), with ``--pull never``: images come from the local store only
(build them with ``scripts/build-image``), the store standing for what the
agent's provisioner would have fetched; and with :data:`ULIMITS`. A MESOS
container gets ``--init`` (catatonit), standing for the command executor and
launch helper that are a real task's parents: signals reach the command, and
the whole container ends with it. Without podman, an image task fails to
launch, as on an agent that cannot provision it; it never runs on the host.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path

from tfmesos.testing.master.containerizer import ContainerLaunchError, Credentials
from tfmesos.testing.master.schema import JSON

__all__ = [
    "CONTAINER_NAME_PREFIX",
    "SANDBOX_DIRECTORY",
    "ULIMITS",
    "ContainerPlan",
    "ImageConfig",
    "Podman",
    "docker_volumes",
    "image_volumes",
    "plan_container",
    "task_image",
]

SANDBOX_DIRECTORY = "/mnt/mesos/sandbox"
"""The agent's ``--sandbox_directory`` default: where the sandbox is mounted."""
CONTAINER_NAME_PREFIX = "mesos-"
"""``DOCKER_NAME_PREFIX`` (``src/slave/containerizer/docker.cpp``)."""
LABEL = "tfmesos.test-master"
"""A label on every container the test master starts: its work directory."""


def task_image(info: JSON) -> tuple[str, str] | None:
    """(containerizer, image name) of a TaskInfo that names an image, or None.
    Raises ContainerLaunchError for an image type the agent cannot run here."""
    container: JSON = info.get("container") or {}
    kind = container.get("type", "MESOS")
    if kind == "DOCKER":
        return "DOCKER", str(container.get("docker", {}).get("image", ""))
    image = container.get("mesos", {}).get("image")
    if image is None:
        return None
    if image.get("type") != "DOCKER" or "docker" not in image:
        raise ContainerLaunchError(
            f"Unsupported container image type: {image.get('type')} "
            "(the tfmesos test master runs Docker images only)"
        )
    return "MESOS", str(image["docker"]["name"])


@dataclasses.dataclass(frozen=True)
class ImageConfig:
    """What the runtime isolator reads from an image's manifest."""

    env: dict[str, str]
    working_dir: str | None
    user: str | None


class Podman:
    """The podman command line the test master runs containers with."""

    def __init__(self, path: str) -> None:
        self.path = path
        runc = shutil.which("runc")
        self.base = [path, "--runtime", runc] if runc else [path]
        self._configs: dict[str, ImageConfig] = {}

    @classmethod
    def find(cls) -> Podman | None:
        """Podman on PATH (``TFMESOS_PODMAN`` names another), or None."""
        path = shutil.which(os.environ.get("TFMESOS_PODMAN") or "podman")
        return cls(path) if path else None

    def command(self, *args: str) -> list[str]:
        return [*self.base, *args]

    def inspect(self, name: str) -> ImageConfig:
        """The image's config from the local store. Raises ContainerLaunchError
        when the store lacks it (the test master never pulls)."""
        if name in self._configs:
            return self._configs[name]
        result = subprocess.run(
            self.command("image", "inspect", "--format", "{{json .Config}}", name),
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise ContainerLaunchError(
                f"Failed to provision image '{name}': not in the local image store "
                "(the tfmesos test master does not pull: build it with scripts/build-image, "
                f"or `podman pull` it): {result.stderr.strip()}"
            )
        config = json.loads(result.stdout or "{}") or {}
        env = {}
        for entry in config.get("Env") or []:
            name_, sep, value = str(entry).partition("=")
            if sep:
                env[name_] = value
        found = ImageConfig(
            env=env,
            working_dir=config.get("WorkingDir") or None,
            user=config.get("User") or None,
        )
        self._configs[name] = found
        return found


ULIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")
"""The container's resource limits. Podman's defaults (nofile 1048576) exceed
what a sandboxed machine allows ("setrlimit RLIMIT_NOFILE: Operation not
permitted"), and so may the limits this process has (runc refused nproc above
some 32768 here, below this process's own); these are checked to work, and
enough for a task's agent and TensorFlow. A Mesos task inherits the agent's
limits unless ``ContainerInfo.rlimit_info`` sets some (``launch.cpp``)."""


def image_volumes(info: JSON, sandbox: Path) -> list[tuple[str, str, bool]]:
    """(host path, container path, read-only) of a MESOS container with an
    image, as ``VolumeHostPathIsolatorProcess::prepare`` makes them with a
    rootfs. Raises ContainerLaunchError with the isolator's message."""
    mounts = []
    for volume in (info.get("container") or {}).get("volumes", []):
        host_path: str | None = None
        if "host_path" in volume and os.path.isabs(volume["host_path"]):
            host_path = volume["host_path"]
        source = volume.get("source", {})
        if source.get("type") == "HOST_PATH":
            path = str(source.get("host_path", {}).get("path", ""))
            if not os.path.isabs(path):
                raise ContainerLaunchError(f"Path '{path}' in HOST_PATH volume is not absolute")
            host_path = path
        if host_path is None:
            continue  # a SANDBOX_PATH volume: not modelled
        if not os.path.exists(host_path):
            raise ContainerLaunchError(f"Path '{host_path}' in HOST_PATH volume does not exist")
        container_path = str(volume["container_path"])
        if os.path.isabs(container_path):
            target = container_path  # created in the rootfs (podman makes it)
        else:
            # "we should always create the mount point in 'directory' first"
            in_sandbox = sandbox / container_path
            try:
                if os.path.isdir(host_path):
                    in_sandbox.mkdir(parents=True, exist_ok=True)
                else:
                    in_sandbox.parent.mkdir(parents=True, exist_ok=True)
                    in_sandbox.touch()
            except OSError as exc:
                raise ContainerLaunchError(
                    f"Failed to create the mount point at '{in_sandbox}': {exc.strerror}"
                ) from None
            target = f"{SANDBOX_DIRECTORY}/{container_path}"
        mounts.append((host_path, target, volume.get("mode") == "RO"))
    return mounts


def docker_volumes(info: JSON, sandbox: Path) -> list[tuple[str, str, bool]]:
    """``-v`` of ``Docker::RunOptions::create``. Raises ContainerLaunchError
    with its message."""
    mounts = []
    for volume in (info.get("container") or {}).get("volumes", []):
        container_path = str(volume["container_path"])
        target = (
            container_path
            if os.path.isabs(container_path)
            else f"{SANDBOX_DIRECTORY}/{container_path}"
        )
        if "host_path" not in volume:
            continue  # DOCKER_VOLUME and other sources: not modelled
        host_path = str(volume["host_path"])
        if not os.path.isabs(host_path) and not os.path.isabs(container_path):
            raise ContainerLaunchError(
                f"Both host_path '{host_path}' and container_path '{container_path}' "
                "of a volume are relative"
            )
        if not os.path.isabs(host_path):
            host_path = str(sandbox / host_path)
        if not os.path.exists(host_path):
            # The Docker daemon creates a missing host path, as a directory.
            os.makedirs(host_path, exist_ok=True)
        mounts.append((host_path, target, volume.get("mode") == "RO"))
    return mounts


@dataclasses.dataclass
class ContainerPlan:
    """A ``podman run`` ready to start: its argv and the environment podman
    runs with (``-e NAME`` takes each value from there, so values never show in
    a process listing)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    containerizer: str


def plan_container(
    podman: Podman,
    *,
    containerizer: str,
    image: str,
    info: JSON,
    sandbox: Path,
    container_id: str,
    executor_env: dict[str, str],
    command_env: dict[str, str],
    role: str,
    credentials: Credentials | None,
    label: str,
) -> ContainerPlan:
    """The ``podman run`` of one task. Raises ContainerLaunchError."""
    config = podman.inspect(image)
    command: JSON = info.get("command", {})
    name = CONTAINER_NAME_PREFIX + container_id
    container: JSON = info.get("container") or {}
    flags = [
        "run",
        "--rm",
        "--pull",
        "never",
        "--name",
        name,
        "--label",
        f"{LABEL}={label}",
        "--network",
        "host",
        "--uts",
        "host",
        *ULIMITS,
    ]
    env: dict[str, str] = {}
    if containerizer == "DOCKER":
        network = container.get("docker", {}).get("network", "HOST")
        if network != "HOST":
            raise ContainerLaunchError(
                f"the tfmesos test master runs containers on the host network only, not {network}"
            )
        mounts = docker_volumes(info, sandbox)
        env.update(command_env)
        env["MESOS_SANDBOX"] = SANDBOX_DIRECTORY
        env["MESOS_CONTAINER_NAME"] = name
        env["MESOS_ALLOCATION_ROLE"] = role
    else:
        mounts = image_volumes(info, sandbox)
        flags.append("--init")
        flags += ["--workdir", config.working_dir or SANDBOX_DIRECTORY]
        if credentials is not None:
            uid, gid, groups = credentials.uid, credentials.gid, credentials.groups
        else:
            uid, gid, groups = os.geteuid(), os.getegid(), []
        flags += ["--user", f"{uid}:{gid}"]
        for group in groups:
            if group != gid:
                flags += ["--group-add", str(group)]
        # The executor's environment, then the image's (podman applies it:
        # leave out what it sets), then the command's, then the role.
        env.update({k: v for k, v in executor_env.items() if k not in config.env})
        env["MESOS_SANDBOX"] = SANDBOX_DIRECTORY
        env.update(command_env)
        env["MESOS_ALLOCATION_ROLE"] = role
    volumes = [(str(sandbox), SANDBOX_DIRECTORY, False), *mounts]
    for host, target, read_only in volumes:
        flags += ["--volume", f"{host}:{target}:{'ro' if read_only else 'rw'}"]
    for key in sorted(env):
        flags += ["--env", key]
    if command.get("shell", True):
        flags += ["--entrypoint", "/bin/sh", image, "-c", str(command.get("value", ""))]
    elif "value" in command:
        arguments = [str(a) for a in command.get("arguments", [])]
        flags += ["--entrypoint", json.dumps([str(command["value"])]), image, *arguments[1:]]
    else:
        flags.append(image)  # the image's Entrypoint and Cmd
    run_env = {"PATH": os.environ.get("PATH") or "/usr/sbin:/usr/bin:/sbin:/bin", **env}
    return ContainerPlan(name, podman.command(*flags), run_env, containerizer)
