from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import psutil
import pytest

from tests.jobevents import JobEvents

if TYPE_CHECKING:
    from tests.mesos_clusters import MesosUnderTest

ROOT = Path(__file__).resolve().parent.parent
MARK = "TFMESOS_TEST_MARK"
TWO_WORKERS_TRUE = ("-w", "2", "-s", "0", "--", "true")
"""``tfrun -w 2 -s 0 -- true``: on Mesos, worker 1 must come from an offer
(worker 0, the chief, runs beside tfrun)."""


class JobProcesses:
    """Finds every process of one test's job by a mark in its environment.

    The mark is inherited by the launcher, the agents and the tasks' commands,
    so a process that outlives the launcher cannot hide from it.
    """

    def __init__(self) -> None:
        self.mark = uuid.uuid4().hex
        self.ignored: set[int] = set()
        """Processes that carry the mark but belong to the test's own fixtures."""

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env[MARK] = self.mark
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env.update(extra)
        return env

    def alive(self, exclude: int | None = None) -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter():
            # The test process itself carries the mark when it hosts a test
            # Mesos master, so that the master's tasks inherit it.
            if proc.pid in (exclude, os.getpid()) or proc.pid in self.ignored:
                continue
            try:
                if proc.environ().get(MARK) == self.mark and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    def wait_gone(self, timeout: float, exclude: int | None = None) -> list[psutil.Process]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = self.alive(exclude)
            if not left:
                return []
            time.sleep(0.1)
        return self.alive(exclude)

    def kill_all(self) -> None:
        for proc in self.alive():
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()


def is_agent(proc: psutil.Process) -> bool:
    """A task's agent: forked by the fork server (and named so), or started as
    an interpreter of its own (``TFMESOS_NO_FORK_SERVER``, or on Mesos). A
    command the agent has forked but not yet exec'ed carries the agent's name
    for a moment: its parent tells them apart."""
    try:
        if proc.name() == "tfmesos-agent":
            parent = proc.parent()
            return parent is not None and parent.name() == "tfmesos-forks"
        command = " ".join(proc.cmdline())
        # Bootstrapped (locally, on Slurm) or python -m tfmesos.agent (on
        # Mesos); not the fork server, whose module is tfmesos.agent.forkserver.
        return "tfmesos.agent.main" in command or command.endswith("-m tfmesos.agent")
    except psutil.Error:
        return False


@contextlib.contextmanager
def marked_master(
    job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch, **options: Any
) -> Iterator[Any]:
    """A test Mesos master (``ThreadedTestMaster``) whose tasks job_procs can find."""
    from tfmesos.testing.master import ThreadedTestMaster

    with ThreadedTestMaster(heartbeat_interval=1.0, allocation_interval=0.2, **options) as m:
        # Tasks inherit the master's environment as it is when they start:
        # give it the mark that lets job_procs find every process of the job.
        monkeypatch.setenv(MARK, job_procs.mark)
        job_procs.ignored.update(m.call(lambda master: master.helper_pids()))
        yield m


