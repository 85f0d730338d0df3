"""The Mesos backend's options, declared here, next to it, not in ``cli.py``
or on :class:`~tfmesos.spec.ClusterSpec`.

Light on purpose (no asyncio, no HTTP client): ``tfrun`` builds and checks
them before it starts anything.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from tfmesos.backends.options import BackendOptions
from tfmesos.errors import SpecError
from tfmesos.flagtypes import positive_number
from tfmesos.mesos.roles import validate_role
from tfmesos.spec import ClusterSpec, Volume, parse_volume

__all__ = ["MesosOptions"]


@dataclass(frozen=True)
class MesosOptions(BackendOptions):
    """The Mesos backend's options. Its tasks' output stays in their sandboxes
    on the agents: ``log_dir`` is only where the chief's goes."""

    master: str | None = None
    """host:port, a comma list, or zk://...; None: $MESOS_MASTER."""
    reconnect_timeout: float = 120.0
    checkpoint: bool = True
    """Agents checkpoint the tasks, which then survive an agent restart, as
    Marathon and Aurora do by default; ``--no-checkpoint`` trades that for a
    task that ends at once with its agent (see the README's ``--checkpoint``)."""
    user: str | None = None
    role: str | None = None
    volumes: tuple[Volume, ...] = ()
    containerizer: str | None = None
    """MESOS or DOCKER; None: MESOS."""
    image: str | None = None
    """The tasks' Docker image; None: none (the agent's own file system)."""
    force_pull_image: bool = False

    label: ClassVar[str] = "Mesos"
    flags: ClassVar[Mapping[str, str]] = {
        "master": "-m",
        "role": "-r",
        "containerizer_type": "-C",
        "force_pull_image": "-f",
        "volumes": "-V",
        "image": "--image",
        "reconnect_timeout": "--reconnect-timeout",
        "user": "--user",
        "checkpoint": "--checkpoint",
    }
    choosing: ClassVar[frozenset[str]] = frozenset({"master"})

    @classmethod
    def add_arguments(cls, group: argparse._ArgumentGroup) -> None:
        group.add_argument(
            "-m",
            "--master",
            help="Mesos master: host:port, a comma list, or zk://host:2181/mesos "
            "(default: $MESOS_MASTER)",
        )
        group.add_argument("-r", "--role", help="Mesos role to take resources from")
        group.add_argument(
            "-C",
            "--containerizer_type",
            type=str.upper,
            choices=["MESOS", "DOCKER"],
            help="Mesos containerizer for the Docker image (default MESOS)",
        )
        group.add_argument(
            "-f",
            "--force_pull_image",
            action="store_true",
            help="pull the Docker image even when the agent has it",
        )
        group.add_argument(
            "-V",
            "--volume",
            dest="volumes",
            action="append",
            default=[],
            metavar="HOST:CONTAINER[:ro]",
            help="a volume to mount in each task's container (repeatable)",
        )
        group.add_argument("--image", help="Docker image for the tasks (default: $DOCKER_IMAGE)")
        group.add_argument(
            "--reconnect-timeout",
            type=positive_number,
            metavar="SECONDS",
            help="Mesos: how long to keep trying to re-subscribe after losing the master "
            "(default 120)",
        )
        group.add_argument(
            "--user",
            metavar="NAME",
            help="Mesos: the user the tasks run as on the agents, which must have it "
            "(default: your login name on this machine)",
        )
        group.add_argument(
            "--checkpoint",
            action=argparse.BooleanOptionalAction,
            help="Mesos: agents checkpoint the tasks, which then survive an agent restart "
            "(default); --no-checkpoint: a task ends at once when its agent stops",
        )

    @classmethod
    def chosen_by_default(cls) -> bool:
        return bool(os.environ.get("MESOS_MASTER"))

    def __post_init__(self) -> None:
        object.__setattr__(self, "volumes", tuple(self.volumes))
        if self.role is not None:
            problem = validate_role(self.role)
            if problem is not None:
                raise SpecError(f"bad Mesos role {self.role!r}: {problem}")
        if self.containerizer not in (None, "MESOS", "DOCKER"):
            raise SpecError(f"containerizer must be MESOS or DOCKER, not {self.containerizer!r}")
        if self.containerizer == "DOCKER" and not self.image:
            raise SpecError(
                "the Docker containerizer runs Docker images only: give --image "
                "(or image=...), or drop -C DOCKER / containerizer_type='DOCKER'"
            )

    @classmethod
    def from_given(cls, given: Mapping[str, Any]) -> MesosOptions:
        """Also takes ``tfmesos.cluster``'s and tfrun's spellings:
        ``containerizer_type`` (any case), ``volumes`` as ``{host: container}``
        or ``-V``'s ``/host:/container[:ro]`` texts, and ``image`` from
        ``$DOCKER_IMAGE`` when not given."""
        own = dict(given)
        containerizer = own.pop("containerizer_type", None)
        if containerizer is not None:
            own["containerizer"] = str(containerizer).upper()
        volumes = own.pop("volumes", None) or ()
        if isinstance(volumes, Mapping):
            volumes = [f"{src}:{dst}" for src, dst in volumes.items()]
        own["volumes"] = tuple(v if isinstance(v, Volume) else parse_volume(v) for v in volumes)
        own["image"] = own.get("image") or os.environ.get("DOCKER_IMAGE")
        return super().from_given(own)

    def check_spec(self, spec: ClusterSpec) -> None:
        if self.containerizer == "DOCKER" and any(job.gpus for job in spec.jobs):
            raise SpecError(
                "Mesos gives GPUs only to tasks of the Mesos containerizer (which runs Docker "
                "images too): drop -C DOCKER / containerizer_type='DOCKER' for GPU jobs"
            )
