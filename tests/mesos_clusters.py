"""One face for the two Mesos the end-to-end tests run on: the test master
(``tfmesos.testing.master``) and real Apache Mesos (``tfmesos.testing.real_mesos``).

A scenario written against :class:`MesosUnderTest` sees only what a framework
or an operator sees on either: the master's address, its ``/state`` JSON, and
agents that can be killed and started again. What only the double can show
(the calls it received) is behind :attr:`MesosUnderTest.double`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.conftest import MARK, JobProcesses, marked_master, wait_until
from tfmesos.testing.master import ThreadedTestMaster
from tfmesos.testing.real_mesos import AgentSpec, MesosNotAvailable, RealMesos, prepare

JSON = dict[str, Any]

_home: Any = None
"""prepare()'s answer (a path), or the MesosNotAvailable it raised: asked once."""


def real_mesos_home() -> Any:
    """The Mesos to start, prepared once per session; under CI (which runs
    scripts/start-mesos --prepare) its absence fails the test, elsewhere it
    skips it with the reason printed."""
    global _home
    if _home is None:
        try:
            _home = prepare()
        except MesosNotAvailable as exc:
            _home = exc
    if isinstance(_home, MesosNotAvailable):
        real_mesos_unavailable(str(_home))
    return _home


def real_mesos_unavailable(reason: str) -> NoReturn:
    """Under CI, real Mesos must run: fail; elsewhere skip, saying why."""
    if os.environ.get("CI"):
        pytest.fail(f"CI runs scripts/start-mesos --prepare, yet {reason}")
    print(f"\nskipping a real-Mesos run: {reason}", file=sys.stderr)
    pytest.skip(reason)


def _double_agent(agent: AgentSpec) -> dict[str, Any]:
    """``add_agent``'s keywords for the double, from a real agent's ``--resources``."""
    shape: dict[str, Any] = {}
    for item in agent.resources.split(";"):
        name, value = item.split(":", 1)
        if name == "ports":
            shape["ports"] = value.strip("[]")
        else:
            shape[name] = float(value)
    return shape


@contextlib.contextmanager
def open_cluster(
    kind: str,
    job_procs: JobProcesses,
    monkeypatch: pytest.MonkeyPatch,
    base: Path,
    agents: Sequence[AgentSpec] | None = None,
) -> Iterator[MesosUnderTest]:
    """A master and ``agents`` (unreserved resources only, for the double),
    of ``kind``; by default the double's two agents of 4 CPUs and 8 GiB, or
    real Mesos's ``DEFAULT_AGENTS`` (those two and one reserved for "ml")."""
    if kind == "test-master":
        options: dict[str, Any] = {"agents": 2, "cpus": 4, "mem": 8192}
        if agents is not None:
            options = {"agents": 0}
        with marked_master(job_procs, monkeypatch, **options) as double:
            for agent in agents or ():
                shape = _double_agent(agent)
                double.call(lambda m, shape=shape: m.add_agent(**shape))
            yield MesosUnderTest(double=double)
        return
    home = real_mesos_home()
    # Tasks get the executor environment only: the mark goes there, and the
    # PYTHONPATH that picks the tfmesos under test, where one does (a git
    # worktree beside an install of another).
    executor_env = {MARK: job_procs.mark}
    if os.environ.get("PYTHONPATH"):
        executor_env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    real = RealMesos(home, executor_env=executor_env, base=base)
    if agents is not None:
        real.agents = tuple(agents)
    try:
        real.start()
    except MesosNotAvailable as exc:
        real_mesos_unavailable(f"it did not start: {exc}")
    try:
        job_procs.ignored.update(real.daemon_pids())
        yield MesosUnderTest(real=real)
    finally:
        real.stop()