@pytest.fixture
def master(job_procs: JobProcesses, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A test Mesos master with two agents of 4 CPUs and 8 GiB each, its tasks
    marked for job_procs: what the Mesos job tests run on."""
    with marked_master(job_procs, monkeypatch, agents=2, cpus=4, mem=8192) as m:
        yield m


MESOS_KINDS = ("test-master", "real-mesos")


@pytest.fixture(params=MESOS_KINDS)
def mesos(
    request: pytest.FixtureRequest,
    job_procs: JobProcesses,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[Any]:
    """The Mesos scenarios' cluster, once as the test master and once as real
    Apache Mesos (a master and the three agents of ``real_mesos.DEFAULT_AGENTS``,
    started for the test): a :class:`tests.mesos_clusters.MesosUnderTest`."""
    from tests.mesos_clusters import open_cluster

    with open_cluster(request.param, job_procs, monkeypatch, tmp_path / "mesos") as cluster:
        yield cluster


# -- one scenario on every backend ----------------------------------------------

EVERY_BACKEND = ("local", "test-master", "real-mesos", "slurm")
"""What ``job_backend`` is parametrized over: this machine, the test Mesos
master, real Apache Mesos and Slurm."""


@dataclasses.dataclass(frozen=True)
class JobBackend:
    """Where a scenario's job runs (the ``job_backend`` fixture): tfrun's
    flags for it, and on Mesos the cluster."""

    name: str
    flags: tuple[str, ...] = ()
    mesos: MesosUnderTest | None = None
    """The cluster a Mesos job runs on."""

    @property
    def host(self) -> str | None:
        """Where a remote task runs, as its events say: this machine, except
        on Slurm, whose node has a name of its own (None: any)."""
        return None if self.name == "slurm" else "127.0.0.1"

    @property
    def cluster_flags(self) -> tuple[str, ...]:
        """The flags of an example that calls ``tfmesos.cluster()``
        (examples/plus.py): where its servers run."""
        if self.mesos is not None:
            return ("--master", self.mesos.url)
        return ("--backend", "slurm") if self.name == "slurm" else ()

    def assert_left_nothing(
        self, events: JobEvents | None = None, *, finished: bool = False
    ) -> None:
        """Nothing of the job is left with the backend: on Mesos its
        framework torn down, no task running and no executor left; on Slurm,
        given the job's ``events``, its allocation released (``finished``:
        waited for, and COMPLETED)."""
        if self.mesos is not None:
            mesos = self.mesos
            assert mesos.torn_down()
            ended = {"TASK_KILLED", "TASK_FINISHED", "TASK_FAILED"}
            assert {task["state"] for task in mesos.tasks()} <= ended, mesos.tasks()
            mesos.wait_for("no executor left", lambda: not mesos.left_on_agents())
        elif self.name == "slurm" and events is not None:
            from tests.test_slurm_jobs import ACTIVE, states, submitted, wait_released

            (job,) = submitted(events)
            if finished:
                assert wait_released([job], 30) == {job: "COMPLETED"}
            else:
                assert states([job])[job] not in ACTIVE


@pytest.fixture
def job_backend(
    request: pytest.FixtureRequest,
    job_procs: JobProcesses,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[JobBackend]:
    """The backend a scenario runs its job on, named by the test's parameter
    (``@pytest.mark.parametrize("job_backend", EVERY_BACKEND, indirect=True)``):
    one scenario, not a copy of it a backend."""
    name = request.param
    if name == "local":
        yield JobBackend(name)
    elif name == "slurm":
        request.getfixturevalue("slurm")  # up, or the test skipped saying why
        yield JobBackend(name, ("--backend", "slurm"))
    else:
        from tests.mesos_clusters import open_cluster

        with open_cluster(name, job_procs, monkeypatch, tmp_path / "mesos") as cluster:
            yield JobBackend(name, ("-m", cluster.url), cluster)


# -- test lanes ----------------------------------------------------------------
#
# Every test is in one of two lanes: ``unit`` (no process started: policy,
# parsing, protocol and in-process servers, milliseconds each) or ``e2e`` (real
# processes and servers: tfrun, the test master's tasks, Mesos, Slurm,
# ZooKeeper, podman); ``heavy`` marks the slowest e2e runs. ``pytest -m unit``
# is the edit-test loop's lane; plain ``pytest`` runs them all, as CI does.

E2E_FIXTURES = frozenset(
    {
        "job_procs",
        "master",
        "mesos",
        "job_backend",
        "slurm",
        "zk",
        "zookeeper",
        "real_mesos",
        "task_image",
        # tfmesos's pytest plugin (tfmesos/testing/pytest_plugin.py)
        "mesos_master",
        "mesos_test_master",
    }
)
"""Fixtures that start processes or need a server: a test using one is e2e."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("heavy") is not None or fixtures & E2E_FIXTURES:
            item.add_marker(pytest.mark.e2e)
        if item.get_closest_marker("e2e") is None:
            item.add_marker(pytest.mark.unit)


class ProcessStarted(AssertionError):
    """A test of the unit lane started a process."""


