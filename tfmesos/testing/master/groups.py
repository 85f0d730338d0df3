"""A task's process group, as the agent holds it: signals, SIGSTOP/SIGCONT for
partitions, and the sweep that kills whatever is left when a task ends (the
posix launcher's ``os::killtree``; Mesos destroys the container)."""

from __future__ import annotations

import signal

from tfmesos.testing.master.reaper import Reaper, killpg
from tfmesos.testing.master.state import MasterState


class ProcessGroups:
    """The live process groups of the agent's tasks."""

    def __init__(self, state: MasterState) -> None:
        self.state = state
        self.live_groups: set[int] = set()
        """Process groups of tasks that may still have processes."""
        self.reaper: Reaper | None = None
        self.frozen: set[int] = set()
        """Process groups stopped (SIGSTOP) by a partition that cuts their tasks off."""

    def signal_group(self, pgid: int | None, sig: int) -> None:
        """Signal a task's process group, only while it may still have processes."""
        if pgid is not None and pgid in self.live_groups:
            killpg(pgid, sig)
            if pgid in self.frozen:
                # Stopped processes see the signal once they run again: destroying
                # a container reaches its processes whatever they are doing.
                self.thaw(pgid)

    def freeze(self, pgid: int | None) -> None:
        """Stop a task's processes (SIGSTOP) until :meth:`thaw` or a signal to kill them."""
        if pgid is not None and pgid in self.live_groups and pgid not in self.frozen:
            self.frozen.add(pgid)
            killpg(pgid, signal.SIGSTOP)

    def thaw(self, pgid: int | None) -> None:
        if pgid is not None and pgid in self.frozen:
            self.frozen.discard(pgid)
            killpg(pgid, signal.SIGCONT)

    def sweep(self, pgid: int) -> None:
        """Kill whatever is left in a task's process group (Mesos destroys the container)."""
        if pgid in self.live_groups:
            killpg(pgid, signal.SIGKILL)
            self.live_groups.discard(pgid)
            self.frozen.discard(pgid)
            if self.reaper is not None:
                self.reaper.untrack(pgid)
