"""A job's state as its event stream tells it: what ``tfrun list``,
``status``, ``logs`` and ``wait`` read of a run, whoever ran it.

Pure reading, standard library only: the events are the README's ("The event
stream"), read back from a file as the launcher wrote them, and nothing here
knows a backend. A stream cut short (a launcher killed) is read as far as it
goes; a line that is not an event is skipped, as a consumer should.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "SCHEMA_VERSION",
    "JobState",
    "TaskAttempt",
    "TaskState",
    "job_state",
    "read_events",
]

SCHEMA_VERSION = 1
"""The event stream's schema version (tfmesos.launcher.events writes it),
changed only by what breaks a consumer of the old schema: here, beside its
reader, which the job commands' backends below the launcher use too."""

STATES = ("pending", "running", "succeeded", "failed", "stopped")
"""A job's states, as ``tfrun list`` says them."""

_RESULTS = {
    "succeeded": "succeeded",
    "interrupted": "stopped",
    "failed": "failed",
    "never up": "failed",
    "refused": "failed",
    "error": "failed",
}


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every event in the file at ``path`` (none where it is missing). A last
    line the launcher is still writing is left for the next read."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    events = []
    for line in data.split(b"\n")[:-1]:  # the part after the last newline is unfinished
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("event"), str):
            events.append(obj)
    return events


@dataclasses.dataclass
class TaskState:
    """One task as the events of the job's latest run tell it."""

    task: str
    state: str = "pending"
    """pending, launched, placed, registered, up, exited."""
    host: str | None = None
    attempts: int = 0
    task_id: str | None = None
    """Its latest attempt's, which names its log (``worker.1.log``:
    :func:`tfmesos.common.tasklog.log_name`)."""
    exit_code: int | None = None
    last_event: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class TaskAttempt:
    """One launch of one task, in the order the job launched them: its run
    (``restart``), its attempt in that run, and its id, which names its log."""

    restart: int
    task: str
    attempt: int
    task_id: str
    exited: bool = False
    exit_code: int | None = None


@dataclasses.dataclass
class JobState:
    """A job as its events tell it, with whether its launcher still runs."""

    running: bool
    """Its launcher holds the run (rundirs' lock)."""
    events: list[dict[str, Any]]
    tasks: dict[str, TaskState]
    restarts: int = 0
    log_dir: str | None = None
    cluster_up: bool = False
    verdict: dict[str, Any] | None = None
    restart: int = 0
    """The latest run's: 0 for the first, N for the Nth restart."""
    max_restarts: int | None = None
    """As ``--max-restarts`` gave it (None in a stream from before it was said)."""
    attempts: list[TaskAttempt] = dataclasses.field(default_factory=list)
    """Every launch of every task, in every run."""
    runs: list[tuple[str | None, dict[str, TaskState]]] = dataclasses.field(default_factory=list)
    """Each run's log directory and tasks, by its restart number."""

    @property
    def state(self) -> str:
        """One of :data:`STATES`."""
        if self.verdict is not None:
            return _RESULTS.get(str(self.verdict.get("result")), "failed")
        if not self.running:
            return "failed"  # its launcher is gone, and said nothing
        return "running" if self.cluster_up else "pending"

    @property
    def exit_status(self) -> int | None:
        if self.verdict is None:
            return None
        status = self.verdict.get("exit_status")
        return status if isinstance(status, int) else None

    @property
    def started(self) -> float | None:
        return _ts(self.events[0]) if self.events else None

    def duration(self, now: float | None = None) -> float | None:
        """Seconds from its first event to its verdict (to now while it runs)."""
        start = self.started
        if start is None:
            return None
        end = _ts(self.verdict) if self.verdict is not None else None
        if end is None:
            end = time.time() if now is None else now
        return max(0.0, end - start)

    @property
    def tasks_up(self) -> int:
        if self.verdict is not None or not self.running:
            return 0
        return sum(1 for task in self.tasks.values() if task.state in ("registered", "up"))

    def of_run(self, restart: int) -> JobState:
        """The job as it was in run ``restart`` (that run's tasks, attempts
        and log directory), for the logs of an earlier run."""
        log_dir, tasks = self.runs[restart]
        return dataclasses.replace(self, tasks=tasks, log_dir=log_dir, restart=restart)

    def may_start_again(self, task: str) -> bool:
        """Whether the job may yet launch ``task`` again: it is not over,
        and the task has not exited 0 in a run that is the last one allowed
        (a task that failed is launched again or fails the job; a job with
        restarts left starts every task again after any task's failure)."""
        if self.verdict is not None or not self.running:
            return False
        state = self.tasks.get(task)
        if state is None or state.state != "exited" or state.exit_code != 0:
            return True
        return self.restart < (self.max_restarts or 0)

    def of_attempt(self, attempt: TaskAttempt) -> JobState:
        """The job as it was when ``attempt`` ran: its run, its task's id."""
        view = self.of_run(attempt.restart)
        task = view.tasks.get(attempt.task) or TaskState(attempt.task)
        tasks = {**view.tasks, attempt.task: dataclasses.replace(task, task_id=attempt.task_id)}
        return dataclasses.replace(view, tasks=tasks)

    def attempt_over(self, task_id: str) -> bool:
        """Whether the launch ``task_id`` is over: it exited, the job
        launched its task again since, or the job is over."""
        if self.verdict is not None or not self.running:
            return True
        for position, attempt in enumerate(self.attempts):
            if attempt.task_id == task_id:
                later = self.attempts[position + 1 :]
                return attempt.exited or any(one.task == attempt.task for one in later)
        return False

    def ended(self, task: str, task_id: str | None) -> bool:
        """Whether the attempt ``task_id`` of ``task`` is over, or the job is."""
        if self.verdict is not None or not self.running:
            return True
        state = self.tasks.get(task)
        return state is not None and (state.task_id != task_id or state.state == "exited")