@contextlib.contextmanager
def _no_process_started(item: pytest.Item) -> Iterator[None]:
    """Holds the unit lane to its word: a unit test (or a fixture it sets
    up, whatever the fixture's scope) that forks or executes anything fails,
    naming the lane it belongs in."""
    if item.get_closest_marker("unit") is None:
        yield
        return
    import _posixsubprocess

    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise ProcessStarted(
            f"{item.nodeid} is in the unit lane but started a process: mark it "
            "pytest.mark.e2e, or add the fixture that starts it to E2E_FIXTURES"
        )

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_posixsubprocess, "fork_exec", refuse)  # multiprocessing's
        patch.setattr(subprocess, "_fork_exec", refuse)  # subprocess's own binding
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve"):
            if hasattr(os, name):
                patch.setattr(os, name, refuse)
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    with _no_process_started(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    with _no_process_started(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failing test on real Mesos shows the master's and agents' last log lines."""
    report = yield
    funcargs = getattr(item, "funcargs", {})
    cluster = funcargs.get("mesos") or getattr(funcargs.get("job_backend"), "mesos", None)
    if report.failed and cluster is not None and cluster.real is not None:
        report.sections.append(("real Mesos logs", cluster.real.logs(40)))
    return report


@pytest.fixture(autouse=True, scope="session")
def _state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Runs' logs go under XDG_STATE_HOME: never the real user's, in tests.
    Set for this process, so that every tfrun a test starts inherits it
    (``JobProcesses.env`` copies ``os.environ``)."""
    state = tmp_path_factory.mktemp("xdg-state")
    before = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(state)
    yield state
    if before is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = before


@pytest.fixture(autouse=True, scope="session")
def _colour_as_on_a_plain_machine() -> Iterator[None]:
    """Whether tfrun colours its output is decided by the terminal and by
    NO_COLOR and FORCE_COLOR: tests that look at the output set them
    themselves, never inherit them."""
    before = {name: os.environ.pop(name, None) for name in ("NO_COLOR", "FORCE_COLOR")}
    yield
    os.environ.update({name: value for name, value in before.items() if value is not None})


def slurm_problem() -> str | None:
    """Why no Slurm can run the tests here, or None."""
    for command in ("sbatch", "squeue", "scancel", "srun", "scontrol", "sinfo"):
        if shutil.which(command) is None:
            return f"{command} is not installed (run scripts/start-slurm as root)"
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=20)
        nodes = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"Slurm does not answer: {exc}"
    if "is UP" not in ping.stdout:
        return f"slurmctld is not up ({ping.stdout.strip() or ping.stderr.strip()}): run scripts/start-slurm"
    if not re.search(r"^(idle|mixed|allocated)", nodes.stdout, re.M):
        return f"no Slurm node is up ({nodes.stdout.strip() or 'none'}): run scripts/start-slurm"
    return None


@pytest.fixture(scope="module")
def slurm() -> None:
    """Slurm up to run the tests on, or the test skipped saying why (failed under CI)."""
    problem = slurm_problem()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI runs scripts/start-slurm, yet {problem}")
    print(f"\nskipping the Slurm tests: {problem}", file=sys.stderr)
    pytest.skip(problem)


@pytest.fixture
def zk() -> Iterator[Any]:
    """A started client of the ZooKeeper server the zk:// tests use
    (tests/test_zookeeper.py's zookeeper_client), stopped after the test."""
    from tests.test_zookeeper import zookeeper_client

    client = zookeeper_client()
    yield client
    client.stop()
    client.close()


@pytest.fixture
def job_procs() -> Iterator[JobProcesses]:
    procs = JobProcesses()
    yield procs
    procs.kill_all()


def tfrun_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "tfmesos.cli", *args]


def run_tfrun(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        tfrun_argv(*args),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=cwd or ROOT,
    )


