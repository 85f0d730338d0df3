"""``tfrun --detach`` on Mesos: the launcher as a task of the job's own framework.

The submitting tfrun subscribes as the job's framework (labelled with its
id, :data:`LABEL_JOB`), launches one *launcher task* with the chief's
resources and the launcher's own, hands it what it needs over a sealed
connection (:mod:`.handover`: secrets are never put in a ``TaskInfo``), and
leaves the framework up. The launcher task (:func:`launcher_main`) is an
attached tfrun that takes the framework over by Mesos's scheduler failover,
runs the job with the chief beside it, keeps the logs and events in its
sandbox, and tears the framework down at the end. ``tfrun list`` and the
other job commands find the job by its label (:mod:`tfmesos.backends.mesos.jobs`)."""

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from tfmesos import wire
from tfmesos.backends.base import Launch, advertised_host
from tfmesos.backends.mesos import handover
from tfmesos.backends.mesos.options import (
    PRINCIPAL_VARIABLE,
    MesosOptions,
    framework_credentials,
)
from tfmesos.backends.mesos.taskinfo import framework_info, task_info
from tfmesos.common.exported import IMAGE, carried, parse_export, task_base
from tfmesos.errors import EXIT_TFRUN_FAILED, EXIT_USAGE, TFMesosError
from tfmesos.mesos import calls
from tfmesos.mesos.masters import default_scheme, read_master_files
from tfmesos.mesos.placement import OfferCapacity, describe_need
from tfmesos.mesos.scheduler import SchedulerClient
from tfmesos.spec import ClusterSpec

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

_CARRIED_FILES = {
    "--ssl-ca": "ssl-ca.pem",
    "--tls-cert": "tls-cert.pem",
    "--tls-key": "tls-key.pem",
    "--extra-config": "extra-config.json",
    "--extra_config": "extra-config.json",
    "-e": "extra-config.json",
}
"""Flags naming files of the submitting machine that the launcher needs:
their contents go in the handover, and the launcher's own copies replace them."""
_GIVEN = ("-m", "--master", "--principal")
"""Flags the launcher is given as this machine resolved them (:func:`_handover`)."""
_DROPPED = ("--detach", "--events", "--log-dir", "--secret-file")
"""Flags of the submitter's alone: the launcher keeps its events and logs in
its sandbox, and has the principal's secret in its environment."""


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


def _split(argv: Sequence[str], command: Sequence[str]) -> tuple[list[str], list[str]]:
    """tfrun's flags in ``argv``, and the job's command from its ``--`` on;
    ``command``: the parsed one (``args.command``), which is the end of
    ``argv`` when there is no ``--``, so that none of its words is taken
    for a flag of tfrun's."""
    argv = list(argv)
    if "--" in argv:
        split = argv.index("--")
        return argv[:split], argv[split:]
    split = len(argv) - len(command)
    return argv[:split], ["--", *argv[split:]]


