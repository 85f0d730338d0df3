"""Each backend's options: typed, declared by the backend, found by name."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import tfmesos
from tfmesos import ClusterSpec, Job
from tfmesos.backends import (
    BACKENDS,
    backend_class,
    backend_options,
    chosen_backends,
    default_backend,
    foreign_options,
    options_class,
)
from tfmesos.backends.local.backend import LocalBackend, LocalOptions
from tfmesos.backends.mesos import MesosBackend, MesosOptions
from tfmesos.backends.slurm.options import SlurmOptions
from tfmesos.cli.parser import Parser
from tfmesos.common import advertise, rundirs
from tfmesos.errors import SpecError
from tfmesos.launcher.run import launcher_factory
from tfmesos.spec import Volume

# What the CLI hands every backend (cli.main); each takes its own.
GIVEN = {
    "master": "m1:5050",
    "log_dir": "/logs",
    "reconnect_timeout": 30.0,
    "checkpoint": True,
    "user": None,
    "slurm": {"partition": "gpu", "sbatch_args": "--exclusive"},
}


def test_each_backend_takes_its_own_options_from_what_the_user_gave() -> None:
    assert backend_options("local", **GIVEN) == LocalOptions(log_dir="/logs")
    assert backend_options("mesos", **GIVEN) == MesosOptions(
        log_dir="/logs", master="m1:5050", reconnect_timeout=30.0, checkpoint=True
    )
    assert backend_options("slurm", **GIVEN) == SlurmOptions(
        log_dir="/logs", partition="gpu", sbatch_args=("--exclusive",)
    )


def test_options_are_frozen_dataclasses_declared_by_each_registered_backend() -> None:
    for name in BACKENDS:
        options = backend_class(name).options_type
        assert dataclasses.is_dataclass(options), name
        assert options.__dataclass_params__.frozen, name  # type: ignore[attr-defined]


def test_the_registry_finds_each_backends_options_without_the_backend() -> None:
    for name in BACKENDS:
        assert options_class(name) is backend_class(name).options_type, name


def test_the_mesos_options_take_the_users_spellings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_IMAGE", "from/env")
    options = backend_options(
        "mesos", role="ml", volumes={"/a": "/b"}, containerizer_type="docker", image=None
    )
    assert options == MesosOptions(
        role="ml", volumes=(Volume("/a", "/b"),), containerizer="DOCKER", image="from/env"
    )
    assert backend_options("mesos", volumes=["/a:/b:ro"]) == MesosOptions(
        volumes=(Volume("/a", "/b", read_only=True),), image="from/env"
    )
    with pytest.raises(SpecError, match=r"bad Mesos role 'a b'"):
        backend_options("mesos", role="a b")
    with pytest.raises(SpecError, match=r"containerizer must be MESOS or DOCKER, not 'LXC'"):
        backend_options("mesos", containerizer_type="lxc")


def test_each_option_belongs_to_one_backend_and_some_choose_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MESOS_MASTER", raising=False)
    assert chosen_backends({"master": "m:5050", "image": "i"}) == [("mesos", ("master", "-m"))]
    # Only -m chooses Mesos: an image alone is refused elsewhere, not taken for Mesos.
    assert chosen_backends({"image": "i"}) == []
    assert chosen_backends({"slurm": {"qos": "high"}}) == [("slurm", ("slurm", "--qos"))]
    assert default_backend() == "local"
    monkeypatch.setenv("MESOS_MASTER", "m:5050")
    assert default_backend() == "mesos"
    assert foreign_options("local", {"force_pull_image": True}) == (
        "force_pull_image",
        "-f",
        "mesos",
    )
    assert foreign_options("slurm", {"volumes": {"/a": "/b"}}) == ("volumes", "-V", "mesos")
    assert foreign_options("mesos", {"slurm": {"time": "1"}}) == ("slurm", "--time", "slurm")
    # Not given: None, False, nothing.
    assert (
        foreign_options("local", {"image": None, "force_pull_image": False, "volumes": []}) is None
    )


def test_the_local_backend_declares_its_task_limit() -> None:
    assert options_class("local").task_limit(1) is None
    assert options_class("mesos").task_limit(10**4) is None


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"backend": "local", "image": "img"}, r"image= is for the mesos backend, not 'local'"),
        ({"backend": "slurm", "role": "ml"}, r"role= is for the mesos backend, not 'slurm'"),
        ({"slurm": {"qos": "q"}, "volumes": {"/a": "/b"}}, r"volumes= is for the mesos backend"),
        ({"master": "m:5050", "slurm": {}}, r"slurm= is for the slurm backend and master= for"),
        ({"backend": "mesos", "slurm": {}}, r"slurm= is for the slurm backend, not 'mesos'"),
    ],
)
def test_cluster_refuses_another_backends_option_before_anything_starts(
    keywords: dict[str, object], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MESOS_MASTER", raising=False)
    with (
        pytest.raises(SpecError, match=message),
        tfmesos.cluster({"name": "ps", "num": 1}, **keywords),  # type: ignore[arg-type]
    ):
        raise AssertionError("the cluster started")


def test_a_bad_slurm_option_is_refused_by_name() -> None:
    with pytest.raises(SpecError, match=r"unknown Slurm option 'partitoin'"):
        backend_options("slurm", slurm={"partitoin": "gpu"})
    with pytest.raises(SpecError, match=r"--time: 'soon' is not a time limit"):
        backend_options("slurm", slurm={"time": "soon"})


def test_an_unknown_backend_is_refused_with_the_known_ones() -> None:
    with pytest.raises(SpecError, match=r"unknown backend 'k8s' \(known: local, mesos, slurm\)"):
        backend_options("k8s")


def test_every_run_of_a_restarting_job_keeps_its_logs_in_one_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    chosen = LocalOptions().for_restarts()
    assert chosen.log_dir is not None and Path(chosen.log_dir).is_dir()
    assert chosen.for_restarts() == chosen
    assert LocalOptions(log_dir="/mine").for_restarts() == LocalOptions(log_dir="/mine")
    rundirs.release(Path(chosen.log_dir))


def test_the_chief_runs_beside_the_launcher_where_the_backend_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setenv(advertise.ADVERTISE_ENV, "launcher.example")
    spec = ClusterSpec((Job("worker", 2, cmd="true"),), replica=True, max_restarts=1)
    assert not LocalBackend.chief_beside_launcher and MesosBackend.chief_beside_launcher

    local = launcher_factory(spec, "local")(0)
    assert isinstance(local.backend, LocalBackend) and local.chief_backend is None

    make = launcher_factory(spec, "mesos", MesosOptions(master="127.0.0.1:1"))
    first, second = make(0), make(1)
    assert isinstance(first.backend, MesosBackend)
    chief = first.chief_backend
    assert isinstance(chief, LocalBackend) and chief.chief_only
    # Remote tasks dial the chief by this machine's advertised name.
    assert chief.host == "launcher.example"
    # The chief's log stays in one directory across restarts.
    assert isinstance(second.chief_backend, LocalBackend)
    assert second.chief_backend.log_dir == chief.log_dir
    assert (first.restart, second.restart) == (0, 1)
    # Each factory made a run directory for its runs (run_replica_job lets go of it).
    rundirs.release(local.backend.log_dir)
    rundirs.release(chief.log_dir)


def test_each_backend_declares_its_own_flags_for_tfrun() -> None:
    """tfrun's parser has each backend's flags from that backend's options
    class, not from cli.py: every flag a class says is its own (``flags``,
    what another backend refuses) is one its ``add_arguments`` declares."""
    for name in BACKENDS:
        options = options_class(name)
        parser = Parser()
        options.add_arguments(parser.flag_group(name))
        declared = set(parser.flags) - {"-h", "--help"}
        assert set(options.flags.values()) <= declared, name


def test_the_stores_kept_in_run_directories_are_those_the_registry_names() -> None:
    # tfrun list tells them without importing the others (the Mesos store's
    # aiohttp, which a plain install lacks: the README's tfrun list failed).
    from tfmesos.backends import JOBS, RUN_DIRECTORY_STORES, job_store_class
    from tfmesos.backends.rundirjobs import RunDirJobs

    kept = {name for name in JOBS if issubclass(job_store_class(name), RunDirJobs)}
    assert kept == RUN_DIRECTORY_STORES
