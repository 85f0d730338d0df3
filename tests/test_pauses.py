"""A frozen process is not a dead one (issue 45): tfrun or a task's agent
stopped (SIGSTOP, as a paused VM or a closed laptop freezes it) for longer
than the silence limit costs the job nothing but a warning. What decides is
the kernel: a frozen process's host still acknowledges its connections, a
vanished host does not (tests/test_rendezvous_cuts.py cuts the network for
real and holds that bound).

The tasks are real agent processes, on the test master and on real Mesos;
each waits for a file the test makes only after the freeze, so the job
cannot end during it.
"""

from __future__ import annotations

import errno
import signal
import socket
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import JobProcesses, Tfrun, is_agent, popen_tfrun, py, wait_until
from tests.mesos_clusters import MesosUnderTest
from tfmesos.agent.main import Agent
from tfmesos.rendezvous import protocol
from tfmesos.rendezvous.client import AgentConfig, Channel

LIMIT = 3.0
"""The silence limit of these jobs: far below the freezes."""

WAITS = (
    "import os, sys, time\n"
    "print('up', flush=True)\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    time.sleep(0.05)\n"
    "print('released', flush=True)\n"
)


@pytest.fixture
def waiting_job(
    mesos: MesosUnderTest, job_procs: JobProcesses, tmp_path: Path
) -> tuple[Tfrun, Path]:
    release = tmp_path / "release"
    tfrun = popen_tfrun(
        *("-v", "-m", mesos.url, "-w", "2", "-s", "0", "--", *py(WAITS), str(release)),
        env=job_procs.env(**{protocol.ENV_SILENCE_LIMIT: str(LIMIT)}),
    )
    wait_until(lambda: tfrun.events.of("cluster_up"), "the cluster up", 120, explain=tfrun.said)
    return tfrun, release


def frozen_for(process: psutil.Process, seconds: float) -> None:
    """SIGSTOP ``process`` for ``seconds`` (the scenario's length), then SIGCONT."""
    process.send_signal(signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        process.send_signal(signal.SIGCONT)


def succeeds(tfrun: Tfrun, release: Path) -> str:
    release.touch()
    _, said = tfrun.communicate(timeout=120)
    assert tfrun.returncode == 0, said
    assert "killed by" not in said, said
    return str(said)


def test_a_frozen_tfrun_costs_its_job_nothing(waiting_job: tuple[Tfrun, Path]) -> None:
    """tfrun frozen for three silence limits: before, every remote task took
    it for gone and stopped itself, and the job failed."""
    tfrun, release = waiting_job
    frozen_for(psutil.Process(tfrun.pid), 3 * LIMIT)
    assert "job succeeded" in succeeds(tfrun, release)


def test_a_frozen_agent_costs_its_job_nothing(
    waiting_job: tuple[Tfrun, Path], job_procs: JobProcesses
) -> None:
    """worker:1's agent frozen until tfrun says it cannot hear it (longer
    than the agent's silence limit): tfrun says when it hears it again, and
    the resumed agent goes on. Before, it took its own freeze for tfrun's
    silence and stopped its task."""
    tfrun, release = waiting_job

    def worker_1_agent() -> psutil.Process | None:
        for proc in job_procs.alive():
            try:
                task = proc.environ().get(protocol.ENV_TASK_ID, "")
            except psutil.Error:
                continue
            if is_agent(proc) and task.startswith("worker.1."):
                return proc
        return None

    agent = wait_until(worker_1_agent, "worker:1's agent")
    assert agent is not None
    agent.send_signal(signal.SIGSTOP)
    try:
        wait_until(
            lambda: "cannot hear task worker:1" in tfrun.said(),
            "tfrun says it cannot hear worker:1",
            explain=tfrun.said,
        )
        assert protocol.UNHEARD_AFTER > LIMIT  # so the agent's silence passed its limit
    finally:
        agent.send_signal(signal.SIGCONT)
    wait_until(
        lambda: "hear task worker:1 again" in tfrun.said(),
        "tfrun hears worker:1 again",
        explain=tfrun.said,
    )
    assert "job succeeded" in succeeds(tfrun, release)


# -- the rule, without processes --------------------------------------------------


def _agent(channel: socket.socket) -> Agent:
    """An agent whose launcher connection is ``channel``."""
    config = AgentConfig(("127.0.0.1", 1), "worker.1.x", b"s", "127.0.0.1", 0, None)
    config.silence_limit = LIMIT
    agent = Agent(config)
    agent.client.channel = Channel(channel)
    agent.client.channel.queue()
    return agent


def test_silence_past_the_limit_on_a_standing_connection_is_only_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        agent = _agent(ours)  # theirs answers as a frozen launcher's kernel does
        assert agent.client.channel is not None
        agent.client.channel.last_heard -= 10 * LIMIT  # as after a freeze
        agent.keep_in_touch()
        agent.keep_in_touch()
        assert not agent.stop_requested
        assert not agent.launcher_lost
        said = capsys.readouterr().err
        assert said.count("heard nothing from tfrun for 30s, but its host still") == 1, said


def test_a_connection_the_kernel_timed_out_stops_the_task(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        agent = _agent(ours)
        assert agent.client.channel is not None
        agent.client.channel.closed = True
        agent.client.channel.failure = TimeoutError(errno.ETIMEDOUT, "Connection timed out")
        agent.keep_in_touch()
        assert agent.stop_requested and agent.launcher_lost
        said = capsys.readouterr().err
        assert "lost tfrun (its rendezvous at 127.0.0.1:1): its host acknowledged nothing" in said
