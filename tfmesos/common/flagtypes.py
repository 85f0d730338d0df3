"""argparse types for tfrun's flags, wherever they are declared (``cli.py``,
each backend's options class), and what those declare them on
(:class:`FlagGroup`).

argparse names the flag in front of what these raise, and names the function
when it raises anything else ("invalid _count value"): each says what its
flags take, and ``tfrun``'s parser puts it after the flag.
"""

from __future__ import annotations

import argparse
from typing import Any, Protocol

__all__ = [
    "FlagGroup",
    "count",
    "other_launchers_hint",
    "plain_number",
    "positive_number",
    "torchrun_hint",
]


class FlagGroup(Protocol):
    """What a backend's options class declares its flags on: a parser, one
    of its argument groups, or anything else with argparse's public
    ``add_argument``."""

    def add_argument(self, *name_or_flags: Any, **kwargs: Any) -> argparse.Action: ...


def plain_number(text: str) -> bool:
    """Written as a number is on a command line: ASCII digits, a sign, a
    point, an exponent. Python's int() and float() also take ``2_0`` (20)
    and other scripts' digits (``٣``, 3): a typo would run 20 workers."""
    return text.isascii() and "_" not in text


def count(text: str) -> int:
    """A whole number of 0 or more: tasks, GPUs, restarts."""
    stripped = text.strip()
    value = int(stripped) if stripped.isascii() and stripped.isdigit() else -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number (0 or more), not {text!r}")
    return value


def positive_number(text: str) -> float:
    """A finite number above 0: CPUs, MiB, seconds."""
    try:
        value = float(text) if plain_number(text) else 0.0
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number above 0, not {text!r}")
    return value


_TORCHRUN = {
    "--nnodes": "tfrun places the tasks itself; give -w N, the job's number of workers",
    "--node-rank": "tfrun gives each task its RANK itself",
    "--rdzv-endpoint": "tfrun runs the rendezvous itself and gives each task MASTER_ADDR",
    "--rdzv-backend": "tfrun runs the rendezvous itself",
    "--rdzv-id": "tfrun runs the rendezvous itself",
    "--master-addr": "tfrun gives each task MASTER_ADDR itself",
    "--master-port": "tfrun gives each task MASTER_PORT itself",
    "--standalone": "tfrun runs the rendezvous itself; give -w N",
    "--no-python": "tfrun never adds python: the command after -- runs as given",
    "--module": "tfrun never adds python: write python -m MODULE after --",
}
"""torchrun's flags, which a torchrun user types first: what tfrun does instead."""


def torchrun_hint(flag: str) -> str | None:
    """``--nproc_per_node`` (or ``--nproc-per-node``): a torchrun flag, and what to give tfrun."""
    hint = _TORCHRUN.get(flag.replace("_", "-"))
    return None if hint is None else f"tfrun has no {flag} (a torchrun flag): {hint}"


_OTHER_LAUNCHERS = {
    # srun and sbatch
    "--gpus": ("srun", "give -Gw GPUS, the GPUs of each worker (-Gs for each ps)"),
    "--gres": ("srun", "give -Gw GPUS, the GPUs of each worker (-Gs for each ps)"),
    "--gpus-per-task": ("srun", "give -Gw GPUS, the GPUs of each worker (-Gs for each ps)"),
    "--cpus-per-task": ("srun", "give -Cw CPUS, the CPUs of each worker (-Cs for each ps)"),
    "--mem": ("srun", "give -Mw MIB, the memory of each worker in MiB (-Ms for each ps)"),
    "--nodes": ("srun", "tfrun places the tasks itself; give -w N, the job's number of workers"),
    "--ntasks": ("srun", "give -w N workers (and -s N parameter servers)"),
    "--ntasks-per-node": ("srun", "tfrun places the tasks itself; give -w N"),
    # Ray
    "--cpus": ("Ray", "give -Cw CPUS, the CPUs of each worker (-Cs for each ps)"),
    "--num-cpus": ("Ray", "give -Cw CPUS, the CPUs of each worker (-Cs for each ps)"),
    "--num-gpus": ("Ray", "give -Gw GPUS, the GPUs of each worker (-Gs for each ps)"),
    "--num-workers": ("Ray", "give -w N, the job's number of workers"),
    # the original tfmesos's examples and TF's own scripts
    "--ps": ("TensorFlow scripts", "give -s N, the number of parameter servers"),
    "--num-ps": ("TensorFlow scripts", "give -s N, the number of parameter servers"),
    "--workers": ("TensorFlow scripts", "give -w N, the job's number of workers"),
}
"""Flags of the launchers a user comes from (srun, Ray, scripts of TF's):
whose each is, and what tfrun takes instead."""


def other_launchers_hint(flag: str) -> str | None:
    """``--gpus`` (srun's): what tfrun takes instead, or None."""
    known = _OTHER_LAUNCHERS.get(flag.replace("_", "-"))
    if known is None:
        return None
    whose, hint = known
    return f"tfrun has no {flag} (as {whose} has): {hint}"
