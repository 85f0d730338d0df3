"""Detached Mesos jobs (``tfrun --detach -m``) for ``tfrun list``, ``status``,
``logs``, ``wait`` and ``stop``, from any machine that reaches the cluster.

A job is its framework on the master, found by its id's label in
``/state``; it runs while the framework is registered. Its events and
output, kept in its launcher task's sandbox, are read through the agent's
files API into a private copy (``$XDG_CACHE_HOME/tfmesos/mesos-jobs/ID``),
read then as a local run's directory is (:mod:`tfmesos.cli.jobs`). ``stop``
takes the framework over (a failover, which the master allows its principal
only) and tears it down."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import os
import signal
import socket
import time
import urllib.parse
from pathlib import Path
from typing import Any, NoReturn

from tfmesos.backends.jobs import DetachedJob, JobError, JobStore, Run
from tfmesos.backends.jobstate import SCHEMA_VERSION, JobState, job_state, read_events
from tfmesos.backends.mesos.detached import (
    LABEL_JOB,
    LABEL_STOPPED,
    LAUNCHER_TASK,
    SANDBOX_EVENTS,
    SANDBOX_LOGS,
    submit_mesos,
    teardown,
)
from tfmesos.backends.mesos.options import framework_credentials
from tfmesos.common.tasklog import log_name
from tfmesos.errors import EXIT_TFRUN_FAILED, EXIT_USAGE
from tfmesos.mesos.reader import MasterReader, ReadError

__all__ = ["MesosJobs"]

STATE_TTL = 1.0
"""Seconds a master's ``/state`` is reused: ``logs -f`` and ``wait`` look often."""
READ_CHUNK = 1 << 20
HTTP_TIMEOUT = 15.0
STOP_TIMEOUT = 60.0


