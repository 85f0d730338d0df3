"""What tfrun says, and how it ends, where the last adversarial run found it
saying too much, too little or the wrong thing (issue 27; issue 26, point 6).

- A master that speaks only TLS, dialled with ``http``: one line that says
  so and how to reach it, at once, not a master lost ("Server disconnected").
- A task refused at the rendezvous while the job stops is expected, not news.
- A signal while tfrun says its verdict: the verdict in full, 128 + the
  signal, no traceback.
- A user's path with a control character in it is shown quoted.
- What a local or Slurm user is told to do names what applies to them, not
  only Mesos.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ROOT, JobProcesses, tfrun_argv
from tfmesos.mesos.transport import AiohttpTransport, TLSError

API = "/api/v1/scheduler"


# -- a master that speaks only TLS, dialled with http ---------------------------


@contextlib.contextmanager
def tls_only_server(pki: Any) -> Iterator[int]:
    """A TLS server on 127.0.0.1 (its port) configured as libprocess
    configures a master's: it handshakes, and hangs up on plain HTTP."""
    from tests.test_real_mesos_security import libprocess_server_context, tls_proxy

    context = libprocess_server_context(*pki.cert("master"))
    with tls_proxy(1, context) as proxy:  # handshakes only: nothing is forwarded
        yield proxy.port


def answered_with_tls(port: int) -> str:
    return (
        f"the Mesos master at http://127.0.0.1:{port} answered with TLS: it serves https "
        f"only; give -m https://127.0.0.1:{port} (or set LIBPROCESS_SSL_ENABLED=true, so "
        "that every master, ZooKeeper's too, is dialled with https; its certificate must "
        "chain to --ssl-ca FILE|DIR, $LIBPROCESS_SSL_CA_FILE / $LIBPROCESS_SSL_CA_DIR, or "
        "else the system's CAs)"
    )


@pytest.mark.e2e
def test_a_tls_master_dialled_with_http_is_named_as_tls_by_the_transport(pki: Any) -> None:
    async def subscribe(port: int) -> BaseException:
        transport = AiohttpTransport()
        try:
            await transport.open_stream(f"http://127.0.0.1:{port}{API}", b"{}", {})
        except BaseException as exc:  # what it raised is the subject
            return exc
        finally:
            await transport.aclose()
        raise AssertionError("a TLS server answered plain HTTP")

    with tls_only_server(pki) as port:
        error = asyncio.run(subscribe(port))
    assert isinstance(error, TLSError), repr(error)
    assert str(error) == answered_with_tls(port)


@pytest.mark.unit
def test_a_plain_server_that_hangs_up_is_still_a_master_lost_and_retried() -> None:
    """Only an answer in TLS makes the hang-up a TLS master: a plain server
    that hangs up (a master going down) is asked once, briefly, and stays a
    TransportError, which the client retries."""
    from tfmesos.mesos.transport import TransportError

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        writer.close()

    async def scenario() -> BaseException:
        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport = AiohttpTransport()
        try:
            await transport.open_stream(f"http://127.0.0.1:{port}{API}", b"{}", {})
        except BaseException as exc:  # what it raised is the subject
            return exc
        finally:
            await transport.aclose()
            server.close()
        raise AssertionError("a server that hangs up answered")

    error = asyncio.run(scenario())
    assert type(error) is TransportError, repr(error)


@pytest.mark.e2e
def test_tfrun_at_a_tls_master_given_as_http_says_so_in_one_line_at_once(
    pki: Any, job_procs: JobProcesses
) -> None:
    """Before: the client took the hang-up for a master lost, tried until
    --connect-timeout was spent, and said only "Server disconnected" (or
    "Connection reset by peer")."""
    with tls_only_server(pki) as port:
        started = time.monotonic()
        result = subprocess.run(
            tfrun_argv("-m", f"127.0.0.1:{port}", "-w", "2", "--", "true"),
            capture_output=True,
            text=True,
            env=job_procs.env(),
            cwd=ROOT,
            timeout=120,
        )
        elapsed = time.monotonic() - started
    assert result.returncode == 125, result.stderr
    (line,) = result.stderr.splitlines()
    assert line == f"tfrun: error: the mesos backend failed: {answered_with_tls(port)}", line
    # At once: well within the first-contact budget (--connect-timeout, 10 s).
    assert elapsed < 8, (elapsed, line)
    assert job_procs.wait_gone(10) == []


# -- a signal while tfrun says its verdict --------------------------------------


