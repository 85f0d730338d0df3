"""The test master's agents that lose contact and come back: the partition
faults (``partition_agent``, ``reregister_agent``, ``mark_agent_gone``).

Each test drives the master over raw HTTP (the helpers of test_testing_master)
and checks what a framework sees, as ``docs/test-master.md`` cites it.
"""

from __future__ import annotations

import os
from pathlib import Path

import aiohttp
import pytest

from tests.test_testing_master import JSON, Scheduler, framework_info, task_info, with_master
from tfmesos.testing.master import TestMaster

pytestmark = pytest.mark.e2e  # every test here starts processes

AWARE = [{"type": "PARTITION_AWARE"}]


# ------------------------------------------------- agents that lose contact


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def sent(master: TestMaster, task_id: str) -> list[JSON]:
    """The UPDATE statuses the master sent for one task, in order."""
    return [
        e["update"]["status"]
        for e in master.events()
        if e["type"] == "UPDATE" and e["update"]["status"]["task_id"]["value"] == task_id
    ]


async def running(sched: Scheduler, master: TestMaster, command: str = "sleep 600") -> JSON:
    [offer] = await sched.offers()
    await sched.launch(offer, task_info("t1", offer, command))
    await sched.updates_until("t1", "TASK_RUNNING")
    return master.task("t1")


