"""The task's environment: tfrun's reaches every task, the same on every
backend, narrowed by ``--export`` (README, "The task's environment";
:mod:`tfmesos.common.exported`), and never through a Mesos TaskInfo."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import JobProcesses, guide_section, popen_tfrun, run_tfrun
from tests.mesos_clusters import MesosUnderTest
from tfmesos.agent import supervisor
from tfmesos.backends.base import Launch
from tfmesos.backends.mesos.options import MesosOptions
from tfmesos.backends.mesos.taskinfo import task_info
from tfmesos.common import exported, taskenv
from tfmesos.common.exported import (
    Export,
    carried,
    host_environment,
    not_carried,
    parse_export,
    task_base,
)
from tfmesos.errors import SpecError
from tfmesos.launcher.message import cluster_message
from tfmesos.rendezvous import protocol
from tfmesos.spec import ClusterSpec, Job

PY = sys.executable

PROBED = (
    "MY_EXPORTED_VAR",
    "MY_OTHER_VAR",
    "MY_SECRET_TOKEN",
    "MY_BYTES",
    "SSH_CONNECTION",
    "HOSTNAME",
    "DISPLAY",
    "TF_CONFIG",
    "SLURM_JOB_ID",
)
PROBE = (
    "import json, os, sys, time; d = sys.argv[1]; "
    "names = " + repr(PROBED) + "; "
    "env = {n: (None if os.environb.get(n.encode()) is None else os.environb[n.encode()].hex()) "
    "for n in names}; "
    "open(os.path.join(d, '{job_name}.{task_index}.tmp'), 'w').write(json.dumps(env)); "
    "os.rename(os.path.join(d, '{job_name}.{task_index}.tmp'), "
    "os.path.join(d, '{job_name}.{task_index}')); "
    "go = os.path.join(d, 'go'); "
    "[time.sleep(0.05) for _ in iter(lambda: os.path.exists(go), True)]"
)
"""Each task writes what it sees of ``PROBED`` (hex of the bytes, or None) to
``DIR/job.index``, then waits for ``DIR/go``: the test looks at the cluster
manager's ``/state`` while every task runs."""

FAKE_SSH = "10.9.9.9 50000 10.8.8.8 22"
FAKE_HOST = "not-this-host.invalid"


def _probe(directory: Path) -> list[str]:
    return [PY, "-c", PROBE, str(directory)]


def _seen(directory: Path, tasks: list[str]) -> dict[str, dict[str, bytes | None]]:
    """What each task saw, by its name (``worker:1``)."""
    seen = {}
    for name in tasks:
        raw = json.loads((directory / name.replace(":", ".")).read_text())
        seen[name] = {k: None if v is None else bytes.fromhex(v) for k, v in raw.items()}
    return seen


def _env(job_procs: JobProcesses, secret: str = "") -> dict[str, str]:
    return job_procs.env(
        MY_EXPORTED_VAR="carried to every task",
        MY_OTHER_VAR="named",
        MY_SECRET_TOKEN=secret or "s3cr3t-" + uuid.uuid4().hex,
        MY_BYTES="caf\udce9 \udcff",  # b"caf\xe9 \xff": not UTF-8, as os.environ holds it
        SSH_CONNECTION=FAKE_SSH,
        HOSTNAME=FAKE_HOST,
        DISPLAY=":77",
    )


TASKS = ["ps:0", "worker:0", "worker:1"]
"""``-w 2 -s 1``: on Mesos and Slurm, worker:0 (the chief) runs beside tfrun,
the others on the cluster."""


def _run(
    backend_args: list[str], directory: Path, env: dict[str, str], *export: str
) -> tuple[Any, list[str]]:
    """Run the probe in every task; return tfrun, once each task has written
    what it saw (they then wait for the go file)."""
    directory.mkdir()
    tfrun = popen_tfrun(
        *backend_args, *export, "-w", "2", "-s", "1", "--timeout", "120", "--", *_probe(directory),
        env=env,
    )  # fmt: skip
    try:
        tfrun.events.wait_for("cluster_up", tfrun, timeout=180)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{tfrun.said()}") from None
    deadline = time.monotonic() + 120
    while not all((directory / t.replace(":", ".")).exists() for t in TASKS):
        assert tfrun.poll() is None, tfrun.said()
        assert time.monotonic() < deadline, tfrun.said()
        time.sleep(0.05)
    return tfrun, TASKS