def job_state(events: Iterable[Mapping[str, Any]], running: bool) -> JobState:
    """The state of a job from its events, the latest run's tasks (a job
    restarted by ``--max-restarts`` starts them again at ``job_started``)."""
    listed = [dict(event) for event in events]
    job = JobState(running=running, events=listed, tasks={})
    for event in listed:
        name = event["event"]
        task = event.get("task")
        if name == "job_started":
            _run_started(job, event)
        elif name == "job_restart":
            job.restarts = max(job.restarts, int(event.get("restart") or 0))
        elif name == "cluster_up":
            job.cluster_up = True
        elif name == "job_verdict":
            job.verdict = event
        if isinstance(task, str):
            _task_event(job, job.tasks.setdefault(task, TaskState(task)), event)
    return job


def _run_started(job: JobState, event: Mapping[str, Any]) -> None:
    job.log_dir = event.get("log_dir") or job.log_dir
    job.cluster_up = False
    job.tasks = {
        one: TaskState(one)
        for names in (event.get("backends") or {}).values()
        for one in names
        if isinstance(one, str)
    }
    restart = event.get("restart")
    job.restart = restart if isinstance(restart, int) else len(job.runs)
    most = event.get("max_restarts")
    job.max_restarts = most if isinstance(most, int) else job.max_restarts
    job.runs.append((job.log_dir, job.tasks))


def _task_event(job: JobState, state: TaskState, event: dict[str, Any]) -> None:
    name = event["event"]
    state.last_event = event
    attempt = int(event.get("attempt") or 1)
    if name == "task_launched":
        state.state = "launched"
        state.task_id = event.get("task_id") or state.task_id
        state.attempts = max(state.attempts, attempt)
        state.exit_code = None
        if state.task_id:
            job.attempts.append(TaskAttempt(job.restart, state.task, attempt, state.task_id))
    elif name in ("task_placed", "task_registered"):
        state.state = name.removeprefix("task_")
        state.host = event.get("host") or state.host
    elif name == "task_ready":
        state.state = "up"
    elif name == "task_exited":
        state.state = "exited"
        state.exit_code = event.get("exit_code")
        state.host = event.get("host") or state.host
        this = (job.restart, state.task, attempt)
        for launched in reversed(job.attempts):
            if (launched.restart, launched.task, launched.attempt) == this:
                launched.exited, launched.exit_code = True, state.exit_code
                break


def _ts(event: Mapping[str, Any] | None) -> float | None:
    value = None if event is None else event.get("ts")
    return float(value) if isinstance(value, int | float) else None
