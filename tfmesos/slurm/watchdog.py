"""Cancels tfrun's Slurm jobs if tfrun dies outright (``kill -9``, the OOM
killer), including jobs still queued, which nothing inside a job could do.

Started in a session of its own so Ctrl-C does not reach it. tfrun writes
``+JOBID`` per job on a pipe and ``done`` once it has cancelled them; the pipe
ending without ``done`` makes the watchdog ``scancel`` every job. Standard
library only.
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
