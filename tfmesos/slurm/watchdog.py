"""Cancels tfrun's Slurm jobs if tfrun dies outright: ``kill -9``, the OOM killer.

Standard library only; started by the Slurm backend in a session of its own
(so that a signal to tfrun's process group, Ctrl-C included, does not reach
it), with nothing open but a pipe from tfrun. tfrun writes ``+JOBID`` for each
job it submits and ``done`` when it has cancelled them itself. If the pipe
ends without ``done``, tfrun is gone: the watchdog runs ``scancel`` on every
job it was told of, at once, and exits. A job still waiting in the queue is
thus removed too, which nothing inside the job could do.
"""

from __future__ import annotations

import subprocess
import sys

__all__ = ["main"]


def main() -> int:
    jobs: list[str] = []
    for raw in sys.stdin:
        line = raw.strip()
        if line == "done":
            return 0
        if line.startswith("+") and line[1:].isdigit():
            jobs.append(line[1:])
    if jobs:
        for _ in range(3):
            try:
                if subprocess.run(["scancel", *jobs], timeout=60, check=False).returncode == 0:
                    break
            except (OSError, subprocess.TimeoutExpired):
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
