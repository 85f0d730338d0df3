"""The environment of a task's executor and command, as the agent sets it:
its own environment (``inherit_env``) or a default ``PATH``, the ``MESOS_*``
variables (``src/slave/slave.cpp``, ``executorEnvironment``), then
``CommandInfo.environment`` (mesos.proto ``Environment``)."""

from __future__ import annotations

import os

from tfmesos.testing.master.schema import JSON
from tfmesos.testing.master.state import MasterState, Task, resolve

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def executor_environment(state: MasterState, task: Task) -> dict[str, str]:
    """The agent's environment for the executor: its own (``inherit_env``) and
    the ``MESOS_*`` variables."""
    agent = state.agents_by_id[task.agent_id]
    env = dict(os.environ) if state.config.inherit_env else {"PATH": DEFAULT_PATH}
    env.setdefault("PATH", DEFAULT_PATH)
    agent_ip = resolve(agent.hostname, state.config.ip)
    env.update(
        {
            "MESOS_SANDBOX": str(task.sandbox),
            "MESOS_DIRECTORY": str(task.sandbox),
            "MESOS_FRAMEWORK_ID": task.framework_id,
            "MESOS_EXECUTOR_ID": task.executor_id,
            "MESOS_SLAVE_ID": task.agent_id,
            "MESOS_AGENT_ENDPOINT": f"{agent_ip}:{agent.port}",
            "MESOS_SLAVE_PID": f"slave(1)@{agent_ip}:{agent.port}",
            "MESOS_CHECKPOINT": "0",
        }
    )
    return env


def command_environment(command: JSON) -> dict[str, str]:
    """``CommandInfo.environment``'s VALUE variables."""
    env = {}
    for variable in command.get("environment", {}).get("variables", []):
        if variable.get("type", "VALUE") == "VALUE" and "value" in variable:
            env[variable["name"]] = variable["value"]
    return env


def task_environment(state: MasterState, task: Task, command: JSON) -> dict[str, str]:
    """The command's environment: the executor's, the command's own, and the
    task's role."""
    env = executor_environment(state, task)
    env.update(command_environment(command))
    env["MESOS_ALLOCATION_ROLE"] = task.role
    return env
