"""``tfrun --detach`` on real Mesos: the launcher and the chief run in a task
of the job's own framework, which takes the framework over from the
submitting tfrun (tfmesos.backends.mesos.detached); ``tfrun list``,
``status``, ``logs``, ``wait`` and ``stop`` find the job on the master and
read its launcher's sandbox through the agent's files API
(tfmesos.backends.mesos.jobs). Real Mesos only: the failover, the labels and the
files API are Mesos's own.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import JobProcesses, py, run_tfrun, tfrun_argv, wait_until
from tests.mesos_clusters import open_cluster
from tests.test_detach import command_lines_holding

pytestmark = pytest.mark.e2e

JSON = dict[str, Any]

SAY = (
    "import json, os, time\n"
    "me = json.loads(os.environ['TF_CONFIG'])['task']\n"
    "print('task says', me['type'], me['index'], os.environ.get('DETACH_TOKEN'), flush=True)\n"
    "time.sleep(3600 if me['type'] == 'ps' or os.environ.get('DETACH_FOREVER') else 2)\n"
)


def _key_pair(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "rendezvous.pem", folder / "rendezvous.key"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=tfmesos-test", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def _all_states(real: Any) -> str:
    """The master's and every agent's ``/state``, as text."""
    texts = [json.dumps(real.state())]
    texts += [json.dumps(real.agent_state(i)) for i in range(len(real.agents))]
    return "\n".join(texts)


def test_a_detached_job_runs_in_its_own_task_and_is_waited_for_then_stopped(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A detached job (1 ps, 2 workers): ``tfrun --detach`` returns with its
    id once its launcher task has the handover; ``wait`` exits 0, ``logs
    --task worker:1`` shows that task's output, ``list`` and ``status``
    agree with its events; the environment carried and the TLS key are in
    no ``/state``. A second, endless one, its master given as $MESOS_MASTER
    only, runs and is stopped: no framework, task or
    executor is left, ``wait`` says it was stopped, and a second ``stop``
    is a no-op."""
    cert, key = _key_pair(tmp_path)
    token = uuid.uuid4().hex
    with open_cluster("real", job_procs, monkeypatch, tmp_path / "mesos") as cluster:
        real = cluster.real
        assert real is not None
        master = ("-m", real.address)
        env = job_procs.env(DETACH_TOKEN=token)
        started = time.monotonic()
        submitted = run_tfrun(
            "--detach",
            *master,
            *("-w", "2", "-s", "1", "--tls-cert", str(cert), "--tls-key", str(key)),
            *("--", *py(SAY)),
            env=env,
            timeout=180,
        )
        took = time.monotonic() - started
        print(f"\ntfrun --detach returned in {took:.2f}s", file=sys.stderr)
        assert submitted.returncode == 0, submitted.stderr
        job = submitted.stdout.splitlines()[-1]
        assert job.startswith("mesos-"), submitted.stdout
        assert f"tfrun wait -m {real.address} {job}" in submitted.stderr

        waited = run_tfrun("wait", *master, job, env=env, timeout=300)
        assert waited.returncode == 0, waited.stderr
        logs = run_tfrun("logs", *master, job, "--task", "worker:1", env=env)
        assert logs.returncode == 0, logs.stderr
        assert f"task says worker 1 {token}" in logs.stdout
        chief = run_tfrun("logs", *master, job, env=env)  # the chief, beside the launcher
        assert f"task says worker 0 {token}" in chief.stdout, chief.stderr
        status = json.loads(run_tfrun("status", *master, job, "--json", env=env).stdout)
        assert status["state"] == "succeeded"
        assert status["verdict"]["exit_status"] == 0
        assert set(status["tasks"]) == {"ps:0", "worker:0", "worker:1"}
        listed = json.loads(run_tfrun("list", *master, "--json", env=env).stdout)
        assert [(r["id"], r["state"], r["exit_status"]) for r in listed] == [(job, "succeeded", 0)]
        wait_until(lambda: not real.state()["frameworks"], "the framework torn down")
        seen = _all_states(real)
        assert token not in seen
        assert key.read_text().splitlines()[1] not in seen

        # Its master from $MESOS_MASTER, which the launcher task's environment
        # does not carry: the launcher is given it as -m. What it exports
        # (issue 46) is on no command line: the launcher task's, or ps's of
        # its tfrun, which ran `tfrun --export ALL,DETACH_TOKEN=...` again.
        exported = uuid.uuid4().hex
        endless = run_tfrun(
            "--detach",
            "--export",
            f"ALL,DETACH_TOKEN={exported}",
            "-w",
            "2",
            "-s",
            "1",
            "--",
            *py(SAY),
            env=job_procs.env(DETACH_FOREVER="1", MESOS_MASTER=real.address),
            timeout=180,
        )
        assert endless.returncode == 0, endless.stderr
        job = endless.stdout.splitlines()[-1]

        def up() -> bool:
            said = run_tfrun("status", *master, job, "--json", env=env)
            if said.returncode != 0:
                return False
            status = json.loads(said.stdout)
            tasks = status["tasks"].values()
            up = sum(t["state"] in ("registered", "up") for t in tasks)
            return status["state"] == "running" and up == 3

        wait_until(
            up,
            "the endless job's three tasks running",
            timeout=120,
            poll=0.5,
            explain=lambda: str(run_tfrun("status", *master, job, "--json", env=env)),
        )
        # logs -f follows the remote task's output as it comes, until the job ends.
        follow = subprocess.Popen(
            [sys.executable, "-m", "tfmesos.cli", "logs", "-f", *master, job, "--task", "worker:1"],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert follow.stdout is not None
        assert follow.stdout.readline() == f"task says worker 1 {exported}\n"
        assert command_lines_holding(exported) == []
        assert exported not in _all_states(real)  # the launcher task's command among them
        # Another user's stop is refused in one line (with credentials, the
        # master itself refuses another principal's failover).
        other = run_tfrun(
            "stop", *master, job, env={**env, "USER": "mallory", "LOGNAME": "mallory"}
        )
        assert other.returncode == 2 and other.stderr.count("\n") == 1, other.stderr
        assert f"tfrun stop: job {job} is " in other.stderr, other.stderr
        assert "not this user's" in other.stderr
        # Two at once (stop is idempotent): both exit 0, whichever tears it down.
        stops = [
            subprocess.Popen(
                tfrun_argv("stop", *master, job), env=env, stderr=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        stopped = [stop.communicate(timeout=120)[1] for stop in stops]
        assert [stop.returncode for stop in stops] == [0, 0], stopped
        assert f"tfrun stop: job {job} stopped\n" in stopped, stopped
        state = real.state()
        assert state["frameworks"] == []
        framework = next(f for f in state["completed_frameworks"] if f["labels"][0]["value"] == job)
        assert framework["tasks"] == []

        def no_executor() -> bool:
            return not any(real.agent_state(i)["frameworks"] for i in range(len(real.agents)))

        wait_until(no_executor, "no agent running an executor of the job")
        assert follow.wait(timeout=60) == 0
        follow.stdout.close()
        waited = run_tfrun("wait", *master, job, env=env)
        assert waited.returncode == 143, waited.stderr
        said = run_tfrun("status", *master, job, env=env).stdout
        assert "stopped by" in said, said
        again = run_tfrun("stop", *master, job, env=env)
        assert again.returncode == 0, again.stderr
        unknown = run_tfrun("wait", *master, "mesos-nosuchjob", env=env)
        assert unknown.returncode == 2
        assert unknown.stderr.strip().count("\n") == 0, unknown.stderr
        assert "no job 'mesos-nosuchjob'" in unknown.stderr


def test_a_detached_job_outlives_its_submitting_host_cut_off_past_the_failover_timeout(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    """A TF replica job (1 ps, 2 workers: examples/mnist/mnist_replica.py,
    TF1 between-graph replication) detached from the client host of
    its own: no process of it is left there, and it runs to success while
    the client is cut off from every host for longer than the failover
    timeout of the framework it subscribed; afterwards ``wait`` from the
    client exits 0 and ``logs --task worker:1`` shows the remote task's
    output. The client's tfrun is neither the framework's scheduler nor
    the chief's host any more: the launcher task is both."""
    from tests.mesos_clusters import open_hosts
    from tests.test_real_mesos_hosts import TWO_TASKS
    from tfmesos.backends.mesos.detached import HANDOVER_FAILOVER_TIMEOUT

    release = tmp_path / "release"
    # Every task waits for the file the test makes once the failover timeout
    # has passed: the job is running then, whatever this machine's speed.
    mnist = (
        *("sh", "-c", 'until [ -e "$0" ]; do sleep 0.1; done; exec "$@"', str(release)),
        *(sys.executable, "examples/mnist/mnist_replica.py", "--ps_hosts", "{ps_hosts}"),
        *("--worker_hosts", "{worker_hosts}", "--job_name", "{job_name}"),
        *("--task_index", "{task_index}"),
    )
    with open_hosts(job_procs, tmp_path / "mesos", [TWO_TASKS, TWO_TASKS]) as real:
        master = ("-m", real.master_address)
        env = job_procs.env()

        def on_client(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                real.client_argv([sys.executable, "-m", "tfmesos.cli", *args]),
                capture_output=True,
                text=True,
                env=env,
                cwd=Path(__file__).parent.parent,
                timeout=timeout,
            )

        submitted = on_client("--detach", *master, "-w", "2", "-s", "1", "--", *mnist)
        assert submitted.returncode == 0, submitted.stderr
        job = submitted.stdout.splitlines()[-1]
        marked = {p.pid for p in job_procs.alive()}
        assert [pid for pid in real.client.pids() if pid in marked] == []
        assert [f["labels"] for f in real.state()["frameworks"]] == [
            [{"key": "tfmesos.job", "value": job}]
        ]
        cut_at = time.monotonic()
        real.isolate("client")
        wait_until(
            lambda: time.monotonic() - cut_at > HANDOVER_FAILOVER_TIMEOUT + 1,
            "the client cut off past the failover timeout",
            timeout=HANDOVER_FAILOVER_TIMEOUT + 5,
            poll=0.5,
        )
        assert [f["labels"] for f in real.state()["frameworks"]] == [
            [{"key": "tfmesos.job", "value": job}]
        ]
        release.touch()
        wait_until(
            lambda: not real.state()["frameworks"] and real.state()["completed_frameworks"],
            "the detached job over while its submitting host is cut off",
            timeout=300,
            poll=0.5,
        )
        cut_for = time.monotonic() - cut_at
        real.rejoin("client")
        print(f"\nthe client host was cut off for {cut_for:.1f}s", file=sys.stderr)
        assert cut_for > HANDOVER_FAILOVER_TIMEOUT
        waited = on_client("wait", *master, job)
        assert waited.returncode == 0, waited.stderr
        logs = on_client("logs", *master, job, "--task", "worker:1")
        assert logs.returncode == 0, logs.stderr
        assert re.search(r"worker 1: done after \d+ local steps", logs.stdout), logs.stdout
        chief = on_client("logs", *master, job)
        assert re.search(r"validation cross entropy = [0-9.]+", chief.stdout), chief.stdout
        status = json.loads(on_client("status", *master, job, "--json").stdout)
        hosts = {name: task["host"] for name, task in status["tasks"].items()}
        assert hosts["worker:1"].startswith("agent") and hosts["ps:0"].startswith("agent")
        (done,) = real.state()["completed_frameworks"]
        assert done["tasks"] == []
        assert len(done["completed_tasks"]) == 3  # the launcher's (with the chief), ps:0, worker:1


def test_a_detached_job_whose_launcher_host_is_lost_fails_without_a_verdict(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    """The launcher task's host cut off from every other: the master marks
    the launcher task unreachable, ``wait`` (from the client) exits 125
    saying the launcher is gone without a verdict, and the job's other
    tasks stop themselves once they cannot hear their launcher
    (``SILENCE_LIMIT``): nothing of the job runs on the other agent. The
    launcher is not relaunched; ``stop`` tears the framework down, which
    the master would otherwise keep until its failover timeout."""
    from tests.mesos_clusters import open_hosts
    from tests.test_real_mesos_hosts import TWO_TASKS

    flags = {"agent_ping_timeout": "1secs", "max_agent_ping_timeouts": "3"}
    forever = "import time; print('up', flush=True); time.sleep(3600)"
    with open_hosts(
        job_procs, tmp_path / "mesos", [TWO_TASKS, TWO_TASKS], master_flags=flags
    ) as real:
        master = ("-m", real.master_address)

        def on_client(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                real.client_argv([sys.executable, "-m", "tfmesos.cli", *args]),
                capture_output=True,
                text=True,
                env=job_procs.env(),
                cwd=Path(__file__).parent.parent,
                timeout=timeout,
            )

        submitted = on_client("--detach", *master, "-w", "2", "-s", "1", "--", *py(forever))
        assert submitted.returncode == 0, submitted.stderr
        job = submitted.stdout.splitlines()[-1]

        def tasks() -> list[JSON]:
            return [t for f in real.state()["frameworks"] for t in f["tasks"]]

        wait_until(
            lambda: len([t for t in tasks() if t["state"] == "TASK_RUNNING"]) == 3,
            "the launcher task, ps:0 and worker:1 running",
            timeout=120,
            poll=0.5,
        )
        (launcher,) = [t for t in tasks() if t["id"] == f"{job}.launcher"]
        lost = next(i for i in range(2) if real.agent_id(i) == launcher["slave_id"])
        other = 1 - lost
        real.isolate(f"agent{lost}")
        try:
            waited = on_client("wait", *master, job, timeout=180)
            assert waited.returncode == 125, waited.stderr
            assert "gone without a verdict" in waited.stderr

            def nothing_on_the_other_agent() -> bool:
                frameworks = real.agent_state(other)["frameworks"]
                return not any(e.get("tasks") for f in frameworks for e in f["executors"])

            wait_until(
                nothing_on_the_other_agent,
                "the job's tasks on the other agent ended by themselves",
                timeout=120,
                poll=0.5,
            )
            stopped = on_client("stop", *master, job)
            assert stopped.returncode == 0, stopped.stderr
            assert "over already" not in stopped.stderr, stopped.stderr
            labelled = [
                f
                for f in real.state()["frameworks"]
                if {"key": "tfmesos.job", "value": job} in f.get("labels", [])
            ]
            assert not labelled, "the job's framework is still registered after stop"
        finally:
            real.rejoin(f"agent{lost}")


def test_a_detached_job_whose_launcher_executor_is_killed_ends_with_one_verdict(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``kill -9`` of the launcher task's executor (issue 45): the launcher
    dies with it and stops the job, whose verdict says so; ``wait`` gives
    that verdict and ``status`` the same after it. Before: ``wait`` exited
    125 (``gone without a verdict``) while the launcher, re-parented to
    init, ran the job on to a later ``job succeeded``."""
    forever = "import time; print('up', flush=True); time.sleep(3600)"
    with open_cluster("real", job_procs, monkeypatch, tmp_path / "mesos") as cluster:
        real = cluster.real
        assert real is not None
        master = ("-m", real.address)
        env = job_procs.env()
        submitted = run_tfrun("--detach", *master, "-w", "2", "--", *py(forever), env=env)
        assert submitted.returncode == 0, submitted.stderr
        job = submitted.stdout.splitlines()[-1]

        def launcher() -> psutil.Process | None:
            for proc in job_procs.alive():
                with contextlib.suppress(psutil.Error):
                    if "tfmesos.backends.mesos.detached" in " ".join(proc.cmdline()):
                        return proc
            return None

        def both_up() -> bool:
            said = run_tfrun("status", *master, job, "--json", env=env)
            if said.returncode != 0:
                return False
            tasks = json.loads(said.stdout)["tasks"].values()
            return sum(t["state"] in ("registered", "up") for t in tasks) == 2

        wait_until(both_up, "the job's two tasks up", timeout=120, poll=0.5)
        found = wait_until(launcher, "the launcher task's launcher process")
        assert found is not None
        executor = found.parent()
        assert executor is not None
        executor.kill()
        waited = run_tfrun("wait", *master, job, env=env, timeout=120)
        assert waited.returncode == 143, waited.stderr
        said = json.loads(run_tfrun("status", *master, job, "--json", env=env).stdout)
        assert said["verdict"]["exit_status"] == 143, said
        again = run_tfrun("wait", *master, job, env=env, timeout=120)
        assert again.returncode == 143, again.stderr
        wait_until(lambda: not real.state()["frameworks"], "the framework torn down")
        assert job_procs.wait_gone(30) == []