class InterruptingStderr(io.StringIO):
    """tfrun's stderr, which sends ``signum`` to this process as the first
    line starting with ``starting`` is written: the signal lands exactly
    while tfrun says it (a signal to oneself is handled before os.kill
    returns to Python code)."""

    def __init__(self, starting: str, signum: int = signal.SIGINT) -> None:
        super().__init__()
        self.starting = starting
        self.signum = signum
        self.sent = False

    def write(self, text: str) -> int:
        if not self.sent and text.startswith(self.starting):
            self.sent = True
            os.kill(os.getpid(), self.signum)
        return super().write(text)


@pytest.fixture
def tfrun_in_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """cli.main run here on a fake backend that fails as it starts (its
    master lost, say), with the signal handlers and tfmesos's log level as
    they were afterwards."""
    import tfmesos.run
    from tfmesos.errors import TFMesosError
    from tfmesos.testing.fake import FakeBackend

    def launcher_factory(spec: Any, backend: str, options: Any, events: Any) -> Any:
        def make(restart: int) -> Any:
            failing = FakeBackend(spec, start_error=TFMesosError("the master is gone"))
            return failing.launcher()

        return make

    monkeypatch.setattr(tfmesos.run, "launcher_factory", launcher_factory)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    level = logging.getLogger("tfmesos").level
    yield
    logging.getLogger("tfmesos").setLevel(level)
    assert {s: signal.getsignal(s) for s in handlers} == handlers


@pytest.mark.unit
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_tfrun_says_its_error_cuts_neither_it_nor_its_status(
    tfrun_in_process: None, monkeypatch: pytest.MonkeyPatch, signum: int
) -> None:
    """Before: the job's event loop had put Python's handlers back, and
    SIGINT raised KeyboardInterrupt in the middle of the line (a traceback,
    no verdict), SIGTERM killed tfrun there."""
    from tfmesos import cli

    stderr = InterruptingStderr("tfrun: error:", signum)
    monkeypatch.setattr("sys.stderr", stderr)
    status = cli.main(["-m", "127.0.0.1:1", "-w", "2", "--", "true"])
    assert stderr.sent
    assert status == 125
    said = stderr.getvalue()
    assert "tfrun: error: the master is gone\n" in said, said
    assert "Traceback" not in said and "KeyboardInterrupt" not in said, said


# -- a user's path with a control character in it --------------------------------


@pytest.mark.unit
def test_a_path_is_shown_as_it_is_unless_a_character_in_it_would_not_print_as_itself() -> None:
    from tfmesos.pathtext import shown_path

    assert shown_path("/tmp/my logs/run 1") == "/tmp/my logs/run 1"
    assert shown_path("/tmp/Ärger") == "/tmp/Ärger"
    assert shown_path("/tmp/a\nb") == "'/tmp/a\\nb'"
    assert shown_path("/tmp/a\tb\x1b[31m") == "'/tmp/a\\tb\\x1b[31m'"
    assert shown_path("/tmp/\udcff") == "'/tmp/\\udcff'"  # an undecodable byte


