"""A hand launch of N processes that do nothing: ``python bench/spawn_true.py N``.

Starts ``/bin/true`` N times, all at once, then waits for every one: what
``tfrun -w N -s 0 -- /bin/true`` does, less everything tfrun adds (bench/fixed_cost.py).
"""

from __future__ import annotations

import subprocess
import sys


def main() -> int:
    procs = [subprocess.Popen(["/bin/true"]) for _ in range(int(sys.argv[1]))]
    return max((proc.wait() for proc in procs), default=0)


if __name__ == "__main__":
    sys.exit(main())
