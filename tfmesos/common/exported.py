"""The task's environment: which of the submitting environment every task
sees (``tfrun --export``, ``cluster(export=...)``), the same on every backend.

By default, as ``srun --export=ALL``, all of it but the names that describe
tfrun's own host, login or cluster manager (:data:`NOT_CARRIED`,
:data:`NOT_CARRIED_PREFIXES`), which would be wrong on another host; what
the launcher sets itself always wins. The variables travel in the cluster
message, over the authenticated rendezvous, never in what a cluster manager
keeps about the task (anyone who can read a Mesos ``/state`` reads that).

Standard library only: the in-task agent imports it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfmesos.common.taskenv import launchers_own

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ALL",
    "ELSEWHERE",
    "HERE",
    "IMAGE",
    "NONE",
    "NOT_CARRIED",
    "NOT_CARRIED_PREFIXES",
    "Export",
    "carried",
    "host_environment",
    "not_carried",
    "parse_export",
    "task_base",
]

ALL = "ALL"
NONE = "NONE"

NOT_CARRIED = {
    "HOSTNAME": "this host's name",
    "PWD": "tfrun's shell's directory (a task's shell sets its own: --chdir)",
    "OLDPWD": "tfrun's shell's previous directory",
    "SHLVL": "how deep tfrun's shell is nested",
    "_": "the last command tfrun's shell ran",
    "DISPLAY": "this host's X display",
    "XAUTHORITY": "the cookie file of this host's X display",
    "WAYLAND_DISPLAY": "this host's Wayland display",
    "TMPDIR": "a directory of this host (often one per login or per job), which another "
    "host may lack",
    "XDG_RUNTIME_DIR": "this login's runtime directory, on this host",
    "XDG_SEAT": "this login's seat",
    "XDG_VTNR": "this login's virtual terminal",
    "DBUS_SESSION_BUS_ADDRESS": "a socket of this login's session bus",
    "GPG_AGENT_INFO": "a socket of this host's gpg-agent",
    "KRB5CCNAME": "this login's Kerberos credential cache (a file on this host)",
    "TMUX": "this host's tmux server's socket",
    "TMUX_PANE": "a pane of this host's tmux",
    "STY": "this host's screen session",
    "WINDOW": "a window of this host's screen",
    "WINDOWID": "a window of this host's X display",
    "GPU_DEVICE_ORDINAL": "GPUs of this host (a task is given its own: CUDA_VISIBLE_DEVICES)",
    "ROCR_VISIBLE_DEVICES": "GPUs of this host (a task is given its own)",
    "HIP_VISIBLE_DEVICES": "GPUs of this host (a task is given its own)",
    "ZE_AFFINITY_MASK": "GPUs of this host (a task is given its own)",
}
"""Names never carried by ``--export ALL`` (the default), each with why: they
describe tfrun's host, its shell or its login, and would be wrong on another
host. ``--export NAME`` carries one by name all the same."""

NOT_CARRIED_PREFIXES = {
    "SSH_": "this login's ssh connection, terminal and agent socket",
    "XDG_SESSION_": "this login's session",
    "SLURM_": "Slurm's word on tfrun's own allocation, job or step (a Slurm task gets its own)",
    "SLURMD_": "Slurm's word on tfrun's own node",
    "SBATCH_": "sbatch's settings, which would change the job tfrun submits",
    "SALLOC_": "salloc's settings",
    "SRUN_": "srun's settings, which would change the steps tfrun starts",
    "MESOS_": "Mesos's word on tfrun's own container (a Mesos task gets its own)",
    "LIBPROCESS_": "Mesos's settings for one process on this host (its address)",
    "PMI_": "an MPI launcher's word on tfrun's own process",
    "PMIX_": "an MPI launcher's word on tfrun's own process",
    "OMPI_": "Open MPI's word on tfrun's own process (JAX would take the task for one)",
}
"""Prefixes of names never carried by ``--export ALL``: a login's, and a
cluster manager's or an MPI launcher's word on tfrun's own process, which
frameworks read to find their place (JAX, Lightning and torch detect Slurm
and Open MPI by them)."""

_BACKENDS_OWN = ("SLURM_", "SLURMD_", "MESOS_", "LIBPROCESS_")
"""What a task's cluster manager gives the task itself: kept from the agent's
environment where it holds the submitting one (:data:`ELSEWHERE`)."""
_BACKENDS_GPUS = ("GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")
"""Slurm's word on a step's GPUs besides ``CUDA_VISIBLE_DEVICES`` (srun's
"output environment variables"): kept there too."""

HERE = "here"
"""The agent's environment is tfrun's, on tfrun's host (the local backend):
of it, the task keeps what describes this host, which is its host."""
ELSEWHERE = "elsewhere"
"""The agent's environment is tfrun's, carried to another host (Slurm's
``sbatch --export=ALL``): of it, the task keeps only its cluster manager's
word on it (``SLURM_*``)."""
IMAGE = "image"
"""The agent's environment is its container's (Mesos with ``--image``): the
image's own variables (its ``PATH``, say) describe the files the task sees,
and win over those carried."""


def not_carried(name: str) -> bool:
    """Whether ``--export ALL`` leaves ``name`` behind: a name of
    :data:`NOT_CARRIED` or :data:`NOT_CARRIED_PREFIXES`, or the launcher's own."""
    return (
        name in NOT_CARRIED or name.startswith(tuple(NOT_CARRIED_PREFIXES)) or launchers_own(name)
    )


