"""What an agent's containerizer does before a task's command runs.

The sandbox owned by the task's user (``src/slave/slave.cpp``
``Framework::addExecutor``; ``src/slave/paths.cpp`` ``createSandboxDirectory``),
the user itself (``CommandInfo.user``, else ``FrameworkInfo.user``, switched to
by ``src/slave/containerizer/mesos/launch.cpp``), and host-path volumes of a
container without an image (``isolators/filesystem/posix.cpp`` refuses them;
``isolators/filesystem/linux.cpp`` with ``volume/host_path.cpp`` mounts them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pwd
from pathlib import Path

from tfmesos.testing.master.schema import JSON
from tfmesos.testing.master.state import Framework, MasterConfig

__all__ = [
    "LAUNCH_SOURCE",
    "ContainerLaunchError",
    "Credentials",
    "check_isolation",
    "create_sandbox",
    "filesystem_isolator",
    "task_user",
    "volume_mounts",
]


# The launch helper of a container with a mount namespace of its own, as
# ``mesos-containerizer launch`` (src/slave/containerizer/mesos/launch.cpp) does
# it: a new mount namespace, "/" marked rslave, each volume bind-mounted (and
# remounted read-only for RO), then the user switched (setgid, setgroups, setuid)
# and the command exec'ed. Run with ``python -I``; its one argument is JSON.
LAUNCH_SOURCE = """
import ctypes, json, os, sys
spec = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
def check(result, what):
    if result != 0:
        error = ctypes.get_errno()
        sys.stderr.write(what + ": " + os.strerror(error) + "\\n")
        sys.exit(1)
CLONE_NEWNS, MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_SLAVE = (
    0x20000, 1, 32, 4096, 16384, 1 << 19)
check(libc.unshare(CLONE_NEWNS), "Failed to enter a new mount namespace")
check(libc.mount(None, b"/", None, MS_SLAVE | MS_REC, None), "Failed to mark '/' as rslave")
for source, target, read_only in spec["mounts"]:
    what = "Failed to mount '" + source + "' at '" + target + "'"
    check(libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None), what)
    if read_only:
        flags = MS_BIND | MS_REC | MS_REMOUNT | MS_RDONLY
        check(libc.mount(None, target.encode(), None, flags, None), what + " read-only")
if spec["uid"] is not None:
    os.setgid(spec["gid"])
    os.setgroups(spec["groups"])
    os.setuid(spec["uid"])
os.execv(spec["program"], spec["argv"])
"""


class ContainerLaunchError(Exception):
    """A container that cannot be launched: the isolator's message (``Failure``)."""


@dataclasses.dataclass
class Credentials:
    """Whom the agent runs a task as (``Framework::addExecutor``; launch.cpp)."""

    name: str
    uid: int
    gid: int
    groups: list[int]


def filesystem_isolator(config: MasterConfig) -> str:
    """``filesystem/linux`` or ``filesystem/posix``: which one the agent's
    ``--isolation`` gives (the containerizer adds ``filesystem/posix`` when no
    filesystem isolator is named)."""
    if config.isolation is None:
        return "filesystem/linux" if os.geteuid() == 0 else "filesystem/posix"
    names = {name.strip() for name in config.isolation.split(",")}
    return "filesystem/linux" if "filesystem/linux" in names else "filesystem/posix"


def check_isolation(config: MasterConfig) -> None:
    """Refuse to start as the agent does (``LinuxFilesystemIsolatorProcess::create``)."""
    if filesystem_isolator(config) == "filesystem/linux" and os.geteuid() != 0:
        raise ValueError("'filesystem/linux' isolator requires root privileges")


def task_user(framework: Framework | None, info: JSON) -> str | None:
    """``CommandInfo.user``, else ``FrameworkInfo.user`` (``Framework::addExecutor``)."""
    command = info.get("command", {})
    if isinstance(command.get("user"), str):
        return str(command["user"])
    if framework is not None and isinstance(framework.info.get("user"), str):
        return str(framework.info["user"])
    return None


def create_sandbox(sandbox: Path, user: str | None) -> Credentials | None:
    """``paths::createExecutorDirectory`` and ``createSandboxDirectory``: mkdir,
    chmod 0750, chown to the user. Raises ContainerLaunchError with the agent's
    message; returns the user's credentials when the task is to switch to them."""
    sandbox.mkdir(parents=True, exist_ok=True)
    sandbox.chmod(0o750)
    if user is None:
        return None
    try:
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            # stout's os::chown(user, path): "No such user" when getpwnam finds none.
            raise OSError(f"No such user '{user}'") from None
        try:
            os.chown(sandbox, entry.pw_uid, entry.pw_gid)
        except OSError as exc:
            raise OSError(os.strerror(exc.errno or 0)) from exc
    except OSError as exc:
        with contextlib.suppress(OSError):
            sandbox.rmdir()
        raise ContainerLaunchError(
            f"Failed to create executor directory '{sandbox}': "
            f"Failed to chown directory to '{user}': {exc.args[0]}"
        ) from None
    if entry.pw_uid == os.geteuid():
        # launch.cpp: no need to switch when the user is the current one.
        return None
    return Credentials(user, entry.pw_uid, entry.pw_gid, os.getgrouplist(user, entry.pw_gid))


def volume_mounts(info: JSON, sandbox: Path, isolator: str) -> list[tuple[str, str, bool]]:
    """What the filesystem isolators make of a MESOS container's ``volumes`` when it
    has no image: (host path, mount point, read-only) bind mounts. Raises
    ContainerLaunchError with the isolator's ``Failure`` message.

    ``filesystem/posix`` (``PosixFilesystemIsolatorProcess::prepare``) refuses
    them; ``filesystem/linux`` enables ``volume/host_path``
    (``VolumeHostPathIsolatorProcess::prepare``): the host path must exist; an
    absolute container path must exist too (the container shares the host
    filesystem) and equal to the host path needs no mount; a relative one is made
    under the sandbox (a directory, or a file for a file). A relative host path is
    a SANDBOX_PATH volume, not this isolator's.
    """
    container: JSON = info.get("container") or {}
    if container.get("type", "MESOS") != "MESOS" or "image" in container.get("mesos", {}):
        return []  # A container with an image: images.py.
    volumes: list[JSON] = list(container.get("volumes", []))
    if not volumes:
        return []
    if isolator != "filesystem/linux":
        raise ContainerLaunchError("Volumes in ContainerInfo is not supported")
    mounts: list[tuple[str, str, bool]] = []
    for volume in volumes:
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
            continue
        if not os.path.exists(host_path):
            raise ContainerLaunchError(f"Path '{host_path}' in HOST_PATH volume does not exist")
        container_path = str(volume["container_path"])
        if os.path.isabs(container_path):
            mount_point = container_path
            if not os.path.exists(mount_point):
                raise ContainerLaunchError(
                    f"Mount point '{mount_point}' is an absolute path. "
                    "It must exist if the container shares the host filesystem"
                )
        else:
            mount_point = str(sandbox / container_path)
            try:
                if os.path.isdir(host_path):
                    os.makedirs(mount_point, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(mount_point), exist_ok=True)
                    Path(mount_point).touch()
            except OSError as exc:
                raise ContainerLaunchError(
                    f"Failed to create the mount point at '{mount_point}': {exc.strerror}"
                ) from None
        if host_path != mount_point:
            mounts.append((host_path, mount_point, volume.get("mode") == "RO"))
    return mounts
