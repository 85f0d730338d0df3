"""``tfrun``'s command line: its flags, its help beside them, and the
:class:`ClusterSpec` they make (:func:`parse_args`); one line, exit 2, for
bad input. Nothing here starts a job (:mod:`tfmesos.cli.main` does)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar, overload

from tfmesos.backends import BACKENDS, BackendOptions, choose_backend, options_class
from tfmesos.common import rundirs
from tfmesos.common.flagtypes import (
    FlagGroup,
    count,
    other_launchers_hint,
    positive_number,
    torchrun_hint,
)
from tfmesos.common.pathtext import shown_path
from tfmesos.common.taskenv import placeholders_in
from tfmesos.errors import (
    EXIT_USAGE,
    SpecError,
)
from tfmesos.rendezvous import protocol
from tfmesos.spec import (
    MAX_NPROC,
    MAX_RESTARTS,
    MAX_TASKS,
    ClusterSpec,
    Job,
)

__all__ = [
    "SUBCOMMANDS",
    "Parser",
    "bare_script",
    "build_parser",
    "parse_args",
    "read_extra_config",
]

SUBCOMMANDS = frozenset({"list", "status", "logs", "wait", "stop", "attach"})
"""``tfrun WORD ...``: a detached job's commands (tfmesos.cli.jobs), told apart
from a job's flags by the first argument alone (a job's command comes after --)."""
DETACHABLE = frozenset({"local", "slurm", "mesos"})
"""The backends ``--detach`` runs on."""

DESCRIPTION = """\
Run a distributed TensorFlow, PyTorch or JAX job: the command runs once per
task, each told the cluster's addresses (placeholders, and what each framework
reads: TF_CONFIG, torchrun's RANK, WORLD_SIZE and MASTER_ADDR, JAX's
JAX_COORDINATOR_ADDRESS; below). A TensorFlow job in replica (between-graph)
mode has -s parameter servers; a PyTorch or JAX job has none. Tasks run on
this machine (the local backend), on an Apache Mesos cluster (-m) or on a
Slurm cluster (--backend slurm)."""

EPILOG = """\
placeholders in the command, filled in for each task:
  {ps_hosts}      host:port of every ps task, comma-joined
  {worker_hosts}  host:port of every worker task, comma-joined
  {chief_hosts}   host:port of the chief (--chief), else empty
  {job_name}      ps or worker (chief, evaluator with --chief, --evaluator)
  {task_index}    the task's index within its job (with --nproc-per-task N,
                  a worker process's own: GROUP_RANK*N + LOCAL_RANK)
  ({{name}} is a literal {name}.)