class MesosUnderTest:
    """A master with agents, either kind, as the scenarios see it."""

    def __init__(self, double: ThreadedTestMaster | None = None, real: RealMesos | None = None):
        assert (double is None) != (real is None)
        self.double = double
        self.real = real
        self.kind = "test-master" if double is not None else "real-mesos"
        self._killed: dict[str, int] = {}
        """Real Mesos: the index of each agent :meth:`kill_agent_of` killed."""

    @property
    def url(self) -> str:
        if self.double is not None:
            return self.double.url
        assert self.real is not None
        return self.real.url

    def state(self) -> JSON:
        with urllib.request.urlopen(self.url + "/state", timeout=10) as answer:
            state: JSON = json.loads(answer.read())
            return state

    def framework(self, name_part: str = "") -> JSON:
        """The one framework (active or completed) whose name holds ``name_part``."""
        state = self.state()
        found: list[JSON] = [
            f
            for f in state["frameworks"] + state["completed_frameworks"]
            if name_part in (f.get("name") or "")
        ]
        assert len(found) == 1, [f.get("name") for f in found]
        return found[0]

    def tasks(self) -> list[JSON]:
        """Every task of every framework, as the master's ``/state`` lists it."""
        state = self.state()
        return [
            task
            for f in state["frameworks"] + state["completed_frameworks"]
            for key in ("tasks", "unreachable_tasks", "completed_tasks")
            for task in f.get(key, [])
        ]

    def wait_for(self, what: str, condition: Callable[[], Any], timeout: float = 60.0) -> Any:
        """:func:`tests.conftest.wait_until`, a failure naming the cluster and showing its logs."""
        return wait_until(condition, f"{self.kind}: {what}", timeout, poll=0.1, explain=self.logs)

    def torn_down(self, name_part: str = "") -> bool:
        """The job's framework is over: no longer among the master's active ones."""
        state = self.state()
        return not any(name_part in (f.get("name") or "") for f in state["frameworks"])

    def left_on_agents(self) -> list[str]:
        """What the agents still run: tasks not over in their executors (real
        Mesos, from each agent's own /state: an executor whose task is over
        stays listed there until the framework acknowledges the task's end,
        or is removed) or the tasks not over (the double's agents are the
        master's)."""
        if self.real is None:
            return [
                f"{t['name']}: {t['state']}"
                for t in self.tasks()
                if t["state"] in ("TASK_STAGING", "TASK_STARTING", "TASK_RUNNING", "TASK_KILLING")
            ]
        left = []
        for index in range(len(self.real.agents)):
            for framework in self.real.agent_state(index)["frameworks"]:
                left += [
                    f"agent{index}: executor {e['id']}: {t['id']} {t.get('state')}"
                    for e in framework["executors"]
                    for t in e.get("tasks", []) + e.get("queued_tasks", [])
                ]
        return left

    def agent_ids(self) -> list[str]:
        return sorted(a["id"] for a in self.state()["slaves"] if a.get("active"))

    def kill_agent_of(self, task_name_part: str) -> str:
        """Kill the agent running the first task whose name holds ``task_name_part``."""
        (task,) = [
            t for t in self.tasks() if task_name_part in t["name"] and t["state"] == "TASK_RUNNING"
        ]
        agent_id = str(task["slave_id"])
        if self.double is not None:
            self.double.kill_agent(agent_id)
            return agent_id
        assert self.real is not None
        for index in range(len(self.real.agents)):
            if self.real.agent_id(index) == agent_id:
                self.real.kill_agent(index)
                self._killed[agent_id] = index
                return agent_id
        raise AssertionError(f"no agent {agent_id}")

    def end_orphans_of(self, agent_id: str, job_procs: JobProcesses) -> None:
        """Real Mesos: start again the agent :meth:`kill_agent_of` killed. A
        checkpointed task outlives its agent (its executor waits the agent's
        ``--recovery_timeout`` for it); the agent, back, hears from the master
        that the task's framework is gone and ends it. The double's tasks end
        with their agent: nothing to do."""
        if self.real is None:
            return
        self.real.start_agent(self._killed.pop(agent_id))
        job_procs.ignored.update(self.real.daemon_pids())

    def add_agents(self, *agents: AgentSpec) -> None:
        """Agents that come while the jobs run, at once (the double: in one
        turn of its loop; real Mesos: started together)."""
        if self.double is not None:
            shapes = [_double_agent(a) for a in agents]
            self.double.call(lambda m: [m.add_agent(**shape) for shape in shapes])
            return
        assert self.real is not None
        before = len(self.real.agents)
        for agent in agents:
            self.real.add_agent(agent)
        self.real.wait_agents(before + len(agents))

    def logs(self) -> str:
        return "" if self.real is None else "real Mesos logs:\n" + self.real.logs()


