"""Real Apache Mesos on this machine: masters (one, or several electing a leader
in ZooKeeper) and agents, started and stopped by pid, for tests and for trying
a job. Run as docs/test-master.md ("Real Mesos") describes. Standard library
only: ``scripts/start-mesos`` runs it before any virtual environment exists.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfmesos.common import proctree

# Finding and installing Mesos is mesos_home's; these names stay importable
# from here, where scripts/start-mesos, the tests and the benchmarks find them.
from tfmesos.testing.mesos_home import HOME_ENV as HOME_ENV
from tfmesos.testing.mesos_home import TARBALL_ENV as TARBALL_ENV
from tfmesos.testing.mesos_home import MesosNotAvailable as MesosNotAvailable
from tfmesos.testing.mesos_home import find_home as find_home
from tfmesos.testing.mesos_home import prepare as prepare
from tfmesos.testing.netns import Host, HostNetwork

__all__ = [
    "DEFAULT_AGENTS",
    "AgentSpec",
    "MesosNotAvailable",
    "RealMesos",
    "find_home",
    "prepare",
]

CLIENT = "client"
"""The name of the host for tfrun and the chief, on hosts of their own."""

CLUSTER_MARK = "TFMESOS_REAL_MESOS"
"""Set in every daemon's and executor's environment (and so in every task's):
how :meth:`RealMesos.stop` finds what the cluster started, executors left
behind by a killed agent included."""


LOOPBACK = "127.0.0.1"
MASTER_PORT = 5050
AGENT_PORT = 5051
"""Mesos's own ports: on hosts of their own, every daemon has its host's."""


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class AgentSpec:
    """One agent: its ``--resources`` (Mesos's text form: ``cpus(role):2``
    reserves for a role) and ``--attributes``."""

    resources: str
    attributes: str = ""


DEFAULT_AGENTS = (
    AgentSpec("cpus:4;mem:8192;ports:[31000-31499]", "rack:r1"),
    AgentSpec("cpus:4;mem:8192;ports:[31500-31999]", "rack:r2"),
    # Reserved for the role "ml", with few ports: a job in any other role
    # is never offered it.
    AgentSpec("cpus(ml):2;mem(ml):2048;ports(ml):[32000-32003]", "rack:r3"),
)
"""Two agents like the test master's (4 CPUs, 8 GiB, disjoint port ranges:
they share one host) and one reserved for a role."""


@dataclass
class _Daemon:
    name: str
    argv: list[str]
    log: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    killed: bool = False
    """Killed on purpose (:meth:`RealMesos.kill_agent`, ``kill_master``): its
    being down is no failure to start."""
    paused: bool = False
    """Stopped by :meth:`RealMesos.pause_agent`, to be continued before its end."""
    host: Host | None = None
    """Its host of its own (``RealMesos(hosts=True)``); None: 127.0.0.1."""

    @property
    def address(self) -> str:
        return self.host.address if self.host is not None else LOOPBACK


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_direct = urllib.request.build_opener(_NoRedirect)
"""Asks one master itself: a master that is not the leader answers ``/state``
with a 307 to the leader (``Master::Http::redirect``, src/master/http.cpp)."""


@dataclass
class RealMesos:
    """One ``mesos-master`` and ``len(agents)`` ``mesos-agent`` processes on free
    ports of 127.0.0.1 under ``base``, each logging to ``base/NAME.log``.

    ``zk``: ``masters`` masters elect a leader there, with a replicated-log
    registry (more than one master needs it). ``executor_env``: the tasks'
    environment (a real agent passes only
    ``--executor_environment_variables``). ``master_flags``/``agent_flags``
    override the defaults. ``hosts``: each daemon on a host of its own
    (:mod:`tfmesos.testing.netns`), plus a ``client`` host for tfrun
    (:meth:`client_argv`), whose network :meth:`cut`, :meth:`heal`,
    :meth:`isolate` and :meth:`rejoin` fail; needs root. docs/test-master.md
    ("Real Mesos") has the details."""

    home: Path
    agents: Sequence[AgentSpec] = DEFAULT_AGENTS
    executor_env: dict[str, str] = field(default_factory=dict)
    master_flags: dict[str, str] = field(default_factory=dict)
    agent_flags: dict[str, str] = field(default_factory=dict)
    base: Path | None = None
    mark: str = field(default_factory=lambda: uuid.uuid4().hex)
    masters: int = 1
    zk: str | None = field(default=None, repr=False)  # it may hold a password
    hosts: bool = False
    _network: HostNetwork | None = field(default=None, init=False, repr=False)
    _masters: list[_Daemon] = field(default_factory=list, init=False, repr=False)
    _agents: list[_Daemon] = field(default_factory=list, init=False, repr=False)
    _own_base: bool = field(default=False, init=False, repr=False)

    # -- start and stop ----------------------------------------------------

    def start(self, timeout: float = 60.0) -> RealMesos:
        if self.masters < 1 or (self.masters > 1 and not self.zk):
            raise ValueError("more than one master elect their leader in ZooKeeper: give zk")
        if self.base is None:
            self.base = Path(tempfile.mkdtemp(prefix="tfmesos-real-mesos-"))
            self._own_base = True
        try:
            if self.hosts:
                self._network = HostNetwork.open([*self._master_names(), CLIENT])
            self._start_daemons(timeout)
        except BaseException:
            self.stop()  # reaps what did start: a daemon left running is a leak
            raise
        return self

    def _start_daemons(self, timeout: float) -> None:
        assert self.base is not None
        for name in self._master_names():
            given = self.master_flags.get("port") if self.masters == 1 else None
            host = self._network[name] if self._network is not None else None
            port = int(given or (MASTER_PORT if host else free_port()))
            master_flags = {
                "ip": host.address if host else LOOPBACK,
                "port": str(port),
                "work_dir": str(_mkdir(self.base / name)),
                "registry": "in_memory",
                "webui_dir": str(self.home / "share" / "mesos" / "webui"),
                # Fast rounds and a quickly noticed dead agent, for tests; the
                # rest is Mesos's defaults.
                "allocation_interval": "200ms",
                "agent_ping_timeout": "1secs",
                "max_agent_ping_timeouts": "3",
            }
            if self.zk:
                master_flags.update(
                    zk=self.hosts_zk or self.zk,
                    quorum=str(self.masters // 2 + 1),
                    registry="replicated_log",
                    # What a standby's 307 and the leader's MasterInfo name.
                    hostname="127.0.0.1",
                )
            if host:
                master_flags["hostname"] = host.name
            master_flags.update(self.master_flags)
            master_flags["port"] = str(port)
            daemon = _Daemon(
                name,
                self._argv("mesos-master", master_flags),
                self.base / f"{name}.log",
                port,
                host=host,
            )
            self._masters.append(daemon)
            self._spawn(daemon)
        for agent in self.agents:
            self._add_agent(agent)
        self.wait_agents(len(self._agents), timeout)

    def _master_names(self) -> list[str]:
        return ["master"] if self.masters == 1 else [f"master{i}" for i in range(self.masters)]

    def add_agent(self, agent: AgentSpec) -> int:
        """Start one more agent (it registers soon after); its index."""
        self.agents = (*self.agents, agent)
        return self._add_agent(agent)

    def _add_agent(self, agent: AgentSpec) -> int:
        assert self._masters, "not started"
        assert self.base is not None
        env = {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"}
        if os.environ.get("PYTHONPATH"):
            # The tfmesos under test, where PYTHONPATH picks it (a git
            # worktree beside an install of another): the tasks' agents too.
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        env.update(self.executor_env)
        env[CLUSTER_MARK] = self.mark
        index = len(self._agents)
        name = f"agent{index}"
        host = self._network.add(name) if self._network is not None else None
        agent_port = AGENT_PORT if host else free_port()
        master = self._masters[0]
        flags = {
            "master": self.hosts_zk
            or f"{master.host.name if master.host else LOOPBACK}:{master.port}",
            "ip": host.address if host else LOOPBACK,
            "hostname": host.name if host else LOOPBACK,
            "port": str(agent_port),
            "work_dir": str(_mkdir(self.base / name)),
            "runtime_dir": str(_mkdir(self.base / f"{name}-run")),
            "launcher_dir": str(self.home / "libexec" / "mesos"),
            "launcher": "posix",
            "isolation": "posix/cpu,posix/mem",
            "resources": agent.resources,
            "executor_environment_variables": json.dumps(env),
            **self.agent_flags,
        }
        if agent.attributes:
            flags["attributes"] = agent.attributes
        argv = [*self._argv("mesos-agent", flags), "--no-systemd_enable_support"]
        daemon = _Daemon(name, argv, self.base / f"{name}.log", agent_port, host=host)
        self._agents.append(daemon)
        self._spawn(daemon)
        return index

    def _argv(self, program: str, flags: dict[str, str]) -> list[str]:
        return [str(self.home / "sbin" / program), *(f"--{k}={v}" for k, v in flags.items())]

    def _spawn(self, daemon: _Daemon) -> None:
        env = dict(os.environ)
        env[CLUSTER_MARK] = self.mark
        # libprocess would advertise the host name, which may not resolve;
        # an agent passes it on to its executors.
        env["LIBPROCESS_IP"] = daemon.address
        argv = daemon.argv if daemon.host is None else [*daemon.host.prefix(), *daemon.argv]
        with open(daemon.log, "ab") as log:
            if daemon.starts:
                log.write(f"\n--- started again ({daemon.name}) ---\n".encode())
                log.flush()
            daemon.proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                # An agent with the Linux launcher is its containers'
                # subreaper (kept through exec): destroying a container,
                # Mesos waits until every process it killed is reaped, and a
                # process whose parent died with it goes to the reaper of
                # orphans. A host's init reaps at once; a sandbox's may not
                # (this machine's reaps every ~2 s, and a CI run saw a
                # container's destroy hang for over 15 s). The agent's own
                # reaper reaps those it waits on as soon as they are its own.
                preexec_fn=proctree.become_subreaper if "--launcher=linux" in daemon.argv else None,
            )
        daemon.starts += 1

    def stop(self) -> None:
        """Stop every daemon by pid, then every process carrying the cluster's
        mark."""
        for index in range(len(self._agents)):
            self.resume_agent(index)  # a stopped process would not hear SIGTERM
        for daemon in [*self._agents, *self._masters]:
            _terminate(daemon.proc)
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self._network is not None:
            self._network.close()
        if self._own_base and self.base is not None and not os.environ.get("TFMESOS_KEEP_MESOS"):
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> RealMesos:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests and users look at -------------------------------------

    @property
    def url(self) -> str:
        """The master's URL; of several, the leader's (or, while none leads,
        a running one's, which sends what it cannot answer to the leader)."""
        assert self._masters, "not started"
        if len(self._masters) == 1:
            return self.master_url(0)
        leader = self.leader_index()
        if leader is None:
            running = [i for i, d in enumerate(self._masters) if _running(d)] or [0]
            leader = running[0]
        return self.master_url(leader)

    @property
    def address(self) -> str:
        return self.url.removeprefix("http://")

    def master_url(self, index: int) -> str:
        master = self._masters[index]
        return f"http://{master.address}:{master.port}"

    def daemon_pids(self) -> list[int]:
        daemons = [*self._agents, *self._masters]
        return [d.proc.pid for d in daemons if _running(d) and d.proc is not None]

    def processes(self) -> list[int]:
        """Pids carrying the mark other than the daemons: executors, tasks."""
        own = set(self.daemon_pids()) | {os.getpid()}
        found = []
        needle = f"{CLUSTER_MARK}={self.mark}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in own:
                continue
            try:
                environ = (entry / "environ").read_bytes()
                status = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if status != "Z" and needle in environ.split(b"\0"):
                found.append(int(entry.name))
        return found

    def get(self, path: str, port: int | None = None) -> Any:
        """``path`` of the daemon at ``port`` (by default the master: of several,
        the leader, through a standby's redirect if need be), as JSON."""
        url = f"http://127.0.0.1:{port}{path}" if port else self.url + path
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.loads(answer.read())

    def state(self) -> Any:
        """The (leading) master's ``/state``."""
        return self.get("/state")

    # -- several masters: the leader, killed and started again ---------------

    def master_state(self, index: int) -> Any:
        """Master ``index``'s own ``/state``, not the leader's; ``None`` if it
        does not lead (it answers with a 307 to the leader, or a 503 while
        none is elected) or does not answer."""
        if not _running(self._masters[index]):
            return None
        try:
            with _direct.open(f"{self.master_url(index)}/state", timeout=10) as answer:
                return json.loads(answer.read())
        except (OSError, ValueError):  # HTTPError for a 307 or a 503 too
            return None

    def leader_index(self) -> int | None:
        """The running master that answers ``/state`` itself, as only the leader
        does."""
        for index in range(len(self._masters)):
            state = self.master_state(index)
            if state is not None and state.get("leader") == state.get("pid"):
                return index
        return None

    def wait_leader(self, timeout: float = 60.0, other_than: int | None = None) -> int:
        """Until a master (not ``other_than``) leads; its index."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_running()
            leader = self.leader_index()
            if leader is not None and leader != other_than:
                return leader
            if time.monotonic() > deadline:
                raise MesosNotAvailable(
                    f"no master (other than {other_than}) led within {timeout:g}s:\n" + self.logs()
                )
            time.sleep(0.1)

    def kill_master(self, index: int) -> None:
        """SIGKILL master ``index``; it leaves ZooKeeper when its session expires
        (10 s)."""
        daemon = self._masters[index]
        daemon.killed = True
        if daemon.proc is not None:
            daemon.proc.kill()
            daemon.proc.wait()

    def start_master(self, index: int) -> None:
        """Restart master ``index`` on its port and work directory; it recovers
        and stands by."""
        daemon = self._masters[index]
        assert not _running(daemon), "still running"
        daemon.killed = False
        self._spawn(daemon)

    def agent_state(self, index: int) -> Any:
        """Agent ``index``'s own ``/state`` (its frameworks and executors)."""
        with urllib.request.urlopen(f"{self.agent_url(index)}/state", timeout=10) as answer:
            return json.loads(answer.read())

    def agent_url(self, index: int) -> str:
        """Agent ``index``'s own address, ``http://127.0.0.1:PORT`` (on hosts
        of their own, its host's address)."""
        daemon = self._agents[index]
        return f"http://{daemon.address}:{daemon.port}"

    def agent_id(self, index: int) -> str:
        daemon = self._agents[index]
        pid = f"@{daemon.address}:{daemon.port}"
        for agent in self.state()["slaves"]:
            if agent["pid"].endswith(pid):
                return str(agent["id"])
        raise KeyError(f"agent{index} is not registered")

    def wait_agents(self, count: int, timeout: float = 60.0) -> None:
        """Until ``count`` agents are active in the master's ``/state``."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_running()
            with contextlib.suppress(OSError, ValueError):
                if sum(a.get("active", False) for a in self.state()["slaves"]) >= count:
                    return
            if time.monotonic() > deadline:
                raise MesosNotAvailable(
                    f"fewer than {count} agents registered in {timeout:g}s:\n" + self.logs()
                )
            time.sleep(0.1)

    def _check_running(self) -> None:
        """Raise if a daemon not killed on purpose has exited."""
        for daemon in [*self._masters, *self._agents]:
            if not daemon.killed and daemon.proc is not None and daemon.proc.poll() is not None:
                raise MesosNotAvailable(
                    f"mesos {daemon.name} exited with status {daemon.proc.returncode}:\n"
                    + self.log_tail(daemon.name)
                )

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = (self.base or Path(".")) / f"{name}.log"
        try:
            text = path.read_text(errors="replace").splitlines()
        except OSError:
            return f"({path}: no log)"
        return "\n".join(f"  {name}| {line}" for line in text[-lines:])

    def logs(self, lines: int = 30) -> str:
        """The last lines of the master's and each agent's log, for a failing test."""
        names = [d.name for d in [*self._masters, *self._agents]] or ["master"]
        return "\n".join(self.log_tail(name, lines) for name in names)

    # -- agents going away and coming back ---------------------------------

    def kill_agent(self, index: int) -> None:
        """SIGKILL agent ``index`` (its executors, under the posix launcher, live on)."""
        daemon = self._agents[index]
        daemon.killed = True
        if daemon.proc is not None:
            daemon.proc.kill()
            daemon.proc.wait()

    def pause_agent(self, index: int) -> None:
        """SIGSTOP agent ``index``: alive, its tasks running, deaf to masters
        until :meth:`resume_agent`."""
        daemon = self._agents[index]
        assert daemon.proc is not None
        assert _running(daemon), "not running"
        daemon.proc.send_signal(signal.SIGSTOP)
        daemon.paused = True

    def resume_agent(self, index: int) -> None:
        daemon = self._agents[index]
        if daemon.proc is not None and daemon.paused:
            daemon.proc.send_signal(signal.SIGCONT)
        daemon.paused = False

    def start_agent(self, index: int) -> None:
        """Restart agent ``index`` on its work directory; it recovers what it
        checkpointed."""
        daemon = self._agents[index]
        assert not _running(daemon), "still running"
        daemon.killed = False
        self._spawn(daemon)

    # -- hosts of their own: the client host, and the network failing -------

    @property
    def network(self) -> HostNetwork:
        """The hosts (``RealMesos(hosts=True)`` only)."""
        assert self._network is not None, "not on hosts of their own: RealMesos(hosts=True)"
        return self._network

    @property
    def client(self) -> Host:
        """The host for tfrun and the chief: its ``/etc/hosts`` names every host."""
        return self.network[CLIENT]

    def client_argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run on the client host (its namespace, its host name)."""
        return [*self.client.prefix(), *argv]

    @property
    def master_address(self) -> str:
        """``NAME:PORT`` of the first master as hosts name it; ``zk`` with
        several."""
        if self.zk:
            return self.hosts_zk or self.zk
        master = self._masters[0]
        return f"{master.host.name}:{master.port}" if master.host else self.address

    @property
    def hosts_zk(self) -> str | None:
        """``zk`` as the hosts of their own reach it: each loopback host in
        it (``127.0.0.1``, ``localhost``) the bridge's address, the root
        namespace's as the hosts see it; on one address, ``zk`` itself."""
        if self.zk is None or self._network is None:
            return self.zk
        scheme, _, rest = self.zk.partition("://")
        servers, slash, path = rest.partition("/")
        credentials, at, servers = servers.rpartition("@")
        gateway = self._network.gateway
        moved = []
        for server in servers.split(","):
            name, colon, port = server.rpartition(":")
            if not colon:
                name, port = server, ""
            if name in ("127.0.0.1", "localhost", "[::1]"):
                name = gateway
            moved.append(f"{name}:{port}" if port else name)
        return f"{scheme}://{credentials}{at}{','.join(moved)}{slash}{path}"

    def cut(self, a: str, b: str) -> None:
        """Hosts ``a`` and ``b`` stop hearing each other, both ways, until
        :meth:`heal`."""
        self.network.cut(a, b)

    def heal(self, a: str, b: str) -> None:
        self.network.heal(a, b)

    def forget(self, on: str, name: str) -> None:
        """Host ``on`` can no longer resolve host ``name``'s name."""
        self.network.forget(on, name)

    def isolate(self, name: str) -> None:
        """Host ``name`` cut from every other (and from this harness) until :meth:`rejoin`."""
        self.network.isolate(name)

    def rejoin(self, name: str) -> None:
        self.network.rejoin(name)

    def frameworks(self) -> Iterator[dict[str, Any]]:
        yield from self.state()["frameworks"]

    def teardown_frameworks(self) -> list[str]:
        """Tear down every framework still registered (what a failed test left)."""
        ended = []
        for framework in self.frameworks():
            data = f"frameworkId={framework['id']}".encode()
            request = urllib.request.Request(f"{self.url}/master/teardown", data=data)
            with (
                contextlib.suppress(urllib.error.URLError),
                urllib.request.urlopen(request, timeout=10),
            ):
                ended.append(str(framework["id"]))
        return ended


def _running(daemon: _Daemon) -> bool:
    return daemon.proc is not None and daemon.proc.poll() is None


def _terminate(proc: subprocess.Popen[bytes] | None, grace: float = 5.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
