"""``tfrun --detach`` on Mesos: the launcher as a task of the job's own framework.

The submitting tfrun subscribes as the job's framework (labelled with its
id, :data:`LABEL_JOB`), launches one *launcher task* with the chief's
resources and the launcher's own, hands it what it needs over a sealed
connection (:mod:`.handover`: secrets are never put in a ``TaskInfo``), and
leaves the framework up. The launcher task (:func:`launcher_main`) is an
attached tfrun that takes the framework over by Mesos's scheduler failover,
runs the job with the chief beside it, keeps the logs and events in its
sandbox, and tears the framework down at the end. ``tfrun list`` and the
other job commands find the job by its label (:mod:`tfmesos.backends.mesos.jobs`).

The job reaches the launcher task typed (:mod:`tfmesos.backends.jobspec`),
inside the sealed handover, and its tfrun through a descriptor: no command
line, the launcher task's or its tfrun's, holds what the job carries."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import getpass
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

from tfmesos.backends.base import Launch, advertised_host
from tfmesos.backends.jobs import DetachedJob
from tfmesos.backends.jobspec import ENV_JOB as DESCRIPTION_VARIABLE
from tfmesos.backends.jobspec import from_json, to_descriptor, to_json
from tfmesos.backends.mesos import handover
from tfmesos.backends.mesos.options import (
    PRINCIPAL_VARIABLE,
    MesosOptions,
    framework_credentials,
)
from tfmesos.backends.mesos.taskinfo import framework_info, task_info
from tfmesos.common import proctree
from tfmesos.common.exported import IMAGE, carried, parse_export, task_base
from tfmesos.errors import EXIT_TFRUN_FAILED, EXIT_USAGE, TFMesosError
from tfmesos.mesos import calls
from tfmesos.mesos.masters import default_scheme, read_master_files
from tfmesos.mesos.placement import OfferCapacity, describe_need
from tfmesos.mesos.reader import TEST_MASTER_FLAG, MasterReader, ReadError
from tfmesos.mesos.scheduler import SchedulerClient
from tfmesos.rendezvous import protocol

__all__ = [
    "ENV_FRAMEWORK_ID",
    "ENV_JOB",
    "LABEL_JOB",
    "adopted_framework",
    "job_labels",
    "launcher_main",
    "submit_mesos",
]

logger = logging.getLogger("tfmesos")

LAUNCHER_CPUS = 0.1
"""CPUs for a detached job's launcher, besides its chief's, in their task."""
LAUNCHER_MEM = 512.0
"""MiB for a detached job's launcher, besides its chief's, in their task."""
HANDOVER_FAILOVER_TIMEOUT = 30.0
"""The framework's failover timeout while the submitter holds it: from the
submitter's leaving to the launcher task's subscription takes seconds (the
launcher task runs already: it has taken the handover); should the launcher
never subscribe, the master tears the framework down this much later. The
launcher subscribes with the job's own (tfmesos.backends.mesos.taskinfo)."""
PLACE_TIMEOUT = 120.0
"""How long the submitter waits for an offer that holds the launcher task
and for its handover, when the job has no --timeout."""
LABEL_JOB = "tfmesos.job"
"""The framework's label that holds the detached job's id."""
LABEL_STOPPED = "tfmesos.stopped_by"
ENV_FRAMEWORK_ID = "TFMESOS_MESOS_FRAMEWORK_ID"
"""The launcher task's tfrun: subscribe as this framework (a failover)."""
ENV_JOB = "TFMESOS_MESOS_JOB"
"""The launcher task's tfrun: the detached job's id, for its framework's label."""
SANDBOX_LOGS = "logs"
"""In the launcher task's sandbox: every task's output (``TASK_ID.log``)."""
SANDBOX_EVENTS = "events.jsonl"
"""In the launcher task's sandbox: the job's event stream, its verdict last."""
LAUNCHER_TASK = "launcher"

_SSL_CA, _TLS_CERT, _TLS_KEY = "ssl-ca.pem", "tls-cert.pem", "tls-key.pem"
"""The files of the submitting machine the launcher needs (``--ssl-ca``,
``--tls-cert``, ``--tls-key``), by the names of its own copies: their
contents go in the handover."""


