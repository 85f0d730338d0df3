"""Finding the memory cgroup's OOM-kill count (tfmesos/agent/oomkills.py), from
/proc files written here, and the kernel's own count where this machine lets
a test make a memory cgroup (tests/test_oom_local.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfmesos.agent.oomkills import counter_path, oom_kills

V1_MOUNTS = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / {root}/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 {mount_root} {root}/mem\\040ory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / {root}/unified rw,relatime - cgroup2 cgroup2 rw
"""
V2_MOUNTS = "41 31 0:38 {mount_root} {root}/cg rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n"


def proc(tmp_path: Path, cgroup: str, mountinfo: str) -> str:
    where = tmp_path / "proc"
    where.mkdir()
    (where / "cgroup").write_text(cgroup)
    (where / "mountinfo").write_text(mountinfo.replace("{root}", str(tmp_path / "sys")))
    return str(where)


def counter(tmp_path: Path, relative: str, name: str, text: str) -> Path:
    path = tmp_path / "sys" / relative / name
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("mount_root", "below"),
    [
        ("/", "mem ory/job/task"),  # the whole hierarchy, its mount point escaped
        ("/job", "mem ory/task"),  # a container's view: mounted from its own cgroup
    ],
)
def test_cgroup_v1_its_memory_cgroup_s_oom_control(
    tmp_path: Path, mount_root: str, below: str
) -> None:
    where = proc(
        tmp_path,
        "9:name=systemd:/\n4:memory:/job/task\n1:cpu,cpuacct:/\n0::/\n",
        V1_MOUNTS.replace("{mount_root}", mount_root),
    )
    expected = counter(
        tmp_path, below, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
    )
    path = counter_path(where)
    assert path == str(expected)
    assert oom_kills(path) == 3


def test_cgroup_v2_its_memory_events(tmp_path: Path) -> None:
    where = proc(tmp_path, "0::/job/task\n", V2_MOUNTS.replace("{mount_root}", "/"))
    expected = counter(
        tmp_path, "cg/job/task", "memory.events", "low 0\nhigh 0\nmax 7\noom 2\noom_kill 1\n"
    )
    path = counter_path(where)
    assert path == str(expected)
    assert oom_kills(path) == 1


@pytest.mark.parametrize(
    ("cgroup", "mountinfo", "why"),
    [
        (
            "4:memory:/job/task\n",
            V1_MOUNTS.replace("{mount_root}", "/other"),
            "not below the mount",
        ),
        ("1:cpu:/\n0::/job\n", V1_MOUNTS.replace("{mount_root}", "/"), "no memory cgroup"),
        ("4:memory:/job/task\n", "", "nothing mounted"),
        ("garbage\n\n", V1_MOUNTS.replace("{mount_root}", "/"), "a listing not as Linux writes it"),
    ],
    ids=["elsewhere", "no-memory-controller", "unmounted", "garbage"],
)
def test_no_counter_where_none_can_be_seen(
    tmp_path: Path, cgroup: str, mountinfo: str, why: str
) -> None:
    counter(tmp_path, "mem ory/job/task", "memory.oom_control", "oom_kill 0\n")
    assert counter_path(proc(tmp_path, cgroup, mountinfo)) is None, why


def test_a_counter_that_cannot_be_read_is_none(tmp_path: Path) -> None:
    assert counter_path(str(tmp_path / "no-such-proc")) is None
    assert oom_kills(str(tmp_path / "gone")) is None
    old_kernel = counter(tmp_path, "old", "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\n")
    assert oom_kills(str(old_kernel)) is None
