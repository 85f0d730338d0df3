"""The tasks' output: which task's lines are shown, with what prefix, and the
flow control that lets a slow terminal slow the tasks that it shows, never
the others, and never the job's teardown."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, BinaryIO

from tfmesos.launcher import verdict
from tfmesos.launcher.attempts import Attempt
from tfmesos.launcher.console import ConsoleWriter, colour_prefix, same_destination, use_colour

if TYPE_CHECKING:
    from tfmesos.spec import TaskSpec

__all__ = ["OUTPUT_STALL", "OutputRouter", "human_size", "shown_output"]

logger = logging.getLogger("tfmesos")

OUTPUT_STALL = 2.0
"""After a failure or a signal, how long a terminal may take no output at all
before what is not written yet is dropped."""


class OutputRouter:
    """Writes the shown tasks' output to ``stream``, each line prefixed with
    its task's name (coloured on a terminal), and keeps every task's tail."""

    def __init__(
        self,
        stream: BinaryIO,
        shown: list[str],
        *,
        colour: bool | None = None,
        notes_after_output: bool | None = None,
        processes: bool = False,
    ) -> None:
        self._console = ConsoleWriter(stream)
        self._processes = processes
        """Each task runs several processes (``--nproc-per-task``), whose
        lines come named already, ``[worker:1.3]``: shown so, not under the
        task's prefix too."""
        self._colour = use_colour(stream) if colour is None else colour
        """Whether the tasks' prefixes are coloured: on a terminal, unless
        NO_COLOR says not to (console.use_colour)."""
        self._shown = {name: position for position, name in enumerate(shown)}
        """Each task whose output is shown, with its place: its colour."""
        self._notes_after_output = (
            same_destination(stream, sys.stderr)
            if notes_after_output is None
            else notes_after_output
        )
        """Whether what the launcher says about a task's end waits until the
        output before it is written: where both go to one place (a terminal,
        ``2>&1``), so that they come out in order there. Elsewhere it is said
        at once, so that a stdout nobody reads cannot hold it back."""
        self._stopping = False
        """Set when the job stops (:meth:`stop`): from then on a task whose
        output the terminal does not keep up with is cut off."""
        self._dropped = 0
        """Bytes of shown output dropped while stopping, the terminal being full."""
        self._cut: set[str] = set()
        """The attempts (by task id) whose output is no longer shown: the job
        is stopping and the terminal did not keep up (what is shown stays a
        prefix of what each printed)."""
        self._abandoned = False

    def prefix(self, name: str) -> bytes:
        text = f"[{name}]"
        if self._colour and name in self._shown:
            text = colour_prefix(text, self._shown[name])
        return f"{text} ".encode()

    async def flow(self, task: Attempt) -> None:
        # Only a task whose output is shown waits for the terminal: the
        # others (by default every task but worker 0) never do, so a paused
        # terminal cannot hide their failures.
        if task.forward:
            await self._console.writable()

    def must_wait(self, task: Attempt) -> bool:
        """Whether :meth:`flow` would make ``task`` wait."""
        return task.forward and not self._console.has_room()

    def write(self, task: Attempt, data: bytes) -> None:
        task.keep_output(data)
        if not task.forward:
            return
        if self._stopping and (task.task_id in self._cut or self._console.full):
            # Stopping: taken in so that the task hears "stop", not shown
            # once the terminal is behind.
            self._cut.add(task.task_id)
            self._dropped += len(data)
            return
        body = data[:-1] if data.endswith(b"\n") else data
        if self._processes:
            self._console.write(self._process_lines(task, body) + b"\n")
            return
        self._console.write(task.prefix + body.replace(b"\n", b"\n" + task.prefix) + b"\n")

    def _process_lines(self, task: Attempt, body: bytes) -> bytes:
        """``[worker:1.3] line`` kept as it came, its name coloured; other lines
        prefixed."""
        name = task.spec.name
        own = f"[{name}.".encode()
        lines = []
        for line in body.split(b"\n"):
            end = line.find(b"] ") if line.startswith(own) else -1
            if end < 0:
                lines.append(task.prefix + line)
            elif self._colour and name in self._shown:
                label = colour_prefix(line[: end + 1].decode(), self._shown[name]).encode()
                lines.append(label + line[end + 1 :])
            else:
                lines.append(line)
        return b"\n".join(lines)

    def stop(self) -> None:
        """The job is stopping: the tasks' output is taken in whether or not
        the terminal keeps up, so that nothing waits for it."""
        self._stopping = True
        self._console.release()

    def report_after_output(self, level: int, message: str, *args: object) -> None:
        """Log ``message`` once the tasks' output printed so far is out: the
        output goes to stdout from the console's thread, logging writes to
        stderr at once, and on a terminal a task's "finished" must come after
        its last line, not before it."""
        if self._notes_after_output:
            self._console.after_written(lambda: logger.log(level, message, *args))
        else:
            logger.log(level, message, *args)

    def abandon(self, reason: str, where: str) -> None:
        """Drop unwritten output, saying once where the full output is."""
        dropped = self._console.abandon() + self._dropped
        self._dropped = 0
        if self._abandoned:
            return
        self._abandoned = True
        if not dropped:
            # A second Ctrl-C with nothing held back: nothing was lost, and
            # where the output is comes in the last line (before: "dropped 0 B
            # ...", the directory said twice).
            logger.warning("%s: still stopping every task", reason)
            return
        logger.warning(
            "%s: dropped %s of the tasks' output not yet written; the full output of each "
            "task is in %s",
            reason,
            human_size(dropped),
            where,
        )

    async def close(self, *, drop_stalled: bool, where: str) -> None:
        """Write what is left; ``drop_stalled`` drops it once the terminal stalls
        ``OUTPUT_STALL``."""
        stall = OUTPUT_STALL if drop_stalled else None
        if not await self._console.aclose(stall=stall):
            self.abandon(f"the terminal took no output for {OUTPUT_STALL:g}s", where)


def shown_output(tasks: list[TaskSpec], shown: frozenset[str] | None) -> str:
    """Whose output tfrun shows (``--worker-logs``), said once at the start:
    the rest is only in the logs, and a user should not have to guess."""
    if shown is None or all(task.name in shown for task in tasks):
        return "showing every task's output here"
    if not shown:
        return "showing no task's output here (--worker-logs none): each is in its log"
    by_job: dict[str, list[int]] = {}
    for task in tasks:
        if task.name in shown:
            by_job.setdefault(task.job_name, []).append(task.index)
    named = ", ".join(verdict.names(job, indices) for job, indices in by_job.items())
    return (
        f"showing {named}'s output here; every other task's is only in its log "
        "(--worker-logs chooses whose: all, worker:1, ps:0, ...)"
    )


def human_size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    if count < 1 << 20:
        return f"{count / 1024:.1f} KiB"
    return f"{count / (1 << 20):.1f} MiB"