def _is_name(name: str) -> bool:
    """A name a POSIX shell passes on: letters, digits and '_', not first a digit."""
    return (
        bool(name)
        and name.isascii()
        and not name[0].isdigit()
        and all(c.isalnum() or c == "_" for c in name)
    )


class Export:
    """What ``--export`` says: everything (``all``), or only ``names``; and
    ``values`` set by it (``NAME=VALUE``)."""

    __slots__ = ("all", "names", "values")

    def __init__(
        self, all: bool, names: tuple[str, ...] = (), values: Mapping[str, str] | None = None
    ) -> None:
        self.all = all
        self.names = names
        self.values = dict(values or {})

    def __repr__(self) -> str:
        return f"Export(all={self.all!r}, names={self.names!r}, values={self.values!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Export) and (self.all, self.names, self.values) == (
            other.all,
            other.names,
            other.values,
        )

    def __hash__(self) -> int:
        return hash((self.all, self.names, tuple(sorted(self.values.items()))))


def parse_export(text: str) -> Export:
    """``--export``'s value, as srun spells it: ``ALL``, ``NONE``,
    ``NAME[,NAME...]`` (only those), each ``NAME`` or ``NAME=VALUE``, after an
    optional ``ALL,`` (everything, and those). ``ValueError`` says what is
    wrong."""
    if not isinstance(text, str):
        raise ValueError(f"--export must be ALL, NONE or NAME[,NAME...], not {text!r}")
    value = text.strip()
    if value.upper() == ALL:
        return Export(True)
    if value.upper() == NONE:
        return Export(False)
    items = value.split(",")
    everything = items[0].strip().upper() == ALL
    if everything:
        items = items[1:]
    names: list[str] = []
    values: dict[str, str] = {}
    for item in items:
        name, equals, value = item.partition("=")
        name = name.strip()
        if not name:
            raise ValueError(
                f"--export {text!r}: an empty name (ALL, NONE or NAME[,NAME=VALUE...], "
                "comma-separated)"
            )
        if name.upper() == NONE:
            raise ValueError(
                f"--export {text!r}: NONE stands alone (a list of names already carries "
                "only those: --export PATH,HOME)"
            )
        if name.upper() == ALL:
            raise ValueError(f"--export {text!r}: ALL can only come first (ALL,NAME=VALUE...)")
        if not _is_name(name):
            raise ValueError(
                f"--export {text!r}: {name!r} is not a variable name /bin/sh passes on "
                "(letters, digits and '_', not starting with a digit)"
            )
        if launchers_own(name):
            raise ValueError(
                f"--export {text!r}: {name} is set by tfmesos for each task: every "
                "TFMESOS_* name, TF_CONFIG, CUDA_VISIBLE_DEVICES and torchrun's and JAX's "
                "(RANK, MASTER_PORT, ...) are the launcher's"
            )
        if "\0" in value:
            raise ValueError(f"--export {text!r}: {name}'s value holds a NUL byte")
        if equals:
            values[name] = value
        elif name not in names:
            names.append(name)
    return Export(everything, tuple(names), values)


def carried(environ: Mapping[str, str], export: Export) -> dict[str, str]:
    """The variables of ``environ`` (tfrun's) that every task is sent.

    ``export.all``: every one but those :func:`not_carried` leaves behind;
    else only the names ``export`` lists (one this host holds). Then the
    values ``export`` sets. Values are carried as they are, bytes that are not
    UTF-8 included (``os.environ``'s ``surrogateescape``, which JSON carries
    as ``\\udcXX``): a task gets the very bytes tfrun had."""
    if export.all:
        env = {name: value for name, value in environ.items() if not not_carried(name)}
    else:
        env = {name: environ[name] for name in export.names if name in environ}
    env.update(export.values)
    return env


def task_base(
    environ: Mapping[str, str], base: str | None, carried: Mapping[str, str]
) -> dict[str, str]:
    """The command's environment before the job's own (``-e``, ``env=``) and
    the launcher's: what the task's host gives (:func:`host_environment`)
    and the variables ``carried`` from tfrun's, these winning, except over
    an image's own (:data:`IMAGE`)."""
    host = host_environment(environ, base)
    if base == IMAGE:
        return {**carried, **host}
    host.update(carried)
    return host


def host_environment(environ: Mapping[str, str], base: str | None) -> dict[str, str]:
    """What the task's host gives its command, from the agent's environment
    (less the agent's own settings).

    ``base`` says where the agent's environment came from. ``None`` or
    :data:`IMAGE`: from the task's host or container (a Mesos agent's, the
    image's and the ``TaskInfo``'s): all of it is the host's. :data:`HERE`:
    tfrun's, on this host: the names that describe this host are kept (they
    are true here), and the launcher's; the rest comes as carried, or not at
    all. :data:`ELSEWHERE`: tfrun's, carried to another host by the cluster
    manager: only the launcher's and the cluster manager's own names are kept.
    """
    if base is None or base == IMAGE:
        return dict(environ)
    if base == HERE:
        return {name: value for name, value in environ.items() if not_carried(name)}
    return {
        name: value
        for name, value in environ.items()
        if launchers_own(name) or name.startswith(_BACKENDS_OWN) or name in _BACKENDS_GPUS
    }