def _operator(url: str, call: str) -> str:
    """The answer of a Mesos operator API call (``/api/v1``), as text."""
    request = urllib.request.Request(
        url + "/api/v1",
        data=json.dumps({"type": call}).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return str(answer.read().decode())


def _finish(tfrun: Any, directory: Path) -> None:
    (directory / "go").write_text("")
    _, said = tfrun.communicate(timeout=120)
    assert tfrun.returncode == 0, said


# -- every backend ----------------------------------------------------------------


def _check_default(
    seen: dict[str, dict[str, bytes | None]], env: dict[str, str], remote: list[str]
) -> None:
    for name, vars_ in seen.items():
        assert vars_["MY_EXPORTED_VAR"] == b"carried to every task", (name, vars_)
        assert vars_["MY_SECRET_TOKEN"] == env["MY_SECRET_TOKEN"].encode(), name
        # Bytes that are not UTF-8 arrive as they were.
        assert vars_["MY_BYTES"] == b"caf\xe9 \xff", (name, vars_)
        # What the launcher sets wins.
        tf_config = json.loads(vars_["TF_CONFIG"] or b"{}")
        assert tf_config["task"] == {
            "type": name.split(":")[0],
            "index": int(name.split(":")[1]),
        }
    for name in remote:
        # This host's names do not travel to another.
        assert seen[name]["SSH_CONNECTION"] != FAKE_SSH.encode(), name
        assert seen[name]["HOSTNAME"] != FAKE_HOST.encode(), name
        assert seen[name]["DISPLAY"] != b":77", name


def _check_named(seen: dict[str, dict[str, bytes | None]]) -> None:
    for name, vars_ in seen.items():
        assert vars_["MY_OTHER_VAR"] == b"named", name
        assert vars_["MY_EXPORTED_VAR"] is None, name
        assert vars_["MY_SECRET_TOKEN"] is None, name


def _check_none(seen: dict[str, dict[str, bytes | None]]) -> None:
    for name, vars_ in seen.items():
        assert vars_["MY_OTHER_VAR"] is None, name
        assert vars_["MY_EXPORTED_VAR"] is None, name
        assert vars_["TF_CONFIG"] is not None, name


LOCAL_WAYS = {
    "in tfrun": {},
    "forked agents": {"TFMESOS_LOCAL_AGENTS": "1"},
    "agents of their own": {"TFMESOS_NO_FORK_SERVER": "1"},
}
"""The local backend's three ways to run a task: in tfrun's own process, by
an agent its fork server forks, by an agent started as an interpreter."""


@pytest.mark.parametrize("way", list(LOCAL_WAYS))
@pytest.mark.parametrize("export", ["default", "NONE", "--export=MY_OTHER_VAR"])
def test_the_environment_reaches_every_local_task_as_export_says(
    export: str, way: str, job_procs: JobProcesses, tmp_path: Path
) -> None:
    env = {**_env(job_procs), **LOCAL_WAYS[way]}
    flags = (
        [] if export == "default" else [export] if export.startswith("--") else ["--export", export]
    )
    tfrun, tasks = _run([], tmp_path / "seen", env, *flags)
    seen = _seen(tmp_path / "seen", tasks)
    _finish(tfrun, tmp_path / "seen")
    if export == "default":
        # Every task is on this host: its own names are true here, and kept.
        _check_default(seen, env, remote=[])
        assert all(v["DISPLAY"] == b":77" for v in seen.values())
    elif export == "NONE":
        _check_none(seen)
    else:
        _check_named(seen)
    assert job_procs.wait_gone(10) == []


def test_the_environment_reaches_every_mesos_task_and_never_its_state(
    mesos: MesosUnderTest, job_procs: JobProcesses, tmp_path: Path
) -> None:
    secret = "s3cr3t-" + uuid.uuid4().hex
    env = _env(job_procs, secret)
    tfrun, tasks = _run(["-m", mesos.url], tmp_path / "seen", env)
    try:
        # Every task runs now: what the master and each agent show of them
        # (their /state, and the operator API's GET_STATE, which holds each
        # executor's environment: a TaskInfo's) holds no value tfrun carried.
        running = [t for t in mesos.tasks() if t["state"] == "TASK_RUNNING"]
        assert len(running) == 2, mesos.tasks()
        shown = {"master /state": json.dumps(mesos.state())}
        if mesos.real is not None:
            shown["master GET_STATE"] = _operator(mesos.url, "GET_STATE")
            for index in range(len(mesos.real.agents)):
                shown[f"agent{index} /state"] = json.dumps(mesos.real.agent_state(index))
                url = mesos.real.agent_url(index)
                shown[f"agent{index} GET_STATE"] = _operator(url, "GET_STATE")
            # The check can see a TaskInfo's environment where it is shown.
            assert any(protocol.ENV_LAUNCHER in text for text in shown.values()), shown.keys()
        for where, text in shown.items():
            assert secret not in text, f"{where} shows a value tfrun carried"
            assert "carried to every task" not in text, where
        seen = _seen(tmp_path / "seen", tasks)
    finally:
        _finish(tfrun, tmp_path / "seen")
    _check_default(seen, env, remote=["ps:0", "worker:1"])
    # Narrowed to one name: on the remote tasks as on the chief.
    tfrun, tasks = _run(["-m", mesos.url], tmp_path / "named", env, "--export", "MY_OTHER_VAR")
    seen = _seen(tmp_path / "named", tasks)
    _finish(tfrun, tmp_path / "named")
    _check_named(seen)
    assert job_procs.wait_gone(10) == []


@pytest.mark.usefixtures("slurm")
def test_the_environment_reaches_every_slurm_task_as_export_says(
    job_procs: JobProcesses, tmp_path: Path
) -> None:
    env = _env(job_procs)
    tfrun, tasks = _run(["--backend", "slurm"], tmp_path / "seen", env)
    seen = _seen(tmp_path / "seen", tasks)
    _finish(tfrun, tmp_path / "seen")
    _check_default(seen, env, remote=["ps:0", "worker:1"])
    assert seen["worker:1"]["SLURM_JOB_ID"], "Slurm's own word reaches its tasks"
    tfrun, tasks = _run(["--backend", "slurm"], tmp_path / "none", env, "--export", "NONE")
    seen = _seen(tmp_path / "none", tasks)
    _finish(tfrun, tmp_path / "none")
    _check_none(seen)
    # NONE: what the host gives still comes; on Slurm, Slurm's own.
    assert seen["worker:1"]["SLURM_JOB_ID"], seen["worker:1"]
    assert seen["worker:1"]["SSH_CONNECTION"] is None
    assert job_procs.wait_gone(10) == []


def test_an_environment_too_large_for_the_tasks_is_one_line_and_exit_2(
    job_procs: JobProcesses,
) -> None:
    big = {f"MY_BIG_{i}": "x" * 100_000 for i in range(11)}
    result = run_tfrun(
        "--events", "/dev/null", "-w", "1", "-s", "0", "--", "true", env=job_procs.env(**big)
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tfrun: error: ") and "--export" in lines[0], lines[0]
    assert "1 MiB (1048576 bytes)" in lines[0], lines[0]
    # Narrowed, it runs.
    narrowed = run_tfrun(
        "-w", "1", "-s", "0", "--export", "NONE", "--", "true", env=job_procs.env(**big)
    )
    assert narrowed.returncode == 0, narrowed.stderr
    assert job_procs.alive() == []


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("TF_CONFIG", "TF_CONFIG is set by tfmesos"),
        ("MY_VAR,TFMESOS_X", "TFMESOS_X is set by tfmesos"),
        ("1ABC", "'1ABC' is not a variable name"),
        ("A,,B", "an empty name"),
        ("A,NONE", "NONE stands alone"),
        # Before: "NONE can only come first", where NONE was first.
        ("NONE,PATH", "NONE stands alone"),
        ("A,ALL", "ALL can only come first"),
    ],
)
def test_an_export_tfrun_cannot_honour_is_one_line_and_exit_2(
    value: str, said: str, job_procs: JobProcesses
) -> None:
    result = run_tfrun("--export", value, "-w", "1", "-s", "0", "--", "true", env=job_procs.env())
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], result.stderr


