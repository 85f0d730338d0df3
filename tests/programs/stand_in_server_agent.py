"""The real agent, whose server (fine-grained mode) is a stand-in for the
TensorFlow one: a socket that listens where the TF server would, at once
rather than after seconds of importing TensorFlow. For launcher tests that
are about servers coming and going, not about TensorFlow.

Run as the local backend's agent command: ``python stand_in_server_agent.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tfmesos.agent import main as agent
from tfmesos.agent.supervisor import task_command

STAND_IN = """
import json, os, socket
cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
address = cluster[os.environ["TFMESOS_JOB_NAME"]][int(os.environ["TFMESOS_TASK_INDEX"])]
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TF's gRPC server binds
server.bind(("", int(address.rpartition(":")[2])))
server.listen()
print("stand-in server at", address, flush=True)
ready = os.environ.get("TFMESOS_READY_FD")
if ready is not None:  # as tfmesos.agent.tfserver tells the agent it listens
    os.write(int(ready), b"1")
    os.close(int(ready))
while True:
    server.accept()[0].close()
"""

_task_command = task_command


def _stand_in_command(
    message: dict[str, Any], environ: dict[str, str]
) -> tuple[str | list[str], dict[str, str]]:
    argv, env = _task_command(message, environ)
    if message.get("cmd") is None:
        argv = [sys.executable, "-c", STAND_IN, "stand-in-server"]
    return argv, env


# The agent's own binding of the supervisor's function (not exported): patched on purpose.
agent.task_command = _stand_in_command  # type: ignore[attr-defined]

if __name__ == "__main__":
    sys.exit(agent.main())
