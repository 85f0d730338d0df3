"""The Slurm job's own script: it runs in the allocation, as the batch step.

Standard library only. It reads the job's plan on its stdin (the plan holds
the job's secret, which a command line would show), registers with tfrun's
rendezvous, starts each task's agent as a job step (``srun``), tells tfrun
when each step ends and with what status, and ends the job as soon as its
connection to tfrun closes: tfrun stopped the job, or died. A tfrun gone
before the job starts ends it at once, with nothing started."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time

from tfmesos.common.pathtext import shown_path
from tfmesos.common.proctree import kill_carriers
from tfmesos.common.tasklog import log_name
from tfmesos.rendezvous import protocol
from tfmesos.rendezvous.client import (
    KEEPALIVE_COUNT,
    KEEPALIVE_IDLE,
    KEEPALIVE_INTERVAL,
    AgentConfig,
    AgentError,
    RendezvousClient,
    keepalive,
)

__all__ = [
    "KEEPALIVE_COUNT",
    "KEEPALIVE_IDLE",
    "KEEPALIVE_INTERVAL",
    "STEP_LOG",
    "end_task_processes",
    "logged",
    "main",
]

END_ROUNDS = 50
"""At most this many rounds of SIGKILL for what a task left behind."""


def report(text: str) -> None:
    """A line in the job's output file (``slurm-JOBID.out`` in tfrun's log
    directory). A file that cannot take it (its disk full) costs the job
    nothing: the script's later lines, and its exit's flush, go nowhere."""
    try:
        print(f"[tfmesos job script {time.strftime('%H:%M:%S')}] {text}", flush=True)
    except OSError:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)


def main() -> int:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    plan = json.loads(sys.stdin.read())
    os.close(0)
    host, _, port = str(plan["launcher"]).rpartition(":")
    config = AgentConfig(
        launcher=(host.strip("[]"), int(port)),
        task_id=str(plan["peer_id"]),
        secret=bytes.fromhex(plan["secret"]),
        host=socket.gethostname(),
        port=0,
        parent_pid=None,
        tls_cert=plan.get("tls_cert"),
    )
    helper = RendezvousClient(config)
    try:
        channel = helper.connect()
    except (AgentError, OSError) as exc:
        report(f"cannot reach tfrun ({exc}): it is gone; ending the job, having started nothing")
        return 1
    keepalive(channel.sock)
    log_dir = str(plan["log_dir"])
    try:
        os.makedirs(log_dir, mode=0o700, exist_ok=True)
    except OSError as exc:
        report(f"cannot make {shown_path(log_dir)} for the tasks' logs: {exc}")
    # The job's output file, which Slurm made with the submitter's umask: a
    # job's output is its user's alone, as every log of it.
    with contextlib.suppress(OSError, KeyError):
        os.chmod(os.path.join(log_dir, f"slurm-{os.environ['SLURM_JOB_ID']}.out"), 0o600)
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in plan["env"].items()})
    steps: dict[int, tuple[str, subprocess.Popen[bytes]]] = {}
    secret = plan["secret"].encode()
    for task_id, name, group in plan["steps"]:
        log = os.path.join(log_dir, log_name(task_id))
        with contextlib.suppress(OSError):  # made here 0600; the step's shell appends to it
            os.close(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        argv = [*plan["srun"][group], f"--job-name={name}", *logged(plan["agent"])]
        step_env = dict(env)
        step_env[protocol.ENV_TASK_ID] = task_id
        step_env[protocol.ENV_LOG_FILE] = log
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, env=step_env)
        except OSError as exc:
            report(f"cannot start task {name}'s step: {exc}")
            channel.send_json({"type": protocol.STEP_ENDED, "task_id": task_id, "code": 127})
            continue
        assert proc.stdin is not None
        # The secret on the step's stdin: srun hands it to the agent, which
        # reads it to its end and closes it (TFMESOS_SECRET_FD=0).
        try:
            proc.stdin.write(secret)
            proc.stdin.close()
        except OSError:
            pass
        steps[proc.pid] = (task_id, proc)
    report(f"started {len(steps)} task(s) as job steps")
    selector = selectors.DefaultSelector()
    selector.register(channel.sock, selectors.EVENT_READ)
    while steps:
        for _ in selector.select(timeout=0.2):
            channel.receive_available()
            if channel.closed:
                report(
                    "tfrun's connection closed (the job is over, or tfrun is gone): ending the job"
                )
                return 0
        for pid, (task_id, proc) in list(steps.items()):
            code = proc.poll()
            if code is None:
                continue
            del steps[pid]
            end_task_processes(task_id)
            try:
                channel.send_json({"type": protocol.STEP_ENDED, "task_id": task_id, "code": code})
            except OSError:
                report("tfrun's connection is gone: ending the job")
                return 0
    report("every task's step has ended")
    return 0


def end_task_processes(task_id: str) -> None:
    """Kill what is left on this node of a task whose step has ended: every
    process that carries its id in its environment. Slurm's
    proctrack/linuxproc follows parents only, so the ``setsid`` children of
    an agent killed outright would outlive the step. Other nodes' are their
    proctrack's."""

    kill_carriers(protocol.ENV_TASK_ID, task_id, END_ROUNDS)


STEP_LOG = 'exec >>"$TFMESOS_AGENT_LOG_FILE" 2>&1 && exec "$@"'
"""How each step's agent is started: its stdout and stderr the task's log
file itself, as the local backend gives it, not srun's --output.

Written by the agent, a full log disk is a failure it reports once, naming
the task, the log and the disk (:class:`tfmesos.common.tasklog.TaskLog`);
through srun that output was lost silently. No file name goes through srun's
patterns either, which some srun versions misread. A log the node cannot
open ends the step with the shell's own message, in the job's output."""


def logged(agent: list[str]) -> list[str]:
    """The step's command: ``agent`` writing to its log (:data:`STEP_LOG`)."""
    return ["/bin/sh", "-c", STEP_LOG, "tfmesos-agent", *agent]


if __name__ == "__main__":
    sys.exit(main())
