"""Hosts of their own on this machine: each a Linux network namespace on one
bridge, with its own address, host name and ``/etc/hosts``, so a Mesos master,
its agents and tfrun see each other by name and the network between them can
fail (:meth:`HostNetwork.cut`, :meth:`HostNetwork.isolate`).

Built with ``ip``, ``unshare`` and ``nft``; nothing leaves the machine.
Everything carries the owner's pid, so :func:`sweep` removes what a dead owner
left. Needs root; standard library only. docs/test-master.md ("Real Mesos")
describes the layout.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Host",
    "HostNetwork",
    "HostsNotAvailable",
    "hosts_unavailable",
    "leftovers",
    "sweep",
]

NETNS_PREFIX = "tfmesos-"
"""Every namespace the harness makes: ``tfmesos-OWNERPID-N-HOSTNAME``."""
ALIAS_PREFIX = "tfmesos-hosts owner="
"""The alias of every link the harness makes, followed by the owner's pid."""
SUBNET = "10.213.{}"
"""The harness's range: 10.213.N.0/24, N one network (1 to 254)."""
NETNS_ETC = Path("/etc/netns")
SYS_NET = Path("/sys/class/net")
LOCK = Path("/run/tfmesos-hosts.lock")
NFT_TABLE = "tfmesos"

_NAMESPACE = re.compile(rf"^{NETNS_PREFIX}(\d+)-(\d+)-")


class HostsNotAvailable(RuntimeError):
    """This machine cannot make hosts of their own (not root, no ``ip netns``)."""


def hosts_unavailable() -> str | None:
    """Why hosts of their own cannot be made here, or None if they can."""
    if os.geteuid() != 0:
        return "hosts of their own need root (network namespaces, veths, a bridge)"
    for program in ("ip", "unshare", "nft", "hostname"):
        if shutil.which(program) is None:
            return f"hosts of their own need {program}, which is not on PATH"
    try:
        _run("ip", "netns", "list")
    except HostsNotAvailable as exc:
        return f"`ip netns` does not work here: {exc}"
    return None


