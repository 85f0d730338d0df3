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
from tfmesos.common import rundirs
from tfmesos.common.flagtypes import FlagGroup, positive_number
from tfmesos.common.pathtext import shown_path
from tfmesos.errors import SpecError
from tfmesos.mesos.placement import PLACEMENTS
from tfmesos.spec import ClusterSpec, Volume, parse_volume

__all__ = ["MesosOptions", "framework_credentials", "read_secret"]

PRINCIPAL_VARIABLE = "MESOS_PRINCIPAL"
SECRET_VARIABLE = "MESOS_SECRET"
_secret_from_environment: str | None = None
"""``$MESOS_SECRET`` as it was when it was taken out of the environment."""


@dataclass(frozen=True)
class MesosOptions(BackendOptions):
    """The Mesos backend's options. ``log_dir`` is where every task's output
    is kept on this machine, as it reaches tfrun (the chief's too); each
    task's sandbox on its agent keeps its own copy."""

    master: str | None = None
    """host:port, a comma list, or zk://...; None: $MESOS_MASTER."""
    reconnect_timeout: float = 120.0
    """How long to keep re-subscribing after losing a master that answered."""
    connect_timeout: float = 10.0
    """How long to keep trying while no master has ever answered: a wrong
    ``-m`` fails in seconds (at most ``reconnect_timeout``)."""
    checkpoint: bool = True
    """Agents checkpoint the tasks, which then survive an agent restart, as
    Marathon and Aurora do by default; ``--no-checkpoint`` trades that for a
    task that ends at once with its agent (see docs/mesos.md, ``--checkpoint``)."""
    user: str | None = None
    role: str | None = None
    volumes: tuple[Volume, ...] = ()
    containerizer: str | None = None
    """MESOS or DOCKER; None: MESOS."""
    image: str | None = None
    """The tasks' Docker image; None: none (the agent's own file system)."""
    force_pull_image: bool = False
    principal: str | None = None
    """The framework's principal; None: $MESOS_PRINCIPAL."""
    secret_file: str | None = None
    """A file that holds the principal's secret (never the secret itself: it
    would show in ``ps``); None: $MESOS_SECRET."""
    ssl_ca: str | None = None
    """The CA file or directory for a master over TLS; None:
    $LIBPROCESS_SSL_CA_FILE / $LIBPROCESS_SSL_CA_DIR, else the system's."""
    placement: str = "spread"
    """How a job's tasks are put on the agents: ``spread`` over as many as
    can hold them, or ``pack``ed onto as few (see docs/mesos.md, Placement)."""
    wait_for_agents: bool = False
    """Wait for agents to register that can hold the job, rather than end it
    at once when the agents registered never could (the cluster grows)."""

    label: ClassVar[str] = "Mesos"
    flags: ClassVar[Mapping[str, str]] = {
        "master": "-m",
        "role": "-r",
        "containerizer_type": "-C",
        "force_pull_image": "-f",
        "volumes": "-V",
        "image": "--image",
        "reconnect_timeout": "--reconnect-timeout",
        "connect_timeout": "--connect-timeout",
        "user": "--user",
        "checkpoint": "--checkpoint",
        "principal": "--principal",
        "secret_file": "--secret-file",
        "ssl_ca": "--ssl-ca",
        "placement": "--placement",
        "wait_for_agents": "--wait-for-agents",
    }
    choosing: ClassVar[frozenset[str]] = frozenset({"master"})

    @classmethod
    def add_arguments(cls, group: FlagGroup) -> None:
        group.add_argument(
            "-m",
            "--master",
            help="Mesos master: host:port, a comma list, or zk://host:2181/mesos "
            "(default: $MESOS_MASTER)",
        )
        group.add_argument("-r", "--role", help="Mesos role to take resources from")
        group.add_argument(
            "-C",
            "--containerizer-type",
            "--containerizer_type",  # the original's spelling, kept
            type=str.upper,
            choices=["MESOS", "DOCKER"],
            help="Mesos containerizer for the Docker image (default MESOS)",
        )
        group.add_argument(
            "-f",
            "--force-pull-image",
            "--force_pull_image",  # the original's spelling, kept
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
            help="Mesos: how long to keep trying to re-subscribe after losing a master that "
            "had answered (default 120)",
        )
        group.add_argument(
            "--connect-timeout",
            type=positive_number,
            metavar="SECONDS",
            help="Mesos: how long to keep trying while no master has answered yet, as with a "
            "mistyped -m; then tfrun exits 125 (default 10; at most --reconnect-timeout)",
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
        group.add_argument(
            "--principal",
            metavar="NAME",
            help="Mesos: the framework's principal, which the master authenticates and "
            "authorizes (default: $MESOS_PRINCIPAL)",
        )
        group.add_argument(
            "--secret-file",
            metavar="FILE",
            help="Mesos: a file holding the principal's secret, for a master that "
            "authenticates frameworks (--authenticate_http_frameworks); its content, less "
            "a final newline (default: $MESOS_SECRET)",
        )
        group.add_argument(
            "--ssl-ca",
            metavar="FILE|DIR",
            help="Mesos: the CA certificates (a PEM file, or a directory hashed by openssl "
            "rehash) that a master's TLS certificate must chain to (default: "
            "$LIBPROCESS_SSL_CA_FILE / $LIBPROCESS_SSL_CA_DIR, else the system's)",
        )

        group.add_argument(
            "--placement",
            choices=PLACEMENTS,
            help="Mesos: spread a job's tasks over the agents that can hold them, fewest "
            "tasks first, so that an agent lost costs few and each starts its share at "
            "once (default); pack: fill each agent before the next",
        )
        group.add_argument(
            "--wait-for-agents",
            action="store_true",
            help="Mesos: when the agents registered could never hold a task, or all of the "
            "job's tasks at once, wait for more to register rather than end the job",
        )

    @classmethod
    def chosen_by_default(cls) -> bool:
        return bool(os.environ.get("MESOS_MASTER"))

    def __post_init__(self) -> None:
        object.__setattr__(self, "volumes", tuple(self.volumes))
        if self.role is not None:
            from tfmesos.mesos.roles import validate_role  # here: a job without --role needs none

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
        if self.placement not in PLACEMENTS:
            choices = " or ".join(PLACEMENTS)
            raise SpecError(f"placement must be {choices}, not {self.placement!r}")
        if self.principal is not None:
            _check_principal(self.principal, "--principal")
        if self.secret_file is not None:
            read_secret(self.secret_file)
        if self.ssl_ca is not None and not os.access(self.ssl_ca, os.R_OK):
            why = "cannot be read" if os.path.exists(self.ssl_ca) else "no such file or directory"
            raise SpecError(f"--ssl-ca {shown_path(self.ssl_ca)}: {why}")

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

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> MesosOptions:
        fields = dict(record)
        fields["volumes"] = tuple(Volume(**volume) for volume in record.get("volumes", ()))
        return super().from_record(fields)

    @classmethod
    def add_job_flags(cls, parser: argparse.ArgumentParser) -> None:
        """Where a detached Mesos job is found, and as whom (tfmesos.backends.mesos.jobs)."""
        parser.add_argument(
            "-m", "--master", help="a detached Mesos job's master (else $MESOS_MASTER)"
        )
        parser.add_argument("--principal", help="the principal the job's framework runs as")
        parser.add_argument("--secret-file", metavar="FILE", help="the principal's secret")
        parser.add_argument("--ssl-ca", metavar="PEM", help="the CA of a master over TLS")

    @classmethod
    def claims_job(cls, args: argparse.Namespace) -> bool:
        job = str(getattr(args, "id", None) or "")
        if getattr(args, "master", None) or job.startswith("mesos-"):
            return True
        # As submission does, $MESOS_MASTER says where jobs are: all but a
        # run of this machine's named by its id (one run --backend local).
        return bool(os.environ.get("MESOS_MASTER")) and not _a_local_run(job)

    def check_spec(self, spec: ClusterSpec) -> None:
        if self.containerizer == "DOCKER" and any(job.gpus for job in spec.jobs):
            raise SpecError(
                "Mesos gives GPUs only to tasks of the Mesos containerizer (which runs Docker "
                "images too): drop -C DOCKER / containerizer_type='DOCKER' for GPU jobs"
            )


def _a_local_run(job: str) -> bool:
    """Whether ``job`` is the id of a run in this user's run directories."""
    if not job or "/" in job or job in (".", "..", rundirs.LATEST):
        return False
    try:
        return (rundirs.runs_root() / job / rundirs.RECORDS[1]).is_file()
    except OSError:  # a name too long for a run's: none
        return False


def _check_principal(principal: str, where: str) -> None:
    if not principal:
        raise SpecError(f"{where}: the principal is empty")
    if ":" in principal:
        # RFC 7617: the user-id of Basic authentication cannot hold a colon.
        raise SpecError(f"{where}: a principal cannot hold ':' (HTTP basic authentication)")


def read_secret(path: str) -> str:
    """The secret in the file at ``path``: its content, less one final line
    end (``echo SECRET > FILE`` writes one). Not said in any message."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as exc:
        raise SpecError(f"--secret-file {shown_path(path)}: {exc.strerror or exc}") from None
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise SpecError(f"--secret-file {shown_path(path)}: not UTF-8 text") from None
    text = text.removesuffix("\n").removesuffix("\r")
    if not text:
        raise SpecError(f"--secret-file {shown_path(path)}: the file is empty")
    return text


def framework_credentials(
    principal: str | None, secret: str | None, secret_file: str | None
) -> tuple[str | None, str | None]:
    """The framework's principal and secret: as given (``--principal``; a
    secret read from ``secret_file``, ``--secret-file``), else from
    ``$MESOS_PRINCIPAL`` and ``$MESOS_SECRET``.

    ``$MESOS_SECRET`` is taken out of this process's environment once read
    (and kept here for later reads, a restarted job's), so that no process
    started after, the chief's command beside tfrun included, inherits it.
    A secret without a principal is an error: there is no one to
    authenticate."""
    global _secret_from_environment
    if not principal:
        principal = os.environ.get(PRINCIPAL_VARIABLE) or None
        if principal is not None:
            _check_principal(principal, f"${PRINCIPAL_VARIABLE}")
    taken = os.environ.pop(SECRET_VARIABLE, None)
    if taken is not None:
        _secret_from_environment = taken or None
    if secret is None and secret_file is not None:
        secret = read_secret(secret_file)
    secret = secret or _secret_from_environment
    if secret and not principal:
        source = "--secret-file" if secret_file else f"${SECRET_VARIABLE}"
        raise SpecError(
            f"{source} gives a secret but no principal: give --principal NAME "
            f"(or ${PRINCIPAL_VARIABLE})"
        )
    return principal, secret
