"""Run a command; the first time, kill it once it has saved a checkpoint past step 0.

    python tests/programs/crash_after_checkpoint.py MARKER CHECKPOINT_DIR -- COMMAND...

A crash in the middle of training, made to order for the restart tests: while
MARKER does not exist, it waits until CHECKPOINT_DIR's ``checkpoint`` index
names a checkpoint after global step 0, then creates MARKER, kills the command
with SIGKILL and exits 1. Once MARKER exists it runs the command plainly.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

_LATEST = re.compile(r'^model_checkpoint_path: ".*?-(\d+)"', re.MULTILINE)


def saved_step(checkpoint_dir: Path) -> int:
    try:
        found = _LATEST.search((checkpoint_dir / "checkpoint").read_text())
    except OSError:
        return 0
    return int(found.group(1)) if found else 0


def main(argv: list[str]) -> int:
    marker, checkpoint_dir, dashes, *command = argv
    assert dashes == "--" and command, __doc__
    child = subprocess.Popen(command)
    if os.path.exists(marker):
        return child.wait()
    while child.poll() is None:
        step = saved_step(Path(checkpoint_dir))
        if step > 0:
            Path(marker).write_text(f"killed after the checkpoint of step {step}\n")
            print(f"crash_after_checkpoint: killing the command after step {step}", flush=True)
            child.send_signal(signal.SIGKILL)
            child.wait()
            return 1
        time.sleep(0.02)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