# -- the policy itself (unit) -------------------------------------------------------


def test_parse_export_takes_sruns_spellings() -> None:
    assert parse_export("ALL") == Export(True)
    assert parse_export("all") == Export(True)
    assert parse_export("NONE") == Export(False)
    assert parse_export("A,B,A") == Export(False, ("A", "B"))
    assert parse_export("A,B=x y") == Export(False, ("A",), {"B": "x y"})
    assert parse_export("ALL,B=1") == Export(True, (), {"B": "1"})
    assert parse_export("B=") == Export(False, (), {"B": ""})
    for wrong in ("", "A,", "1A", "A-B", "RANK", "CUDA_VISIBLE_DEVICES", "TFMESOS_X", "A,ALL"):
        with pytest.raises(ValueError, match="--export"):
            parse_export(wrong)


def test_all_carries_everything_but_this_hosts_names_and_the_launchers() -> None:
    environ = {
        "PATH": "/opt/bin:/usr/bin",
        "HOME": "/home/u",
        "TF_USE_LEGACY_KERAS": "1",
        "BASH_FUNC_module%%": "() { :; }",  # carried as srun does: the shell decides
        "HOSTNAME": "login1",
        "PWD": "/home/u/x",
        "OLDPWD": "/home/u",
        "SHLVL": "2",
        "_": "/usr/bin/tfrun",
        "DISPLAY": ":0",
        "TMPDIR": "/tmp/u",
        "XDG_RUNTIME_DIR": "/run/user/1000",
        "XDG_SESSION_ID": "3",
        "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1",
        "SSH_CONNECTION": "1 2 3 4",
        "SLURM_JOB_ID": "12",
        "SBATCH_PARTITION": "gpu",
        "MESOS_SANDBOX": "/sandbox",
        "LIBPROCESS_IP": "10.0.0.1",
        "OMPI_COMM_WORLD_RANK": "3",
        "TF_CONFIG": "{}",
        "RANK": "5",
        "CUDA_VISIBLE_DEVICES": "0",
        "TFMESOS_ADVERTISE_HOST": "x",
    }
    assert carried(environ, parse_export("ALL")) == {
        "PATH": "/opt/bin:/usr/bin",
        "HOME": "/home/u",
        "TF_USE_LEGACY_KERAS": "1",
        "BASH_FUNC_module%%": "() { :; }",
    }
    assert carried(environ, parse_export("NONE")) == {}
    # A name given is carried, even one of this host's; one not set is not.
    assert carried(environ, parse_export("DISPLAY,HOME,UNSET,X=1")) == {
        "DISPLAY": ":0",
        "HOME": "/home/u",
        "X": "1",
    }
    assert carried(environ, parse_export("ALL,HOME=/h"))["HOME"] == "/h"
    for name in environ:
        if name not in ("PATH", "HOME", "TF_USE_LEGACY_KERAS", "BASH_FUNC_module%%"):
            assert not_carried(name), name
    # Each name left behind says why, in the README's table.
    assert all(exported.NOT_CARRIED.values()) and all(exported.NOT_CARRIED_PREFIXES.values())


