"""Issue 28: what starting one command costs the agent, by the way it is started.

Each repetition starts ``/bin/true`` BATCH times, one after the other, from
this process with the agent's modules loaded (about an agent's size, so that
a ``fork`` copies as much as an agent's does), its output on a pipe as the
agent's is, in each of these ways:

- ``sh -c 'exec /bin/true'`` with the agent's ``preexec_fn`` (a session and
  so a process group of its own, parent-death signal): how the agent started every command before;
- ``/bin/true`` exec'd directly, the same ``preexec_fn``: how it starts a
  command line of plain words now (``tfmesos.common.shell.plain_argv``);
- ``/bin/true`` with ``start_new_session`` and no ``preexec_fn``, which lets
  ``subprocess`` use ``vfork``: but without the parent-death signal;
- ``setpriv --pdeathsig KILL /bin/true`` the same way: the signal asked for
  by a small C program rather than by Python in the child.

CPU is this process's and its children's, user + system, per command, in ms.
"""

from __future__ import annotations

import os
import resource
import subprocess
import time
from collections.abc import Callable

from benchlib import Result, alternate, command_line, parse_args

from tfmesos.common import proctree

BATCH = 50
SETPRIV = "/usr/bin/setpriv"


def _per_command(start: Callable[[], subprocess.Popen[bytes]]) -> Callable[[], tuple[float, float]]:
    def run() -> tuple[float, float]:
        before = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        started = time.perf_counter()
        for _ in range(BATCH):
            proc = start()
            assert proc.stdout is not None
            proc.stdout.read()
            proc.stdout.close()
            proc.wait()
        wall = time.perf_counter() - started
        after = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        cpu = sum(
            a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime
            for a, b in zip(after, before, strict=True)
        )
        return cpu / BATCH * 1000, wall / BATCH * 1000

    return run


def _popen(argv: str | list[str], **options: object) -> Callable[[], subprocess.Popen[bytes]]:
    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
            argv,
            shell=isinstance(argv, str),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            **options,
        )

    return start


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], reps=7)
    result = Result("spawn_cost", command_line("spawn_cost.py", args), args.quick, {"batch": BATCH})
    proctree.libc()  # loaded once, as the agent has it
    preexec = {"preexec_fn": proctree.own_session_dying_with_parent}
    contenders = {
        "sh -c exec, preexec_fn": _per_command(_popen("exec /bin/true", **preexec)),
        "direct exec, preexec_fn": _per_command(_popen(["/bin/true"], **preexec)),
        "direct exec, vfork (no death signal)": _per_command(
            _popen(["/bin/true"], start_new_session=True)
        ),
    }
    if os.access(SETPRIV, os.X_OK):
        contenders["setpriv --pdeathsig, vfork"] = _per_command(
            _popen([SETPRIV, "--pdeathsig", "KILL", "/bin/true"], start_new_session=True)
        )
    samples = alternate(args.reps, contenders, warmup=args.warmup)
    for name, pairs in samples.items():
        result.add(f"CPU per command, {name}", "ms", [cpu for cpu, _ in pairs])
        result.add(f"wall per command, {name}", "ms", [wall for _, wall in pairs])
    result.ratio(
        "CPU: direct / sh -c",
        "CPU per command, direct exec, preexec_fn",
        "CPU per command, sh -c exec, preexec_fn",
    )
    result.note(f"load average at the end: {os.getloadavg()[0]:.2f}")
    result.write(args.results_dir)


if __name__ == "__main__":
    main()