def _flag_values(flags: Sequence[str], names: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """``flags`` less each of ``names`` (``--x V``, ``--x=V``, ``-xV``, a
    bare ``--detach``), and the values those had."""
    kept: list[str] = []
    values: dict[str, str] = {}
    words = iter(flags)
    for word in words:
        name, equals, value = word.partition("=")
        if not word.startswith("--") and len(word) > 2 and word[:2] in names:
            name, equals, value = word[:2], "=", word[2:]  # -eFILE, as argparse takes it
        if name not in names:
            kept.append(word)
        elif name == "--detach":
            continue
        elif equals:
            values[name] = value
        else:
            values[name] = next(words, "")
    return kept, values


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


def _handover(args: Any, argv: Sequence[str], job: str, secret: str | None) -> dict[str, Any]:
    flags, command = _split(argv, getattr(args, "command", None) or [])
    flags, values = _flag_values(flags, (*_DROPPED, *_CARRIED_FILES, *_GIVEN))
    files = {}
    for flag, name in _CARRIED_FILES.items():
        if flag in values:
            path = Path(values[flag])
            if path.is_dir():
                _fail(f"{flag} {path}: a detached job's launcher needs a file, not a directory")
            files[name] = [flag, path.read_bytes().hex()]
    options: MesosOptions = args.options
    if "--user" not in flags and options.user is None:
        flags += ["--user", getpass.getuser()]  # the framework's user, which a failover keeps
    # Given whatever way on this machine ($MESOS_MASTER, $MESOS_PRINCIPAL,
    # -m file://PATH): the launcher's environment carries no MESOS_*, and
    # its host may lack the file.
    master = _master_url(options.master or os.environ.get("MESOS_MASTER") or "")
    flags += ["-m", master]
    principal = options.principal or os.environ.get(PRINCIPAL_VARIABLE)
    if principal:
        flags += ["--principal", principal]
    environment = carried(os.environ, parse_export("ALL"))
    return {
        "master": master,
        "job": job,
        "flags": flags,
        "command": command,
        "files": files,
        "env": environment,
        "secret": secret,
        "cwd": os.getcwd(),
    }


def submit_mesos(args: Any, argv: Sequence[str], spec: ClusterSpec) -> NoReturn:
    """Detach a Mesos job: print its id once its launcher task has taken the
    handover, and exit 0; exit as an attached tfrun would where it could not."""
    job = new_job_id()
    try:
        framework_id, host = asyncio.run(_submit(args, argv, spec, job))
    except TFMesosError as exc:
        _fail(str(exc), exc.exit_status)
    except OSError as exc:
        _fail(f"the detached job's launcher could not be started: {exc}")
    master = args.options.master or os.environ.get("MESOS_MASTER", "")
    shown = f" -m {master}" if args.options.master else ""
    print(
        f"tfrun: job {job} runs detached, its launcher a task on {host} "
        f"(framework {framework_id}); follow it with:\n"
        f"  tfrun logs -f{shown} {job}      # worker:0's output as it comes (--task all: every task's)\n"
        f"  tfrun status{shown} {job}\n"
        f"  tfrun wait{shown} {job}         # until it ends, with its exit status\n"
        f"  tfrun stop{shown} {job}",
        file=sys.stderr,
        flush=True,
    )
    print(job, flush=True)
    raise SystemExit(0)


def _fail(message: str, status: int = EXIT_TFRUN_FAILED) -> NoReturn:
    print(f"tfrun: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(status)


async def _submit(args: Any, argv: Sequence[str], spec: ClusterSpec, job: str) -> tuple[str, str]:
    options: MesosOptions = args.options
    master = options.master or os.environ.get("MESOS_MASTER")
    if not master:
        _fail("the mesos backend needs a master: -m HOST:5050 or MESOS_MASTER", EXIT_USAGE)
    principal, secret = framework_credentials(options.principal, None, options.secret_file)
    user = options.user or getpass.getuser()
    host = advertised_host()
    info = framework_info(spec, options, user, host, principal)
    info["failover_timeout"] = HANDOVER_FAILOVER_TIMEOUT
    info["labels"] = job_labels(job)
    chief = next(t for t in spec.tasks() if t.job_name == spec.ending_job)
    need = dataclasses.replace(chief, cpus=chief.cpus + LAUNCHER_CPUS, mem=chief.mem + LAUNCHER_MEM)
    events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    client = SchedulerClient(
        master,
        info,
        events.put_nowait,
        reconnect_timeout=options.reconnect_timeout,
        connect_timeout=options.connect_timeout,
        auth=(principal, secret) if principal and secret else None,
        ssl_ca=options.ssl_ca,
    )
    runner = asyncio.create_task(client.run())
    key = os.urandom(32)
    task_id = f"{job}.{LAUNCHER_TASK}"
    given = _handover(args, argv, job, secret)
    given["framework_info"] = info
    server, port, handed = await handover.serve_one(key, task_id, given, "0.0.0.0")
    ok = False
    try:
        deadline = asyncio.get_running_loop().time() + (spec.start_timeout or PLACE_TIMEOUT)
        launched_on = ""
        while not handed.done():
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise TFMesosError(
                    f"the detached job's launcher task was not running within "
                    f"{spec.start_timeout or PLACE_TIMEOUT:g}s "
                    + (
                        f"(launched on {launched_on})"
                        if launched_on
                        else f"(no offer held {describe_need(need)}: {client.last_error or 'none came'})"
                    )
                )
            getter = asyncio.ensure_future(events.get())
            waited: set[asyncio.Future[Any]] = {getter, handed, runner}
            await asyncio.wait(waited, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if runner.done():
                getter.cancel()
                runner.result()  # raises MasterLostError, SchedulerError
                raise TFMesosError("the Mesos master ended the detached job's framework")
            if not getter.done():
                getter.cancel()
                continue
            event = getter.result()
            kind = event.get("type")
            if kind == "OFFERS":
                for offer in event.get("offers", {}).get("offers", []):
                    capacity = OfferCapacity.of(offer)
                    if launched_on or not capacity.fits(need):
                        client.submit(calls.decline(offer["id"], 1.0))
                        continue
                    resources, task_port = capacity.take(need)
                    env = {
                        wire.ENV_SECRET: key.hex(),
                        handover.ENV_HANDOVER: f"{host}:{port}",
                        wire.ENV_TASK_ID: task_id,
                    }
                    launch = Launch(task_id, need, env)
                    task = task_info(launch, spec, options, offer, resources, task_port, user)
                    python = "python3" if options.image else sys.executable
                    task["name"] = f"{spec.name[:60]} (launcher)"
                    task["command"]["value"] = f"exec {python} -m tfmesos.backends.mesos.detached"
                    launched_on = str(offer.get("hostname", ""))
                    given["framework_id"] = client.framework_id
                    client.submit(calls.accept(offer["id"], [task], 0.0))
            elif kind == "UPDATE":
                status = event["update"]["status"]
                if "uuid" in status:
                    client.submit(calls.acknowledge(status))
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
        assert client.framework_id is not None
        ok = True
        return client.framework_id, launched_on
    finally:
        server.close()
        # Left standing on success: the launcher task takes it over.
        await client.close(teardown=not ok)
        with contextlib.suppress(Exception):
            await runner


# -- in the launcher task --------------------------------------------------------


def launcher_main() -> int:
    """The launcher task: take the handover, then run the job as an attached
    tfrun that takes the framework over, and end with its exit status."""
    logging.basicConfig(format="[launcher] %(message)s", level=logging.INFO, stream=sys.stderr)
    key = bytes.fromhex(os.environ.pop(wire.ENV_SECRET))
    task_id = os.environ.pop(wire.ENV_TASK_ID)
    address = os.environ.pop(handover.ENV_HANDOVER)
    for name in (wire.ENV_HOST, wire.ENV_PORT):
        os.environ.pop(name, None)
    given = handover.receive(address, key, task_id)
    framework_id = str(given["framework_id"])
    sandbox = Path(os.environ.get("MESOS_SANDBOX") or os.getcwd())
    # Outside the sandbox, which the agent's files API serves to its readers.
    private = Path(tempfile.mkdtemp(prefix="tfmesos-launcher-", dir=_private_root(sandbox)))
    try:
        flags = list(given["flags"])
        for name, (flag, content) in given["files"].items():
            path = private / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as file:
                file.write(bytes.fromhex(content))
            flags += [flag, str(path)]
        flags += [
            "--log-dir",
            str(sandbox / SANDBOX_LOGS),
            "--events",
            str(sandbox / SANDBOX_EVENTS),
        ]
        base = IMAGE if os.environ.get(wire.ENV_BASE) == IMAGE else None
        env = task_base(os.environ, base, given["env"])
        env.pop(wire.ENV_BASE, None)
        env[ENV_FRAMEWORK_ID] = framework_id
        env[ENV_JOB] = str(given["job"])
        if given.get("secret"):
            env["MESOS_SECRET"] = str(given["secret"])
        argv = [
            sys.executable,
            "-m",
            "tfmesos.cli",
            "--backend",
            "mesos",
            *flags,
            *given["command"],
        ]
        cwd = given.get("cwd") if os.path.isdir(str(given.get("cwd"))) else None
        child = subprocess.Popen(argv, env=env, cwd=cwd or str(sandbox))

        def forward(signum: int, _frame: object) -> None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, forward)
        status = child.wait()
        # Its tfrun left the framework standing (a restart's next run takes
        # it over again): torn down here, the launcher task with it.
        auth = (str(given["framework_info"].get("principal")), str(given["secret"]))
        ca = private / _CARRIED_FILES["--ssl-ca"]
        problem = asyncio.run(
            teardown(
                str(given["master"]),
                dict(given["framework_info"], failover_timeout=HANDOVER_FAILOVER_TIMEOUT),
                framework_id,
                auth=auth if given.get("secret") else None,
                ssl_ca=str(ca) if ca.exists() else None,
            )
        )
        if problem is not None:
            logger.warning("cannot tear the framework %s down: %s", framework_id, problem)
        return status if status >= 0 else 128 - status
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _private_root(sandbox: Path) -> str | None:
    root = Path(tempfile.gettempdir()).resolve()
    return "/tmp" if root == sandbox.resolve() or sandbox.resolve() in root.parents else None


if __name__ == "__main__":
    sys.exit(launcher_main())