def test_the_host_gives_its_own_names_by_where_the_agents_environment_came_from() -> None:
    agent_env = {
        "PATH": "/usr/bin",
        "MY_EXPORTED_VAR": "from tfrun",
        "DISPLAY": ":0",
        "SLURM_JOB_ID": "7",
        "TFMESOS_TASK_ID": "worker.1.0.ab",
        "CUDA_VISIBLE_DEVICES": "",
    }
    # A Mesos agent's environment is its host's: all of it.
    assert host_environment(agent_env, None) == agent_env
    # tfrun's, here: this host's names (true here) and the launcher's.
    assert host_environment(agent_env, exported.HERE) == {
        "DISPLAY": ":0",
        "SLURM_JOB_ID": "7",
        "TFMESOS_TASK_ID": "worker.1.0.ab",
        "CUDA_VISIBLE_DEVICES": "",
    }
    # tfrun's, carried elsewhere by Slurm: Slurm's word and the launcher's.
    assert host_environment(agent_env, exported.ELSEWHERE) == {
        "SLURM_JOB_ID": "7",
        "TFMESOS_TASK_ID": "worker.1.0.ab",
        "CUDA_VISIBLE_DEVICES": "",
    }
    # What is carried comes on top; in an image, under the image's own.
    carried = {"PATH": "/home/u/venv/bin:/usr/bin", "MY_VAR": "1"}
    assert task_base(agent_env, None, carried)["PATH"] == "/home/u/venv/bin:/usr/bin"
    in_image = task_base({"PATH": "/opt/venv/bin:/usr/bin"}, exported.IMAGE, carried)
    assert in_image == {"PATH": "/opt/venv/bin:/usr/bin", "MY_VAR": "1"}


def test_a_mesos_taskinfo_holds_no_carried_variable_and_says_where_an_image_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = _spec(monkeypatch, MY_SECRET_TOKEN="s3cr3t")
    offer = {"hostname": "h", "agent_id": {"value": "a"}}
    (task,) = [t for t in spec.tasks() if t.index == 1]
    launch = Launch("worker.1.0.x", task, {protocol.ENV_LAUNCHER: "h:1", protocol.ENV_TASK_ID: "w"})
    for image, base in ((None, None), ("tfmesos-cpu", exported.IMAGE)):
        info = task_info(launch, spec, MesosOptions(image=image), offer, [], 31000, None)
        variables = {v["name"]: v["value"] for v in info["command"]["environment"]["variables"]}
        assert "MY_SECRET_TOKEN" not in variables and "s3cr3t" not in json.dumps(info)
        assert variables.get(protocol.ENV_BASE) == base