def _run(*argv: str, check: bool = True) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise HostsNotAvailable(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One harness at a time sweeps and picks its network number."""
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _run("ip", "netns", "list").splitlines() if line.strip()]


def _owned_links() -> dict[str, int]:
    """Each link the harness made, and its owner's pid."""
    links = {}
    for entry in SYS_NET.iterdir():
        try:
            alias = (entry / "ifalias").read_text().strip()
        except OSError:
            continue
        if alias.startswith(ALIAS_PREFIX):
            with contextlib.suppress(ValueError):
                links[entry.name] = int(alias.removeprefix(ALIAS_PREFIX).split()[0])
    return links


def _remove_namespace(namespace: str) -> None:
    """SIGKILL what runs in ``namespace``, then delete it and its ``/etc/netns`` folder."""
    for pid in _run("ip", "netns", "pids", namespace, check=False).split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    _run("ip", "netns", "delete", namespace, check=False)
    shutil.rmtree(NETNS_ETC / namespace, ignore_errors=True)


def sweep() -> list[str]:
    """Remove what dead owners' networks left; return what was removed. Hold
    :func:`_locked`."""
    removed = []
    for namespace in _namespaces():
        match = _NAMESPACE.match(namespace)
        if match and not _alive(int(match[1])):
            _remove_namespace(namespace)
            removed.append(f"namespace {namespace}")
    for link, pid in _owned_links().items():
        if not _alive(pid):
            _run("ip", "link", "delete", link, check=False)
            removed.append(f"link {link}")
    if NETNS_ETC.is_dir():
        for folder in NETNS_ETC.iterdir():
            match = _NAMESPACE.match(folder.name)
            if match and not _alive(int(match[1])):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(f"folder {folder}")
    return removed


def leftovers(pid: int | None = None) -> list[str]:
    """What of the harness exists now (of owner ``pid``, or of any): for tests."""
    found = []
    for namespace in _namespaces():
        match = _NAMESPACE.match(namespace)
        if match and (pid is None or int(match[1]) == pid):
            found.append(f"namespace {namespace}")
    for link, owner in _owned_links().items():
        if pid is None or owner == pid:
            found.append(f"link {link}")
    if NETNS_ETC.is_dir():
        for folder in NETNS_ETC.iterdir():
            match = _NAMESPACE.match(folder.name)
            if match and (pid is None or int(match[1]) == pid):
                found.append(f"folder {folder}")
    return found


def _write_nsswitch(path: Path) -> None:
    """A host's ``/etc/nsswitch.conf``: this machine's, names looked up in
    the host's ``/etc/hosts`` only. No DNS server is reachable from a host
    (no route leads out): a name its file lacks is then unknown at once, as a
    real resolver's NXDOMAIN says, not a lookup that fails for now."""
    try:
        lines = Path("/etc/nsswitch.conf").read_text().splitlines()
    except OSError:
        lines = []
    kept = [line for line in lines if line.split(":", 1)[0].strip() != "hosts"]
    path.write_text("\n".join([*kept, "hosts: files"]) + "\n")


@dataclass(frozen=True)
class Host:
    """One host: its name (also its host name), address and namespace."""

    name: str
    address: str
    namespace: str
    link: str
    """Its veth's end on the bridge, in the root namespace."""

    def prefix(self) -> list[str]:
        """What to put before a command's argv to run it on this host: in its
        namespace (its network, its ``/etc/hosts``), under its host name."""
        return [
            "ip", "netns", "exec", self.namespace,
            "unshare", "--uts", "--",
            "sh", "-c", 'hostname "$0" && exec "$@"', self.name,
        ]  # fmt: skip

    def pids(self) -> list[int]:
        """The processes running on this host (in its network namespace)."""
        return [int(pid) for pid in _run("ip", "netns", "pids", self.namespace).split()]

    def run(self, *argv: str, check: bool = True) -> str:
        """Run ``argv`` in this host's namespace (``ip netns exec``), its output."""
        return _run("ip", "netns", "exec", self.namespace, *argv, check=check)


@dataclass
class HostNetwork:
    """Hosts of their own on one bridge; :meth:`close` removes them all."""

    number: int = 0
    """N of 10.213.N.0/24 and of the bridge ``tfmbrN``: chosen by :meth:`open`."""
    hosts: dict[str, Host] = field(default_factory=dict)
    owner: int = field(default_factory=os.getpid)
    unknown: dict[str, set[str]] = field(default_factory=dict)
    """The names each host's ``/etc/hosts`` leaves out: :meth:`forget`."""

    @property
    def bridge(self) -> str:
        return f"tfmbr{self.number}"

    @property
    def gateway(self) -> str:
        """The bridge's address: the root namespace's, as the hosts see it."""
        return f"{SUBNET.format(self.number)}.1"

    @classmethod
    def open(cls, names: Sequence[str] = ()) -> HostNetwork:
        """Sweep, then make a bridge on a free 10.213.N.0/24 and a host per name."""
        why = hosts_unavailable()
        if why:
            raise HostsNotAvailable(why)
        network = cls()
        try:
            with _locked():
                sweep()
                taken = {link.removeprefix("tfmbr") for link in os.listdir(SYS_NET)}
                routed = _run("ip", "-4", "route", "show")
                free = [
                    n
                    for n in range(1, 255)
                    if str(n) not in taken and f"{SUBNET.format(n)}." not in routed
                ]
                if not free:
                    raise HostsNotAvailable("every network of 10.213.0.0/16 is taken")
                network.number = free[0]
                network._make_bridge()
            for name in names:
                network.add(name)
        except BaseException:
            network.close()
            raise
        return network

    def _make_bridge(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "link", "set", self.bridge, "alias", f"{ALIAS_PREFIX}{self.owner}")
        _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")

    def add(self, name: str) -> Host:
        """A new host named ``name``; every host's ``/etc/hosts`` names it."""
        if not re.fullmatch(r"[a-z][a-z0-9-]{0,30}", name) or name in self.hosts:
            raise ValueError(f"a host needs a new name of lower-case letters and digits: {name!r}")
        index = len(self.hosts)
        if index > 250:
            raise ValueError("a network holds 251 hosts at most")
        host = Host(
            name=name,
            address=f"{SUBNET.format(self.number)}.{index + 2}",
            namespace=f"{NETNS_PREFIX}{self.owner}-{self.number}-{name}",
            link=f"tfm{self.number}h{index}",
        )
        self.hosts[name] = host
        (NETNS_ETC / host.namespace).mkdir(parents=True, exist_ok=True)
        _write_nsswitch(NETNS_ETC / host.namespace / "nsswitch.conf")
        self._write_hosts_files()
        _run("ip", "netns", "add", host.namespace)
        _run(
            "ip", "link", "add", host.link, "type", "veth",
            "peer", "name", "eth0", "netns", host.namespace,
        )  # fmt: skip
        _run("ip", "link", "set", host.link, "alias", f"{ALIAS_PREFIX}{self.owner}")
        _run("ip", "link", "set", host.link, "master", self.bridge, "up")
        _run("ip", "-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _run("ip", "-n", host.namespace, "link", "set", "eth0", "up")
        _run("ip", "-n", host.namespace, "link", "set", "lo", "up")
        # What cut() drops: an output chain dropping what goes to the set's addresses.
        host.run("nft", f"add table ip {NFT_TABLE}")
        host.run("nft", f"add set ip {NFT_TABLE} cut {{ type ipv4_addr ; }}")
        host.run("nft", f"add chain ip {NFT_TABLE} out {{ type filter hook output priority 0 ; }}")
        host.run("nft", f"add rule ip {NFT_TABLE} out ip daddr @cut drop")
        return host

    def _write_hosts_files(self) -> None:
        """Every host's ``/etc/hosts``: loopback, then every host by name.
        Written in place: ``ip netns exec`` bound the file itself, so a
        running program sees a host added later."""
        for host in self.hosts.values():
            unknown = self.unknown.get(host.name, set())
            named = [f"{h.address} {h.name}" for h in self.hosts.values() if h.name not in unknown]
            text = "\n".join(["127.0.0.1 localhost", *named]) + "\n"
            path = NETNS_ETC / host.namespace / "hosts"
            with open(path, "a+") as file:
                file.seek(0)
                file.truncate()
                file.write(text)

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    # -- faults -----------------------------------------------------------

    def forget(self, on: str, name: str) -> None:
        """Drop host ``name`` from host ``on``'s ``/etc/hosts``, as a missing DNS
        entry."""
        self.unknown.setdefault(on, set()).add(name)
        self._write_hosts_files()

    def cut(self, a: str, b: str) -> None:
        """Hosts ``a`` and ``b`` no longer hear each other (both ways, silently)."""
        for one, other in ((a, b), (b, a)):
            self[one].run("nft", f"add element ip {NFT_TABLE} cut {{ {self[other].address} }}")

    def heal(self, a: str, b: str) -> None:
        for one, other in ((a, b), (b, a)):
            self[one].run(
                "nft", f"delete element ip {NFT_TABLE} cut {{ {self[other].address} }}", check=False
            )

    def isolate(self, name: str) -> None:
        """Host ``name`` off the network: its link down (the harness loses it too)."""
        _run("ip", "link", "set", self[name].link, "down")

    def rejoin(self, name: str) -> None:
        _run("ip", "link", "set", self[name].link, "up")

    # -- the end ----------------------------------------------------------

    def close(self) -> None:
        """Remove every host (what still runs in one is SIGKILLed) and the bridge."""
        for host in self.hosts.values():
            _run("ip", "link", "delete", host.link, check=False)
            _remove_namespace(host.namespace)
        self.hosts.clear()
        if self.number:
            _run("ip", "link", "delete", self.bridge, check=False)
