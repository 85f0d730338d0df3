"""The launcher: it owns one job from the first launch to the last teardown.

One module a job: :mod:`.loop` (the :class:`Launcher` and its event loop),
:mod:`.attempts` (each attempt at a task and its state), :mod:`.output` (the
tasks' output and its flow control), :mod:`.message` (the cluster message),
:mod:`.relaunch` (fine-grained relaunches at the same address) and
:mod:`.verdict` (the words of a job's end). The rules they carry out are in
:mod:`tfmesos.launcher.policy`.
"""

from __future__ import annotations

from tfmesos.launcher.attempts import Attempt, AttemptState
from tfmesos.launcher.job import Launcher
from tfmesos.launcher.loop import RendezvousFactory
from tfmesos.launcher.policy import MAX_ATTEMPTS

__all__ = ["MAX_ATTEMPTS", "Attempt", "AttemptState", "Launcher", "RendezvousFactory"]
