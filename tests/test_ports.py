"""Where the local backend's ports come from."""

from __future__ import annotations

from tfmesos.common.ports import MESOS_AGENT_PORTS, PortAllocator, ephemeral_range, task_port_range


def test_local_ports_keep_out_of_the_ephemeral_range_and_a_mesos_agents_ports() -> None:
    low, high = task_port_range()
    ephemeral_low, _ = ephemeral_range()
    mesos_low, mesos_high = MESOS_AGENT_PORTS
    assert high < ephemeral_low
    # A chief beside tfrun on an agent's machine would otherwise take ports
    # the agent offers (seen: a Mesos task's "port 31000 is already in use").
    assert high < mesos_low or low > mesos_high
    allocator = PortAllocator()
    assert (allocator.low, allocator.high) == (low, high)
    for _ in range(50):
        port = allocator.allocate()
        assert low <= port <= high