def job_labels(job: str) -> dict[str, Any]:
    return {"labels": [{"key": LABEL_JOB, "value": job}]}


_adopted: list[tuple[str, str] | None] = []


def adopted_framework() -> tuple[str, str] | None:
    """In a detached job's launcher task: the framework to take over and the
    job's id, for each run of the job (a restart's too); taken out of the
    environment at the first ask, so that no task's command inherits them."""
    if not _adopted:
        framework_id = os.environ.pop(ENV_FRAMEWORK_ID, None)
        job = os.environ.pop(ENV_JOB, None)
        _adopted.append((framework_id, job) if framework_id and job else None)
    return _adopted[0]


async def teardown(
    master: str,
    info: dict[str, Any],
    framework_id: str,
    *,
    auth: tuple[str, str] | None,
    ssl_ca: str | None,
    timeout: float = 30.0,
) -> str | None:
    """Take the framework over (a failover, which the master refuses to
    another principal) and tear it down: every task of it killed. None once
    done, else why not."""
    client = SchedulerClient(
        master,
        info,
        lambda event: None,
        reconnect_timeout=timeout,
        connect_timeout=timeout,
        auth=auth,
        ssl_ca=ssl_ca,
    )
    client.framework_id = framework_id
    runner = asyncio.create_task(client.run())
    subscribed = asyncio.create_task(client.subscribed.wait())
    try:
        await asyncio.wait(
            {runner, subscribed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if not subscribed.done():
            if runner.done() and runner.exception() is not None:
                return str(runner.exception())
            return client.last_error or f"not subscribed within {timeout:g}s"
        await client.close(teardown=True)
        return None
    finally:
        subscribed.cancel()
        if not runner.done():
            await client.close(teardown=False)
        with contextlib.suppress(Exception):
            await runner


def new_job_id() -> str:
    return f"mesos-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def _master_url(given: str) -> str:
    """The master spec ``given`` as this machine reads it, for a launcher
    elsewhere: each ``file://`` read, each address given its scheme (this
    environment's libprocess SSL setting, which the launcher's lacks)."""
    master = read_master_files(given)
    if master.startswith("zk://"):
        return master
    scheme = default_scheme()
    parts = [part.strip() for part in master.split(",") if part.strip()]
    return ",".join(part if "://" in part else f"{scheme}://{part}" for part in parts)


def _read_file(what: str, path: str | None) -> str | None:
    """The contents (hex) of a file of this machine the launcher needs."""
    if path is None:
        return None
    if Path(path).is_dir():
        _fail(f"{what} {path}: a detached job's launcher needs a file, not a directory")
    return Path(path).read_bytes().hex()


def _handover(job: DetachedJob, job_id: str, secret: str | None) -> dict[str, Any]:
    """What the launcher task is handed: the job as it runs there (the
    master, principal and user as this machine resolved them, given
    whatever way: ``$MESOS_MASTER``, ``$MESOS_PRINCIPAL``, ``-m
    file://PATH``; the launcher's environment carries no ``MESOS_*`` and
    its host may lack the file), the files of this machine it needs, the
    environment carried and the principal's secret. The submitter's own
    stay behind: its events and logs (the launcher keeps them in its
    sandbox), its secret's file."""
    options = job.options
    assert isinstance(options, MesosOptions)
    files = {
        name: content
        for name, content in (
            (_SSL_CA, _read_file("--ssl-ca", options.ssl_ca)),
            (_TLS_CERT, _read_file("--tls-cert", job.spec.tls_cert)),
            (_TLS_KEY, _read_file("--tls-key", job.spec.tls_key)),
        )
        if content is not None
    }
    master = _master_url(options.master or os.environ.get("MESOS_MASTER") or "")
    there = dataclasses.replace(
        job,
        spec=dataclasses.replace(job.spec, tls_cert=None, tls_key=None),
        options=dataclasses.replace(
            options,
            master=master,
            principal=options.principal or os.environ.get(PRINCIPAL_VARIABLE) or None,
            user=options.user or getpass.getuser(),  # the framework's, which a failover keeps
            secret_file=None,
            ssl_ca=None,
            log_dir=None,
        ),
        events=None,
    )
    return {
        "master": master,
        "job": job_id,
        "description": to_json(there),
        "files": files,
        "env": carried(os.environ, parse_export("ALL")),
        "secret": secret,
        "cwd": os.getcwd(),
    }


def submit_mesos(job: DetachedJob) -> NoReturn:
    """Detach a Mesos job: print its id once its launcher task has taken the
    handover, and exit 0; exit as an attached tfrun would where it could not."""
    job_id = new_job_id()
    options = job.options
    assert isinstance(options, MesosOptions)
    master = options.master or os.environ.get("MESOS_MASTER")
    if not master:
        _fail("the mesos backend needs a master: -m HOST:5050 or MESOS_MASTER", EXIT_USAGE)
    if _is_test_master(master, options):
        _fail(
            f"{master} is the tfmesos test master, which keeps no framework labels and serves "
            "no agent's files: a detached job there could never be found again by tfrun "
            "list, status, logs or stop. Run the job attached there, or detached on real "
            "Mesos (scripts/start-mesos starts one on this machine)",
            EXIT_USAGE,
        )
    try:
        framework_id, host = asyncio.run(_submit(job, job_id, master))
    except TFMesosError as exc:
        _fail(str(exc), exc.exit_status)
    except OSError as exc:
        _fail(f"the detached job's launcher could not be started: {exc}")
    shown = f" -m {master}" if options.master else ""
    print(
        f"tfrun: job {job_id} runs detached, its launcher a task on {host} "
        f"(framework {framework_id}); follow it with:\n"
        f"  tfrun logs -f{shown} {job_id}      # worker:0's output as it comes (--task all: every task's)\n"
        f"  tfrun status{shown} {job_id}\n"
        f"  tfrun wait{shown} {job_id}         # until it ends, with its exit status\n"
        f"  tfrun stop{shown} {job_id}",
        file=sys.stderr,
        flush=True,
    )
    print(job_id, flush=True)
    raise SystemExit(0)


def _is_test_master(master: str, options: MesosOptions) -> bool:
    """Whether ``master`` leads to the test master (its ``/state`` says so in
    its flags); a master that cannot be read is left to the submission to
    report."""
    principal, secret = framework_credentials(options.principal, None, options.secret_file)
    reader = MasterReader(
        master, (principal, secret) if principal and secret else None, options.ssl_ca
    )
    try:
        url, state = reader.leader()
        if state is None:
            state = reader.read_json(url + "/state")
    except ReadError:
        return False
    finally:
        reader.close()
    return bool(state.get("flags", {}).get(TEST_MASTER_FLAG))


def _fail(message: str, status: int = EXIT_TFRUN_FAILED) -> NoReturn:
    print(f"tfrun: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(status)


async def _submit(job: DetachedJob, job_id: str, master: str) -> tuple[str, str]:
    return await _LauncherSubmission(job, job_id, master).run()


class _LauncherSubmission:
    """The submitter's framework, for as long as it takes to launch the
    launcher task and hand it the job: one offer that holds the chief's
    resources and the launcher's is taken, the others declined."""

    def __init__(self, job: DetachedJob, job_id: str, master: str) -> None:
        options = job.options
        assert isinstance(options, MesosOptions)
        self.job, self.options, self.job_id = job, options, job_id
        spec = job.spec
        self.principal, self.secret = framework_credentials(
            options.principal, None, options.secret_file
        )
        self.user = options.user or getpass.getuser()
        self.host = advertised_host()
        self.info = framework_info(spec, options, self.user, self.host, self.principal)
        self.info["failover_timeout"] = HANDOVER_FAILOVER_TIMEOUT
        self.info["labels"] = job_labels(job_id)
        chief = next(t for t in spec.tasks() if t.job_name == spec.ending_job)
        self.need = dataclasses.replace(
            chief, cpus=chief.cpus + LAUNCHER_CPUS, mem=chief.mem + LAUNCHER_MEM
        )
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.client = SchedulerClient(
            master,
            self.info,
            self.events.put_nowait,
            reconnect_timeout=options.reconnect_timeout,
            connect_timeout=options.connect_timeout,
            auth=(self.principal, self.secret) if self.principal and self.secret else None,
            ssl_ca=options.ssl_ca,
        )
        self.key = os.urandom(32)
        self.task_id = f"{job_id}.{LAUNCHER_TASK}"
        self.given = _handover(job, job_id, self.secret)
        self.given["framework_info"] = self.info
        self.launched_on = ""
        self.port = 0

    async def run(self) -> tuple[str, str]:
        """The framework's id and the launcher task's host, once it has the job."""
        runner = asyncio.create_task(self.client.run())
        server, self.port, handed = await handover.serve_one(
            self.key, self.task_id, self.given, "0.0.0.0"
        )
        ok = False
        try:
            await self._until_handed(runner, handed)
            assert self.client.framework_id is not None
            ok = True
            return self.client.framework_id, self.launched_on
        finally:
            server.close()
            # Left standing on success: the launcher task takes it over.
            await self.client.close(teardown=not ok)
            with contextlib.suppress(Exception):
                await runner

    async def _until_handed(self, runner: asyncio.Task[None], handed: asyncio.Future[str]) -> None:
        loop = asyncio.get_running_loop()
        timeout = self.job.spec.start_timeout or PLACE_TIMEOUT
        deadline = loop.time() + timeout
        while not handed.done():
            left = deadline - loop.time()
            if left <= 0:
                raise TFMesosError(
                    f"the detached job's launcher task was not running within {timeout:g}s "
                    + (
                        f"(launched on {self.launched_on})"
                        if self.launched_on
                        else f"(no offer held {describe_need(self.need)}: "
                        f"{self.client.last_error or 'none came'})"
                    )
                )
            getter = asyncio.ensure_future(self.events.get())
            waited: set[asyncio.Future[Any]] = {getter, handed, runner}
            await asyncio.wait(waited, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if runner.done():
                getter.cancel()
                runner.result()  # raises MasterLostError, SchedulerError
                raise TFMesosError("the Mesos master ended the detached job's framework")
            if not getter.done():
                getter.cancel()
                continue
            self._handle(getter.result())

    def _handle(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "OFFERS":
            for offer in event.get("offers", {}).get("offers", []):
                self._offer(offer)
        elif kind == "UPDATE":
            status = event["update"]["status"]
            if "uuid" in status:
                self.client.submit(calls.acknowledge(status))
            state = str(status.get("state", ""))
            if state not in ("TASK_STAGING", "TASK_STARTING", "TASK_RUNNING"):
                message = status.get("message") or status.get("reason") or ""
                raise TFMesosError(
                    f"the detached job's launcher task ended before it took the job "
                    f"over: {state}{': ' + message if message else ''}"
                )
        elif kind == "ERROR":
            message = event.get("error", {}).get("message", "no message")
            raise TFMesosError(f"the Mesos master sent an ERROR: {message}")

    def _offer(self, offer: dict[str, Any]) -> None:
        capacity = OfferCapacity.of(offer)
        if self.launched_on or not capacity.fits(self.need):
            self.client.submit(calls.decline(offer["id"], 1.0))
            return
        resources, task_port = capacity.take(self.need)
        env = {
            protocol.ENV_SECRET: self.key.hex(),
            handover.ENV_HANDOVER: f"{self.host}:{self.port}",
            protocol.ENV_TASK_ID: self.task_id,
        }
        launch = Launch(self.task_id, self.need, env)
        spec, options = self.job.spec, self.options
        task = task_info(launch, spec, options, offer, resources, task_port, self.user)
        python = "python3" if options.image else sys.executable
        task["name"] = f"{spec.name[:60]} (launcher)"
        task["command"]["value"] = f"exec {python} -m tfmesos.backends.mesos.detached"
        self.launched_on = str(offer.get("hostname", ""))
        self.given["framework_id"] = self.client.framework_id
        self.client.submit(calls.accept(offer["id"], [task], 0.0))


# -- in the launcher task --------------------------------------------------------


def launcher_main() -> int:
    """The launcher task: take the handover, then run the job as an attached
    tfrun that takes the framework over, and end with its exit status."""
    logging.basicConfig(format="[launcher] %(message)s", level=logging.INFO, stream=sys.stderr)
    # The launcher ends with its executor (SIGTERM: the job stopped, its
    # verdict said): one that outlived it would run the job unaccounted for,
    # re-parented to init, and say a verdict after Mesos had said the task died.
    executor = os.getppid()
    if not proctree.exit_with_parent(executor):
        logger.warning("the launcher task's executor is gone (killed?): not taking the job")
        return 128 + signal.SIGTERM
    key = bytes.fromhex(os.environ.pop(protocol.ENV_SECRET))
    task_id = os.environ.pop(protocol.ENV_TASK_ID)
    address = os.environ.pop(handover.ENV_HANDOVER)
    for name in (protocol.ENV_HOST, protocol.ENV_PORT):
        os.environ.pop(name, None)
    given = handover.receive(address, key, task_id)
    framework_id = str(given["framework_id"])
    sandbox = Path(os.environ.get("MESOS_SANDBOX") or os.getcwd())
    # Outside the sandbox, which the agent's files API serves to its readers.
    private = Path(tempfile.mkdtemp(prefix="tfmesos-launcher-", dir=_private_root(sandbox)))
    try:
        files = _write_files(private, given["files"])
        status = _run_job(given, files, sandbox, framework_id, executor)
        # Its tfrun left the framework standing (a restart's next run takes
        # it over again): torn down here, the launcher task with it.
        auth = (str(given["framework_info"].get("principal")), str(given["secret"]))
        problem = asyncio.run(
            teardown(
                str(given["master"]),
                dict(given["framework_info"], failover_timeout=HANDOVER_FAILOVER_TIMEOUT),
                framework_id,
                auth=auth if given.get("secret") else None,
                ssl_ca=files.get(_SSL_CA),
            )
        )
        if problem is not None:
            logger.warning("cannot tear the framework %s down: %s", framework_id, problem)
        return status if status >= 0 else 128 - status
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _write_files(private: Path, files: dict[str, str]) -> dict[str, str]:
    """The submitter's files, written here, private: their paths by name."""
    written = {}
    for name, content in files.items():
        path = private / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(bytes.fromhex(content))
        written[name] = str(path)
    return written


def _run_job(
    given: dict[str, Any], files: dict[str, str], sandbox: Path, framework_id: str, executor: int
) -> int:
    """Run the job handed over as an attached tfrun (:mod:`tfmesos.cli.launch`,
    its description through a descriptor), its events and logs in the
    sandbox; its exit status. A signal is passed on to it (``executor`` gone:
    said first)."""
    job = from_json(str(given["description"]))
    assert isinstance(job.options, MesosOptions)
    spec = job.spec
    if spec.cwd == given.get("cwd") and not os.path.isdir(str(spec.cwd)):
        # The submitter's directory, which this host lacks: the sandbox, as
        # a tfrun started here would take its own.
        spec = dataclasses.replace(spec, cwd=str(sandbox))
    if _TLS_CERT in files:
        spec = dataclasses.replace(spec, tls_cert=files[_TLS_CERT], tls_key=files.get(_TLS_KEY))
    job = dataclasses.replace(
        job,
        spec=spec,
        options=dataclasses.replace(
            job.options, log_dir=str(sandbox / SANDBOX_LOGS), ssl_ca=files.get(_SSL_CA)
        ),
        events=str(sandbox / SANDBOX_EVENTS),
    )
    base = IMAGE if os.environ.get(protocol.ENV_BASE) == IMAGE else None
    env = task_base(os.environ, base, given["env"])
    env.pop(protocol.ENV_BASE, None)
    env[ENV_FRAMEWORK_ID] = framework_id
    env[ENV_JOB] = str(given["job"])
    if given.get("secret"):
        env["MESOS_SECRET"] = str(given["secret"])
    described = to_descriptor(job)
    env[DESCRIPTION_VARIABLE] = f"fd:{described}"
    cwd = given.get("cwd") if os.path.isdir(str(given.get("cwd"))) else None
    child = subprocess.Popen(
        [sys.executable, "-m", "tfmesos.cli.launch"],
        env=env,
        cwd=cwd or str(sandbox),
        pass_fds=(described,),
    )
    os.close(described)

    def forward(signum: int, _frame: object) -> None:
        if os.getppid() != executor:
            logger.warning("the launcher task's executor is gone (killed?): stopping the job")
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    return child.wait()


def _private_root(sandbox: Path) -> str | None:
    root = Path(tempfile.gettempdir()).resolve()
    return "/tmp" if root == sandbox.resolve() or sandbox.resolve() in root.parents else None


if __name__ == "__main__":
    sys.exit(launcher_main())
