"""The launcher: it owns one job from the first launch to the last teardown. The
rules it carries out are pure functions in :mod:`tfmesos.launcher.policy`.
"""

from __future__ import annotations

from tfmesos.launcher.attempts import Attempt, AttemptState
from tfmesos.launcher.job import Launcher
from tfmesos.launcher.loop import RendezvousFactory
from tfmesos.launcher.policy import MAX_ATTEMPTS

__all__ = ["MAX_ATTEMPTS", "Attempt", "AttemptState", "Launcher", "RendezvousFactory"]
