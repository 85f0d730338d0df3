"""The Slurm backend's flags, declared here, next to it, not in ``cli.py``.

Light on purpose (no asyncio, no subprocess): ``tfrun --help`` reads it.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from tfmesos.backends.options import BackendOptions
from tfmesos.common.flagtypes import FlagGroup
from tfmesos.errors import SpecError

__all__ = ["OPTIONS", "SlurmOptions", "add_arguments", "from_args", "validate"]

_TIME = r"^(\d+-)?\d+(:\d+){0,2}$|^(UNLIMITED|INFINITE)$"
"""A time limit sbatch takes (case aside): compiled only when one is given."""


@dataclass(frozen=True, slots=True)
class Option:
    flag: str
    name: str
    """The backend's keyword argument (and the argparse destination, ``slurm_NAME``)."""
    metavar: str
    help: str


OPTIONS = (
    Option("--partition", "partition", "NAME", "Slurm: the partition to run the tasks in"),
    Option("--account", "account", "NAME", "Slurm: the account to charge"),
    Option("--qos", "qos", "NAME", "Slurm: the quality of service"),
    Option(
        "--time",
        "time",
        "LIMIT",
        "Slurm: the job's time limit, as sbatch takes it (MINUTES, HH:MM:SS, DAYS-HH:MM:SS)",
    ),
    Option(
        "--sbatch-args",
        "sbatch_args",
        "ARGS",
        "Slurm: more sbatch options, split as a shell would, for each part of the job "
        "(--sbatch-args='--constraint=a100 --mail-type=END')",
    ),
)


@dataclass(frozen=True)
class SlurmOptions(BackendOptions):
    """The Slurm backend's options, checked, and the shared log directory for
    tasks."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    sbatch_args: tuple[str, ...] | None = None

    label: ClassVar[str] = "Slurm"

    @classmethod
    def add_arguments(cls, group: FlagGroup) -> None:
        add_arguments(group)

    @classmethod
    def gather_arguments(cls, args: argparse.Namespace) -> None:
        args.slurm = from_args(args) or None

    @classmethod
    def given_flags(cls, given: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Each option given in ``slurm``, by its flag."""
        own = given.get("slurm")
        if own is None:
            return []
        return [("slurm", o.flag) for o in OPTIONS if o.name in own] or [("slurm", "slurm=")]

    @classmethod
    def chosen_by(cls, given: Mapping[str, Any]) -> list[tuple[str, str]]:
        return cls.given_flags(given)

    @classmethod
    def from_given(cls, given: Mapping[str, Any]) -> SlurmOptions:
        """These options from ``given["slurm"]`` by name; any other name is
        refused."""
        own = dict(given.get("slurm") or {})
        unknown = sorted(set(own) - {o.name for o in OPTIONS})
        if unknown:
            raise SpecError(
                f"unknown Slurm option {unknown[0]!r} (known: {', '.join(o.name for o in OPTIONS)})"
            )
        log_dir = given.get("log_dir")
        return cls(log_dir=str(log_dir) if log_dir else None, **validate(own))


def add_arguments(group: FlagGroup) -> None:
    for option in OPTIONS:
        group.add_argument(
            option.flag, dest=f"slurm_{option.name}", metavar=option.metavar, help=option.help
        )


def from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The options given as flags, by name, not yet checked
    (:meth:`SlurmOptions.from_given` checks them)."""
    options: dict[str, Any] = {}
    for option in OPTIONS:
        value = getattr(args, f"slurm_{option.name}", None)
        if value is not None:
            options[option.name] = value
    return options


def validate(options: dict[str, Any]) -> dict[str, Any]:
    """Check the user's options before anything starts; a :class:`SpecError` names
    the flag."""
    checked = dict(options)
    for name in ("partition", "account", "qos"):
        value = checked.get(name)
        if value is not None and (
            not isinstance(value, str) or not re.fullmatch(r"[\w.,@+-]+", value)
        ):
            raise SpecError(f"--{name}: {value!r} is not a Slurm {name} name")
    limit = checked.get("time")
    if limit is not None and (
        not isinstance(limit, str) or not re.match(_TIME, limit.strip(), re.I)
    ):
        raise SpecError(
            f"--time: {limit!r} is not a time limit sbatch takes "
            "(MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS[:MINUTES[:SECONDS]])"
        )
    extra = checked.get("sbatch_args")
    if isinstance(extra, str):
        try:
            extra = shlex.split(extra)
        except ValueError as exc:
            raise SpecError(f"--sbatch-args: {exc}") from None
    if extra is not None:
        if not all(isinstance(a, str) for a in extra):
            raise SpecError("--sbatch-args must be sbatch options (strings)")
        for arg in extra:
            if not arg.startswith("-"):
                raise SpecError(
                    f"--sbatch-args: {arg!r} is not an sbatch option (write them as "
                    "--sbatch-args='--constraint=a100 --exclusive')"
                )
            if arg.split("=", 1)[0] in _OWNED:
                raise SpecError(
                    f"--sbatch-args: tfrun sets {arg.split('=', 1)[0]} itself "
                    "(the tasks' CPUs, memory and GPUs come from -C, -M and -G)"
                )
        checked["sbatch_args"] = tuple(extra)
    return checked


_OWNED = frozenset(
    {
        "--ntasks",
        "-n",
        "--cpus-per-task",
        "-c",
        "--mem",
        "--mem-per-cpu",
        "--mem-per-gpu",
        "--gpus-per-task",
        "--gres",
        "--gpus",
        "-G",
        "--output",
        "-o",
        "--error",
        "-e",
        "--parsable",
        "--wrap",
        "--export",
        "--chdir",
        "-D",
        "--job-name",
        "-J",
        "--requeue",
        "--no-requeue",
        "--hetjob",
    }
)