class MesosJobs(JobStore):
    """The detached jobs of one Mesos cluster (``-m``, else ``$MESOS_MASTER``)."""

    backend = "mesos"

    def __init__(
        self,
        master: str,
        principal: str | None = None,
        secret_file: str | None = None,
        ssl_ca: str | None = None,
    ) -> None:
        self._error = JobError
        self.master = master
        self.principal, self._secret = framework_credentials(principal, None, secret_file)
        self.ssl_ca = ssl_ca
        auth = (self.principal, self._secret) if self.principal and self._secret else None
        self._reader = MasterReader(master, auth, ssl_ca, HTTP_TIMEOUT)
        self._state: tuple[float, dict[str, Any]] | None = None
        self._master_url = ""
        self._dirs: dict[str, tuple[str, str]] = {}
        """Each job's launcher sandbox: its agent's URL and the directory."""
        self._mirrored: dict[tuple[str, str], int] = {}
        """(job, file) followed, with how much of it is copied here."""
        self._root = (
            Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
            / "tfmesos"
            / "mesos-jobs"
        )

    @classmethod
    def submit(cls, job: DetachedJob) -> NoReturn:
        submit_mesos(job)

    @classmethod
    def from_flags(cls, args: argparse.Namespace) -> MesosJobs:
        master = getattr(args, "master", None) or os.environ.get("MESOS_MASTER")
        if not master:
            raise JobError("a detached Mesos job is found on its master: give -m HOST:5050")
        return cls(
            master,
            getattr(args, "principal", None),
            getattr(args, "secret_file", None),
            getattr(args, "ssl_ca", None),
        )

    # -- the master and the agents -----------------------------------------------

    def _open(self, url: str) -> Any:
        """The JSON at ``url``, read as the backend reads the master."""
        return self._reader.read_json(url)

    def _leader(self) -> tuple[str, dict[str, Any] | None]:
        """The leading master's URL, and its ``/state`` where that was read."""
        try:
            return self._reader.leader()
        except ReadError as exc:
            raise self._error(str(exc), EXIT_TFRUN_FAILED) from None

    def close(self) -> None:
        self._reader.close()

    def _master_state(self, fresh: bool = False) -> dict[str, Any]:
        if self._state is not None and not fresh:
            taken, cached = self._state
            if time.monotonic() - taken < STATE_TTL:
                return cached
        url, known = self._leader()
        self._master_url = url
        state = known
        if state is None:
            try:
                state = self._open(url + "/state")
            except (OSError, ValueError) as exc:
                raise self._error(
                    f"the master's /state at {url}: {exc}", EXIT_TFRUN_FAILED
                ) from None
        assert state is not None
        self._state = (time.monotonic(), state)
        return state

    # -- the jobs ---------------------------------------------------------------

    def _frameworks(self, fresh: bool = False) -> list[tuple[dict[str, Any], bool]]:
        """Every detached job's framework, with whether it is still registered."""
        state = self._master_state(fresh)
        found = []
        for key, active in (("frameworks", True), ("completed_frameworks", False)):
            for framework in state.get(key, []):
                if _label(framework, LABEL_JOB) is not None:
                    found.append((framework, active))
        found.sort(key=lambda pair: float(pair[0].get("registered_time") or 0))
        return found

    def _mine(self, framework: dict[str, Any]) -> bool:
        if self.principal:
            return bool(framework.get("principal") == self.principal)
        return bool(framework.get("user") in (getpass.getuser(), None))

    def runs(self) -> list[Run]:
        return [self._run(f) for f, _ in self._frameworks() if self._mine(f)]

    def _run(self, framework: dict[str, Any]) -> Run:
        job = str(_label(framework, LABEL_JOB))
        where = self._root / job
        where.mkdir(parents=True, exist_ok=True, mode=0o700)
        record = {
            "id": job,
            "backend": "mesos",
            "name": framework.get("name", ""),
            "framework_id": framework.get("id"),
            "user": framework.get("user"),
            "principal": framework.get("principal"),
            "started": framework.get("registered_time"),
            "detached": True,
        }
        return Run(job, "mesos", where, record)

    def find(self, job_id: str) -> Run:
        frameworks = self._frameworks(fresh=True)
        if job_id == "latest":
            mine = [f for f, _ in frameworks if self._mine(f)]
            if not mine:
                raise self._error(f"there is no detached job on {self.master} yet")
            return self._run(mine[-1])
        matches = [
            f
            for f, _ in frameworks
            if job_id in (_label(f, LABEL_JOB), f.get("id"))
            or str(_label(f, LABEL_JOB)).endswith(job_id)
        ]
        if not matches:
            raise self._error(
                f"no job {job_id!r} on the Mesos master {self.master} (tfrun list -m shows them)"
            )
        if len(matches) > 1:
            raise self._error(f"{job_id!r} is the end of {len(matches)} jobs' ids: give more of it")
        framework = matches[0]
        if not self._mine(framework):
            who = framework.get("principal") or framework.get("user")
            raise self._error(f"job {job_id} is {who}'s, not this user's", EXIT_USAGE)
        return self._run(framework)

    def _framework(self, run: Run) -> tuple[dict[str, Any], bool]:
        for framework, active in self._frameworks():
            if framework.get("id") == run.record["framework_id"]:
                return framework, active
        raise self._error(
            f"job {run.id}'s framework is no longer known to the master", EXIT_TFRUN_FAILED
        )

    def state(self, run: Run) -> JobState:
        framework, running = self._framework(run)
        # A framework the master still has, whose launcher task is gone
        # (its host lost: unreachable; or ended), runs no more: nobody
        # schedules it, and the master removes it only once its failover
        # timeout has passed. But a launcher task that ended on a host the
        # master still reaches (its executor killed) may have left its
        # launcher running: while that launcher's tfrun is still the
        # framework's connected scheduler, it may yet say a verdict, and a
        # verdict said before it would be taken back.
        launcher = _launcher_state(framework, run.id)
        still_scheduling = launcher not in _LAUNCHER_LOST and bool(framework.get("connected"))
        running = running and (launcher in _LAUNCHER_ALIVE or still_scheduling)
        self._sync(run, framework)
        events = read_events(run.where / SANDBOX_EVENTS)
        stopped = _label(framework, LABEL_STOPPED)
        if stopped is not None and not running:
            by, _, at = stopped.rpartition(" at ")
            verdict = {
                "v": SCHEMA_VERSION,
                "ts": float(at or time.time()),
                "event": "job_verdict",
                "exit_status": 128 + signal.SIGTERM,
                "result": "interrupted",
                "message": f"the job was stopped by {by} (tfrun stop)",
                "signal": "SIGTERM",
                "stopped_by": by,
                "stopped_at": float(at or 0),
            }
            events = [e for e in events if e.get("event") != "job_verdict"] + [verdict]
        return job_state(events, running)

    def task_logs(self, run: Run, state: JobState, task: str) -> list[Path]:
        task_state = state.tasks.get(task)
        if task_state is None or task_state.task_id is None:
            return []
        name = f"{SANDBOX_LOGS}/{log_name(task_state.task_id)}"
        self._mirrored.setdefault((run.id, name), 0)
        framework, _ = self._framework(run)
        self._sync(run, framework)
        return [run.where / name]

    def console(self, run: Run) -> Path:
        """The launcher task's standard output: the chief's, and every
        forwarded task's, as an attached tfrun prints them."""
        self._mirrored.setdefault((run.id, "stdout"), 0)
        self._sync(run, self._framework(run)[0])
        path = run.where / "stdout"
        path.touch(mode=0o600)
        return path

    def stop(self, run: Run) -> bool:
        # Torn down while the master lists it, whatever its launcher's state
        # (lost, unreachable): nobody else would before its failover timeout.
        framework, listed = self._framework(run)
        if not listed:
            return False
        by = f"{getpass.getuser()}@{socket.gethostname()} (pid {os.getpid()})"
        info: dict[str, Any] = {
            key: framework[key]
            for key in (
                "user",
                "name",
                "principal",
                "checkpoint",
                "roles",
                "capabilities",
                "hostname",
            )
            if key in framework
        }
        if "capabilities" in info:
            info["capabilities"] = [
                {"type": c} if isinstance(c, str) else c for c in info["capabilities"]
            ]
        given = framework.get("labels") or []
        given = given.get("labels", []) if isinstance(given, dict) else given
        labels = [label for label in given if label.get("key") != LABEL_STOPPED]
        labels.append({"key": LABEL_STOPPED, "value": f"{by} at {time.time():.3f}"})
        info["labels"] = {"labels": labels}
        info["failover_timeout"] = 0.0
        problem = asyncio.run(
            teardown(
                self.master,
                info,
                str(framework["id"]),
                auth=(self.principal, self._secret) if self.principal and self._secret else None,
                ssl_ca=self.ssl_ca,
            )
        )
        if problem is not None:
            if not self._still_registered(run):
                # Another tfrun stop tore it down first (the master then
                # refuses this one's subscription): stop is idempotent.
                return True
            raise self._error(f"cannot stop job {run.id}: {problem}", EXIT_TFRUN_FAILED)
        deadline = time.monotonic() + STOP_TIMEOUT
        while self._framework(run)[1]:
            if time.monotonic() >= deadline:
                raise self._error(
                    f"cannot stop job {run.id}: its framework {framework['id']} is still "
                    f"registered {STOP_TIMEOUT:g}s after its teardown",
                    EXIT_TFRUN_FAILED,
                )
            time.sleep(0.2)
            self._state = None
        return True

    def _still_registered(self, run: Run) -> bool:
        """Whether the master, looked at afresh, still lists the job's framework."""
        self._state = None
        try:
            return self._framework(run)[1]
        except JobError:  # no longer known at all
            return False

    # -- the launcher's sandbox ---------------------------------------------------

    def _sandbox(self, run: Run, framework: dict[str, Any]) -> tuple[str, str] | None:
        known = self._dirs.get(run.id)
        if known is not None:
            return known
        launcher = f"{run.id}.{LAUNCHER_TASK}"
        tasks = [
            t
            for key in ("tasks", "completed_tasks", "unreachable_tasks")
            for t in framework.get(key, [])
            if t.get("id") == launcher
        ]
        if not tasks:
            return None
        agent_id = tasks[0].get("slave_id")
        state = self._master_state()
        agents = [a for a in state.get("slaves", []) if a.get("id") == agent_id]
        if not agents:
            return None
        pid = str(agents[0].get("pid", ""))  # slave(1)@10.0.0.2:5051
        scheme = "https" if self._master_url.startswith("https:") else "http"
        agent_url = f"{scheme}://{pid.rpartition('@')[2]}"
        try:
            agent = self._open(agent_url + "/state")
        except (OSError, ValueError):
            return None
        for key in ("frameworks", "completed_frameworks"):
            for f in agent.get(key, []):
                if f.get("id") != framework.get("id"):
                    continue
                for executor in f.get("executors", []) + f.get("completed_executors", []):
                    if executor.get("id") == launcher:
                        self._dirs[run.id] = (agent_url, str(executor["directory"]))
                        return self._dirs[run.id]
        return None

    def _sync(self, run: Run, framework: dict[str, Any]) -> None:
        """Copy what is new of the job's events and followed logs here."""
        sandbox = self._sandbox(run, framework)
        if sandbox is None:
            return
        self._mirrored.setdefault((run.id, SANDBOX_EVENTS), 0)
        for (job, name), copied in list(self._mirrored.items()):
            if job == run.id:
                self._mirrored[(job, name)] = self._copy(sandbox, name, run.where / name, copied)

    def _copy(self, sandbox: tuple[str, str], name: str, target: Path, copied: int) -> int:
        agent_url, directory = sandbox
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        while True:
            query = urllib.parse.urlencode(
                {"path": f"{directory}/{name}", "offset": copied, "length": READ_CHUNK}
            )
            try:
                answer = self._open(f"{agent_url}/files/read?{query}")
            except ReadError as exc:
                if exc.status in (None, 200, 404):
                    # Not there yet, the agent out of reach, an answer that is
                    # no JSON: what was copied stands.
                    return copied
                raise self._error(
                    f"cannot read {name} on {agent_url}: {exc}", EXIT_TFRUN_FAILED
                ) from None
            data = str(answer.get("data", "")).encode("utf-8", "surrogateescape")
            if not data:
                return copied
            fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o600)
            with contextlib.closing(os.fdopen(fd, "r+b")) as file:
                file.seek(copied)
                file.write(data)
            copied += len(data)


_LAUNCHER_ALIVE = (None, "TASK_STAGING", "TASK_STARTING", "TASK_RUNNING")
_LAUNCHER_LOST = ("TASK_UNREACHABLE", "TASK_LOST", "TASK_GONE", "TASK_GONE_BY_OPERATOR")
"""The launcher task's states in which its host is lost to the master."""
"""The launcher task's states (None: not known yet) in which the job runs."""


def _launcher_state(framework: dict[str, Any], job: str) -> str | None:
    launcher = f"{job}.{LAUNCHER_TASK}"
    for key in ("tasks", "unreachable_tasks", "completed_tasks"):
        for task in framework.get(key, []):
            if task.get("id") == launcher:
                return "TASK_UNREACHABLE" if key == "unreachable_tasks" else str(task.get("state"))
    return None


def _label(framework: dict[str, Any], key: str) -> str | None:
    labels = framework.get("labels") or []
    if isinstance(labels, dict):
        labels = labels.get("labels") or []
    for label in labels:
        if isinstance(label, dict) and label.get("key") == key:
            return str(label.get("value", ""))
    return None