def _spec(monkeypatch: pytest.MonkeyPatch, export: str = "ALL", **env: str) -> ClusterSpec:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return ClusterSpec(
        jobs=(Job("worker", 2, cmd="true"),),
        replica=True,
        env={"MY_JOB_VAR": "from -e", "MY_EXPORTED_VAR": "-e wins"},
        export=export,
    )


def test_the_cluster_message_carries_the_environment_and_the_agent_layers_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = _spec(monkeypatch, MY_EXPORTED_VAR="tfrun's", MY_OTHER_VAR="other", SSH_TTY="/dev/pts/1")
    assert spec.exported["MY_OTHER_VAR"] == "other"
    assert "SSH_TTY" not in spec.exported
    assert "MY_OTHER_VAR" not in repr(spec)  # the environment is no spec's repr
    (task,) = [t for t in spec.tasks() if t.index == 1]

    class _Attempt:
        spec = task

    message = cluster_message(
        spec,
        _Attempt(),  # type: ignore[arg-type]
        run_id="r",
        restart=0,
        cluster_def={"worker": ["h:1", "h:2"]},
    )
    assert message["exported"] == spec.exported
    # Through the wire as the agent gets it, then the agent's layers.
    decoded = protocol.parse_json(
        protocol.encode_json({**message, "exported": {"B": "\udcff"}})[5:]
    )
    agent_env = {
        "PATH": "/agent/bin",
        "OMP_NUM_THREADS": "7",
        protocol.ENV_BASE: exported.HERE,
        protocol.ENV_LAUNCHER: "h:9",
        "TFMESOS_TASK_ID": "worker.1.0.x",
        "RANK": "99",
    }
    _, env = supervisor.task_command({**message}, dict(agent_env))
    assert env["MY_OTHER_VAR"] == "other"
    assert env["MY_EXPORTED_VAR"] == "-e wins"
    assert env["MY_JOB_VAR"] == "from -e"
    assert env["RANK"] == "1"  # the launcher's own wins
    assert env["TFMESOS_TASK_ID"] == "worker.1.0.x"
    assert protocol.ENV_BASE not in env and protocol.ENV_LAUNCHER not in env
    assert env["PATH"] == spec.exported.get("PATH")  # tfrun's, not the agent's copy of it
    _, env = supervisor.task_command({**decoded}, dict(agent_env))
    assert env["B"] == "\udcff" and "MY_OTHER_VAR" not in env
    # A Mesos agent's environment is its host's: kept, under what is carried.
    del agent_env[protocol.ENV_BASE]
    _, env = supervisor.task_command({**message, "exported": {}}, dict(agent_env))
    assert env["PATH"] == "/agent/bin" and env["OMP_NUM_THREADS"] == "7"


def test_a_spec_refuses_an_environment_too_large_or_an_export_it_cannot_honour(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(SpecError, match=r"narrow --export"):
        _spec(monkeypatch, **{f"MY_BIG_{i}": "x" * 100_000 for i in range(11)})
    assert _spec(monkeypatch, "NONE").exported == {}
    with pytest.raises(SpecError, match="TF_CONFIG is set by tfmesos"):
        _spec(monkeypatch, "TF_CONFIG")
    assert taskenv.launchers_own("TF_CONFIG")


def test_the_readme_names_every_name_left_behind() -> None:
    section = guide_section("docs/running.md", "The task's environment")
    for name in exported.NOT_CARRIED:
        assert f"`{name}`" in section, name
    for prefix in exported.NOT_CARRIED_PREFIXES:
        assert f"`{prefix}*`" in section, prefix


FINE_GRAINED = """
import sys
import psutil
import tfmesos

jobs = [{"name": "worker", "num": 1}]
with tfmesos.cluster(jobs, quiet=True, **({"export": sys.argv[1]} if sys.argv[1:] else {})):
    servers = [
        p for p in psutil.Process().children(recursive=True)
        if "tfmesos.agent.tfserver" in " ".join(p.cmdline())
    ]
    print(sorted(p.environ().get("MY_EXPORTED_VAR", "-") for p in servers))
"""


@pytest.mark.parametrize("export", [None, "NONE"])
def test_fine_grained_servers_see_the_environment_as_export_says(
    export: str | None, job_procs: JobProcesses, tmp_path: Path
) -> None:
    result = subprocess.run(
        [PY, "-c", FINE_GRAINED, *([export] if export else [])],
        capture_output=True,
        text=True,
        env=job_procs.env(MY_EXPORTED_VAR="carried"),
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    expected = "['-']" if export == "NONE" else "['carried']"
    assert result.stdout.strip() == expected, result.stdout
    assert job_procs.wait_gone(10) == []
