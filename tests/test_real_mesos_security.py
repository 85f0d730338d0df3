"""A real Mesos 1.12 master as operators secure it: over TLS signed by an
internal CA, and demanding framework credentials.

**TLS.** The build in ``../shared/mesos/`` has no SSL (libprocess built
without ``--enable-ssl``), so the master is reached through :class:`TLSProxy`,
a TLS server in front of it that forwards the bytes both ways, configured as
libprocess configures a master's TLS by default (``openssl.cpp``: TLS 1.2
only, ``LIBPROCESS_SSL_CIPHERS``'s default list, the server's preference;
``LIBPROCESS_SSL_REQUIRE_CLIENT_CERT`` when asked), with a certificate signed
by a CA made here with the ``openssl`` CLI (:class:`PKI`), naming the master
by its IP address (``subjectAltName=IP:127.0.0.1``), as a master found
through ZooKeeper is dialled. With one master, no redirect names another
address.

**Authentication.** A master started with ``--authenticate_frameworks
--authenticate_http_frameworks --http_framework_authenticators=basic
--credentials=FILE``, as the Mesos docs (``docs/authentication.md``) set it up.

Each cluster (one master, one agent) is started once for its tests; the
agents' ports lie in 28000-28199, apart from every other real-Mesos test's and
below Linux's ephemeral ports (32768-60999), which any connection may take.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import ROOT, run_tfrun, tfrun_argv
from tests.jobevents import JobEvents
from tests.mesos_clusters import real_mesos_home, real_mesos_unavailable
from tests.test_zookeeper import ZK_HOSTS, master_info, zookeeper_client
from tfmesos.testing.real_mesos import AgentSpec, MesosNotAvailable, RealMesos

LIBPROCESS_CIPHERS = (
    "AES128-SHA:AES256-SHA:RC4-SHA:DHE-RSA-AES128-SHA:DHE-DSS-AES128-SHA:"
    "DHE-RSA-AES256-SHA:DHE-DSS-AES256-SHA"
)
"""libprocess's default ``LIBPROCESS_SSL_CIPHERS`` (``openssl.cpp``): what a
master left at the defaults accepts."""
TLS_AGENT = AgentSpec("cpus:4;mem:4096;ports:[28000-28099]")
AUTH_AGENT = AgentSpec("cpus:4;mem:4096;ports:[28100-28199]")
PRINCIPAL = "tf-team"
JOB = ("-w", "2", "-s", "0", "--reconnect-timeout", "30", "--", "true")
"""Two workers (worker 1 from an offer); a reconnect budget short enough that
a failure that is retried instead of said at once is seen as such."""


def say(text: str) -> None:
    print(f"\n{text}", file=sys.stderr, flush=True)


# ------------------------------------------------------------- certificates


def openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


@dataclass(frozen=True)
class PKI:
    """Certificates made with the ``openssl`` CLI under ``folder``."""

    folder: Path

    @property
    def ca(self) -> Path:
        """The CA that signs the master's and the client's certificates."""
        return self.folder / "ca.pem"

    @property
    def ca_dir(self) -> Path:
        """A directory holding :attr:`ca` under its hash (``openssl rehash``'s form)."""
        return self.folder / "ca-dir"

    @property
    def other_ca(self) -> Path:
        """A CA that signed nothing here."""
        return self.folder / "other-ca.pem"

    def cert(self, name: str) -> tuple[Path, Path]:
        """The certificate ``name`` and its key."""
        return self.folder / f"{name}.pem", self.folder / f"{name}.key"

    @classmethod
    def make(cls, folder: Path) -> PKI:
        if shutil.which("openssl") is None:
            reason = "no openssl CLI to make the test's CA (apt-get install openssl)"
            if os.environ.get("CI"):
                pytest.fail(reason)
            say(f"skipping: {reason}")
            pytest.skip(reason)
        pki = cls(folder)
        days = ("-days", "2")
        for ca in ("ca", "other-ca"):
            openssl(
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", *days,
                "-keyout", folder / f"{ca}.key", "-out", folder / f"{ca}.pem",
                "-subj", f"/CN=tfmesos test {ca}",
            )  # fmt: skip
        for name, san in (
            ("master", "IP:127.0.0.1"),
            ("master-by-name", "DNS:mesos-master.invalid"),
            ("client", "DNS:tfrun-client.invalid"),
        ):
            cert, key = pki.cert(name)
            csr = folder / f"{name}.csr"
            openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
                    "-subj", f"/CN={name}")  # fmt: skip
            ext = folder / f"{name}.ext"
            ext.write_text(f"subjectAltName={san}\n")
            openssl("x509", "-req", "-in", csr, "-CA", pki.ca, "-CAkey", folder / "ca.key",
                    "-CAcreateserial", "-out", cert, *days, "-extfile", ext)  # fmt: skip
        pki.ca_dir.mkdir()
        digest = subprocess.run(
            ["openssl", "x509", "-hash", "-noout", "-in", str(pki.ca)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        shutil.copy(pki.ca, pki.ca_dir / f"{digest}.0")
        return pki


def libprocess_server_context(
    cert: Path, key: Path, client_ca: Path | None = None
) -> ssl.SSLContext:
    """A server context as libprocess makes a master's by default
    (``reinitialize`` in ``3rdparty/libprocess/src/openssl.cpp``): TLS 1.2
    only, its default cipher list, the server's preference; with
    ``client_ca``, a client certificate required and verified
    (``LIBPROCESS_SSL_REQUIRE_CLIENT_CERT``)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(LIBPROCESS_CIPHERS)
    context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    context.load_cert_chain(cert, key)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cafile=client_ca)
    return context


class TLSProxy:
    """A TLS server on a free port of 127.0.0.1 that forwards each connection's
    bytes, both ways, to 127.0.0.1:``target``: a master serving TLS.
    :attr:`refused` counts the handshakes it failed."""

    def __init__(self, target: int, context: ssl.SSLContext) -> None:
        self.target = target
        self.context = context
        self.refused: list[str] = []
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            tls = self.context.wrap_socket(client, server_side=True)
        except (OSError, ssl.SSLError) as exc:
            self.refused.append(str(exc))
            client.close()
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target))
        except OSError:
            tls.close()
            return
        with self._lock:
            self._sockets += [tls, upstream]
        threading.Thread(target=self._pump, args=(upstream, tls), daemon=True).start()
        self._pump(tls, upstream)

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
                    end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()


@contextlib.contextmanager
def tls_proxy(target: int, context: ssl.SSLContext) -> Iterator[TLSProxy]:
    proxy = TLSProxy(target, context)
    try:
        yield proxy
    finally:
        proxy.close()


# ----------------------------------------------------------------- clusters


@contextlib.contextmanager
def real_cluster(base: Path, agent: AgentSpec, **master_flags: str) -> Iterator[RealMesos]:
    real = RealMesos(real_mesos_home(), agents=[agent], master_flags=master_flags, base=base)
    try:
        real.start()
    except MesosNotAvailable as exc:
        real_mesos_unavailable(f"it did not start: {exc}")
    try:
        yield real
    finally:
        real.stop()


@pytest.fixture(scope="module")
def plain_mesos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealMesos]:
    """A real master (no SSL in this build) and one agent, for the TLS proxy."""
    with real_cluster(tmp_path_factory.mktemp("tls-mesos"), TLS_AGENT) as real:
        yield real


@dataclass(frozen=True)
class AuthMesos:
    real: RealMesos
    secret: str
    secret_file: Path


@pytest.fixture(scope="module")
def auth_mesos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthMesos]:
    """A real master that authenticates frameworks with HTTP Basic, knowing
    one principal and its (random) secret; one agent."""
    base = tmp_path_factory.mktemp("auth-mesos")
    secret = secrets.token_hex(16)
    credentials = base / "credentials.json"
    credentials.write_text(
        json.dumps({"credentials": [{"principal": PRINCIPAL, "secret": secret}]})
    )
    secret_file = base / "secret"
    secret_file.write_text(secret + "\n")  # as `echo SECRET > FILE` writes it
    secret_file.chmod(0o600)
    flags = {
        "authenticate_frameworks": "true",
        "authenticate_http_frameworks": "true",
        "http_framework_authenticators": "basic",
        "credentials": str(credentials),
    }
    with real_cluster(base / "mesos", AUTH_AGENT, **flags) as real:
        yield AuthMesos(real, secret, secret_file)


def master_port(real: RealMesos) -> int:
    return int(real.address.rsplit(":", 1)[1])


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any Mesos TLS or credential
    setting of the machine's, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LIBPROCESS_SSL_", "SSL_"))
        and k not in ("MESOS_PRINCIPAL", "MESOS_SECRET")
    }
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.update(extra)
    return env


def tfrun_timed(
    *args: str, env: dict[str, str], events: JobEvents
) -> tuple[subprocess.CompletedProcess[str], float]:
    """tfrun with ``args``, its events to ``events``, and how long it took."""
    started = time.monotonic()
    done = run_tfrun(*events.flag, *args, env=env, timeout=300)
    return done, time.monotonic() - started


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("tfrun: error:")]


def assert_said_at_once(
    done: subprocess.CompletedProcess[str], status: int, events: JobEvents
) -> str:
    """tfrun exited ``status``, tfrun's own error, no task placed, with one
    error line, at the first try: no re-subscription, no reconnect budget
    spent. The line, returned."""
    assert done.returncode == status, done.stderr
    verdict = events.verdict()
    assert (verdict["result"], verdict["exit_status"]) == ("error", status), verdict
    assert "task_placed" not in events.names(), events.names()
    (line,) = error_lines(done.stderr)
    assert "re-subscribing" not in done.stderr, done.stderr
    assert "within 30s" not in line, line
    assert "Traceback" not in done.stderr, done.stderr
    return line


@pytest.fixture
def zookeeper() -> Iterator[Any]:
    """A client of the ZooKeeper server that scripts/start-zookeeper runs (as
    tests/test_zookeeper.py finds it)."""
    client = zookeeper_client()
    yield client
    client.stop()
    client.close()


# ----------------------------------------------------------------------- TLS


@pytest.mark.parametrize("given", ["--ssl-ca", "LIBPROCESS_SSL_CA_FILE", "LIBPROCESS_SSL_CA_DIR"])
@pytest.mark.e2e
def test_a_job_runs_through_a_tls_master_with_its_ca_given(
    plain_mesos: RealMesos, pki: PKI, given: str, tmp_path: Path
) -> None:
    """The CA as a flag (its file) or as libprocess's variables (its file, or
    a hashed directory), the master's scheme from ``LIBPROCESS_SSL_ENABLED``
    (as libprocess decides it) or given: the job runs."""
    events = JobEvents(tmp_path / "events.jsonl")
    cert, key = pki.cert("master")
    with tls_proxy(master_port(plain_mesos), libprocess_server_context(cert, key)) as proxy:
        if given == "--ssl-ca":
            done, took = tfrun_timed(
                "-m", proxy.url, "--ssl-ca", str(pki.ca), *JOB, env=clean_env(), events=events
            )
        else:
            trust = str(pki.ca if given == "LIBPROCESS_SSL_CA_FILE" else pki.ca_dir)
            env = clean_env(LIBPROCESS_SSL_ENABLED="true", **{given: trust})
            done, took = tfrun_timed("-m", f"127.0.0.1:{proxy.port}", *JOB, env=env, events=events)
    say(f"TLS job with the CA from {given}: exit {done.returncode} in {took:.2f} s")
    assert done.returncode == 0, done.stderr
    assert events.verdict()["result"] == "succeeded", done.stderr
    [attached] = events.of("backend_attached")
    assert attached["master"] == f"https://127.0.0.1:{proxy.port}", attached
    assert not proxy.refused, proxy.refused


def test_a_tls_master_found_through_zookeeper_is_dialled_and_verified_by_its_ip(
    plain_mesos: RealMesos, pki: PKI, zookeeper: Any, tmp_path: Path
) -> None:
    """The master's MasterInfo in ZooKeeper, as a master writes it, under a
    host name that does not resolve, its ``pid`` at the TLS endpoint: tfrun
    dials the IP (https, as ``LIBPROCESS_SSL_ENABLED`` says) and checks the
    certificate's IP subjectAltName."""
    cert, key = pki.cert("master")
    group = f"/tfmesos-security-{uuid.uuid4().hex}"
    events = JobEvents(tmp_path / "events.jsonl")
    with tls_proxy(master_port(plain_mesos), libprocess_server_context(cert, key)) as proxy:
        zookeeper.create(
            f"{group}/json.info_", master_info("mesos-master.invalid", proxy.port, pid_host="127.0.0.1"),
            ephemeral=True, sequence=True, makepath=True,
        )  # fmt: skip
        try:
            env = clean_env(LIBPROCESS_SSL_ENABLED="true", LIBPROCESS_SSL_CA_FILE=str(pki.ca))
            done, took = tfrun_timed("-m", f"zk://{ZK_HOSTS}{group}", *JOB, env=env, events=events)
        finally:
            zookeeper.delete(group, recursive=True)
    say(f"TLS master through ZooKeeper: exit {done.returncode} in {took:.2f} s")
    assert done.returncode == 0, done.stderr
    assert events.verdict()["result"] == "succeeded", done.stderr
    # The master subscribed to, by its IP, over TLS; its web UI reached the same way.
    [attached] = events.of("backend_attached")
    assert attached["master"] == f"https://127.0.0.1:{proxy.port}", attached
    page = f"{attached['master']}/#/frameworks/{attached['framework_id']}"
    assert attached["web_ui"] == page, attached
    assert not proxy.refused, proxy.refused


@pytest.mark.e2e
def test_without_the_ca_the_job_ends_at_once_with_the_ssl_reason(
    plain_mesos: RealMesos, pki: PKI, tmp_path: Path
) -> None:
    """The CA not given: tfrun trusts the system's CAs, which never signed
    the master's certificate. One line, the SSL reason, what was trusted and
    what to set; no retry for the reconnect budget (the old message,
    "Cannot connect: Operation not permitted", after 120 s)."""
    events = JobEvents(tmp_path / "events.jsonl")
    cert, key = pki.cert("master")
    port = master_port(plain_mesos)
    with tls_proxy(port, libprocess_server_context(cert, key)) as proxy:
        done, took = tfrun_timed("-m", proxy.url, *JOB, env=clean_env(), events=events)
    line = assert_said_at_once(done, 125, events)
    say(f"no CA: exit {done.returncode} in {took:.2f} s: {line}")
    assert f"TLS handshake with {proxy.url} failed: certificate verify failed:" in line
    assert "unable to get local issuer certificate" in line
    assert "the system's CAs" in line
    assert "--ssl-ca" in line and "LIBPROCESS_SSL_CA_FILE" in line
    assert "Operation not permitted" not in done.stderr


@pytest.mark.e2e
def test_a_wrong_ca_is_refused_and_named(plain_mesos: RealMesos, pki: PKI, tmp_path: Path) -> None:
    events = JobEvents(tmp_path / "events.jsonl")
    cert, key = pki.cert("master")
    port = master_port(plain_mesos)
    with tls_proxy(port, libprocess_server_context(cert, key)) as proxy:
        env = clean_env(LIBPROCESS_SSL_CA_FILE=str(pki.other_ca))
        done, took = tfrun_timed("-m", proxy.url, *JOB, env=env, events=events)
    line = assert_said_at_once(done, 125, events)
    say(f"a wrong CA: exit {done.returncode} in {took:.2f} s: {line}")
    assert "certificate verify failed" in line
    assert f"the CAs in {pki.other_ca} ($LIBPROCESS_SSL_CA_FILE)" in line


@pytest.mark.e2e
def test_a_certificate_that_does_not_name_the_masters_ip_is_refused(
    plain_mesos: RealMesos, pki: PKI, tmp_path: Path
) -> None:
    """Signed by the CA given, but for a host name only, while the master is
    dialled by its IP (as a master found through ZooKeeper is)."""
    events = JobEvents(tmp_path / "events.jsonl")
    cert, key = pki.cert("master-by-name")
    port = master_port(plain_mesos)
    with tls_proxy(port, libprocess_server_context(cert, key)) as proxy:
        done, took = tfrun_timed(
            "-m", proxy.url, "--ssl-ca", str(pki.ca), *JOB, env=clean_env(), events=events
        )
    line = assert_said_at_once(done, 125, events)
    say(f"a certificate without the IP: exit {done.returncode} in {took:.2f} s: {line}")
    assert "IP address mismatch" in line
    assert "must name the address dialled, 127.0.0.1" in line


@pytest.mark.e2e
def test_a_master_that_requires_a_client_certificate_gets_libprocess_s(
    plain_mesos: RealMesos, pki: PKI, tmp_path: Path
) -> None:
    """``LIBPROCESS_SSL_REQUIRE_CLIENT_CERT`` on the master: tfrun presents
    ``LIBPROCESS_SSL_CERT_FILE``/``KEY_FILE``, as libprocess does, and the
    job runs; without them, the master's refusal is said at once."""
    events = JobEvents(tmp_path / "events.jsonl")
    without_events = JobEvents(tmp_path / "without.jsonl")
    cert, key = pki.cert("master")
    client_cert, client_key = pki.cert("client")
    port = master_port(plain_mesos)
    context = libprocess_server_context(cert, key, client_ca=pki.ca)
    with tls_proxy(port, context) as proxy:
        env = clean_env(
            LIBPROCESS_SSL_CA_FILE=str(pki.ca),
            LIBPROCESS_SSL_CERT_FILE=str(client_cert),
            LIBPROCESS_SSL_KEY_FILE=str(client_key),
        )
        done, took = tfrun_timed("-m", proxy.url, *JOB, env=env, events=events)
        say(f"with a client certificate: exit {done.returncode} in {took:.2f} s")
        assert done.returncode == 0, done.stderr
        assert events.verdict()["result"] == "succeeded", done.stderr
        assert not proxy.refused, proxy.refused
        without, took = tfrun_timed(
            "-m",
            proxy.url,
            *JOB,
            env=clean_env(LIBPROCESS_SSL_CA_FILE=str(pki.ca)),
            events=without_events,
        )
    line = assert_said_at_once(without, 125, without_events)
    say(f"without it: exit {without.returncode} in {took:.2f} s: {line}")
    assert f"TLS handshake with {proxy.url} failed:" in line
    assert "LIBPROCESS_SSL_CERT_FILE" in line


# ------------------------------------------------------------ authentication


@pytest.mark.e2e
def test_the_right_credentials_from_the_flags_run_the_job(
    auth_mesos: AuthMesos, tmp_path: Path
) -> None:
    events = JobEvents(tmp_path / "events.jsonl")
    done, took = tfrun_timed(
        "-m", auth_mesos.real.address, "--principal", PRINCIPAL,
        "--secret-file", str(auth_mesos.secret_file), *JOB, env=clean_env(), events=events,
    )  # fmt: skip
    say(f"--principal and --secret-file: exit {done.returncode} in {took:.2f} s")
    assert done.returncode == 0, done.stderr
    assert events.verdict()["result"] == "succeeded", done.stderr
    state = auth_mesos.real.state()
    principals = [f.get("principal") for f in state["frameworks"] + state["completed_frameworks"]]
    assert PRINCIPAL in principals
    assert auth_mesos.secret not in done.stdout + done.stderr


@pytest.mark.e2e
def test_the_right_credentials_from_the_environment_run_the_job(
    auth_mesos: AuthMesos, tmp_path: Path
) -> None:
    events = JobEvents(tmp_path / "events.jsonl")
    env = clean_env(MESOS_PRINCIPAL=PRINCIPAL, MESOS_SECRET=auth_mesos.secret)
    done, took = tfrun_timed("-m", auth_mesos.real.address, *JOB, env=env, events=events)
    say(f"$MESOS_PRINCIPAL and $MESOS_SECRET: exit {done.returncode} in {took:.2f} s")
    assert done.returncode == 0, done.stderr
    assert events.verdict()["result"] == "succeeded", done.stderr
    assert auth_mesos.secret not in done.stdout + done.stderr


@pytest.mark.parametrize("verbose", [False, True])
@pytest.mark.e2e
def test_a_wrong_secret_is_one_line_and_a_status_of_its_own(
    auth_mesos: AuthMesos, tmp_path: Path, verbose: bool
) -> None:
    """Exit 77 (EX_NOPERM), at the first answer, the principal named and the
    secret nowhere in what tfrun says, with -v (tracebacks at debug) too."""
    wrong = secrets.token_hex(16)
    events = JobEvents(tmp_path / "events.jsonl")
    secret_file = tmp_path / "secret"
    secret_file.write_text(wrong)
    args = ("-v",) if verbose else ()
    done, took = tfrun_timed(
        *args, "-m", auth_mesos.real.address, "--principal", PRINCIPAL,
        "--secret-file", str(secret_file), *JOB, env=clean_env(), events=events,
    )  # fmt: skip
    assert wrong not in done.stdout + done.stderr
    assert auth_mesos.secret not in done.stdout + done.stderr
    if verbose:
        assert done.returncode == 77, done.stderr
        assert events.verdict()["exit_status"] == 77, done.stderr
        return
    line = assert_said_at_once(done, 77, events)
    say(f"a wrong secret: exit {done.returncode} in {took:.2f} s: {line}")
    assert f"the Mesos master at http://{auth_mesos.real.address} refused the credentials" in line
    assert f"principal {PRINCIPAL!r} (401 Unauthorized)" in line


@pytest.mark.e2e
def test_no_credentials_for_a_master_that_demands_them(
    auth_mesos: AuthMesos, tmp_path: Path
) -> None:
    events = JobEvents(tmp_path / "events.jsonl")
    done, took = tfrun_timed("-m", auth_mesos.real.address, *JOB, env=clean_env(), events=events)
    line = assert_said_at_once(done, 77, events)
    say(f"no credentials: exit {done.returncode} in {took:.2f} s: {line}")
    assert "demands authentication (401 Unauthorized)" in line
    assert "--principal" in line and "--secret-file" in line and "$MESOS_SECRET" in line


def _holding(secret: str, exclude: set[int]) -> list[str]:
    """Every process (but ``exclude``) whose command line or environment
    holds ``secret``."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid in exclude:
            continue
        try:
            where = [" ".join(proc.cmdline()), *proc.environ().values()]
            if any(secret in text for text in where):
                found.append(f"{proc.pid} {proc.name()}: {' '.join(proc.cmdline())[:200]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.mark.parametrize("source", ["--secret-file", "MESOS_SECRET"])
@pytest.mark.e2e
def test_the_secret_is_in_no_process_of_the_job(
    auth_mesos: AuthMesos, tmp_path: Path, source: str
) -> None:
    """While every task runs (the chief beside tfrun, worker 1 under the
    agent's executor), no process's command line or environment holds the
    secret: not tfrun's children, not the tasks, not the executors. With
    ``$MESOS_SECRET``, tfrun's own environment holds it, as the shell gave
    it; tfrun takes it out of the environment its children inherit."""
    marks = tmp_path / "marks"
    marks.mkdir()
    command = f"touch {marks}/up-{{task_index}}; while [ ! -e {marks}/go ]; do sleep 0.05; done"
    args: tuple[str, ...]
    if source == "--secret-file":
        args = ("--principal", PRINCIPAL, "--secret-file", str(auth_mesos.secret_file))
        env = clean_env()
    else:
        args = ()
        env = clean_env(MESOS_PRINCIPAL=PRINCIPAL, MESOS_SECRET=auth_mesos.secret)
    argv = ["-m", auth_mesos.real.address, *args, "-w", "2", "-s", "0", "--", command]
    # Its pipes closed and tfrun reaped at the end; not read to their end if
    # it is killed, since the tasks it leaves may hold them open.
    with subprocess.Popen(
        tfrun_argv(*argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env, cwd=ROOT,
    ) as proc:  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while not all((marks / f"up-{i}").exists() for i in (0, 1)):
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the tasks did not start within 120 s"
                time.sleep(0.05)
            holders = _holding(auth_mesos.secret, exclude={os.getpid(), proc.pid})
            (marks / "go").touch()
            out, err = proc.communicate(timeout=120)
        finally:
            (marks / "go").touch()  # the tasks end, whatever became of tfrun
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    assert holders == []
    assert auth_mesos.secret not in out + err


@pytest.mark.e2e
def test_a_secret_without_a_principal_is_bad_usage(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text("s3cret\n")
    done = run_tfrun("-m", "127.0.0.1:1", "--secret-file", str(secret_file), *JOB, env=clean_env())
    assert done.returncode == 2, done.stderr
    assert "gives a secret but no principal" in done.stderr
    assert "s3cret" not in done.stderr


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (
            ("--principal", "tf", "--secret-file", "/nowhere/secret"),
            "--secret-file /nowhere/secret: No such file",
        ),
        (("--ssl-ca", "/nowhere/ca.pem"), "--ssl-ca /nowhere/ca.pem: no such file or directory"),
        (("--principal", "tf:x"), "a principal cannot hold ':'"),
    ],
)
@pytest.mark.e2e
def test_what_cannot_be_used_is_bad_usage_before_anything_starts(
    flags: tuple[str, ...], said: str
) -> None:
    done = run_tfrun("-m", "127.0.0.1:1", *flags, *JOB, env=clean_env())
    assert done.returncode == 2, done.stderr
    assert said in done.stderr


@pytest.mark.e2e
def test_a_detached_jobs_credentials_reach_its_launcher_task_in_no_state(
    auth_mesos: AuthMesos, tmp_path: Path
) -> None:
    """``tfrun --detach`` with ``--principal`` and ``--secret-file``: the
    launcher task, which takes the framework over, gets the secret through
    the sealed handover (tfmesos.backends.mesos.handover), not its
    ``TaskInfo``: the job runs to success as that principal, and neither
    the master's nor the agent's ``/state`` holds the secret."""
    real = auth_mesos.real
    credentials = ("--principal", PRINCIPAL, "--secret-file", str(auth_mesos.secret_file))
    done = run_tfrun(
        "--detach", "-m", real.address, *credentials, "-w", "2", "-s", "0", "--", "true",
        env=clean_env(), timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = done.stdout.splitlines()[-1]
    seen = json.dumps(real.state()) + json.dumps(real.agent_state(0))
    waited = run_tfrun("wait", "-m", real.address, *credentials, job, env=clean_env())
    assert waited.returncode == 0, waited.stderr
    seen += json.dumps(real.state()) + json.dumps(real.agent_state(0))
    assert auth_mesos.secret not in seen
    state = real.state()
    (framework,) = [
        f
        for f in state["frameworks"] + state["completed_frameworks"]
        if {"key": "tfmesos.job", "value": job} in f.get("labels", [])
    ]
    assert framework["principal"] == PRINCIPAL
    assert len(framework["completed_tasks"]) == 2  # the launcher's (with the chief), worker:1