class CuttableProxy:
    """A TCP forwarder to 127.0.0.1:``target`` on a port of its own, whose
    :meth:`cut` drops every connection and refuses new ones until
    :meth:`restore`: a network between a launcher and its master that fails."""

    def __init__(self, target: int) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._connections: list[socket.socket] = []
        self._listener: socket.socket | None = None
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port: int = probe.getsockname()[1]
        self.restore()

    def restore(self) -> None:
        listener = socket.socket()
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))  # taken meanwhile: an error, not a leak
            listener.listen(64)
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut or closed
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._connections += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(2)

    def cut(self) -> None:
        if self._listener is not None:
            # shutdown() wakes the accept() blocked in the other thread and
            # stops the listening; close() alone would leave it accepting.
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
        with self._lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(2)
            connection.close()

    def close(self) -> None:
        self.cut()


class BlackholeProxy:
    """A TCP forwarder to 127.0.0.1:``target`` whose :meth:`cut` is a black
    hole, as on a network that drops every packet: both directions stop
    being forwarded, no socket is closed, and an ``nft`` rule drops every
    packet of the cut connections, so that no kernel acknowledges what the
    other end sends (a proxy that only stopped forwarding would still be
    acknowledged, as a frozen process is). :meth:`heal` forwards again, what
    was held first. ``cut(only=...)`` cuts only the connections whose first
    bytes from the client hold ``only`` (a rendezvous registration names its
    task id: ``b'"task_id":"worker.1.'``). Needs root and ``nft``."""

    def __init__(self, target: int) -> None:
        self.target = target
        self._stopped = False
        self._connections: list[tuple[threading.Event, bytearray, socket.socket]] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def _table(self) -> str:
        return f"tfmesos_cut_{self.port}"

    def cut(self, only: bytes = b"") -> int:
        """Cut the connections that match; return how many."""
        ports = []
        with self._lock:
            for flowing, first, sock in self._connections:
                if only in first:
                    flowing.clear()
                    ours, theirs = sock.getsockname()[1], sock.getpeername()[1]
                    # The port that is not the proxy's listener or the target
                    # names the connection on loopback.
                    ports.append(theirs if ours == self.port else ours)
        if ports:
            table, listed = self._table, ", ".join(str(p) for p in ports)
            for rule in (
                f"add table inet {table}",
                f"add chain inet {table} out {{ type filter hook output priority 0 ; }}",
                f"add rule inet {table} out tcp sport {{ {listed} }} drop",
                f"add rule inet {table} out tcp dport {{ {listed} }} drop",
            ):
                subprocess.run(["nft", rule], check=True, capture_output=True)
        return len(ports)

    def heal(self) -> None:
        subprocess.run(
            ["nft", f"delete table inet {self._table}"], check=False, capture_output=True
        )
        with self._lock:
            for flowing, _, _ in self._connections:
                flowing.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            flowing, first = threading.Event(), bytearray()
            flowing.set()
            with self._lock:
                self._connections += [(flowing, first, client), (flowing, first, upstream)]
            for a, b, seen in ((client, upstream, first), (upstream, client, None)):
                threading.Thread(target=self._pump, args=(a, b, flowing, seen), daemon=True).start()

    def _pump(
        self,
        source: socket.socket,
        sink: socket.socket,
        flowing: threading.Event,
        seen: bytearray | None,
    ) -> None:
        try:
            while True:
                flowing.wait()
                data = source.recv(65536)
                if seen is not None and len(seen) < 4096:
                    seen += data[: 4096 - len(seen)]
                # Read just as the cut came: held, never delivered before the heal.
                flowing.wait()
                if self._stopped:
                    return
                if not data:
                    sink.shutdown(socket.SHUT_WR)
                    return
                sink.sendall(data)
        except OSError:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stopped = True
        subprocess.run(
            ["nft", f"delete table inet {self._table}"], check=False, capture_output=True
        )
        self._listener.close()
        with self._lock:
            connections, self._connections = self._connections, []
        for flowing, _, sock in connections:
            flowing.set()
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class HoldingProxy:
    """An HTTP forwarder to a master at ``target`` (``http://host:port``) that
    holds the first scheduler call of type ``hold`` unanswered (unsent to the
    master) until :meth:`release`: a master slow to answer one call. It
    records the type and the master's answer of every call it forwards, in
    the order answered; event streams (SUBSCRIBE) are passed on as they come."""

    def __init__(self, target: str, hold: str, *, answer_held: bool = False) -> None:
        self.target = target
        self.hold = hold
        self.answer_held = answer_held
        """Hold the master's answer to the call, not the call: the master
        has it (and acts on it), the client hears nothing until released."""
        self.answered: list[tuple[str, int]] = []
        self.held = threading.Event()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._release = asyncio.Event()
        self._holding = False
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        self._ready.wait(30)
        self.url = f"http://127.0.0.1:{self.port}"

    def calls(self) -> list[tuple[str, int]]:
        with self._lock:
            return list(self.answered)

    def release(self) -> None:
        self._loop.call_soon_threadsafe(self._release.set)

    def close(self) -> None:
        self.release()
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def _serve(self) -> None:
        try:
            self._loop.run_until_complete(self._main())
        finally:
            # Left open, the loop and its self-pipe were found by the
            # garbage collector at pytest's end: unraisable warnings, which
            # warnings-as-errors turned into a failed run after its tests passed.
            self._loop.close()

    async def _main(self) -> None:
        from aiohttp import ClientSession, ClientTimeout, web

        self._stop = asyncio.Event()
        session = ClientSession(timeout=ClientTimeout(total=None), auto_decompress=False)
        forwarded = ("Content-Type", "Accept", "Mesos-Stream-Id", "Authorization")

        async def forward(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            kind = ""
            if request.method == "POST" and request.path == "/api/v1/scheduler":
                kind = str(json.loads(body or b"{}").get("type", ""))
            hold = kind == self.hold and not self._holding
            if hold:
                self._holding = True
                if not self.answer_held:
                    self.held.set()
                    await self._release.wait()
            headers = {k: v for k in forwarded if (v := request.headers.get(k)) is not None}
            async with session.request(
                request.method, self.target + request.path_qs, data=body, headers=headers,
                allow_redirects=False,
            ) as upstream:  # fmt: skip
                if hold and self.answer_held:
                    self.held.set()
                    await self._release.wait()
                with self._lock:
                    self.answered.append((kind, upstream.status))
                reply = web.StreamResponse(status=upstream.status)
                for name in ("Content-Type", "Mesos-Stream-Id", "Location"):
                    if name in upstream.headers:
                        reply.headers[name] = upstream.headers[name]
                await reply.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await reply.write(chunk)
                await reply.write_eof()
                return reply

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", forward)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()
        await session.close()


@contextlib.contextmanager
def open_hosts(
    job_procs: JobProcesses,
    base: Path,
    agents: Sequence[AgentSpec],
    *,
    masters: int = 1,
    zk: str | None = None,
    master_flags: Mapping[str, str] | None = None,
) -> Iterator[RealMesos]:
    """Real Mesos on hosts of their own (``RealMesos(hosts=True)``): a
    master (or ``masters``, electing their leader in ZooKeeper at ``zk``,
    which they reach through the bridge), ``agents`` and a client host, each
    a network namespace with its own address, name and ``/etc/hosts``.
    Skips, saying why, where this machine cannot make them (not root, no
    ``ip netns``); after it, nothing of them is left."""
    from tfmesos.testing import netns

    why = netns.hosts_unavailable()
    if why:
        print(f"\nskipping a run on hosts of their own: {why}", file=sys.stderr)
        pytest.skip(why)
    home = real_mesos_home()
    executor_env = {MARK: job_procs.mark}
    if os.environ.get("PYTHONPATH"):
        executor_env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    real = RealMesos(
        home,
        agents=tuple(agents),
        executor_env=executor_env,
        base=base,
        master_flags=dict(master_flags or {}),
        masters=masters,
        zk=zk,
        hosts=True,
    )
    try:
        real.start(timeout=120 if zk else 60)
    except MesosNotAvailable as exc:
        real_mesos_unavailable(f"it did not start on hosts of their own: {exc}")
    number = real.network.number
    try:
        job_procs.ignored.update(real.daemon_pids())
        yield real
    finally:
        real.stop()
    assert netns.leftovers(os.getpid()) == [], "hosts left after the cluster stopped"
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"{netns.NETNS_PREFIX}{os.getpid()}-{number}-" not in listed, listed
    assert f" tfmbr{number}:" not in links and f" tfm{number}h" not in links, links


def wait_for(
    what: str, condition: Callable[[], Any], real: RealMesos, timeout: float = 120.0
) -> Any:
    """:func:`tests.conftest.wait_until` for a real cluster: a failure shows
    the last lines of its daemons' logs."""
    return wait_until(condition, what, timeout, poll=0.1, explain=lambda: real.logs(40))