what each task gets in its environment:
  TensorFlow  TF_CONFIG; TFMESOS_PS_HOSTS, TFMESOS_WORKER_HOSTS,
              TFMESOS_JOB_NAME, TFMESOS_TASK_INDEX, TFMESOS_DISTRIBUTED=1;
              TFMESOS_CHIEF_HOSTS with --chief; with --cluster-file, for a
              cluster too large for them, none of TF_CONFIG and the *_HOSTS
              but TFMESOS_CLUSTER_FILE, a file of TF_CONFIG's JSON
  PyTorch     what torchrun gives: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
              LOCAL_RANK=0, LOCAL_WORLD_SIZE=1 (with --nproc-per-task N:
              0..N-1 and N, as torchrun's --nproc_per_node N), GROUP_RANK,
              GROUP_WORLD_SIZE,
              ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE, TORCHELASTIC_RUN_ID,
              TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS,
              TORCHELASTIC_USE_AGENT_STORE=False; unless set,
              OMP_NUM_THREADS (its CPUs) and TORCH_NCCL_ASYNC_ERROR_HANDLING=1
  JAX         JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID
              (pass the last two to jax.distributed.initialize())
  every task  TFMESOS_RESTART (which run, with --max-restarts); on the local
              backend CUDA_VISIBLE_DEVICES: its own GPUs ("" with none,
              where torchrun leaves it unset)
  Worker 0 is the chief, rank 0 and JAX's process 0; the ps tasks come after
  the workers. -s defaults to 0 unless the command uses {ps_hosts}.
  With --chief the chief is a task of its own (TF_CONFIG type chief), rank 0
  before the workers, and the job ends when it exits; an --evaluator is in no
  cluster list and has no rank (no RANK, WORLD_SIZE, MASTER_*, JAX_*).

from torchrun:
  torchrun --nproc_per_node 4 train.py   is   tfrun -w 4 -- python train.py
                (4 tasks), or tfrun -w 1 --nproc-per-task 4 -- python train.py
                (one task of 4 processes: [worker:0.3] is local rank 3)
  --no-python, -m/--module  no counterpart: tfrun never prefixes python, the
                command after -- runs as given (write python -m MODULE;
                tfrun's -m is the Mesos master)
  -r/--redirects, -t/--tee  every task's full output is always kept in its
                log file (--log-dir, else the run's directory); --worker-logs
                picks the workers whose output is also shown here: '*' all,
                none for files only
  --max-restarts  the same: the whole job is started again

exit status:
  0        every worker exited 0 (with --chief: the chief did)
  2        bad usage; nothing was started
  77       the Mesos master refused the framework's credentials
           (--principal, --secret-file)
  124      the cluster never came up (--timeout, or tasks that kept dying
           before they checked in)
  125      tfrun itself failed (it could not reach or lost the Mesos
           master, the master refused the framework, an error in tfrun)
  130/143/129  tfrun was stopped by Ctrl-C / SIGTERM / SIGHUP
  other    a task failed: its own status (126/127: its command could not
           run / was not found), or 1 when it had none or one listed above

detached jobs (--detach; on Mesos the commands take -m too):
  tfrun list [--json]               this user's jobs: state, tasks up, exit status
  tfrun status ID [--json]          each task's state, host, attempts; the verdict
  tfrun logs ID [--task T|all] [-f] a task's output (default the chief, worker:0)
  tfrun wait ID                     until the job ends; exits with its status
  tfrun stop ID                     end it as Ctrl-C does (idempotent)
  tfrun attach ID                   its console; Ctrl-C leaves it running

examples:
  tfrun -w 2 -s 1 -- python examples/mnist/mnist_replica.py \\
      --ps_hosts {ps_hosts} --worker_hosts {worker_hosts} \\
      --job_name {job_name} --task_index {task_index}
  tfrun -w 3 -- python examples/torch_ddp.py
  tfrun -w 3 --worker-logs '*' -- python examples/jax_psum.py
  tfrun --chief -w 3 -s 2 -- python train_ps.py    # ParameterServerStrategy
"""


_N = TypeVar("_N")


class Parser(argparse.ArgumentParser):
    """argparse's parser, its errors said in one line (exit 2), through
    argparse's public API only: its errors caught as :class:`argparse.ArgumentError`
    (``exit_on_error=False``), never read back from its (translated) words,
    and its flags known as they are added (:attr:`flags`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.flags: list[str] = []
        """Every option string added, through :meth:`add_argument` or a
        :meth:`flag_group`, in order: what a mistyped flag is matched to."""
        kwargs.setdefault("exit_on_error", False)
        super().__init__(*args, **kwargs)

    def add_argument(self, *name_or_flags: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*name_or_flags, **kwargs)
        self.flags.extend(action.option_strings)
        _underscore_spellings(super().add_argument, action, kwargs)
        return action

    def flag_group(self, title: str) -> FlagGroup:
        """An argument group under ``title`` in the help, whose flags are
        known to this parser too."""
        return _KnownFlags(self.add_argument_group(title), self.flags)

    # typeshed's third form (namespace= alone) is left out: nothing calls it.
    @overload  # type: ignore[override]
    def parse_args(
        self, args: Sequence[str] | None = None, namespace: None = None
    ) -> argparse.Namespace: ...
    @overload
    def parse_args(self, args: Sequence[str] | None, namespace: _N) -> _N: ...
    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        """argparse's, but an unknown flag is said as :meth:`_unknown_flag`
        says it, and a flag's value refused by its type names the flag:
        ``-w/--nworker must be ...``."""
        try:
            parsed, extras = self.parse_known_args(args, namespace)
        except argparse.ArgumentError as exc:
            self.error(_refusal(exc))
        if extras:
            self.error(
                self._unknown_flag(extras[0]) or f"unrecognized arguments: {' '.join(extras)}"
            )
        return parsed

    def error(self, message: str) -> NoReturn:
        # One line, not argparse's usage dump: the message is what matters.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _unknown_flag(self, word: str) -> str | None:
        """``unknown flag --wroker-logs (did you mean --worker-logs?)``."""
        if not word.startswith("-"):
            return None
        flag = word.split("=", 1)[0]
        hint = torchrun_hint(flag) or other_launchers_hint(flag)
        if hint is not None:
            return hint
        known = [o for o in self.flags if o.startswith("--") == flag.startswith("--")]
        text = f"unknown flag {flag}"
        import difflib  # here: only a mistyped flag needs it

        # Close enough to be a typo (--wroker-logs); 0.6, difflib's default,
        # took --epochs for --qos and --gpus for --user.
        nearest = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
        if nearest:
            return f"{text} (did you mean {nearest[0]}?)"
        # Most likely the command's own flag, typed before the --.
        return f"{text}: if it is the command's, put it after -- (tfrun -w 2 -- python train.py {word})"


def _refusal(exc: argparse.ArgumentError) -> str:
    """What argparse refused: ``-w/--nworker must be ...`` where a flag's
    type refused its value (common/flagtypes.py's words, which all start
    "must"), else argparse's own message."""
    if exc.argument_name and exc.message.startswith("must "):
        return f"{exc.argument_name} {exc.message}"
    return str(exc)


class _KnownFlags:
    """An argument group that tells its parser each flag added to it."""

    def __init__(self, group: FlagGroup, flags: list[str]) -> None:
        self._group = group
        self._flags = flags

    def add_argument(self, *name_or_flags: Any, **kwargs: Any) -> argparse.Action:
        action = self._group.add_argument(*name_or_flags, **kwargs)
        self._flags.extend(action.option_strings)
        _underscore_spellings(self._group.add_argument, action, kwargs)
        return action


def _underscore_spellings(
    add: Callable[..., argparse.Action], action: argparse.Action, kwargs: dict[str, Any]
) -> None:
    """``--max_restarts`` for ``--max-restarts``, as torchrun users type
    tfrun's multi-word flags: taken alike, never shown in the help, never
    suggested for a typo (not in :attr:`Parser.flags`)."""
    spellings = [
        "--" + flag[2:].replace("-", "_")
        for flag in action.option_strings
        if flag.startswith("--") and "-" in flag[2:]
    ]
    spellings = [flag for flag in spellings if flag not in action.option_strings]
    if spellings:
        hidden = {**kwargs, "dest": action.dest, "help": argparse.SUPPRESS}
        hidden["default"] = argparse.SUPPRESS  # the shown flag's default stands
        add(*spellings, **hidden)


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked for: reading the installed
    distributions' metadata would cost every tfrun a few milliseconds."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> NoReturn:
        from importlib.metadata import PackageNotFoundError, version

        try:
            release = version("tfmesos")
        except PackageNotFoundError:  # run from a source tree
            release = "(not installed)"
        # The protocol is what a task image's tfmesos must match (docs/failures.md).
        sys.stdout.write(f"tfrun {release}, rendezvous protocol {protocol.PROTOCOL_VERSION}\n")
        parser.exit()


class _NameAction(argparse.Action):
    """``-n``/``--name``, and which of the two was typed (``name_flag``):
    a number is taken as a name only from ``--name``."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        namespace.name_flag = option_string


def build_parser() -> Parser:
    parser = Parser(
        prog="tfrun",
        usage="%(prog)s -w N [-s N] [options] -- command [args...]",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # --nwork 1 must not run as --nworker 1: a flag is spelt out or refused.
        allow_abbrev=False,
    )
    job = parser.flag_group("the job")
    job.add_argument(
        "-w",
        "--nworker",
        type=_workers,
        metavar="N",
        help="number of workers (worker 0 is the chief, unless --chief)",
    )
    job.add_argument(
        "-s",
        "--nserver",
        type=count,
        metavar="N",
        help="number of parameter servers (ps); default 0, unless the command uses {ps_hosts}",
    )
    job.add_argument(
        "--chief",
        action="store_true",
        help="one more task, TF_CONFIG type chief (rank 0, beside tfrun on a cluster), besides "
        "the -w workers: the job ends when it exits, its status the job's, and the rest are "
        "stopped (ParameterServerStrategy's coordinator, MultiWorkerMirrored's chief)",
    )
    job.add_argument(
        "--evaluator",
        action="store_true",
        help="one more task, TF_CONFIG type evaluator, in no cluster list and with no rank (TF's "
        "side-car evaluator): stopped when the job ends; its end, even a failure, does not end it",
    )
    job.add_argument(
        "--events",
        metavar="FILE",
        help="write the job's events to FILE, one JSON object a line, flushed as each happens; "
        "the last is the verdict, with tfrun's exit status (docs/running.md, 'The event stream')",
    )
    job.add_argument(
        "--detach",
        action="store_true",
        help="start the job and return: print its id last, once the launcher runs as a daemon "
        "that outlives this terminal (local backend), Slurm has taken its job (slurm) or its "
        "launcher runs as a task of the job's framework (mesos); "
        "follow it with tfrun list, status ID, logs -f ID, wait ID, stop ID",
    )
    job.add_argument(
        "--max-restarts",
        type=_restarts,
        default=0,
        metavar="N",
        help=f"start the whole job again, up to N times (0 to {MAX_RESTARTS}), when a task fails "
        "or is lost after the cluster is up (default 0); TFMESOS_RESTART tells the tasks which "
        "run it is",
    )
    job.add_argument(
        "--nproc-per-task",
        "--nproc-per-node",
        "--nproc_per_node",
        dest="nproc_per_task",
        type=_nproc,
        default=1,
        metavar="N",
        help="run N processes in each task, sharing its CPUs and GPUs, as torchrun's "
        "--nproc_per_node runs N on each node: LOCAL_RANK 0..N-1, RANK = GROUP_RANK*N + "
        "LOCAL_RANK, WORLD_SIZE tasks*N; each process's output is shown as [worker:I.LOCAL_RANK] "
        "and kept in a log of its own; for TensorFlow each worker process is a worker of its "
        "own, at a port of its own (TF_CONFIG, {worker_hosts}: tasks*N workers); chief, ps and "
        "evaluator tasks run one process (default 1)",
    )
    job.add_argument(
        "-Cw",
        "--worker-cpus",
        type=positive_number,
        default=1.0,
        metavar="CPUS",
        help="CPUs per worker (default 1)",
    )
    job.add_argument(
        "-Gw",
        "--worker-gpus",
        type=count,
        default=0,
        metavar="GPUS",
        help="GPUs per worker (default 0)",
    )
    job.add_argument(
        "-Mw",
        "--worker-mem",
        type=positive_number,
        default=1024.0,
        metavar="MIB",
        help="memory per worker in MiB (default 1024)",
    )
    job.add_argument(
        "-Cs",
        "--server-cpus",
        type=positive_number,
        default=1.0,
        metavar="CPUS",
        help="CPUs per ps (default 1)",
    )
    job.add_argument(
        "-Gs",
        "--server-gpus",
        type=count,
        default=0,
        metavar="GPUS",
        help="GPUs per ps (default 0)",
    )
    job.add_argument(
        "-Ms",
        "--server-mem",
        type=positive_number,
        default=1024.0,
        metavar="MIB",
        help="memory per ps in MiB (default 1024)",
    )
    for letter, what, kind, unit, shown in (
        ("C", "cpus", positive_number, "CPUS", "CPUs"),
        ("G", "gpus", count, "GPUS", "GPUs"),
        ("M", "mem", positive_number, "MIB", "memory in MiB"),
    ):
        job.add_argument(
            f"-{letter}c",
            f"--chief-{what}",
            type=kind,
            metavar=unit,
            help=f"{shown} for the chief (--chief; default: the workers', -{letter}w)",
        )
    job.add_argument(
        "-e",
        "--extra-config",
        "--extra_config",  # the original's spelling, kept
        metavar="FILE",
        help='JSON file: {"initializer": CMD, "finalizer": CMD, "env": {NAME: VALUE}}; the initializer runs before the command in each task, the finalizer after it',
    )
    job.add_argument(
        "--export",
        default="ALL",
        metavar="ALL|NONE|NAME[,NAME...]",
        help="which of this environment every task sees, as srun --export: ALL (default) less "
        "the names that describe this host (HOSTNAME, PWD, DISPLAY, TMPDIR, SSH_*, SLURM_*, ...: "
        "see docs/running.md); NONE; or only the names given (NAME=VALUE sets one; ALL,NAME=VALUE adds "
        "to ALL). Carried over the job's authenticated rendezvous, never in a Mesos TaskInfo; "
        "-e's env and what tfrun sets come on top",
    )
    job.add_argument(
        "--cluster-file",
        action="store_true",
        help="give each task the cluster's definition in a file, not in its environment: "
        "TFMESOS_CLUSTER_FILE names a file of TF_CONFIG's JSON, and TF_CONFIG and the "
        "TFMESOS_*_HOSTS are not set. For a job whose addresses are too many for one "
        "variable (128 KiB), which tfrun otherwise refuses",
    )
    job.add_argument(
        "--worker-logs",
        metavar="IDS",
        help="tasks whose output is printed here as well as kept in their log files: "
        "comma-separated worker indices or task names (0,1 or worker:1,ps:0), '*' for every "
        "worker, all for every task, or none for the files only (default 0; with --chief, "
        "none); the chief's and the evaluator's are printed unless none",
    )
    job.add_argument(
        "--chdir",
        metavar="DIR",
        help="run each task's command in DIR, as srun --chdir (default: this directory; on a "
        "cluster, the same path on each host)",
    )
    job.add_argument(
        "--timeout",
        type=positive_number,
        metavar="SECONDS",
        help="give up if the cluster is not up after this long (default: wait)",
    )

    where = parser.flag_group("where tasks run")
    where.add_argument(
        "--backend",
        choices=list(BACKENDS),
        help="local: this machine; mesos: a Mesos cluster; slurm: a Slurm cluster (default: mesos when -m or MESOS_MASTER is given, slurm when a Slurm flag is, else local)",
    )
    where.add_argument(
        "-n",
        "--name",
        action=_NameAction,
        help="the job's name: the Mesos framework's, the Slurm job's (default: [tfrun] and the command)",
    )
    for name in BACKENDS:
        options_class(name).add_arguments(where)
    where.add_argument(
        "--log-dir",
        metavar="DIR",
        help="where each task's full output is kept (on Mesos as it reaches tfrun; default: a new directory under $XDG_STATE_HOME/tfmesos/runs)",
    )

    security = parser.flag_group("security")
    security.add_argument(
        "--tls-cert",
        metavar="PEM",
        help="serve the rendezvous over TLS with this certificate; tasks trust only it",
    )
    security.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="say more about what the launcher does"
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        help="print tfmesos's version and its rendezvous protocol's, and exit",
    )
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, help="the command each task runs, after --"
    )
    return parser


def _restarts(text: str) -> int:
    """``--max-restarts``: a whole number from 0 to :data:`MAX_RESTARTS`."""
    stripped = text.strip()
    value = int(stripped) if stripped.isascii() and stripped.isdigit() else -1
    if not 0 <= value <= MAX_RESTARTS:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from 0 to {MAX_RESTARTS}, not {text!r}"
        )
    return value


def _workers(text: str) -> int:
    """``-w``: a count, said as what it takes (0 only with ``--chief``)."""
    try:
        return count(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"must be a whole number, 1 or more (0 with --chief), not {text!r}"
        ) from None


def _nproc(text: str) -> int:
    """``--nproc-per-task``: a whole number from 1 to :data:`MAX_NPROC`."""
    stripped = text.strip()
    value = int(stripped) if stripped.isascii() and stripped.isdigit() else 0
    if not 1 <= value <= MAX_NPROC:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from 1 to {MAX_NPROC}, not {text!r}"
        )
    return value


def _command(parts: Sequence[str]) -> str:
    # One argument is a shell command line, as the original took it; several
    # are argv, quoted so that each reaches the task as it was given.
    if len(parts) == 1:
        return parts[0]
    return shlex.join(parts)


def _worker_logs(
    text: str | None, nworker: int, chief: bool, evaluator: bool, nserver: int = 0
) -> frozenset[str]:
    """The tasks whose output is shown: the workers ``--worker-logs`` names
    (by default worker 0, the chief; with ``--chief``, none), and the chief
    and the evaluator, but with ``none``."""
    if text is not None and text.strip() == "none":  # torchrun's -r without -t: the files only
        return frozenset()
    aside = {"chief:0"} if chief else set()
    if evaluator:
        aside.add("evaluator:0")
    if text is None:
        return frozenset(aside if chief else {"worker:0", *aside})
    sizes = {"worker": nworker, "ps": nserver, "chief": int(chief), "evaluator": int(evaluator)}
    return _worker_indices(text, sizes) | aside


def _worker_indices(text: str, sizes: dict[str, int]) -> frozenset[str]:
    """``0,2`` (workers), ``*`` (every worker), ``all`` (every task), or
    task names: ``worker:1,ps:0``."""
    if text.strip() == "*":
        return frozenset(f"worker:{i}" for i in range(sizes["worker"]))
    if text.strip() == "all":
        return frozenset(f"{job}:{i}" for job, size in sizes.items() for i in range(size))
    names = set()
    for part in text.split(","):
        part = part.strip()
        job, colon, index = part.rpartition(":")
        if not colon:
            job, index = "worker", part
        if job not in sizes or not index.isdigit():
            raise SpecError(
                f"--worker-logs: {part!r} is neither a worker index nor a task of this job "
                "(use e.g. 0,1, worker:1, ps:0, '*' for every worker, all, or none)"
            )
        if int(index) >= sizes[job]:
            if job in ("chief", "evaluator") and not sizes[job]:
                raise SpecError(f"--worker-logs: there is no {job}: give --{job} for one")
            count = sizes[job]
            raise SpecError(
                f"--worker-logs: there is no {job} {index} in a job of {count} {job}"
                f"{'s' if count != 1 and job != 'ps' else ''}"
            )
        names.add(f"{job}:{int(index)}")
    return frozenset(names)


def _jobs(args: argparse.Namespace, cmd: str) -> tuple[Job, ...]:
    """The job's task groups: ``--chief``, the ps, the workers,
    ``--evaluator``. The chief takes the workers' resources but where
    ``-Cc/-Mc/-Gc`` say otherwise; the evaluator takes the workers'."""
    worker = (args.worker_cpus, args.worker_mem, args.worker_gpus)
    jobs = []
    if args.chief:
        given = (args.chief_cpus, args.chief_mem, args.chief_gpus)
        cpus, mem, gpus = (w if c is None else c for c, w in zip(given, worker, strict=True))
        jobs.append(Job("chief", 1, cpus, mem, gpus, cmd))
    jobs.append(Job("ps", args.nserver, args.server_cpus, args.server_mem, args.server_gpus, cmd))
    jobs.append(Job("worker", args.nworker, *worker, cmd))
    if args.evaluator:
        jobs.append(Job("evaluator", 1, *worker, cmd))
    return tuple(jobs)


def _chdir(path: str | None, backend: str) -> str:
    """Where each task runs its command: ``--chdir``, made absolute here;
    on the local backend it must be a directory of this machine."""
    if path is None:
        return os.getcwd()
    where = os.path.abspath(path)
    if backend == "local" and not os.path.isdir(where):
        raise SpecError(f"--chdir: {shown_path(path)} is not a directory")
    return where


def _readable(path: str | None, flag: str) -> str | None:
    if path is not None and not os.access(path, os.R_OK):
        raise SpecError(f"{flag}: cannot read {shown_path(path)}")
    return os.path.abspath(path) if path else None


def _log_dir(path: str | None) -> str | None:
    """The log directory as an absolute path (sbatch would read a relative
    one from --chdir), once it is known that it can be made and written, so
    that one that cannot is a usage error before anything starts.

    Made to be sure, and what was made removed at once: the backend makes it
    when the job starts, and a job refused before (a backend's own check, as
    Slurm's of a backslash) must leave nothing behind."""
    if path is None:
        return None
    if not path:  # os.path.abspath would make it this directory
        raise SpecError("--log-dir: the directory's name is empty")
    where = os.path.abspath(path)
    if os.path.exists(where) and not os.path.isdir(where):
        raise SpecError(f"--log-dir: cannot use {shown_path(path)}: it is not a directory")
    missing = []
    parent = where
    while not os.path.lexists(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    made: list[str] = []
    try:
        for directory in reversed(missing):
            os.mkdir(directory)
            made.append(directory)
        writable = os.access(where, os.W_OK | os.X_OK)
    except OSError as exc:
        raise SpecError(
            f"--log-dir: cannot use {shown_path(path)}: {exc.strerror or exc}"
        ) from None
    finally:
        for directory in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(directory)
    if not writable:
        raise SpecError(f"--log-dir: cannot use {shown_path(path)}: it is not writable")
    return where


MAX_EXTRA_CONFIG = 4 << 20
"""The largest ``-e`` file read (4 MiB): what it holds goes to every task in
a message that must fit in 1 MiB, so a larger one can never run, and one
without end (``-e /dev/zero``) must not be read until memory runs out."""


def read_extra_config(path: str) -> tuple[str | None, str | None, dict[str, str]]:
    """``-e FILE``: its initializer, finalizer and environment."""
    from tfmesos.common.pathtext import shown_path

    shown = shown_path(path)
    try:
        with open(path, "rb") as config_file:
            data = config_file.read(MAX_EXTRA_CONFIG + 1)
    except OSError as exc:
        raise SpecError(f"-e: cannot read {shown}: {exc.strerror}") from None
    if len(data) > MAX_EXTRA_CONFIG:
        raise SpecError(
            f"-e: {shown} is larger than {MAX_EXTRA_CONFIG >> 20} MiB, which no job can hold"
        )
    try:
        config = json.loads(data)
    except ValueError as exc:  # and UnicodeDecodeError, a ValueError
        raise SpecError(f"-e: {shown} is not valid JSON: {exc}") from None
    except RecursionError:  # nested past the parser's depth: no configuration is
        raise SpecError(f"-e: {shown} is not valid JSON: nested too deeply") from None
    if not isinstance(config, dict):
        raise SpecError(f"-e: {shown} must hold a JSON object")
    unknown = sorted(set(config) - {"initializer", "finalizer", "env"})
    if unknown:
        raise SpecError(
            f"-e: unknown key {unknown[0]!r} in {shown} (known: initializer, finalizer, env)"
        )
    env = config.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise SpecError(f"-e: 'env' in {shown} must map names to strings")
    for key in ("initializer", "finalizer"):
        if config.get(key) is not None and not isinstance(config[key], str):
            raise SpecError(f"-e: {key!r} in {shown} must be a shell command string")
    texts = [(f"{key!r}", config.get(key) or "") for key in ("initializer", "finalizer")]
    texts += [(f"'env' name {name!r}", name) for name in env]
    texts += [(f"'env' {name!r}", value) for name, value in env.items()]
    for what, text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            if not "\udc80" <= text[exc.start] <= "\udcff":
                continue  # no byte either: the job's own checks say so
            # JSON's \udc80 to \udcff: a lone surrogate, which the checks of
            # the job's text would take for a byte that is not UTF-8 (as
            # os.environ holds one), and sizing it failed with a traceback.
            raise SpecError(
                f"-e: {what} in {shown} holds {text[exc.start]!r}, a lone surrogate, "
                "which is not text (JSON's \\uD800 to \\uDFFF must come in pairs)"
            ) from None
    return config.get("initializer"), config.get("finalizer"), env


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, ClusterSpec]:
    """Parse ``tfrun``'s arguments into the options and the job's spec.

    Exits with status 2 and a one-line message on any bad input: each step
    below raises :class:`SpecError`, in the order the user is told.
    """
    parser = build_parser()
    words, command = _split_at_dashes(argv)
    args = parser.parse_args(words)
    try:
        command = _required(args, command)
        _default_servers(args, command)
        _check_name(args)
        problem = bare_script(command, args.chdir)
        if problem is not None:
            raise SpecError(problem)
        ntasks = _check_tasks(args)
        options_type = _choose_backend(args, ntasks)
        spec = _spec(args, _command(command))
        _take_options(args, options_type, spec)
    except SpecError as exc:
        parser.error(str(exc))
    return args, spec


def _split_at_dashes(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """tfrun's flags, and the command after the first ``--`` (none without)."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    split = argv.index("--")
    return argv[:split], argv[split + 1 :]


def _required(args: argparse.Namespace, command: list[str]) -> list[str]:
    """``-w`` and the command, which must be given: the command's words."""
    # Checked here rather than by argparse, which would name the missing -w
    # before an unknown flag (--nworkers) that is the real mistake.
    if args.nworker is None:
        raise SpecError(
            "-w is required: the number of workers (tasks; --nproc-per-task N runs N "
            "processes in each, as torchrun's --nproc_per_node)"
        )
    command = command or [a for a in args.command if a != "--"]
    if not command:
        raise SpecError("no command given: put it after --")
    return command


def _default_servers(args: argparse.Namespace, command: list[str]) -> None:
    """``-s``, where not given: 0, unless the command names the ps tasks."""
    if args.nserver is not None:
        return
    # A torchrun or JAX job has no ps; a TensorFlow job that names its ps
    # tasks must say how many.
    if "ps_hosts" in placeholders_in(_command(command)):
        raise SpecError("the command uses {ps_hosts}: give the number of ps tasks with -s N")
    args.nserver = 0


def _check_name(args: argparse.Namespace) -> None:
    """``-n``: one line of text; a number is most likely srun's ``-n``."""
    if args.name is None:
        return
    if not args.name.isprintable():
        # Mesos refuses a framework name that is not UTF-8 only once it is
        # registering, and Slurm's job name would carry an escape raw.
        raise SpecError(
            f"-n/--name {args.name!r} must be one line of printable text "
            "(no newline, escape or byte that is not UTF-8)"
        )
    if args.name.strip().isdigit() and getattr(args, "name_flag", "-n") == "-n":
        # srun's -n is the number of tasks: most likely meant as such.
        raise SpecError(
            f"-n {args.name} would name the job {args.name!r}: tfrun's -n is the job's name, "
            f"and srun's -n (its number of tasks) is tfrun's -w (-w {args.name.strip()}); "
            f"to name the job {args.name!r}, give --name {args.name}"
        )


def _check_tasks(args: argparse.Namespace) -> int:
    """The job's tasks, counted before anything is built per task
    (``-w 10**20`` must cost nothing): their number."""
    if args.nworker < 1 and not args.chief:
        raise SpecError(
            f"-w must be 1 or more, not {args.nworker}: worker 0 is the chief; "
            "-w 0 is for a job with --chief"
        )
    for what in ("cpus", "gpus", "mem"):
        if getattr(args, f"chief_{what}") is not None and not args.chief:
            raise SpecError(f"--chief-{what} is for the chief: give --chief too")
    ntasks: int = args.nworker + args.nserver + args.chief + args.evaluator
    if ntasks > MAX_TASKS:
        raise SpecError(
            f"a job can have at most {MAX_TASKS} tasks in all, not {ntasks} "
            f"(-w {args.nworker} -s {args.nserver}"
            + " --chief" * args.chief
            + " --evaluator" * args.evaluator
            + ")"
        )
    return ntasks


def _choose_backend(args: argparse.Namespace, ntasks: int) -> type[BackendOptions]:
    """The backend the flags choose (``args.backend``), once it is known to
    take the job: its options class."""
    # The registry says which flags are whose: each backend's options class
    # (tfmesos.backends.OPTIONS) names its own, and those that choose it.
    for name in BACKENDS:
        options_class(name).gather_arguments(args)
    args.backend = choose_backend(args.backend, vars(args), as_flags=True)
    if args.detach and args.backend not in DETACHABLE:
        raise SpecError(
            f"--detach is not yet supported on the {args.backend} backend: it runs on the local "
            "and Slurm backends (tfrun --detach -w N -- command); run this job attached"
        )
    options_type = options_class(args.backend)
    problem = options_type.task_limit(ntasks, args.nproc_per_task)
    if problem is not None:
        raise SpecError(problem)
    return options_type


def _spec(args: argparse.Namespace, cmd: str) -> ClusterSpec:
    """The job's spec, from the flags checked so far and ``-e``'s file."""
    initializer, finalizer, env = (
        read_extra_config(args.extra_config) if args.extra_config else (None, None, {})
    )
    return ClusterSpec(
        jobs=_jobs(args, cmd),
        name=args.name or f"[tfrun] {cmd}"[:200],
        replica=True,
        cwd=_chdir(args.chdir, args.backend),
        env=env,
        initializer=initializer,
        finalizer=finalizer,
        forward_logs=_worker_logs(
            args.worker_logs, args.nworker, args.chief, args.evaluator, args.nserver
        ),
        start_timeout=args.timeout,
        tls_cert=_readable(args.tls_cert, "--tls-cert"),
        tls_key=_readable(args.tls_key, "--tls-key"),
        max_restarts=args.max_restarts,
        nproc=args.nproc_per_task,
        export=args.export,
        cluster_file=args.cluster_file,
    )


def _take_options(
    args: argparse.Namespace, options_type: type[BackendOptions], spec: ClusterSpec
) -> None:
    """The backend's options (``args.options``), checked against the job,
    and the settings of this machine every job needs, checked before start."""
    args.log_dir = _log_dir(args.log_dir)
    # Each backend takes what is its own of the flags (BackendOptions.from_given).
    args.options = options_type.from_given(vars(args))
    args.options.check_spec(spec)
    rundirs.keep_runs()  # TFMESOS_KEEP_RUNS and TFMESOS_TASK_LOG_MAX
    rundirs.task_log_max()


def bare_script(command: list[str], chdir: str | None) -> str | None:
    """``tfrun -w 4 train.py``: what to say where the command's first word is a
    Python file that the shell would not find (exit 127) or not run (126) in
    every task, as tfrun never adds python; None where it runs."""
    import os
    import shlex

    try:
        word = shlex.split(command[0])[0] if len(command) == 1 else command[0]
    except (ValueError, IndexError):
        return None
    path = os.path.join(chdir or ".", word)
    if not word.endswith(".py") or not os.path.isfile(path):
        return None
    with contextlib.suppress(OSError), open(path, "rb") as script:
        runnable = os.access(path, os.X_OK) and script.read(2) == b"#!"
        import shutil  # here: only a command naming a .py file needs it

        if runnable and ("/" in word or shutil.which(word)):
            return None
    return (
        f"{word} is a Python file, which the command runs as given: "
        f"write python {word} (tfrun never adds python)"
    )
