"""Real Mesos on hosts of their own: the master, each agent and tfrun (with
the chief) in a network namespace each, with its own address, host name and
``/etc/hosts`` (``RealMesos(hosts=True)``, ``tfmesos/testing/netns.py``), as
a real cluster's hosts are: they reach each other by name, and the network
between them can fail.

Needs root and ``ip netns`` (skipped, saying why, elsewhere) and real Mesos
(tests/mesos_clusters.py: ``real_mesos_home``). The timings go to stderr
(``pytest -s`` shows them).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PY, ROOT, JobProcesses, popen_tfrun, py, start_tfrun
from tests.mesos_clusters import open_hosts, wait_for
from tfmesos.rendezvous.protocol import STOP_GRACE
from tfmesos.testing import netns
from tfmesos.testing.real_mesos import AgentSpec, RealMesos

pytestmark = pytest.mark.e2e

ONE_TASK = AgentSpec("cpus:1.2;mem:2048;ports:[31000-31099]")
"""Room for one task of 1 CPU (and its executor's 0.1): two tasks on two
such agents are on two hosts. Every agent has the same ports: each has its
own address."""
TWO_TASKS = AgentSpec("cpus:2.3;mem:4096;ports:[31000-31099]")

JSON = dict[str, Any]


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for init's reaping does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def tasks_of(real: RealMesos) -> list[JSON]:
    state = real.state()
    return [
        task
        for f in state["frameworks"] + state["completed_frameworks"]
        for key in ("tasks", "unreachable_tasks", "completed_tasks")
        for task in f.get(key, [])
    ]


CHECK_NAMES = textwrap.dedent(
    """
    import json, os, socket
    config = json.loads(os.environ["TF_CONFIG"])
    me = config["task"]
    hosts = {{a.rsplit(":", 1)[0] for addrs in config["cluster"].values() for a in addrs}}
    own = config["cluster"][me["type"]][me["index"]].rsplit(":", 1)[0]
    assert own == socket.gethostname(), (own, socket.gethostname())
    assert hosts <= set({names}), hosts
    for host in hosts:
        address = socket.gethostbyname(host)
        assert not address.startswith("127."), (host, address)
    print("names", me["type"], me["index"], own, sorted(hosts), flush=True)
    """
)


def test_a_replica_job_names_the_hosts_in_tf_config(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    """tfrun and the chief on the client host, the ps and worker 1 on two
    agents: each task's ``TF_CONFIG`` gives the hosts' names (its own its
    host name), each resolving to that host's address, none a loopback one."""
    started = time.monotonic()
    with open_hosts(job_procs, tmp_path / "mesos", [ONE_TASK, ONE_TASK]) as real:
        up = time.monotonic() - started
        names = {"client", "agent0", "agent1"}
        # The name tfrun gives the tasks to dial back: the client host's own.
        advertised = subprocess.run(
            real.client_argv(
                [PY, "-c", "from tfmesos.common.advertise import *; print(advertised_host())"]
            ),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert advertised == "client"
        code = CHECK_NAMES.format(names=sorted(names))
        proc = popen_tfrun(
            *("-m", real.master_address, "-w", "2", "-s", "1", "--worker-logs", "*"),
            *("--", *py(code)),
            env=job_procs.env(),
            on=real.client.prefix(),
        )
        out, err = proc.communicate(timeout=180)
        ran = time.monotonic() - started - up
    print(f"\nhosts: cluster up in {up:.2f}s, replica job in {ran:.2f}s", file=sys.stderr)
    assert proc.returncode == 0, err
    lines = sorted(line.split("] ", 1)[1] for line in out.splitlines())
    assert lines == [
        f"names worker 0 client {sorted(names)}",
        f"names worker 1 {lines[1].split()[3]} {sorted(names)}",
    ], out
    assert "task worker:0 registered at client:" in err, err
    # The ps and worker 1 on the two agents, one each.
    placed = {
        line.split(" registered at ")[1].split(":")[0]
        for line in err.splitlines()
        if "registered at agent" in line
    }
    assert placed == {"agent0", "agent1"}, err
    assert job_procs.wait_gone(10) == []


def test_mnist_replica_trains_across_the_hosts(job_procs: JobProcesses, tmp_path: Path) -> None:
    """examples/mnist/mnist_replica.py, TF1's between-graph replication:
    the chief on the client host, the ps and worker 1 on two agents, each
    dialling the others' TF servers by the names ``{ps_hosts}`` and
    ``{worker_hosts}`` give."""
    started = time.monotonic()
    with open_hosts(job_procs, tmp_path / "mesos", [ONE_TASK, ONE_TASK]) as real:
        proc = popen_tfrun(
            *("-m", real.master_address, "-w", "2", "-s", "1", "--"),
            *(PY, "examples/mnist/mnist_replica.py", "--ps_hosts", "{ps_hosts}"),
            *("--worker_hosts", "{worker_hosts}", "--job_name", "{job_name}"),
            *("--task_index", "{task_index}"),
            env=job_procs.env(),
            on=real.client.prefix(),
        )
        out, err = proc.communicate(timeout=300)
        took = time.monotonic() - started
    print(f"\nhosts: MNIST replica across hosts in {took:.2f}s", file=sys.stderr)
    assert proc.returncode == 0, out[-2000:] + err[-2000:]
    assert re.search(r"\[worker:0\] validation cross entropy = [0-9.]+", out), out
    placed = {
        line.split(" registered at ")[1].split(":")[0]
        for line in err.splitlines()
        if " registered at " in line
    }
    assert placed == {"client", "agent0", "agent1"}, err
    assert job_procs.wait_gone(10) == []


def test_a_fine_grained_job_spans_the_hosts(job_procs: JobProcesses, tmp_path: Path) -> None:
    """examples/plus.py from the client host: two ps and two workers on two
    agents, the session opened from the client to worker 0 by its name."""
    started = time.monotonic()
    with open_hosts(job_procs, tmp_path / "mesos", [TWO_TASKS, TWO_TASKS]) as real:
        result = subprocess.run(
            real.client_argv([PY, "examples/plus.py", real.master_address]),
            capture_output=True,
            text=True,
            env=job_procs.env(),
            cwd=ROOT,
            timeout=300,
        )
        hosts = {t["slave_id"] for t in tasks_of(real)}
        took = time.monotonic() - started
    print(f"\nhosts: fine-grained plus across hosts in {took:.2f}s", file=sys.stderr)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "42"
    assert len(hosts) == 2, hosts
    assert job_procs.wait_gone(10) == []


def test_an_agent_cut_from_the_master_is_unreachable_and_the_job_restarts(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    """Worker 1's agent cut from the master past the ping timeout: its task
    is TASK_UNREACHABLE, tfrun starts the job again (``--max-restarts 1``) on
    the other agent and it succeeds; once the cut heals, the old copy is
    ended. tfrun is PARTITION_AWARE (``taskinfo.framework_capabilities``)."""
    flags = {"agent_ping_timeout": "1secs", "max_agent_ping_timeouts": "3"}
    with open_hosts(
        job_procs, tmp_path / "mesos", [ONE_TASK, ONE_TASK], master_flags=flags
    ) as real:
        # Run 0 waits for ever; run 1 (TFMESOS_RESTART=1) ends at once.
        command = (
            'if [ "$TFMESOS_RESTART" = 0 ]; then exec sleep 600; fi; echo "run $TFMESOS_RESTART"'
        )
        proc, _ = start_tfrun(
            *("-m", real.master_address, "-w", "2", "-s", "0", "--worker-logs", "*"),
            *("--max-restarts", "1", "--", command),
            env=job_procs.env(),
            on=real.client.prefix(),
        )
        (old,) = wait_for(
            "worker 1 TASK_RUNNING in the master",
            lambda: [t for t in tasks_of(real) if t["state"] == "TASK_RUNNING"],
            real,
        )
        cut_agent = next(i for i in range(len(real.agents)) if real.agent_id(i) == old["slave_id"])
        name = f"agent{cut_agent}"
        marked = {p.pid for p in job_procs.alive()}
        on_agent = [pid for pid in real.network[name].pids() if pid in marked]
        # The task's processes (its in-task agent, its command), not Mesos's executor.
        old_copy = [pid for pid in on_agent if b"mesos-executor" not in command_line(pid)]
        assert old_copy, "worker 1's processes on its agent"
        cut_at = time.monotonic()
        real.cut(name, "master")

        def unreachable() -> bool:
            return any(
                t["id"] == old["id"] and t["state"] == "TASK_UNREACHABLE" for t in tasks_of(real)
            )

        wait_for("the cut agent's task TASK_UNREACHABLE", unreachable, real)
        unreachable_after = time.monotonic() - cut_at
        # While tfrun runs the job again: when does the old copy end, the cut
        # not healed (its agent still reaches tfrun's host)?
        old_ended: float | None = None
        old_ended_wall = 0.0
        deadline = time.monotonic() + 180
        while proc.poll() is None and time.monotonic() < deadline:
            if old_ended is None and not any(running(pid) for pid in old_copy):
                old_ended, old_ended_wall = time.monotonic() - cut_at, time.time()
            time.sleep(0.1)
        out, err = proc.communicate(timeout=30)
        done_after = time.monotonic() - cut_at
        healed_at = time.monotonic()
        real.heal(name, "master")

        def old_copy_ended() -> bool:
            frameworks = real.agent_state(cut_agent)["frameworks"]
            return not any(e.get("tasks") for f in frameworks for e in f["executors"]) and not any(
                running(pid) for pid in on_agent
            )

        wait_for("the old copy ended after the heal", old_copy_ended, real)
        ended_after = time.monotonic() - healed_at
        (new_launch,) = [
            e
            for e in proc.events.all()
            if e["event"] == "task_launched" and e["task"] == "worker:1" and e["restart"] == 1
        ]
        # Both copies of worker 1 ran from the new one's launch to the old one's end.
        overlap = old_ended_wall - new_launch["ts"]
        said = "".join(
            line for line in err.splitlines(True) if "worker:1" in line or "again" in line
        )
    print(
        f"\nhosts: agent cut from the master: TASK_UNREACHABLE after {unreachable_after:.2f}s, "
        f"job restarted and done after {done_after:.2f}s; the old copy of worker 1 ended "
        f"{'after ' + format(old_ended, '.2f') + 's' if old_ended else 'not before the heal'} "
        f"(its end minus the new copy's launch: {overlap:+.2f}s, polled every 0.1 s); "
        f"after the heal, its agent (and its executor) had nothing of the job after "
        f"{ended_after:.2f}s\n{said}",
        file=sys.stderr,
    )
    assert proc.returncode == 0, err
    assert sorted(out.splitlines()) == ["[worker:0] run 1", "[worker:1] run 1"], err
    assert "ended in state TASK_UNREACHABLE" in err, err
    # tfrun still reaches the old copy's host: it stops it (through the
    # rendezvous) when it starts the job again, before the cut heals. Only
    # Mesos's executor waits for the heal, to report the task's end.
    assert old_ended is not None and old_ended < done_after, (old_ended, done_after)
    # It stops the old run's tasks as it starts the new run: the two copies
    # overlap by no more than this test's polling (0.1 s) shows, far below
    # the in-task agent's STOP_GRACE that a task ignoring SIGTERM is given.
    assert overlap < STOP_GRACE, overlap
    assert job_procs.wait_gone(10) == []


def test_an_agent_restarted_on_its_host_recovers_its_task(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    """Worker 1's agent SIGKILLed and started again on its host (its
    namespace, address and name, its work directory): it recovers the
    checkpointed task and re-registers, and the job ends as if nothing had
    happened. The master's ping timeout (15 s here) leaves room for the
    restart on a loaded machine."""
    flags = {"agent_ping_timeout": "5secs", "max_agent_ping_timeouts": "3"}
    with open_hosts(
        job_procs, tmp_path / "mesos", [ONE_TASK, ONE_TASK], master_flags=flags
    ) as real:
        release = tmp_path / "release"
        command = f'while [ ! -e {release} ]; do sleep 0.1; done; echo "done {{task_index}}"'
        proc, _ = start_tfrun(
            *("-m", real.master_address, "-w", "2", "-s", "0", "--worker-logs", "*"),
            *("--", command),
            env=job_procs.env(),
            on=real.client.prefix(),
        )
        (task,) = wait_for(
            "worker 1 TASK_RUNNING in the master",
            lambda: [t for t in tasks_of(real) if t["state"] == "TASK_RUNNING"],
            real,
        )
        index = next(i for i in range(len(real.agents)) if real.agent_id(i) == task["slave_id"])
        killed_at = time.time()
        real.kill_agent(index)
        real.start_agent(index)
        job_procs.ignored.update(real.daemon_pids())

        def back() -> float | None:
            for agent in real.state()["slaves"]:
                if (
                    agent["id"] == task["slave_id"]
                    and agent.get("reregistered_time", 0) > killed_at
                ):
                    return float(agent["reregistered_time"]) - killed_at
            return None

        recovered = wait_for("the agent re-registered with its task", back, real)
        release.touch()
        out, err = proc.communicate(timeout=120)
        (after,) = [t for t in tasks_of(real) if t["id"] == task["id"]]
    print(f"\nhosts: agent restarted, re-registered after {recovered:.2f}s", file=sys.stderr)
    assert proc.returncode == 0, err
    assert sorted(out.splitlines()) == ["[worker:0] done 0", "[worker:1] done 1"], err
    assert "TASK_UNREACHABLE" not in err, err
    assert after["state"] in ("TASK_FINISHED", "TASK_KILLED"), after
    assert job_procs.wait_gone(10) == []


PROBE = textwrap.dedent(
    """
    import socket, sys
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
        print("connected")
    except socket.timeout:
        print("timed out")
    except OSError as exc:
        print(exc.strerror)
    """
)


def test_cut_and_isolate_fail_the_network_silently_between_hosts(tmp_path: Path) -> None:
    """``cut(a, b)`` drops what a and b send each other, and nothing else: a
    connection times out, as across a failed network, rather than being
    refused; ``isolate`` cuts a host from every other; each heals."""
    why = netns.hosts_unavailable()
    if why:
        print(f"\nskipping a run on hosts of their own: {why}", file=sys.stderr)
        pytest.skip(why)
    network = netns.HostNetwork.open(["a", "b", "c"])
    try:
        server = subprocess.Popen(
            [*network["b"].prefix(), PY, "-m", "http.server", "--bind", "b", "8000"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        def probe(source: str, timeout: float = 1.0) -> str:
            argv = [*network[source].prefix(), PY, "-c", PROBE, "b", "8000", str(timeout)]
            return subprocess.run(argv, capture_output=True, text=True).stdout.strip()

        try:
            deadline = time.monotonic() + 30
            while probe("a") != "connected":
                assert time.monotonic() < deadline, "b's server never listened"
                time.sleep(0.1)
            network.cut("a", "b")
            assert probe("a") == "timed out"
            assert probe("c") == "connected"
            network.heal("a", "b")
            assert probe("a") == "connected"
            network.isolate("b")
            assert probe("a") == "timed out"
            assert probe("c") == "timed out"
            network.rejoin("b")
            assert probe("a", timeout=10) == "connected"
        finally:
            server.kill()
            server.wait()
    finally:
        network.close()
    assert netns.leftovers(os.getpid()) == []


def test_a_killed_harness_leaves_what_the_next_start_removes(tmp_path: Path) -> None:
    """The fixture's end removes every namespace, link and /etc/netns folder
    (``open_hosts`` checks it); a harness SIGKILLed mid-run leaves them, with
    its Mesos in them, and the next network's start sweeps them away."""
    why = netns.hosts_unavailable()
    if why:
        print(f"\nskipping a run on hosts of their own: {why}", file=sys.stderr)
        pytest.skip(why)
    program = textwrap.dedent(
        f"""
        import os, sys, time
        from pathlib import Path
        from tfmesos.testing.real_mesos import AgentSpec, RealMesos, prepare
        real = RealMesos(prepare(), agents=(AgentSpec({ONE_TASK.resources!r}),),
                         base=Path({str(tmp_path / "mesos")!r}), hosts=True).start()
        print(" ".join(str(p) for p in real.daemon_pids()), flush=True)
        time.sleep(600)
        """
    )
    harness = subprocess.Popen([PY, "-c", program], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert harness.stdout is not None
        daemons = [int(p) for p in harness.stdout.readline().split()]
        assert daemons, "the harness did not start"
        left = netns.leftovers(harness.pid)
        harness.kill()
        harness.wait()
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait()
        if harness.stdout is not None:
            harness.stdout.close()
    assert len([x for x in left if x.startswith("namespace")]) == 3, left  # master, agent, client
    assert netns.leftovers(harness.pid) == left
    assert all(running(pid) for pid in daemons)
    started = time.monotonic()
    network = netns.HostNetwork.open()  # sweeps first
    network.close()
    print(
        f"\nhosts: swept a SIGKILLed harness in {time.monotonic() - started:.2f}s", file=sys.stderr
    )
    assert netns.leftovers(harness.pid) == []
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in daemons) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(running(pid) for pid in daemons)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"{netns.NETNS_PREFIX}{harness.pid}-" not in listed + links