class Tfrun(subprocess.Popen[str]):
    """A tfrun that :func:`start_tfrun` started, its events written to
    :attr:`events`. Its stderr goes to a file, not a pipe, so that tfrun never
    waits on a test that is not reading it (a pipe holds 64 KiB), and so that
    what it said before an event is all there once the event is:
    :meth:`communicate` returns it as a pipe's would be returned. The test's
    ``_tfruns_closed`` fixture ends and closes it."""

    def __init__(self, args: tuple[str, ...], env: dict[str, str], on: Sequence[str] = ()) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="tfrun-"))
        self.events = JobEvents(self.directory / "events.jsonl")
        self._stderr = self.directory / "stderr"
        with self._stderr.open("wb") as stderr:  # tfrun has its own copy
            super().__init__(
                [*on, *tfrun_argv(*self.events.flag, *args)],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=env,
                cwd=ROOT,
            )

    def said(self) -> str:
        """What tfrun has said on stderr so far."""
        return self._stderr.read_text(errors="replace")

    def communicate(self, input: str | None = None, timeout: float | None = None) -> Any:
        out, _ = super().communicate(input, timeout)
        return out, self.said()

    def close(self) -> None:
        """End tfrun if the test left it running, and free what it holds."""
        with self:  # closes stdout and waits
            if self.poll() is None:
                self.kill()
        shutil.rmtree(self.directory, ignore_errors=True)


_started: list[Tfrun] = []
"""The tfruns the running test started, for ``_tfruns_closed`` to close."""


@pytest.fixture(autouse=True)
def _tfruns_closed() -> Iterator[None]:
    """Every tfrun a test starts is ended and its pipe closed when the test
    ends, whether or not the test got that far (an open pipe is a
    ResourceWarning, and warnings fail tests)."""
    yield
    while _started:
        _started.pop().close()


def popen_tfrun(*args: str, env: dict[str, str], on: Sequence[str] = ()) -> Tfrun:
    """Start tfrun and return at once; it is ended when the test ends. ``on``
    goes before its argv: a host of its own's ``RealMesos.client.prefix()``."""
    proc = Tfrun(args, env, on)
    _started.append(proc)
    return proc


def start_tfrun(*args: str, env: dict[str, str], on: Sequence[str] = ()) -> tuple[Tfrun, list[str]]:
    """Start tfrun; return once its cluster is up (its ``cluster_up`` event),
    with the lines it said on stderr until then."""
    proc = popen_tfrun(*args, env=env, on=on)
    try:
        proc.events.wait_for("cluster_up", proc, timeout=300)
    except AssertionError as error:
        raise AssertionError(f"the job never came up: {error}\n{proc.said()}") from None
    return proc, proc.said().splitlines(keepends=True)


@pytest.fixture
def job_events(tmp_path: Path) -> JobEvents:
    """Where a test's tfrun writes its events: pass ``*job_events.flag``."""
    return JobEvents(tmp_path / "events.jsonl")