@with_master(agents=1)
async def test_a_partitioned_agent_s_task_keeps_running_and_returns_when_it_reregisters(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    """Master::markUnreachable then __reregisterSlave, for a PARTITION_AWARE framework."""
    stream = await sched.subscribe(framework_info(capabilities=AWARE))
    task = await running(sched, master)
    agent_id = master.partition_agent()
    unreachable = await stream.update("t1", "TASK_UNREACHABLE")
    assert unreachable["source"] == "SOURCE_MASTER"
    assert unreachable["reason"] == "REASON_AGENT_REMOVED"
    assert unreachable["message"] == "health check timed out"
    assert unreachable["unreachable_time"]["nanoseconds"] > 0
    assert "uuid" not in unreachable
    failure = await stream.next("FAILURE")
    assert failure["failure"] == {"agent_id": {"value": agent_id}}
    assert alive(task["pid"])
    assert master.agents()[0]["state"] == "unreachable"
    # A KILL now reaches no agent: the master answers for the unreachable task.
    await sched.call("KILL", kill={"task_id": {"value": "t1"}, "agent_id": {"value": agent_id}})
    answer = await stream.update("t1")
    assert (answer["state"], answer["reason"]) == ("TASK_UNREACHABLE", "REASON_RECONCILIATION")

    assert master.reregister_agent(agent_id) is True
    back = await stream.update("t1")
    assert (back["state"], back["source"]) == ("TASK_RUNNING", "SOURCE_MASTER")
    assert back["reason"] == "REASON_AGENT_REREGISTERED"
    assert back["message"] == "Unreachable agent re-reregistered"
    assert "uuid" not in back
    assert master.framework(sched.framework_id)["task_ids"] == ["t1"]
    await sched.call("KILL", kill={"task_id": {"value": "t1"}})
    await sched.updates_until("t1", "TASK_KILLED")
    await master.wait_for(lambda: not alive(task["pid"]))


@with_master(agents=1)
async def test_a_framework_that_is_not_partition_aware_sees_lost_then_running(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    """__removeSlave sends TASK_LOST; __reregisterSlave re-adds the tasks of every
    framework (its partition-aware set is not consulted) with their state."""
    stream = await sched.subscribe()
    await running(sched, master)
    agent_id = master.partition_agent()
    lost = await stream.update("t1", "TASK_LOST")
    assert lost["reason"] == "REASON_AGENT_REMOVED"
    assert master.reregister_agent(agent_id)
    back = await stream.update("t1")
    assert (back["state"], back["reason"]) == ("TASK_RUNNING", "REASON_AGENT_REREGISTERED")


@with_master(agents=1)
async def test_updates_of_a_partitioned_agent_wait_until_it_reregisters(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    stream = await sched.subscribe(framework_info(capabilities=AWARE))
    task = await running(sched, master, "while [ ! -e go ]; do sleep 0.05; done")
    agent_id = master.partition_agent()
    await stream.update("t1", "TASK_UNREACHABLE")
    (Path(task["sandbox"]) / "go").touch()
    await master.wait_task_state("t1", "TASK_FINISHED")  # as the agent knows it
    assert [s["state"] for s in sent(master, "t1")][-1] == "TASK_UNREACHABLE"
    assert master.reregister_agent(agent_id)
    back = await stream.update("t1")
    assert (back["state"], back["reason"]) == ("TASK_FINISHED", "REASON_AGENT_REREGISTERED")
    resent = await stream.update("t1")
    assert (resent["state"], resent["source"]) == ("TASK_FINISHED", "SOURCE_EXECUTOR")
    await sched.ack(resent)
    await master.wait_for(lambda: master.framework(sched.framework_id)["task_ids"] == [])


@with_master(agents=1)
async def test_an_unreachable_agent_marked_gone_is_refused_and_its_tasks_die(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    """Master::markGone for an unreachable agent; its reregistration is refused
    with a ShutdownMessage, and the agent kills its tasks."""
    stream = await sched.subscribe(framework_info(capabilities=AWARE))
    task = await running(sched, master)
    agent_id = master.partition_agent()
    await stream.update("t1", "TASK_UNREACHABLE")
    master.mark_agent_gone(agent_id)
    gone = await stream.update("t1")
    assert (gone["state"], gone["reason"]) == (
        "TASK_GONE_BY_OPERATOR",
        "REASON_AGENT_REMOVED_BY_OPERATOR",
    )
    assert gone["message"] == "Agent has been marked gone"
    assert alive(task["pid"])
    assert master.reregister_agent(agent_id) is False
    await master.wait_for(lambda: not alive(task["pid"]))
    assert [s["state"] for s in sent(master, "t1")][-1] == "TASK_GONE_BY_OPERATOR"
    assert master.agents()[0]["state"] == "gone"


@with_master(agents=1)
async def test_an_agent_that_restarts_without_its_tasks_makes_them_gone(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    """An agent that died (kill_agent) and comes back under its ID reports no task:
    __reregisterSlave forgets its unreachable tasks, and reconciliation then
    answers TASK_GONE (task unknown, agent registered: Master::reconcile)."""
    stream = await sched.subscribe(framework_info(capabilities=AWARE))
    task = await running(sched, master)
    agent_id = master.kill_agent()
    await stream.update("t1", "TASK_UNREACHABLE")
    await master.wait_for(lambda: not alive(task["pid"]))
    assert master.reregister_agent(agent_id)
    tasks = [{"task_id": {"value": "t1"}, "agent_id": {"value": agent_id}}]
    await sched.call("RECONCILE", reconcile={"tasks": tasks})
    answer = await stream.update("t1")
    assert (answer["state"], answer["reason"]) == ("TASK_GONE", "REASON_RECONCILIATION")


@with_master(agents=1)
async def test_tasks_of_a_framework_removed_meanwhile_are_shut_down_on_return(
    master: TestMaster, session: aiohttp.ClientSession, sched: Scheduler
) -> None:
    """Master::removeFramework marks unreachable tasks TASK_KILLED; the agent
    that comes back is told to shut the framework down."""
    stream = await sched.subscribe(framework_info(capabilities=AWARE))
    task = await running(sched, master)
    agent_id = master.partition_agent(freeze=True)
    await stream.update("t1", "TASK_UNREACHABLE")
    await sched.call("TEARDOWN")
    assert master.task("t1")["state"] == "TASK_KILLED"
    assert alive(task["pid"])
    assert master.reregister_agent(agent_id)
    await master.wait_for(lambda: not alive(task["pid"]))