@pytest.mark.unit
def test_tfruns_refusals_show_a_path_with_a_newline_quoted_on_one_line(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], tfrun_in_process: None
) -> None:
    from tfmesos import cli

    a_file = tmp_path / "f\nile"
    a_file.write_text("")
    refusals = {
        "--log-dir": f"--log-dir: cannot use {str(a_file)!r}: it is not a directory",
        "--chdir": f"--chdir: {str(a_file)!r} is not a directory",
        "-e": f"-e: {str(a_file)!r} is not valid JSON",
    }
    for flag, said in refusals.items():
        a_file.write_text("" if flag != "-e" else "{")
        with pytest.raises(SystemExit) as refused:
            cli.parse_args([flag, str(a_file), "-w", "1", "--", "true"])
        assert refused.value.code == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert said in line, line
    # --events is opened once the job is parsed.
    missing = tmp_path / "no\ndir" / "events"
    assert cli.main(["-m", "127.0.0.1:1", "--events", str(missing), "-w", "1", "--", "true"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"tfrun: error: --events: cannot write {str(missing)!r}: "), line


@pytest.mark.unit
def test_where_the_local_and_slurm_backends_keep_the_logs_is_shown_quoted(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tfmesos.backends.local import LocalBackend
    from tfmesos.backends.slurm import SlurmBackend
    from tfmesos.spec import ClusterSpec, Job

    where = tmp_path / "a\nb"
    job = ClusterSpec((Job("worker", 1),))
    assert LocalBackend(job, log_dir=where).logs_location() == repr(str(where))
    # Slurm's commands as if on PATH: nothing is run.
    monkeypatch.setattr("tfmesos.backends.slurm.shutil.which", lambda name: f"/usr/bin/{name}")
    assert SlurmBackend(job, log_dir=where).logs_location() == repr(str(where))


def test_the_mesos_backends_files_are_shown_quoted(tmp_path: Any) -> None:
    from tfmesos.backends.mesos_options import read_secret
    from tfmesos.errors import SpecError
    from tfmesos.mesos.masters import parse_masters

    odd = tmp_path / "a\nb"
    quoted = repr(str(odd))
    with pytest.raises(SpecError) as secret:
        read_secret(str(odd))
    with pytest.raises(SpecError) as master:
        parse_masters(f"file://{odd}")
    for said in (str(secret.value), str(master.value)):
        assert quoted in said and "\n" not in said, said


@pytest.mark.e2e
def test_a_local_job_with_a_newline_in_its_log_dir_says_where_its_logs_are_on_one_line(
    tmp_path: Any, job_procs: JobProcesses
) -> None:
    where = tmp_path / "a\nb"
    result = subprocess.run(
        tfrun_argv("--log-dir", str(where), "-w", "1", "-s", "0", "--", "true"),
        capture_output=True,
        text=True,
        env=job_procs.env(),
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert f"[tfrun] the full output of each task goes to {str(where)!r}" in lines, lines
    assert f"[tfrun] the full output of each task is in {str(where)!r}" in lines, lines
    assert all(line.startswith("[tfrun] ") for line in lines), lines
    assert (where / "worker.0.0.log").exists() or list(where.iterdir()), "no log kept there"


# -- what a local or Slurm user is told to do --------------------------------------

ON_A_CLUSTER = "(-m MASTER for Mesos, --backend slurm)"


@pytest.fixture
def a_small_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine as the local backend sees it: 2 CPUs, 1 GiB, one GPU."""
    from tfmesos.resources import MachineResources

    small = MachineResources(cpus=2, mem_mib=1024.0, gpus=("0",))
    monkeypatch.setattr("tfmesos.backends.local.machine_resources", lambda gpus=True: small)


def refusal(job: Any, *, chief_only: bool = False) -> str:
    from tfmesos.backends.local import LocalBackend
    from tfmesos.errors import ResourceError

    backend = LocalBackend(job, log_dir="/nowhere", chief_only=chief_only)
    tasks = [t for t in job.tasks() if not chief_only or t.name == "worker:0"]
    with pytest.raises(ResourceError) as refused:
        backend.check(tasks)
    return str(refused.value)


@pytest.mark.unit
def test_a_local_job_too_large_is_told_of_every_cluster_backend_not_mesos_alone(
    a_small_machine: None,
) -> None:
    """Before: "or run the job on a Mesos cluster (-m)", "or give a Mesos
    master", to users who may have only Slurm."""
    from tfmesos.spec import ClusterSpec, Job

    def replica(**asks: Any) -> Any:
        return ClusterSpec((Job("worker", 2, cmd="true", **asks),), replica=True)

    assert refusal(replica(cpus=64)).endswith(
        f"ask for less with -Cw, or run the job on a cluster {ON_A_CLUSTER}"
    )
    assert refusal(replica(mem=4096)).endswith(
        f"ask for less with -Mw (MiB), or run the job on a cluster {ON_A_CLUSTER}"
    )
    assert refusal(replica(gpus=2)).endswith(
        f"give -Gw 0, or run the job on a cluster with GPUs {ON_A_CLUSTER}"
    )
    # Each task fits, all of them together do not.
    assert refusal(replica(gpus=1)).endswith(
        f"ask for fewer, or run the job on a cluster {ON_A_CLUSTER}"
    )
    # tfmesos.cluster(): its own arguments, not tfrun's flags.
    servers = ClusterSpec((Job("ps", 1, cpus=64),))
    assert refusal(servers).endswith(
        "ask for less (cpus= of job 'ps'), or run the job on a cluster "
        "(master= for Mesos, backend='slurm')"
    )


@pytest.mark.unit
def test_the_chief_of_a_job_on_a_cluster_is_told_of_tfruns_machine_not_of_mesos(
    a_small_machine: None, caplog: pytest.LogCaptureFixture
) -> None:
    """The chief runs beside tfrun for a Mesos job and a Slurm job alike."""
    from tfmesos.backends.local import LocalBackend
    from tfmesos.spec import ClusterSpec, Job

    gpus = ClusterSpec((Job("worker", 2, cmd="true", gpus=2),), replica=True)
    said = refusal(gpus, chief_only=True)
    assert said.endswith(
        "(the chief runs on this machine, beside tfrun): "
        "run tfrun on a machine with a GPU, or give -Gw 0"
    ), said
    cpus = ClusterSpec((Job("worker", 2, cmd="true", cpus=64),), replica=True)
    with caplog.at_level(logging.WARNING, logger="tfmesos"):
        LocalBackend(cpus, log_dir="/nowhere", chief_only=True).check(cpus.tasks()[:1])
    assert caplog.messages[-1].endswith(
        "(the chief runs on this machine, beside tfrun): ask for less with -Cw, "
        "or run tfrun on a machine with more; running it anyway"
    ), caplog.messages
    assert "Mesos" not in said + caplog.text


# -- a task refused at the rendezvous while the job stops ---------------------------


def refused_at_the_rendezvous(stopping: bool) -> list[logging.LogRecord]:
    """What the rendezvous logs of a task id it does not admit, during a
    live job or once the job is stopping."""
    from tests.test_rendezvous import Client, in_thread, serve

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    async def scenario() -> None:
        server, _ = await serve(set())  # admits no one
        if stopping:
            server.stopping()

        def late_task() -> dict[str, object]:
            with Client(server.port) as client:
                client.register("worker:1.0")
                return client.receive()

        answer = await in_thread(late_task)
        await server.close()
        assert answer == {"type": "reject", "reason": "task not expected"}

    logger = logging.getLogger("tfmesos")
    handler, level = Keep(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        asyncio.run(scenario())
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return [r for r in records if "refused task id 'worker:1.0'" in r.getMessage()]


@pytest.mark.unit
def test_a_task_refused_while_the_job_stops_is_not_news_but_during_a_live_job_it_warns() -> None:
    (live,) = refused_at_the_rendezvous(stopping=False)
    assert live.levelno == logging.WARNING
    assert live.getMessage().endswith(": not expected now")
    (late,) = refused_at_the_rendezvous(stopping=True)
    assert late.levelno == logging.DEBUG, late.getMessage()
    assert late.getMessage().endswith(": not expected now (the job is stopping)")


@pytest.mark.unit
def test_the_launcher_tells_its_rendezvous_that_the_job_is_stopping_before_it_kills(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C while tasks register: the launcher kills those not registered
    yet, and their agents may dial in meanwhile; the rendezvous must know
    from the first moment of the stop."""
    from tests.test_rendezvous import until
    from tfmesos.rendezvous import RendezvousServer
    from tfmesos.spec import ClusterSpec, Job
    from tfmesos.testing.fake import FakeBackend, Hangs

    told: list[object] = []  # whether the rendezvous was still open when told
    monkeypatch.setattr(
        RendezvousServer, "stopping", lambda self: told.append(getattr(self, "open", None))
    )
    job = ClusterSpec((Job("worker", 2, cmd="true"),), replica=True)
    backend = FakeBackend(job, {"worker:1": Hangs()})

    async def scenario() -> None:
        launcher = backend.launcher()
        starting = asyncio.create_task(launcher.start())
        await until(lambda: "worker:1" in backend.launched, "worker:1 launched")
        starting.cancel()  # as SIGINT does, while worker:1 has not registered
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        await launcher.stop(drop_stalled_output=True)

    asyncio.run(scenario())
    assert told == [True]


def test_late_signals_leave_no_wakeup_descriptor_behind() -> None:
    """The event loop's wakeup descriptor, left set when a signal cut its
    removal short, is read by no one once the loop is over: a burst of
    signals filled it, and CPython 3.11 then hung in its signal handler
    (tfrun never exited). Taking the signals over lets go of it."""
    import socket

    from tfmesos.run import LateSignals

    read_end, write_end = socket.socketpair()
    late = LateSignals()
    try:
        write_end.setblocking(False)
        signal.set_wakeup_fd(write_end.fileno())  # as a loop cut short leaves it
        late.take_over(None)
        assert signal.set_wakeup_fd(-1) == -1
    finally:
        signal.set_wakeup_fd(-1)
        late.restore()
        read_end.close()
        write_end.close()