def install_in_new_venv(tmp_path: Path, *, editable: bool = False) -> tuple[str, str]:
    """``pip install .`` (``-e .`` with ``editable``) in a fresh environment
    under ``tmp_path``, from a copy of what an install is made of (setuptools
    builds in the source tree: build/, *.egg-info, not to be left in the
    checkout). The environment's python, and what pip said on stderr; the
    test asserts the install went through."""
    import venv

    source = tmp_path / "source"
    shutil.copytree(
        ROOT / "tfmesos", source / "tfmesos", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    venv.create(tmp_path / "venv", with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", *(["-e"] if editable else []), str(source)],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    return python, install.stderr


PY = sys.executable


def py(code: str) -> list[str]:
    """A task's command: this Python running ``code``."""
    return [PY, "-c", code]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A CA and certificates for a master, agents and clients
    (tests.test_real_mesos_security.PKI), made once a module."""
    from tests.test_real_mesos_security import PKI

    return PKI.make(tmp_path_factory.mktemp("pki"))


def runs_in(root: Path) -> list[Path]:
    """The runs' directories in ``root``: not the ``latest`` link."""
    return sorted(path for path in root.iterdir() if not path.is_symlink())


@pytest.fixture
def tfrun_in_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """cli.main run here on a fake backend that fails as it starts (its
    master lost, say), with the signal handlers and tfmesos's log level as
    they were afterwards."""
    import tfmesos.launcher.run
    from tfmesos.errors import TFMesosError
    from tfmesos.testing.fake import FakeBackend

    def launcher_factory(spec: Any, backend: str, options: Any, events: Any) -> Any:
        def make(restart: int) -> Any:
            failing = FakeBackend(spec, start_error=TFMesosError("the master is gone"))
            return failing.launcher()

        return make

    monkeypatch.setattr(tfmesos.launcher.run, "launcher_factory", launcher_factory)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    level = logging.getLogger("tfmesos").level
    yield
    logging.getLogger("tfmesos").setLevel(level)
    assert {s: signal.getsignal(s) for s in handlers} == handlers


def one_error_line(stderr: str) -> str:
    """tfrun's one ``tfrun: error:`` line, the only line it printed."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("tfrun: error: "), stderr
    return lines[0]


GUIDE = (
    "README.md",
    "docs/running.md",
    "docs/fine-grained.md",
    "docs/mesos.md",
    "docs/pytorch-jax.md",
    "docs/slurm.md",
)
"""The user's guide, in reading order: the README and the pages it leads to."""


def guide_section(page: str, heading: str) -> str:
    """The text under ``## heading`` in ``page`` (of :data:`GUIDE`), up to the next ``## ``."""
    text = (ROOT / page).read_text()
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


T = TypeVar("T")


class _Deadline:
    """The waiting rule of :func:`wait_until` and :func:`until`: after
    ``timeout`` (a hang guard, not a measure), an AssertionError that names
    ``what`` was awaited, with ``explain()``'s text (a cluster's logs, say)."""

    def __init__(self, what: str, timeout: float, explain: Callable[[], str] | None) -> None:
        self.what, self.timeout, self.explain = what, timeout, explain
        self.at = time.monotonic() + timeout

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise AssertionError(
                f"never: {self.what} (not within {self.timeout:g}s)"
                + (f"\n{self.explain()}" if self.explain else "")
            )


def wait_until(
    condition: Callable[[], T],
    what: str,
    timeout: float = 60.0,
    *,
    poll: float = 0.05,
    explain: Callable[[], str] | None = None,
) -> T:
    """Poll ``condition`` until it gives something true, and return that;
    fail as :class:`_Deadline` says. It sleeps between looks: in a coroutine,
    where the condition waits on the loop's own tasks, use :func:`until`."""
    deadline = _Deadline(what, timeout, explain)
    while not (found := condition()):
        deadline.check()
        time.sleep(poll)
    return found


async def until(
    condition: Callable[[], T],
    what: str,
    timeout: float = 10.0,
    *,
    poll: float = 0.002,
    explain: Callable[[], str] | None = None,
) -> T:
    """:func:`wait_until` for a coroutine: the loop turns between looks, so
    that the tasks the condition waits on can run."""
    deadline = _Deadline(what, timeout, explain)
    while not (found := condition()):
        deadline.check()
        await asyncio.sleep(poll)
    return found


# -- several TensorFlow workers a task (--nproc-per-task) ------------------------

MWMS = str(Path(__file__).parent / "programs" / "mwms_ranks.py")
"""A MultiWorkerMirrored program of ``tfrun --nproc-per-task`` tests."""
FOUR_WORKERS = ("worker:0.0", "worker:0.1", "worker:1.0", "worker:1.1")


def check_four_tensorflow_workers(result: subprocess.CompletedProcess[str]) -> None:
    """Each of the four processes was a TensorFlow worker of its own, of
    index RANK, at an address of its own, in one collective of four that
    all-reduced 0 + 1 + 2 + 3."""
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    said = {
        name: (int(index), address, rank, replicas, total)
        for name, index, address, rank, replicas, total in re.findall(
            r"^\[(worker:\d\.\d)\] worker:(\d) of 4 at (\S+) rank=(\d) replicas=(\d) sum=(\S+)$",
            result.stdout,
            re.M,
        )
    }
    assert sorted(said) == list(FOUR_WORKERS), result.stdout[-5000:]
    for name, (index, _, rank, replicas, total) in said.items():
        group, local = map(int, name.partition(":")[2].split("."))
        assert index == group * 2 + local == int(rank), name
        assert (replicas, total) == ("4", "6"), name
    assert len({address for _, address, *_ in said.values()}) == 4
