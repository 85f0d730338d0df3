"""A detached job as its launcher receives it: the job's spec and its
backend's options, typed, serialised with the standard library (JSON of the
frozen dataclasses, with a ``"version"``), never tfrun's arguments to parse
again.

The submitter writes it; the launcher (:mod:`tfmesos.cli.launch`: the local
daemon, a Slurm job's batch step, the process a Mesos launcher task starts)
builds its spec and options from it. It holds what the job carries (the
variables ``--export`` sets, with their values), so it goes to the launcher
through a descriptor (:func:`to_descriptor`) or a private file, sealed where
it crosses the network (:mod:`tfmesos.backends.mesos.handover`), never on a
command line, where ``ps`` shows it to every user of the host.

A description of another version than this tfmesos's is refused in one line
(:class:`~tfmesos.errors.SpecError`): the submitter's tfmesos and the
launcher's differ.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from tfmesos.backends.jobs import DetachedJob
from tfmesos.errors import SpecError
from tfmesos.spec import ClusterSpec, Job

__all__ = [
    "ENV_JOB",
    "VERSION",
    "from_json",
    "read_description",
    "to_descriptor",
    "to_json",
]

VERSION = 1
"""The description's version: a field removed, renamed or changed in
meaning is a new one."""
ENV_JOB = "TFMESOS_DETACHED_JOB"
"""Where a detached job's launcher finds its description: ``fd:N`` (a
descriptor it inherited) or the path of a private file, taken once read."""


def plain(value: Any) -> Any:
    """``value`` as JSON holds it: a dataclass as the mapping of the fields
    its constructor takes, a tuple or set as a list (a set sorted)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, (frozenset, set)):
        return sorted(plain(item) for item in value)
    if isinstance(value, (tuple, list)):
        return [plain(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    return value


def to_json(job: DetachedJob) -> str:
    """``job``'s description. ASCII only: a variable's bytes that are not
    UTF-8 (``os.environ``'s surrogates) travel as JSON's ``\\udcXX``."""
    return json.dumps(
        {
            "version": VERSION,
            "backend": job.backend,
            "spec": plain(job.spec),
            "options": plain(job.options),
            "verbose": job.verbose,
            "events": job.events,
        },
        sort_keys=True,
    )


def from_json(text: str) -> DetachedJob:
    """The job ``text`` describes; :class:`SpecError` where it is none, or
    of another version."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise SpecError("the detached job's description cannot be read: it is not a JSON object")
    if data.get("version") != VERSION:
        raise SpecError(
            f"the detached job's description is version {data.get('version')!r}, and this "
            f"tfmesos reads version {VERSION} only: the submitting tfrun's tfmesos differs "
            "from its launcher's"
        )
    from tfmesos.backends import options_class  # the registry: each backend's own options

    try:
        options = options_class(str(data["backend"])).from_record(data["options"])
        return DetachedJob(
            backend=str(data["backend"]),
            spec=_spec(data["spec"]),
            options=options,
            verbose=bool(data.get("verbose")),
            events=data.get("events"),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise SpecError(f"the detached job's description cannot be read: {exc!r}") from None


def _spec(record: Mapping[str, Any]) -> ClusterSpec:
    fields = dict(record)
    fields["jobs"] = tuple(Job(**job) for job in record["jobs"])
    if fields.get("forward_logs") is not None:
        fields["forward_logs"] = frozenset(fields["forward_logs"])
    return ClusterSpec(**fields)


def to_descriptor(job: DetachedJob) -> int:
    """``job``'s description in an anonymous file (no name, no path, gone
    with its last descriptor), its descriptor inheritable: for a launcher
    this process starts, as ``fd:N`` in :data:`ENV_JOB`."""
    fd = os.memfd_create("tfmesos-detached-job", 0)
    data = to_json(job).encode("ascii")
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    return fd


def read_description(where: str) -> DetachedJob:
    """The job described at ``where`` (:data:`ENV_JOB`'s value): a
    descriptor, closed once read, or a file, removed once read."""
    if where.startswith("fd:"):
        with os.fdopen(int(where.removeprefix("fd:")), "rb") as file:
            text = file.read().decode("ascii")
    else:
        with open(where, "rb") as file:
            text = file.read().decode("ascii")
        os.unlink(where)
    return from_json(text)
