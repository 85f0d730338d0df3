"""A test double of an Apache Mesos master: the v1 scheduler HTTP API, for real.

It follows the published protocol (``docs/scheduler-http-api.md``,
``docs/recordio.md``, ``docs/reconciliation.md``, the v1 ``mesos.proto`` and
``scheduler/scheduler.proto``), not any one client, and where the documents are
silent it does what the Mesos master and agent do. ``docs/test-master.md`` in
this repository lists every behaviour, where it came from and what is left out.

Accepted tasks run for real, as local processes, each in its own process group
and sandbox directory; every "agent" is this machine. Nothing a task starts
outlives the master: stopping it kills every task's process group.

Three ways to run it:

* ``python -m tfmesos.testing.master --port 5050 --agents 3 --cpus 4 --mem 8192``
* ``async with TestMaster(agents=2) as master: ...`` in a coroutine
* ``with ThreadedTestMaster(agents=2) as master: ...`` in synchronous code

Fault injection and inspection are methods of both classes and also plain HTTP
endpoints under ``/__test__/`` (see :meth:`TestMaster._control_routes`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from tfmesos import procfs

__all__ = [
    "MESOS_VERSION",
    "TERMINAL_STATES",
    "MasterConfig",
    "ProtocolError",
    "TestMaster",
    "ThreadedTestMaster",
    "main",
    "parse_call",
    "recordio_encode",
]

logger = logging.getLogger("tfmesos.testing.master")

JSON = dict[str, Any]
T = TypeVar("T")

MESOS_VERSION = "1.11.0"
"""The Mesos version this double reports in ``master_info`` and ``/state``."""

SCHEDULER_PATH = "/api/v1/scheduler"

TERMINAL_STATES = frozenset(
    {
        "TASK_FINISHED",
        "TASK_FAILED",
        "TASK_KILLED",
        "TASK_ERROR",
        "TASK_LOST",
        "TASK_DROPPED",
        "TASK_GONE",
        "TASK_GONE_BY_OPERATOR",
    }
)
"""What ``protobuf::isTerminalState`` calls terminal (``src/common/protobuf_utils.cpp``)."""

# Refuse filters: the default and the cap (mesos.proto `Filters`; allocator).
DEFAULT_REFUSE_SECONDS = 5.0
MAX_REFUSE_SECONDS = 365 * 24 * 3600.0
# The command executor's default kill grace period (src/launcher/executor.cpp).
DEFAULT_KILL_GRACE_SECONDS = 3.0
# Scalars are fixed point with three decimals (mesos.proto `Value.Scalar`).
_MILLI = 1000
# The allocator's default --min_allocatable_resources: "cpus:0.01|mem:32".
_MIN_CPUS_MILLI = 10
_MIN_MEM_MILLI = 32 * _MILLI
NAME_MAX = 255


def _now() -> float:
    return time.time()


def _new_uuid_b64() -> str:
    """A random RFC 4122 UUID as JSON encodes ``bytes``: base64 of the 16 bytes."""
    return base64.b64encode(uuid.uuid4().bytes).decode("ascii")


def _id(value: str) -> JSON:
    return {"value": value}


def recordio_encode(event: Mapping[str, Any]) -> bytes:
    """One RecordIO record (``docs/recordio.md``): decimal length, LF, the JSON bytes."""
    data = json.dumps(event, separators=(",", ":")).encode("utf-8")
    return str(len(data)).encode("ascii") + b"\n" + data


# --------------------------------------------------------------------------- #
# Parsing calls the way the master does: protobuf from JSON, with stout's rules.
# --------------------------------------------------------------------------- #


class ProtocolError(Exception):
    """A request the real master would refuse; ``status`` is the HTTP status it answers."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# A field: (kind, label, target). kind is one of string, bytes, double, int,
# bool, enum (target = enum name), message (target = message name), any (an
# object not looked into). label is optional, required, repeated or map.
_Field = tuple[str, str, str]

_ENUMS: dict[str, frozenset[str]] = {
    "Call.Type": frozenset(
        {
            "UNKNOWN",
            "SUBSCRIBE",
            "TEARDOWN",
            "ACCEPT",
            "DECLINE",
            "ACCEPT_INVERSE_OFFERS",
            "DECLINE_INVERSE_OFFERS",
            "REVIVE",
            "KILL",
            "SHUTDOWN",
            "ACKNOWLEDGE",
            "ACKNOWLEDGE_OPERATION_STATUS",
            "RECONCILE",
            "RECONCILE_OPERATIONS",
            "MESSAGE",
            "REQUEST",
            "SUPPRESS",
            "UPDATE_FRAMEWORK",
        }
    ),
    "Offer.Operation.Type": frozenset(
        {
            "UNKNOWN",
            "LAUNCH",
            "LAUNCH_GROUP",
            "RESERVE",
            "UNRESERVE",
            "CREATE",
            "DESTROY",
            "GROW_VOLUME",
            "SHRINK_VOLUME",
            "CREATE_DISK",
            "DESTROY_DISK",
        }
    ),
    "FrameworkInfo.Capability.Type": frozenset(
        {
            "UNKNOWN",
            "REVOCABLE_RESOURCES",
            "TASK_KILLING_STATE",
            "GPU_RESOURCES",
            "SHARED_RESOURCES",
            "PARTITION_AWARE",
            "MULTI_ROLE",
            "RESERVATION_REFINEMENT",
            "REGION_AWARE",
        }
    ),
    "Value.Type": frozenset({"SCALAR", "RANGES", "SET", "TEXT"}),
    "ExecutorInfo.Type": frozenset({"UNKNOWN", "DEFAULT", "CUSTOM"}),
    "ContainerInfo.Type": frozenset({"DOCKER", "MESOS"}),
    "DockerInfo.Network": frozenset({"HOST", "BRIDGE", "NONE", "USER"}),
    "Image.Type": frozenset({"APPC", "DOCKER"}),
    "Environment.Variable.Type": frozenset({"UNKNOWN", "VALUE", "SECRET"}),
}

_OPT, _REQ, _REP, _MAP = "optional", "required", "repeated", "map"

_MESSAGES: dict[str, dict[str, _Field]] = {
    "ID": {"value": ("string", _REQ, "")},
    "Call": {
        "framework_id": ("message", _OPT, "ID"),
        "type": ("enum", _OPT, "Call.Type"),
        "subscribe": ("message", _OPT, "Call.Subscribe"),
        "accept": ("message", _OPT, "Call.Accept"),
        "decline": ("message", _OPT, "Call.Decline"),
        "accept_inverse_offers": ("message", _OPT, "Call.InverseOffers"),
        "decline_inverse_offers": ("message", _OPT, "Call.InverseOffers"),
        "revive": ("message", _OPT, "Call.Roles"),
        "kill": ("message", _OPT, "Call.Kill"),
        "shutdown": ("message", _OPT, "Call.Shutdown"),
        "acknowledge": ("message", _OPT, "Call.Acknowledge"),
        "acknowledge_operation_status": ("message", _OPT, "Call.AcknowledgeOperationStatus"),
        "reconcile": ("message", _OPT, "Call.Reconcile"),
        "reconcile_operations": ("message", _OPT, "Call.ReconcileOperations"),
        "message": ("message", _OPT, "Call.Message"),
        "request": ("message", _OPT, "Call.Request"),
        "suppress": ("message", _OPT, "Call.Roles"),
        "update_framework": ("message", _OPT, "Call.Subscribe"),
    },
    "Call.Subscribe": {
        "framework_info": ("message", _REQ, "FrameworkInfo"),
        "suppressed_roles": ("string", _REP, ""),
        "offer_constraints": ("any", _OPT, ""),
    },
    "Call.Accept": {
        "offer_ids": ("message", _REP, "ID"),
        "operations": ("message", _REP, "Offer.Operation"),
        "filters": ("message", _OPT, "Filters"),
    },
    "Call.Decline": {
        "offer_ids": ("message", _REP, "ID"),
        "filters": ("message", _OPT, "Filters"),
    },
    "Call.InverseOffers": {
        "inverse_offer_ids": ("message", _REP, "ID"),
        "filters": ("message", _OPT, "Filters"),
    },
    "Call.Roles": {"roles": ("string", _REP, "")},
    "Call.Kill": {
        "task_id": ("message", _REQ, "ID"),
        "agent_id": ("message", _OPT, "ID"),
        "kill_policy": ("message", _OPT, "KillPolicy"),
    },
    "Call.Shutdown": {
        "executor_id": ("message", _REQ, "ID"),
        "agent_id": ("message", _REQ, "ID"),
    },
    "Call.Acknowledge": {
        "agent_id": ("message", _REQ, "ID"),
        "task_id": ("message", _REQ, "ID"),
        "uuid": ("bytes", _REQ, ""),
    },
    "Call.AcknowledgeOperationStatus": {
        "agent_id": ("message", _OPT, "ID"),
        "resource_provider_id": ("message", _OPT, "ID"),
        "uuid": ("bytes", _REQ, ""),
        "operation_id": ("message", _REQ, "ID"),
    },
    "Call.Reconcile": {"tasks": ("message", _REP, "Call.Reconcile.Task")},
    "Call.Reconcile.Task": {
        "task_id": ("message", _REQ, "ID"),
        "agent_id": ("message", _OPT, "ID"),
    },
    "Call.ReconcileOperations": {
        "operations": ("message", _REP, "Call.ReconcileOperations.Operation")
    },
    "Call.ReconcileOperations.Operation": {
        "operation_id": ("message", _REQ, "ID"),
        "agent_id": ("message", _OPT, "ID"),
        "resource_provider_id": ("message", _OPT, "ID"),
    },
    "Call.Message": {
        "agent_id": ("message", _REQ, "ID"),
        "executor_id": ("message", _REQ, "ID"),
        "data": ("bytes", _REQ, ""),
    },
    "Call.Request": {"requests": ("message", _REP, "Request")},
    "Request": {
        "agent_id": ("message", _OPT, "ID"),
        "resources": ("message", _REP, "Resource"),
    },
    "FrameworkInfo": {
        "user": ("string", _REQ, ""),
        "name": ("string", _REQ, ""),
        "id": ("message", _OPT, "ID"),
        "failover_timeout": ("double", _OPT, ""),
        "checkpoint": ("bool", _OPT, ""),
        "role": ("string", _OPT, ""),
        "roles": ("string", _REP, ""),
        "hostname": ("string", _OPT, ""),
        "principal": ("string", _OPT, ""),
        "webui_url": ("string", _OPT, ""),
        "capabilities": ("message", _REP, "FrameworkInfo.Capability"),
        "labels": ("any", _OPT, ""),
        "offer_filters": ("any", _MAP, ""),
    },
    "FrameworkInfo.Capability": {"type": ("enum", _OPT, "FrameworkInfo.Capability.Type")},
    "Filters": {"refuse_seconds": ("double", _OPT, "")},
    "KillPolicy": {"grace_period": ("message", _OPT, "DurationInfo")},
    "DurationInfo": {"nanoseconds": ("int", _REQ, "")},
    "Offer.Operation": {
        "type": ("enum", _OPT, "Offer.Operation.Type"),
        "id": ("message", _OPT, "ID"),
        "launch": ("message", _OPT, "Offer.Operation.Launch"),
        "launch_group": ("message", _OPT, "Offer.Operation.LaunchGroup"),
        "reserve": ("any", _OPT, ""),
        "unreserve": ("any", _OPT, ""),
        "create": ("any", _OPT, ""),
        "destroy": ("any", _OPT, ""),
        "grow_volume": ("any", _OPT, ""),
        "shrink_volume": ("any", _OPT, ""),
        "create_disk": ("any", _OPT, ""),
        "destroy_disk": ("any", _OPT, ""),
    },
    "Offer.Operation.Launch": {"task_infos": ("message", _REP, "TaskInfo")},
    "Offer.Operation.LaunchGroup": {
        "executor": ("message", _REQ, "ExecutorInfo"),
        "task_group": ("message", _REQ, "TaskGroupInfo"),
    },
    "TaskGroupInfo": {"tasks": ("message", _REP, "TaskInfo")},
    "TaskInfo": {
        "name": ("string", _REQ, ""),
        "task_id": ("message", _REQ, "ID"),
        "agent_id": ("message", _REQ, "ID"),
        "resources": ("message", _REP, "Resource"),
        "executor": ("message", _OPT, "ExecutorInfo"),
        "command": ("message", _OPT, "CommandInfo"),
        "container": ("message", _OPT, "ContainerInfo"),
        "health_check": ("any", _OPT, ""),
        "check": ("any", _OPT, ""),
        "kill_policy": ("message", _OPT, "KillPolicy"),
        "data": ("bytes", _OPT, ""),
        "labels": ("any", _OPT, ""),
        "discovery": ("any", _OPT, ""),
        "max_completion_time": ("message", _OPT, "DurationInfo"),
        "limits": ("any", _MAP, ""),
    },
    "ExecutorInfo": {
        "type": ("enum", _OPT, "ExecutorInfo.Type"),
        "executor_id": ("message", _REQ, "ID"),
        "framework_id": ("message", _OPT, "ID"),
        "command": ("message", _OPT, "CommandInfo"),
        "container": ("message", _OPT, "ContainerInfo"),
        "resources": ("message", _REP, "Resource"),
        "name": ("string", _OPT, ""),
        "source": ("string", _OPT, ""),
        "data": ("bytes", _OPT, ""),
        "discovery": ("any", _OPT, ""),
        "shutdown_grace_period": ("message", _OPT, "DurationInfo"),
        "labels": ("any", _OPT, ""),
    },
    "CommandInfo": {
        "uris": ("message", _REP, "CommandInfo.URI"),
        "environment": ("message", _OPT, "Environment"),
        "shell": ("bool", _OPT, ""),
        "value": ("string", _OPT, ""),
        "arguments": ("string", _REP, ""),
        "user": ("string", _OPT, ""),
    },
    "CommandInfo.URI": {
        "value": ("string", _REQ, ""),
        "executable": ("bool", _OPT, ""),
        "extract": ("bool", _OPT, ""),
        "cache": ("bool", _OPT, ""),
        "output_file": ("string", _OPT, ""),
    },
    "Environment": {"variables": ("message", _REP, "Environment.Variable")},
    "Environment.Variable": {
        "name": ("string", _REQ, ""),
        "type": ("enum", _OPT, "Environment.Variable.Type"),
        "value": ("string", _OPT, ""),
        "secret": ("any", _OPT, ""),
    },
    "ContainerInfo": {
        "type": ("enum", _REQ, "ContainerInfo.Type"),
        "volumes": ("any", _REP, ""),
        "hostname": ("string", _OPT, ""),
        "docker": ("message", _OPT, "ContainerInfo.DockerInfo"),
        "mesos": ("message", _OPT, "ContainerInfo.MesosInfo"),
        "network_infos": ("any", _REP, ""),
        "linux_info": ("any", _OPT, ""),
        "rlimit_info": ("any", _OPT, ""),
        "tty_info": ("any", _OPT, ""),
    },
    "ContainerInfo.DockerInfo": {
        "image": ("string", _REQ, ""),
        "network": ("enum", _OPT, "DockerInfo.Network"),
        "port_mappings": ("any", _REP, ""),
        "privileged": ("bool", _OPT, ""),
        "parameters": ("any", _REP, ""),
        "force_pull_image": ("bool", _OPT, ""),
        "volume_driver": ("string", _OPT, ""),
    },
    "ContainerInfo.MesosInfo": {"image": ("message", _OPT, "Image")},
    "Image": {
        "type": ("enum", _REQ, "Image.Type"),
        "appc": ("any", _OPT, ""),
        "docker": ("message", _OPT, "Image.Docker"),
        "cached": ("bool", _OPT, ""),
    },
    "Image.Docker": {
        "name": ("string", _REQ, ""),
        "credential": ("any", _OPT, ""),
        "config": ("any", _OPT, ""),
    },
    "Resource": {
        "provider_id": ("message", _OPT, "ID"),
        "name": ("string", _REQ, ""),
        "type": ("enum", _REQ, "Value.Type"),
        "scalar": ("message", _OPT, "Value.Scalar"),
        "ranges": ("message", _OPT, "Value.Ranges"),
        "set": ("message", _OPT, "Value.Set"),
        "role": ("string", _OPT, ""),
        "allocation_info": ("message", _OPT, "Resource.AllocationInfo"),
        "reservation": ("any", _OPT, ""),
        "reservations": ("any", _REP, ""),
        "disk": ("any", _OPT, ""),
        "revocable": ("any", _OPT, ""),
        "shared": ("any", _OPT, ""),
    },
    "Resource.AllocationInfo": {"role": ("string", _OPT, "")},
    "Value.Scalar": {"value": ("double", _REQ, "")},
    "Value.Ranges": {"range": ("message", _REP, "Value.Range")},
    "Value.Range": {"begin": ("int", _REQ, ""), "end": ("int", _REQ, "")},
    "Value.Set": {"item": ("string", _REP, "")},
}


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "JSON boolean"
    if isinstance(value, (int, float)):
        return "JSON number"
    if isinstance(value, str):
        return "JSON string"
    if isinstance(value, list):
        return "JSON array"
    return "JSON object"


def _parse_scalar_value(kind: str, target: str, name: str, value: Any) -> Any:
    """One non-repeated value, as stout's ``protobuf::Parser`` reads it; None drops it."""
    if kind in ("message", "any"):
        if not isinstance(value, dict):
            raise ProtocolError(400, f"Not expecting a {_json_kind(value)} for field '{name}'")
        return value if kind == "any" else _parse_message(target, value)
    if isinstance(value, dict):
        raise ProtocolError(400, f"Not expecting a JSON object for field '{name}'")
    if kind == "string":
        if not isinstance(value, str):
            raise ProtocolError(400, f"Not expecting a {_json_kind(value)} for field '{name}'")
        return value
    if kind == "bytes":
        if not isinstance(value, str):
            raise ProtocolError(400, f"Not expecting a {_json_kind(value)} for field '{name}'")
        try:
            base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
            raise ProtocolError(
                400, f"Failed to base64 decode bytes field '{name}': {exc}"
            ) from None
        return value
    if kind == "enum":
        if not isinstance(value, str):
            raise ProtocolError(400, f"Not expecting a {_json_kind(value)} for field '{name}'")
        return value if value in _ENUMS[target] else None
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value in ("true", "false"):
            return value == "true"
        raise ProtocolError(400, f"Not expecting a {_json_kind(value)} for field '{name}'")
    # double and int: a JSON number, or a string that parses as one.
    if isinstance(value, bool):
        raise ProtocolError(400, f"Not expecting a JSON boolean for field '{name}'")
    if isinstance(value, str):
        text = value.strip()
        try:
            if kind == "double" and text in ("Infinity", "-Infinity"):
                number: float | int = float(text.lower().replace("infinity", "inf"))
            else:
                number = json.loads(text)
                if isinstance(number, bool) or not isinstance(number, (int, float)):
                    raise ValueError(text)
        except ValueError:
            raise ProtocolError(
                400, f"Failed to parse '{value}' as a JSON number for field '{name}'"
            ) from None
        value = number
    if not isinstance(value, (int, float)):
        raise ProtocolError(400, f"Not expecting a {_json_kind(value)} for field '{name}'")
    if kind == "int":
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ProtocolError(400, f"Not a finite number for field '{name}'")
            return int(value)
        return value
    return float(value)


def _parse_message(name: str, obj: JSON) -> JSON:
    spec = _MESSAGES[name]
    out: JSON = {}
    for key, value in obj.items():
        field = spec.get(key)
        if field is None or value is None:
            continue  # stout ignores unknown fields and nulls
        kind, label, target = field
        if label == _MAP:
            if not isinstance(value, dict):
                raise ProtocolError(400, f"Not expecting a {_json_kind(value)} for field '{key}'")
            out[key] = value
        elif label == _REP:
            items = value if isinstance(value, list) else [value]
            parsed = [_parse_scalar_value(kind, target, key, item) for item in items]
            out[key] = [item for item in parsed if item is not None]
        else:
            if isinstance(value, list):
                raise ProtocolError(400, f"Not expecting a JSON array for field '{key}'")
            parsed_value = _parse_scalar_value(kind, target, key, value)
            if parsed_value is None and label == _REQ:
                raise ProtocolError(400, f"Failed to find enum for '{value}'")
            if parsed_value is not None:
                out[key] = parsed_value
    return out


def _missing_required(name: str, obj: JSON, prefix: str = "") -> list[str]:
    missing: list[str] = []
    for key, (kind, label, target) in _MESSAGES[name].items():
        if label == _REQ and key not in obj:
            missing.append(prefix + key)
        if kind != "message" or key not in obj:
            continue
        if label == _REP:
            for index, item in enumerate(obj[key]):
                missing += _missing_required(target, item, f"{prefix}{key}[{index}].")
        else:
            missing += _missing_required(target, obj[key], f"{prefix}{key}.")
    return missing


def parse_call(body: bytes) -> JSON:
    """Parse a JSON ``scheduler::Call`` as the master does, or raise :class:`ProtocolError`.

    The result is the call as the master understands it: unknown fields and
    unknown values of optional enums dropped, numbers given as strings read as
    numbers, a lone value for a repeated field taken as a list of one.
    """
    try:
        value = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(400, f"Failed to parse body into JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ProtocolError(
            400, "Failed to convert JSON into Call protobuf: Expecting a JSON object"
        )
    try:
        call = _parse_message("Call", value)
    except ProtocolError as exc:
        raise ProtocolError(
            400, f"Failed to convert JSON into Call protobuf: {exc.message}"
        ) from None
    missing = _missing_required("Call", call)
    if missing:
        raise ProtocolError(
            400,
            "Failed to convert JSON into Call protobuf: Missing required fields: "
            + ", ".join(missing),
        )
    return call


def _validate_call(call: JSON) -> None:
    """``validation::scheduler::call::validate`` (src/master/validation.cpp)."""
    kind = call.get("type")
    if kind is None:
        raise ProtocolError(
            400, "Failed to validate scheduler::Call: Expecting 'type' to be present"
        )

    def fail(message: str) -> ProtocolError:
        return ProtocolError(400, f"Failed to validate scheduler::Call: {message}")

    if kind == "SUBSCRIBE":
        if "subscribe" not in call:
            raise fail("Expecting 'subscribe' to be present")
        info_id = call["subscribe"]["framework_info"].get("id")
        if info_id != call.get("framework_id"):
            raise fail("'framework_id' differs from 'subscribe.framework_info.id'")
        return
    if "framework_id" not in call:
        raise fail("Expecting 'framework_id' to be present")
    payload = {
        "ACCEPT": "accept",
        "DECLINE": "decline",
        "ACCEPT_INVERSE_OFFERS": "accept_inverse_offers",
        "DECLINE_INVERSE_OFFERS": "decline_inverse_offers",
        "KILL": "kill",
        "SHUTDOWN": "shutdown",
        "ACKNOWLEDGE": "acknowledge",
        "ACKNOWLEDGE_OPERATION_STATUS": "acknowledge_operation_status",
        "RECONCILE": "reconcile",
        "RECONCILE_OPERATIONS": "reconcile_operations",
        "MESSAGE": "message",
        "REQUEST": "request",
        "UPDATE_FRAMEWORK": "update_framework",
    }.get(kind)
    if payload is not None and payload not in call:
        raise fail(f"Expecting '{payload}' to be present")
    if kind in ("ACKNOWLEDGE", "ACKNOWLEDGE_OPERATION_STATUS"):
        raw = base64.b64decode(call[payload or ""]["uuid"])
        if len(raw) != 16:
            raise fail(f"Invalid UUID: expected 16 bytes, got {len(raw)}")
        if kind == "ACKNOWLEDGE_OPERATION_STATUS" and "agent_id" not in call[payload or ""]:
            raise fail("Expecting 'agent_id' to be present")
    if (
        kind == "UPDATE_FRAMEWORK"
        and call["update_framework"]["framework_info"].get("id") != call["framework_id"]
    ):
        raise fail("'framework_id' differs from 'update_framework.framework_info.id'")


def _validate_id(value: str) -> str | None:
    """``common::validation::validateID``: the rules for task, executor and framework IDs."""
    if not value:
        return "ID must not be empty"
    if len(value) > NAME_MAX:
        return f"ID must not be greater than {NAME_MAX} characters"
    if value in (".", ".."):
        return f"'{value}' is disallowed"
    if any(ord(c) < 32 or ord(c) == 127 or c in "/\\" for c in value):
        return f"'{value}' contains invalid characters"
    return None


def _validate_role(role: str) -> str | None:
    """``roles::validate``: a role is "*" or a path of non-special components."""
    if role == "*":
        return None
    if not role:
        return "Empty role name is invalid"
    if role.startswith("/") or role.endswith("/"):
        return f"Role '{role}' cannot start or end with a slash"
    for part in role.split("/"):
        if part in (".", "..", ""):
            return f"Role '{role}' cannot contain '.', '..' or empty path components"
        if part.startswith("-"):
            return f"Role '{role}' cannot start with '-'"
        if any(c.isspace() or ord(c) < 32 or c in "\\*" for c in part):
            return f"Role '{role}' cannot contain whitespace, '\\' or '*'"
    return None


# --------------------------------------------------------------------------- #
# Resources: scalars (in thousandths) and ranges, as Mesos compares them.
# --------------------------------------------------------------------------- #

Ranges = list[tuple[int, int]]


def _normalize_ranges(ranges: Iterable[tuple[int, int]]) -> Ranges:
    merged: Ranges = []
    for begin, end in sorted(ranges):
        if merged and begin <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((begin, end))
    return merged


def _ranges_contain(outer: Ranges, inner: Ranges) -> bool:
    return all(any(b >= ob and e <= oe for ob, oe in outer) for b, e in inner)


def _ranges_subtract(outer: Ranges, inner: Ranges) -> Ranges:
    result = list(outer)
    for b, e in inner:
        next_result: Ranges = []
        for ob, oe in result:
            if e < ob or b > oe:
                next_result.append((ob, oe))
                continue
            if ob < b:
                next_result.append((ob, b - 1))
            if e < oe:
                next_result.append((e + 1, oe))
        result = next_result
    return result


def _format_ranges(ranges: Ranges) -> str:
    return "[" + ", ".join(f"{b}-{e}" for b, e in ranges) + "]"


def _format_scalar(milli: int) -> str:
    value = milli / _MILLI
    return str(int(value)) if value == int(value) else f"{value:g}"


@dataclasses.dataclass
class Resources:
    """Unreserved resources of one role: scalars in thousandths, and port-like ranges."""

    scalars: dict[str, int] = dataclasses.field(default_factory=dict)
    ranges: dict[str, Ranges] = dataclasses.field(default_factory=dict)

    def copy(self) -> Resources:
        return Resources(dict(self.scalars), {k: list(v) for k, v in self.ranges.items()})

    def is_empty(self) -> bool:
        return not any(self.scalars.values()) and not any(self.ranges.values())

    def scalar(self, name: str) -> float:
        return self.scalars.get(name, 0) / _MILLI

    def __add__(self, other: Resources) -> Resources:
        out = self.copy()
        for name, value in other.scalars.items():
            out.scalars[name] = out.scalars.get(name, 0) + value
        for name, ranges in other.ranges.items():
            out.ranges[name] = _normalize_ranges(out.ranges.get(name, []) + ranges)
        return out

    def __sub__(self, other: Resources) -> Resources:
        out = self.copy()
        for name, value in other.scalars.items():
            out.scalars[name] = max(0, out.scalars.get(name, 0) - value)
        for name, ranges in other.ranges.items():
            out.ranges[name] = _ranges_subtract(out.ranges.get(name, []), ranges)
        return out

    def contains(self, other: Resources) -> bool:
        for name, value in other.scalars.items():
            if value > self.scalars.get(name, 0):
                return False
        return all(
            _ranges_contain(self.ranges.get(name, []), ranges)
            for name, ranges in other.ranges.items()
        )

    def without(self, name: str) -> Resources:
        out = self.copy()
        out.scalars.pop(name, None)
        out.ranges.pop(name, None)
        return out

    def to_json(self, allocation_role: str | None) -> list[JSON]:
        """The ``repeated Resource`` an offer carries (role "*": unreserved)."""
        out: list[JSON] = []
        for name in sorted(self.scalars):
            if self.scalars[name] <= 0:
                continue
            resource: JSON = {
                "name": name,
                "type": "SCALAR",
                "scalar": {"value": self.scalars[name] / _MILLI},
                "role": "*",
            }
            if allocation_role is not None:
                resource["allocation_info"] = {"role": allocation_role}
            out.append(resource)
        for name in sorted(self.ranges):
            if not self.ranges[name]:
                continue
            resource = {
                "name": name,
                "type": "RANGES",
                "ranges": {"range": [{"begin": b, "end": e} for b, e in self.ranges[name]]},
                "role": "*",
            }
            if allocation_role is not None:
                resource["allocation_info"] = {"role": allocation_role}
            out.append(resource)
        return out

    def describe(self, allocation_role: str | None = None) -> str:
        """Like Mesos's ``stringify(Resources)``: ``cpus(allocated: r):1; ports(...):[1-2]``."""
        tag = f"(allocated: {allocation_role})" if allocation_role is not None else ""
        parts = [
            f"{name}{tag}:{_format_scalar(value)}"
            for name, value in sorted(self.scalars.items())
            if value > 0
        ]
        parts += [
            f"{name}{tag}:{_format_ranges(ranges)}"
            for name, ranges in sorted(self.ranges.items())
            if ranges
        ]
        return "; ".join(parts) if parts else "{}"

    def summary(self) -> JSON:
        """Like the resource maps of Mesos's ``/state``: ``{"cpus": 1.0, "ports": "[...]"}``."""
        out: JSON = {name: value / _MILLI for name, value in sorted(self.scalars.items())}
        for name, ranges in sorted(self.ranges.items()):
            if ranges:
                out[name] = _format_ranges(ranges)
        return out


def _allocatable(resources: Resources) -> bool:
    """The default ``--min_allocatable_resources`` of the allocator: cpus:0.01 | mem:32."""
    return (
        resources.scalars.get("cpus", 0) >= _MIN_CPUS_MILLI
        or resources.scalars.get("mem", 0) >= _MIN_MEM_MILLI
    )


@dataclasses.dataclass
class _ParsedResources:
    resources: Resources
    error: str | None = None
    # Resources of a kind this master never offers (reserved, revocable, SET,
    # persistent, from a provider, or allocated to another role): never contained.
    foreign: list[str] = dataclasses.field(default_factory=list)
    allocation_roles: set[str] = dataclasses.field(default_factory=set)


def _parse_resources(items: Sequence[JSON], offer_role: str) -> _ParsedResources:
    """Read a task's ``repeated Resource`` after the master injected the offer's role."""
    parsed = _ParsedResources(Resources())
    for item in items:
        name = item["name"]
        kind = item["type"]
        role = item.get("allocation_info", {}).get("role", offer_role)
        parsed.allocation_roles.add(role)
        if kind == "SCALAR":
            if "scalar" not in item:
                parsed.error = f"Task uses invalid resources: Invalid scalar resource {name}"
                continue
            value = item["scalar"]["value"]
            if not math.isfinite(value) or value < 0:
                parsed.error = (
                    f"Task uses invalid resources: Invalid scalar resource {name}:{value}"
                )
                continue
            amount = round(value * _MILLI)
        elif kind == "RANGES":
            if "ranges" not in item:
                parsed.error = f"Task uses invalid resources: Invalid ranges resource {name}"
                continue
            ranges = [(r["begin"], r["end"]) for r in item["ranges"].get("range", [])]
            if any(b > e or b < 0 for b, e in ranges):
                parsed.error = f"Task uses invalid resources: Invalid ranges resource {name}"
                continue
        elif kind == "SET":
            if "set" not in item:
                parsed.error = f"Task uses invalid resources: Invalid set resource {name}"
                continue
        else:
            parsed.error = f"Task uses invalid resources: Unsupported resource type {kind}"
            continue
        special = [
            key
            for key in ("reservation", "reservations", "disk", "revocable", "shared", "provider_id")
            if item.get(key)
        ]
        if item.get("role", "*") != "*":
            special.append(f"role {item['role']}")
        if role != offer_role:
            special.append(f"allocation role {role}")
        if kind == "SET" or special:
            parsed.foreign.append(f"{name} ({', '.join(special) or kind})")
            continue
        if kind == "SCALAR":
            parsed.resources.scalars[name] = parsed.resources.scalars.get(name, 0) + amount
        else:
            parsed.resources.ranges[name] = _normalize_ranges(
                parsed.resources.ranges.get(name, []) + ranges
            )
    if parsed.error is None and len(parsed.allocation_roles) > 1:
        parsed.error = (
            "Invalid task resources: The resources have multiple allocation roles ("
            + ", ".join(sorted(parsed.allocation_roles))
            + ") but only one allocation role is allowed"
        )
    return parsed


def parse_ranges(text: str) -> Ranges:
    """``"31000-32000"``, ``"[31000-31999,33000-33010]"`` or ``"31000"`` to ranges."""
    text = text.strip().strip("[]")
    ranges: Ranges = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        begin, _, end = part.partition("-")
        b = int(begin)
        e = int(end) if end else b
        if b > e or b < 0:
            raise ValueError(f"bad range {part!r}")
        ranges.append((b, e))
    return _normalize_ranges(ranges)


def _split_ranges(ranges: Ranges, parts: int) -> list[Ranges]:
    """Cut ranges into ``parts`` disjoint slices of (nearly) equal size."""
    ports = [p for b, e in ranges for p in range(b, e + 1)]
    size, extra = divmod(len(ports), parts)
    out: list[Ranges] = []
    start = 0
    for index in range(parts):
        count = size + (1 if index < extra else 0)
        chunk = ports[start : start + count]
        start += count
        out.append(_normalize_ranges((p, p) for p in chunk))
    return out


# --------------------------------------------------------------------------- #
# Configuration and state.
# --------------------------------------------------------------------------- #


@dataclasses.dataclass
class MasterConfig:
    """Everything a :class:`TestMaster` can be told. Every field is a keyword of TestMaster."""

    agents: int = 3
    """How many agents (all of them this machine)."""
    cpus: float = 4.0
    mem: float = 8192.0
    """Memory per agent, in MB."""
    disk: float = 10240.0
    """Disk per agent, in MB (0: no disk resource). Real agents always offer disk."""
    gpus: int = 0
    gpu_agents: int | None = None
    """How many of the agents have the ``gpus`` (None: all of them)."""
    ports: str = "31000-32000"
    """The ``ports`` range(s), Mesos style: ``31000-32000`` or ``[31000-31099,32000-32099]``."""
    split_ports: bool = True
    """When agents share a hostname, cut ``ports`` into disjoint slices, one per agent,
    so tasks on two "agents" of this one machine are never offered the same port."""
    hostname: str = "127.0.0.1"
    """The hostname the master and (unless ``agent_hostnames``) every agent advertise."""
    agent_hostnames: Sequence[str] | None = None
    attributes: Mapping[str, str | float] | None = None
    """Attributes of every agent: numbers become SCALAR, ``[a-b]`` RANGES, others TEXT."""
    ip: str = "127.0.0.1"
    """The address to listen on."""
    port: int = 0
    """The port to listen on (0: a free one, see :attr:`TestMaster.url`)."""
    heartbeat_interval: float = 15.0
    """Seconds between HEARTBEAT events (``heartbeat_interval_seconds``)."""
    allocation_interval: float = 1.0
    """Seconds between allocation rounds (the master's ``--allocation_interval``)."""
    offer_timeout: float | None = None
    """Rescind offers not answered within this many seconds (``--offer_timeout``; None: never)."""
    filter_gpu_resources: bool = True
    """As the master's ``--filter_gpu_resources``: agents with GPUs are offered only to
    frameworks with the GPU_RESOURCES capability. When False, GPU-unaware frameworks get
    those agents' other resources."""
    update_retry_interval: float = 10.0
    """First retry of an unacknowledged status update (the agent's 10 s), then doubling."""
    update_retry_max: float = 600.0
    """Longest wait between retries of one status update (the agent's 10 min)."""
    shutdown_grace_period: float = DEFAULT_KILL_GRACE_SECONDS
    """SIGTERM to SIGKILL when a framework's tasks are shut down (teardown, failover timeout)."""
    work_dir: str | None = None
    """Where the sandboxes go (None: a new temporary directory, removed on stop)."""
    keep_work_dir: bool = False
    """Keep a temporary ``work_dir`` after stop."""
    inherit_env: bool = True
    """Tasks get the master process's environment under their own (False: PATH only)."""
    leader: bool = True
    leader_address: str | None = None
    """``host:port`` of the leading master when this one is not the leader."""
    redirect_location: str | None = None
    """An exact ``Location`` to answer with when not the leader (overrides leader_address)."""
    kill_on_orphan: bool = True
    """Run a small reaper process that SIGKILLs every live task process group if this
    process dies without stopping the master (a crash, SIGKILL)."""


@dataclasses.dataclass
class Agent:
    id: str
    hostname: str
    port: int
    total: Resources
    attributes: list[JSON]
    state: str = "active"  # active | unreachable | gone
    used: Resources = dataclasses.field(default_factory=Resources)
    unreachable_time: float | None = None

    @property
    def has_gpus(self) -> bool:
        return self.total.scalars.get("gpus", 0) > 0


@dataclasses.dataclass
class Offer:
    id: str
    framework_id: str
    agent_id: str
    role: str
    resources: Resources
    created: float
    timer: asyncio.TimerHandle | None = None


@dataclasses.dataclass
class _Filter:
    agent_id: str
    role: str
    resources: Resources
    expires: float


class _Close:
    """Queue sentinel: end the stream (``abort``: drop the connection instead)."""

    def __init__(self, abort: bool) -> None:
        self.abort = abort


class Subscription:
    """One SUBSCRIBE connection: its stream ID and the events waiting to be written."""

    def __init__(self, stream_id: str, request: web.Request) -> None:
        self.stream_id = stream_id
        self.request = request
        self.queue: asyncio.Queue[bytes | _Close] = asyncio.Queue()
        self.closed = False
        self.heartbeat: asyncio.Task[None] | None = None
        self.framework_id: str | None = None

    def send(self, event: JSON) -> None:
        if not self.closed:
            self.queue.put_nowait(recordio_encode(event))

    def close(self, abort: bool = False) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(_Close(abort))


@dataclasses.dataclass
class Task:
    """A task as the master and its agent know it."""

    task_id: str
    name: str
    framework_id: str
    agent_id: str
    executor_id: str
    info: JSON
    """The TaskInfo as the scheduler sent it."""
    resources: Resources
    role: str
    container_id: str
    sandbox: Path
    group_executor: JSON | None = None
    """The ExecutorInfo of a LAUNCH_GROUP; None for a command task."""
    state: str = "TASK_STAGING"
    """The latest state (the agent's view)."""
    status_update_state: str | None = None
    """The state of the latest update forwarded to the scheduler (what reconciliation reports)."""
    statuses: list[JSON] = dataclasses.field(default_factory=list)
    pending: deque[JSON] = dataclasses.field(default_factory=deque)
    retry_handle: asyncio.TimerHandle | None = None
    retry_interval: float = 0.0
    process: asyncio.subprocess.Process | None = None
    pid: int | None = None
    returncode: int | None = None
    inject_failure: str | None = None
    kill_requested: bool = False
    kill_grace: float = DEFAULT_KILL_GRACE_SECONDS
    kill_timer: asyncio.TimerHandle | None = None
    released: bool = False
    """Its resources went back to the agent (it reached a terminal state)."""
    finalized: bool = False
    """The master is done with it (agent lost, framework removed): no more updates."""
    runner: asyncio.Task[None] | None = None
    launched_at: float = dataclasses.field(default_factory=_now)
    ended_at: float | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def snapshot(self) -> JSON:
        return {
            "task_id": self.task_id,
            "name": self.name,
            "framework_id": self.framework_id,
            "agent_id": self.agent_id,
            "executor_id": self.executor_id,
            "state": self.state,
            "status_update_state": self.status_update_state,
            "pid": self.pid,
            "returncode": self.returncode,
            "sandbox": str(self.sandbox),
            "container_id": self.container_id,
            "role": self.role,
            "resources": self.resources.summary(),
            "task_info": self.info,
            "container": self.info.get("container"),
            "executor": self.group_executor,
            "statuses": list(self.statuses),
            "pending_updates": len(self.pending),
            "launched_at": self.launched_at,
            "ended_at": self.ended_at,
        }


class Framework:
    def __init__(self, framework_id: str, info: JSON) -> None:
        self.id = framework_id
        self.info: JSON = info
        self.suppressed: set[str] = set()
        self.filters: list[_Filter] = []
        self.subscription: Subscription | None = None
        self.failover_timer: asyncio.TimerHandle | None = None
        self.tasks: dict[str, Task] = {}
        self.completed_tasks: dict[str, Task] = {}
        self.unreachable_tasks: dict[str, Task] = {}
        self.registered_time = _now()
        self.unregistered_time: float | None = None
        self.events: list[JSON] = []

    @property
    def capabilities(self) -> set[str]:
        return {c["type"] for c in self.info.get("capabilities", []) if "type" in c}

    @property
    def multi_role(self) -> bool:
        return "MULTI_ROLE" in self.capabilities

    @property
    def partition_aware(self) -> bool:
        return "PARTITION_AWARE" in self.capabilities

    @property
    def roles(self) -> list[str]:
        if self.multi_role:
            return list(self.info.get("roles", []))
        return [self.info.get("role", "*")]

    @property
    def connected(self) -> bool:
        return self.subscription is not None

    @property
    def failover_timeout(self) -> float:
        value = self.info.get("failover_timeout", 0.0)
        return float(value) if isinstance(value, (int, float)) else 0.0

    def send(self, event: JSON) -> None:
        if self.subscription is not None:
            self.events.append(event)
            self.subscription.send(event)

    def snapshot(self) -> JSON:
        return {
            "id": self.id,
            "name": self.info.get("name"),
            "framework_info": self.info,
            "roles": self.roles,
            "capabilities": sorted(self.capabilities),
            "connected": self.connected,
            "active": self.connected,
            "stream_id": self.subscription.stream_id if self.subscription else None,
            "suppressed_roles": sorted(self.suppressed),
            "filters": [
                {
                    "agent_id": f.agent_id,
                    "role": f.role,
                    "resources": f.resources.summary(),
                    "expires_in": round(f.expires - time.monotonic(), 3),
                }
                for f in self.filters
                if f.expires > time.monotonic()
            ],
            "task_ids": sorted(self.tasks),
            "completed_task_ids": sorted(self.completed_tasks),
            "unreachable_task_ids": sorted(self.unreachable_tasks),
            "registered_time": self.registered_time,
            "unregistered_time": self.unregistered_time,
        }


@dataclasses.dataclass
class _LaunchFailure:
    pattern: re.Pattern[str]
    remaining: int
    message: str


@dataclasses.dataclass
class _CallFailure:
    call_type: str
    remaining: int
    status: int
    message: str


_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_REAPER_SOURCE = """
import os, shutil, signal, sys
groups = set()
directories = []
for line in sys.stdin:
    line = line.rstrip("\\n")
    if line[:1] == "+":
        groups.add(int(line[1:]))
    elif line[:1] == "-":
        groups.discard(int(line[1:]))
    elif line[:1] == "d":
        directories.append(line[1:])
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
for directory in directories:
    shutil.rmtree(directory, ignore_errors=True)
"""


class _Reaper:
    """A helper process told every live task process group. When its stdin reaches
    EOF (the master stopped, or its process died however it died) it SIGKILLs the
    groups still listed, so no task outlives a crashed test run."""

    def __init__(self) -> None:
        import subprocess

        self._process: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-c", _REAPER_SOURCE],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )

    def _send(self, line: str) -> None:
        process = self._process
        if process is None or process.stdin is None:
            return
        try:
            process.stdin.write(line.encode("ascii") + b"\n")
            process.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            self._process = None

    def track(self, pgid: int) -> None:
        self._send(f"+{pgid}")

    def untrack(self, pgid: int) -> None:
        self._send(f"-{pgid}")

    def remove_on_exit(self, directory: Path) -> None:
        if "\n" not in str(directory):
            self._send(f"d{directory}")

    async def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError, ValueError):
            if process.stdin is not None:
                process.stdin.close()
        deadline = time.monotonic() + 5
        while process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if process.poll() is None:
            process.kill()
            process.wait()


def _killpg(pgid: int, sig: int) -> bool:
    """Signal a task's processes; False if its process group no longer exists.

    Every task starts in a session of its own (its pgid is also its session
    id). Like Mesos, which kills a task's whole process tree (the posix
    launcher's ``os::killtree`` follows groups and sessions; cgroups take the
    container), the signal also reaches processes the task moved into other
    process groups of its session.
    """
    for pid in _session_members(pgid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _session_members(sid: int) -> list[int]:
    """Processes in session ``sid`` (Linux /proc; elsewhere none are found)."""
    try:
        return [p.pid for p in procfs.processes() if p.session == sid]
    except OSError:
        return []


def _describe_exit(returncode: int) -> str:
    """``WSTRINGIFY``: "exited with status N" or "terminated with signal Name"."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    signum = -returncode
    name = signal.strsignal(signum) or f"signal {signum}"
    return f"terminated with signal {name}"


_ARCHIVES = (".tar", ".tgz", ".tar.gz", ".tbz2", ".tar.bz2", ".txz", ".tar.xz", ".zip")


def _fetch_uris(uris: Sequence[JSON], sandbox: Path) -> None:
    """The Mesos fetcher, for local paths, ``file://`` and ``http(s)://`` URIs.

    Each URI lands in the sandbox as ``output_file`` or its basename; then it is
    made executable (``executable``), or unpacked into the sandbox if it is an
    archive (``extract``, default true). Raises OSError or ValueError on failure.
    """
    import gzip
    import urllib.parse
    import urllib.request

    for uri in uris:
        value: str = uri["value"]
        parsed = urllib.parse.urlparse(value)
        name = uri.get("output_file") or os.path.basename(parsed.path.rstrip("/"))
        if not name:
            raise ValueError(f"cannot name the file fetched from {value!r}")
        target = sandbox / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if parsed.scheme in ("http", "https"):
            with urllib.request.urlopen(value, timeout=60) as response, open(target, "wb") as out:
                shutil.copyfileobj(response, out)
        elif parsed.scheme == "file":
            shutil.copyfile(urllib.parse.unquote(parsed.path), target)
        elif parsed.scheme:
            raise ValueError(f"unsupported URI scheme {parsed.scheme!r} in {value!r}")
        else:
            shutil.copyfile(value, target)
        if uri.get("executable", False):
            target.chmod(0o755)
        elif uri.get("extract", True):
            if name.endswith(_ARCHIVES):
                shutil.unpack_archive(str(target), str(sandbox))
            elif name.endswith(".gz"):
                with gzip.open(target, "rb") as packed, open(target.with_suffix(""), "wb") as out:
                    shutil.copyfileobj(packed, out)


def _accepts_json(header: str | None) -> bool:
    """``Request::acceptsMediaType("application/json")``: no Accept accepts everything."""
    if header is None:
        return True
    for item in header.split(","):
        media, _, params = item.strip().partition(";")
        media = media.strip().lower()
        quality = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip().lower() == "q":
                with contextlib.suppress(ValueError):
                    quality = float(value)
        if quality > 0 and media in ("application/json", "application/*", "*/*"):
            return True
    return False


def _duration_seconds(duration: JSON | None) -> float | None:
    if not duration or "nanoseconds" not in duration:
        return None
    return float(duration["nanoseconds"]) / 1e9


def _packed_ip(address: str) -> int:
    """``MasterInfo.ip``: the IPv4 address packed in network order, read as a uint32."""
    try:
        return int(struct.unpack("<I", socket.inet_aton(address))[0])
    except OSError:
        return 0


def _resolve(hostname: str, fallback: str) -> str:
    try:
        socket.inet_aton(hostname)
        return hostname
    except OSError:
        pass
    try:
        return socket.gethostbyname(hostname)
    except OSError:
        return fallback


def _parse_attributes(attributes: Mapping[str, str | float] | None) -> list[JSON]:
    out: list[JSON] = []
    for name, value in (attributes or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append({"name": name, "type": "SCALAR", "scalar": {"value": float(value)}})
            continue
        text = str(value)
        if text.startswith("[") and text.endswith("]"):
            with contextlib.suppress(ValueError):
                ranges = parse_ranges(text)
                out.append(
                    {
                        "name": name,
                        "type": "RANGES",
                        "ranges": {"range": [{"begin": b, "end": e} for b, e in ranges]},
                    }
                )
                continue
        try:
            number = float(text)
        except ValueError:
            out.append({"name": name, "type": "TEXT", "text": {"value": text}})
        else:
            out.append({"name": name, "type": "SCALAR", "scalar": {"value": number}})
    return out


class TestMaster:
    """A Mesos master (and its agents) in this process, serving the v1 scheduler API.

    Use ``async with TestMaster(agents=2, cpus=2) as master:``; ``master.url`` is
    its base URL (``http://127.0.0.1:PORT``), the scheduler endpoint is
    ``master.url + "/api/v1/scheduler"``. Keywords are the fields of
    :class:`MasterConfig`. All methods must be called on the master's event loop
    (use :class:`ThreadedTestMaster` from other threads).
    """

    __test__ = False  # not a pytest test class

    def __init__(self, config: MasterConfig | None = None, **overrides: Any) -> None:
        self.config = dataclasses.replace(config or MasterConfig(), **overrides)
        self.master_id = str(uuid.uuid4())
        self.agents_by_id: dict[str, Agent] = {}
        self.frameworks_by_id: dict[str, Framework] = {}
        self.completed_frameworks: dict[str, Framework] = {}
        self.offers_by_id: dict[str, Offer] = {}
        self.received_calls: list[JSON] = []
        self._framework_seq = 0
        self._offer_seq = 0
        self._agent_seq = 0
        self._launch_failures: list[_LaunchFailure] = []
        self._call_failures: list[_CallFailure] = []
        self._executors: dict[tuple[str, str, str], Resources] = {}
        self._live_groups: set[int] = set()
        self._reaper: _Reaper | None = None
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._allocation_task: asyncio.Task[None] | None = None
        self._allocation_pending = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._port = 0
        self._work_dir: Path | None = None
        self._own_work_dir = False
        self._started_at = 0.0
        self._stopping = False
        self.master_info: JSON = {}

    # ------------------------------------------------------------------ life

    async def __aenter__(self) -> TestMaster:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> TestMaster:
        """Create the agents and start serving. Returns self."""
        config = self.config
        self._loop = asyncio.get_running_loop()
        if config.work_dir is None:
            self._work_dir = Path(tempfile.mkdtemp(prefix="tfmesos-test-master-"))
            self._own_work_dir = True
        else:
            self._work_dir = Path(config.work_dir)
            self._work_dir.mkdir(parents=True, exist_ok=True)
        if config.kill_on_orphan:
            self._reaper = _Reaper()
            if self._own_work_dir and not config.keep_work_dir:
                self._reaper.remove_on_exit(self._work_dir)
        self._create_agents()

        app = web.Application()
        app.router.add_route("*", SCHEDULER_PATH, self._scheduler_endpoint)
        for path in ("/redirect", "/master/redirect"):
            app.router.add_get(path, self._redirect_endpoint)
        for path in ("/state", "/master/state", "/state.json", "/master/state.json"):
            app.router.add_get(path, self._state_endpoint)
        for path in ("/health", "/master/health"):
            app.router.add_get(path, self._health_endpoint)
        self._control_routes(app)
        self._runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=2.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, config.ip, config.port, reuse_address=True)
        await site.start()
        self._port = int(self._runner.addresses[0][1])
        self._started_at = _now()
        self.master_info = self._make_master_info()
        self._allocation_task = self._spawn(self._allocation_loop())
        logger.info("test master %s listening on %s", self.master_id, self.url)
        return self

    async def stop(self) -> None:
        """Close every stream, kill every task's process group, stop serving."""
        if self._stopping:
            return
        self._stopping = True
        if self._allocation_task is not None:
            self._allocation_task.cancel()
        for framework in list(self.frameworks_by_id.values()):
            if framework.subscription is not None:
                framework.subscription.close()
            if framework.failover_timer is not None:
                framework.failover_timer.cancel()
        for offer in list(self.offers_by_id.values()):
            self._remove_offer(offer)
        tasks = [task for fw in self._all_frameworks() for task in self._framework_tasks(fw)]
        for task in tasks:
            self._finalize(task)
            if task.pid is not None:
                self._signal_group(task.pid, signal.SIGKILL)
        waiters = [task.process.wait() for task in tasks if task.process is not None]
        if waiters:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), 10)
        for pgid in list(self._live_groups):
            self._sweep(pgid)
        for task in tasks:
            if task.kill_timer is not None:
                task.kill_timer.cancel()
        for background in list(self._tasks):
            background.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
        if self._reaper is not None:
            await self._reaper.close()
        if self._own_work_dir and not self.config.keep_work_dir and self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """``http://IP:PORT``: add ``/api/v1/scheduler`` for the scheduler endpoint."""
        return f"http://{self.config.ip}:{self._port}"

    @property
    def scheduler_url(self) -> str:
        return self.url + SCHEDULER_PATH

    @property
    def work_dir(self) -> Path:
        assert self._work_dir is not None
        return self._work_dir

    def _spawn(self, coro: Awaitable[T]) -> asyncio.Task[T]:
        task: asyncio.Task[T] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _make_master_info(self) -> JSON:
        hostname = self.config.hostname
        ip = _resolve(hostname, self.config.ip)
        return {
            "id": self.master_id,
            "ip": _packed_ip(ip),
            "port": self._port,
            "pid": f"master@{ip}:{self._port}",
            "hostname": hostname,
            "version": MESOS_VERSION,
            "address": {"hostname": hostname, "ip": ip, "port": self._port},
            "capabilities": [
                {"type": "AGENT_UPDATE"},
                {"type": "AGENT_DRAINING"},
                {"type": "QUOTA_V2"},
            ],
        }

    def _create_agents(self) -> None:
        config = self.config
        hostnames = list(config.agent_hostnames or [config.hostname] * config.agents)
        if len(hostnames) != config.agents:
            raise ValueError("agent_hostnames must name one hostname per agent")
        ranges = parse_ranges(config.ports) if config.ports else []
        shared_host = len(set(hostnames)) < len(hostnames)
        if config.split_ports and shared_host and ranges:
            slices = _split_ranges(ranges, config.agents)
        else:
            slices = [list(ranges) for _ in hostnames]
        gpu_agents = config.agents if config.gpu_agents is None else config.gpu_agents
        for index, hostname in enumerate(hostnames):
            self.add_agent(
                hostname=hostname,
                ports=slices[index],
                gpus=config.gpus if index < gpu_agents else 0,
            )

    # ------------------------------------------------------------ helpers

    def _all_frameworks(self) -> list[Framework]:
        return [*self.frameworks_by_id.values(), *self.completed_frameworks.values()]

    @staticmethod
    def _framework_tasks(framework: Framework) -> list[Task]:
        return [
            *framework.tasks.values(),
            *framework.completed_tasks.values(),
            *framework.unreachable_tasks.values(),
        ]

    def _find_task(self, task_id: str, framework_id: str | None = None) -> Task | None:
        for framework in self._all_frameworks():
            if framework_id is not None and framework.id != framework_id:
                continue
            for tasks in (framework.tasks, framework.unreachable_tasks, framework.completed_tasks):
                if task_id in tasks:
                    return tasks[task_id]
        return None

    def _request_allocation(self) -> None:
        if not self._allocation_pending and self._loop is not None and not self._stopping:
            self._allocation_pending = True
            self._loop.call_soon(self._allocate)

    # -------------------------------------------------------------- HTTP

    async def _scheduler_endpoint(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        record: JSON = {
            "seq": len(self.received_calls),
            "time": _now(),
            "method": request.method,
            "content_type": request.headers.get("Content-Type"),
            "stream_id": request.headers.get("Mesos-Stream-Id"),
            "type": None,
            "framework_id": None,
            "body": None,
            "status": None,
        }
        with contextlib.suppress(UnicodeDecodeError, ValueError):
            record["body"] = json.loads(body.decode("utf-8"))
        self.received_calls.append(record)
        try:
            response = await self._scheduler(request, body, record)
        except ProtocolError as exc:
            record["status"] = exc.status
            record["error"] = exc.message
            headers = {"Allow": "POST"} if exc.status == 405 else None
            return web.Response(status=exc.status, text=exc.message, headers=headers)
        if record["status"] is None:
            record["status"] = response.status
        return response

    async def _scheduler(
        self, request: web.Request, body: bytes, record: JSON
    ) -> web.StreamResponse:
        if not self.config.leader:
            return self._redirect(request)
        if request.method != "POST":
            raise ProtocolError(
                405, f"Expecting one of {{ 'POST' }}, but received '{request.method}'"
            )
        content_type = request.headers.get("Content-Type")
        if content_type is None:
            raise ProtocolError(400, "Expecting 'Content-Type' to be present")
        if content_type.strip() == "application/x-protobuf":
            raise ProtocolError(415, "This test master accepts only 'application/json' calls")
        if content_type.strip() != "application/json":
            raise ProtocolError(
                415, "Expecting 'Content-Type' of application/json or application/x-protobuf"
            )
        call = parse_call(body)
        record["type"] = call.get("type")
        record["framework_id"] = call.get("framework_id", {}).get("value")
        _validate_call(call)
        kind = call["type"]
        for rule in self._call_failures:
            if rule.remaining > 0 and rule.call_type == kind:
                rule.remaining -= 1
                self._call_failures = [r for r in self._call_failures if r.remaining > 0]
                raise ProtocolError(rule.status, rule.message)
        if kind == "SUBSCRIBE":
            if not _accepts_json(request.headers.get("Accept")):
                raise ProtocolError(
                    406,
                    "Expecting 'Accept' to allow 'application/x-protobuf' or 'application/json'",
                )
            if "Mesos-Stream-Id" in request.headers:
                raise ProtocolError(
                    400, "Subscribe calls should not include the 'Mesos-Stream-Id' header"
                )
            return await self._subscribe(request, call, record)

        framework = self.frameworks_by_id.get(call["framework_id"]["value"])
        if framework is None:
            raise ProtocolError(400, "Framework cannot be found")
        if framework.subscription is None:
            raise ProtocolError(403, "Framework is not subscribed")
        stream_id = request.headers.get("Mesos-Stream-Id")
        if stream_id is None:
            raise ProtocolError(
                400, "All non-subscribe calls should include the 'Mesos-Stream-Id' header"
            )
        if stream_id != framework.subscription.stream_id:
            raise ProtocolError(
                400,
                f"The stream ID '{stream_id}' included in this request didn't match the stream "
                f"ID currently associated with framework ID {framework.id}",
            )
        if kind == "UNKNOWN":
            raise ProtocolError(501, "Received 'UNKNOWN' call")
        if kind == "UPDATE_FRAMEWORK":
            self._update_framework(framework, call["update_framework"])
            return web.Response(status=200)
        self._dispatch(framework, kind, call)
        return web.Response(status=202)

    def _dispatch(self, framework: Framework, kind: str, call: JSON) -> None:
        if kind == "TEARDOWN":
            self._remove_framework(framework)
        elif kind == "ACCEPT":
            self._accept(framework, call["accept"])
        elif kind == "DECLINE":
            self._decline(framework, call["decline"])
        elif kind == "REVIVE":
            self._revive(framework, call.get("revive", {}).get("roles", []))
        elif kind == "SUPPRESS":
            self._suppress(framework, call.get("suppress", {}).get("roles", []))
        elif kind == "KILL":
            self._kill(framework, call["kill"])
        elif kind == "SHUTDOWN":
            self._shutdown_executor(framework, call["shutdown"])
        elif kind == "ACKNOWLEDGE":
            self._acknowledge(framework, call["acknowledge"])
        elif kind == "RECONCILE":
            self._reconcile(framework, call["reconcile"].get("tasks", []))
        elif kind == "RECONCILE_OPERATIONS":
            self._reconcile_operations(framework, call["reconcile_operations"])
        # MESSAGE, REQUEST, ACKNOWLEDGE_OPERATION_STATUS and the inverse offer
        # calls are accepted and have no effect here (no custom executors, no
        # allocator modules, no operations with feedback, no maintenance).

    def _redirect(self, request: web.Request) -> web.Response:
        """``Master::Http::redirect``: a protocol-relative ``Location`` to the leader."""
        config = self.config
        if config.redirect_location is not None and not config.leader:
            location = config.redirect_location
        else:
            if config.leader:
                leader = f"{config.hostname}:{self._port}"
            elif config.leader_address is not None:
                leader = config.leader_address
            else:
                return web.Response(status=503, text="No leader elected")
            base = "//" + leader
            path = request.path
            if path in ("/redirect", "/master/redirect"):
                location = base
            elif path.startswith(("/redirect/", "/master/redirect/")):
                return web.Response(status=404)
            else:
                location = base + request.path_qs
        return web.Response(status=307, headers={"Location": location})

    async def _redirect_endpoint(self, request: web.Request) -> web.Response:
        return self._redirect(request)

    async def _health_endpoint(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _state_endpoint(self, request: web.Request) -> web.Response:
        return web.json_response(self.mesos_state())

    # -------------------------------------------------------- subscription

    async def _subscribe(
        self, request: web.Request, call: JSON, record: JSON
    ) -> web.StreamResponse:
        stream_id = str(uuid.uuid4())
        response = web.StreamResponse(
            status=200,
            headers={"Content-Type": "application/json", "Mesos-Stream-Id": stream_id},
        )
        response.enable_chunked_encoding()
        await response.prepare(request)
        record["status"] = 200
        record["new_stream_id"] = stream_id
        subscription = Subscription(stream_id, request)
        error = self._admit(subscription, call["subscribe"])
        if error is not None:
            record["error"] = error
            await response.write(recordio_encode({"type": "ERROR", "error": {"message": error}}))
            await response.write_eof()
            return response
        try:
            while True:
                item = await subscription.queue.get()
                if isinstance(item, _Close):
                    if item.abort:
                        transport = request.transport
                        if transport is not None:
                            transport.abort()
                        return response
                    await response.write_eof()
                    return response
                await response.write(item)
        except (ConnectionError, RuntimeError):
            return response
        finally:
            subscription.closed = True
            if subscription.heartbeat is not None:
                subscription.heartbeat.cancel()
            self._stream_ended(subscription)

    def _validate_framework_info(self, info: JSON) -> str | None:
        """``validation::framework::validate`` and ``Master::validateFramework``."""
        capabilities = {c.get("type") for c in info.get("capabilities", [])}
        multi_role = "MULTI_ROLE" in capabilities
        if multi_role and "role" in info:
            return "'FrameworkInfo.role' must not be set when the framework is MULTI_ROLE capable"
        if not multi_role and info.get("roles"):
            return (
                "'FrameworkInfo.roles' must not be set when the framework is not MULTI_ROLE capable"
            )
        roles: list[str] = info.get("roles", []) if multi_role else [info.get("role", "*")]
        duplicates = sorted({r for r in roles if roles.count(r) > 1})
        if duplicates:
            return f"'FrameworkInfo.roles' contains duplicate items: {duplicates}"
        for role in roles:
            problem = _validate_role(role)
            if problem is not None:
                which = (
                    "'FrameworkInfo.roles' contains invalid role"
                    if multi_role
                    else ("'FrameworkInfo.role' is not a valid role")
                )
                return f"{which}: {problem}"
        framework_id = info.get("id", {}).get("value")
        if framework_id:
            problem = _validate_id(framework_id)
            if problem is not None:
                return problem
        timeout = info.get("failover_timeout", 0.0)
        if not math.isfinite(timeout) or abs(timeout) * 1e9 >= 2**63:
            return f"The framework failover_timeout ({timeout}) is invalid"
        if framework_id and framework_id in self.completed_frameworks:
            return "Framework has been removed"
        return None

    def _admit(self, subscription: Subscription, subscribe: JSON) -> str | None:
        info: JSON = dict(subscribe["framework_info"])
        error = self._validate_framework_info(info)
        if error is not None:
            return error
        multi_role = "MULTI_ROLE" in {c.get("type") for c in info.get("capabilities", [])}
        roles = info.get("roles", []) if multi_role else [info.get("role", "*")]
        suppressed = list(subscribe.get("suppressed_roles", []))
        stray = sorted(set(suppressed) - set(roles))
        if stray:
            return f"Suppressed roles {stray} are not contained in the set of roles"
        framework_id = info.get("id", {}).get("value")
        if framework_id:
            framework = self.frameworks_by_id.get(framework_id)
            if framework is None:
                # Unknown to this master: Mesos takes it for a framework that has
                # not yet reregistered after a master failover and admits it.
                framework = Framework(framework_id, info)
                self.frameworks_by_id[framework_id] = framework
            else:
                if info.get("principal") != framework.info.get("principal"):
                    return "Changing framework's principal is not allowed."
                # `user` and `checkpoint` cannot change; new values are ignored.
                for key in ("user", "checkpoint"):
                    if key in framework.info:
                        info[key] = framework.info[key]
                    else:
                        info.pop(key, None)
                old = framework.subscription
                if old is not None:
                    old.send({"type": "ERROR", "error": {"message": "Framework failed over"}})
                    old.close()
                    framework.subscription = None
                if framework.failover_timer is not None:
                    framework.failover_timer.cancel()
                    framework.failover_timer = None
                for offer in self._offers_of(framework):
                    self._remove_offer(offer)  # discarded, not rescinded
                framework.info = info
        else:
            self._framework_seq += 1
            framework_id = f"{self.master_id}-{self._framework_seq - 1:04d}"
            info["id"] = _id(framework_id)
            framework = Framework(framework_id, info)
            self.frameworks_by_id[framework_id] = framework
        framework.suppressed = set(suppressed)
        framework.subscription = subscription
        subscription.framework_id = framework_id
        framework.send(
            {
                "type": "SUBSCRIBED",
                "subscribed": {
                    "framework_id": _id(framework_id),
                    "heartbeat_interval_seconds": float(self.config.heartbeat_interval),
                    "master_info": self.master_info,
                },
            }
        )
        subscription.send({"type": "HEARTBEAT"})
        subscription.heartbeat = self._spawn(self._heartbeat(subscription))
        # The agents resend what is still unacknowledged to the new connection.
        for task in list(framework.tasks.values()):
            if task.pending and not task.finalized:
                task.retry_interval = self.config.update_retry_interval
                self._forward_head(task)
        self._request_allocation()
        return None

    async def _heartbeat(self, subscription: Subscription) -> None:
        while not subscription.closed:
            await asyncio.sleep(self.config.heartbeat_interval)
            subscription.send({"type": "HEARTBEAT"})

    def _stream_ended(self, subscription: Subscription) -> None:
        framework = self.frameworks_by_id.get(subscription.framework_id or "")
        if framework is not None and framework.subscription is subscription:
            self._disconnect(framework)

    def _disconnect(self, framework: Framework) -> None:
        """The subscription connection broke: deactivate, start the failover timeout."""
        framework.subscription = None
        for offer in self._offers_of(framework):
            self._remove_offer(offer)
        if self._stopping:
            return
        timeout = framework.failover_timeout
        logger.info("framework %s disconnected; failover timeout %ss", framework.id, timeout)
        if timeout <= 0:
            self._remove_framework(framework)
        else:
            assert self._loop is not None
            framework.failover_timer = self._loop.call_later(
                timeout, self._failover_expired, framework.id
            )

    def _failover_expired(self, framework_id: str) -> None:
        framework = self.frameworks_by_id.get(framework_id)
        if framework is not None and framework.subscription is None:
            framework.failover_timer = None
            self._remove_framework(framework)

    def _remove_framework(self, framework: Framework) -> None:
        """TEARDOWN or failover timeout: kill the tasks, forget the framework."""
        logger.info("removing framework %s", framework.id)
        if framework.failover_timer is not None:
            framework.failover_timer.cancel()
            framework.failover_timer = None
        for offer in self._offers_of(framework):
            self._remove_offer(offer)
        if framework.subscription is not None:
            framework.subscription.close()
            framework.subscription = None
        message = f"Framework {framework.id} removed"
        for task in list(framework.tasks.values()):
            if not task.terminal:
                self._record_master_state(task, "TASK_KILLED", message, "REASON_FRAMEWORK_REMOVED")
            self._shutdown_task(task, self.config.shutdown_grace_period)
            framework.completed_tasks[task.task_id] = framework.tasks.pop(task.task_id)
        for task in list(framework.unreachable_tasks.values()):
            self._record_master_state(task, "TASK_KILLED", message, "REASON_FRAMEWORK_REMOVED")
            framework.completed_tasks[task.task_id] = framework.unreachable_tasks.pop(task.task_id)
        framework.unregistered_time = _now()
        self.frameworks_by_id.pop(framework.id, None)
        self.completed_frameworks[framework.id] = framework
        self._request_allocation()

    def _update_framework(self, framework: Framework, update: JSON) -> None:
        info: JSON = dict(update["framework_info"])
        error = self._validate_framework_info(info)
        if error is None:
            for key in ("principal", "user", "checkpoint"):
                if info.get(key) != framework.info.get(key):
                    error = f"Updating 'FrameworkInfo.{key}' is unsupported"
                    break
        multi_role = "MULTI_ROLE" in {c.get("type") for c in info.get("capabilities", [])}
        roles = info.get("roles", []) if multi_role else [info.get("role", "*")]
        suppressed = set(update.get("suppressed_roles", []))
        if error is None and not suppressed <= set(roles):
            error = f"Suppressed roles {sorted(suppressed - set(roles))} are not contained in the set of roles"
        if error is not None:
            raise ProtocolError(400, f"Failed to validate scheduler::Call: {error}")
        framework.info = info
        for offer in self._offers_of(framework):
            if offer.role not in roles:
                self._rescind(offer)
        for role in framework.suppressed - suppressed:
            framework.filters = [f for f in framework.filters if f.role != role]
        framework.suppressed = suppressed
        self._request_allocation()

    # ---------------------------------------------------------------- offers

    def _offers_of(self, framework: Framework) -> list[Offer]:
        return [o for o in self.offers_by_id.values() if o.framework_id == framework.id]

    def _remove_offer(self, offer: Offer) -> None:
        if offer.timer is not None:
            offer.timer.cancel()
        self.offers_by_id.pop(offer.id, None)

    def _rescind(self, offer: Offer) -> None:
        self._remove_offer(offer)
        framework = self.frameworks_by_id.get(offer.framework_id)
        if framework is not None:
            framework.send({"type": "RESCIND", "rescind": {"offer_id": _id(offer.id)}})

    def _offer_timed_out(self, offer_id: str) -> None:
        offer = self.offers_by_id.get(offer_id)
        if offer is not None:
            offer.timer = None
            self._rescind(offer)

    def _add_filter(
        self, framework: Framework, offer: Offer, resources: Resources, filters: JSON | None
    ) -> None:
        seconds = DEFAULT_REFUSE_SECONDS
        if filters is not None and "refuse_seconds" in filters:
            value = float(filters["refuse_seconds"])
            if math.isnan(value) or value < 0:
                seconds = DEFAULT_REFUSE_SECONDS
            else:
                seconds = min(value, MAX_REFUSE_SECONDS)
        if seconds > 0 and not resources.is_empty():
            framework.filters.append(
                _Filter(offer.agent_id, offer.role, resources, time.monotonic() + seconds)
            )

    def _offer_json(self, offer: Offer) -> JSON:
        agent = self.agents_by_id[offer.agent_id]
        ip = _resolve(agent.hostname, self.config.ip)
        data: JSON = {
            "id": _id(offer.id),
            "framework_id": _id(offer.framework_id),
            "agent_id": _id(offer.agent_id),
            "hostname": agent.hostname,
            "url": {
                "scheme": "http",
                "address": {"hostname": agent.hostname, "ip": ip, "port": agent.port},
                "path": "/slave(1)",
            },
            "resources": offer.resources.to_json(offer.role),
            "allocation_info": {"role": offer.role},
        }
        if agent.attributes:
            data["attributes"] = agent.attributes
        executors = sorted(
            executor_id
            for (framework_id, agent_id, executor_id) in self._executors
            if framework_id == offer.framework_id and agent_id == agent.id
        )
        if executors:
            data["executor_ids"] = [_id(e) for e in executors]
        return data

    async def _allocation_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.allocation_interval)
            self._allocate()

    def _share(self, framework: Framework) -> float:
        """The framework's dominant share of the cluster (for a DRF-like order)."""
        total = Resources()
        for agent in self.agents_by_id.values():
            if agent.state == "active":
                total = total + agent.total
        used = Resources()
        for task in framework.tasks.values():
            if not task.released:
                used = used + task.resources
        for offer in self._offers_of(framework):
            used = used + offer.resources
        shares = [
            used.scalars.get(name, 0) / total.scalars[name]
            for name in ("cpus", "mem", "disk", "gpus")
            if total.scalars.get(name)
        ]
        return max(shares, default=0.0)

    def _allocate(self) -> None:
        """One allocation round: offer each agent's free resources to a framework's role."""
        self._allocation_pending = False
        if self._stopping or not self.config.leader:
            return
        now = time.monotonic()
        frameworks = [f for f in self.frameworks_by_id.values() if f.subscription is not None]
        for framework in frameworks:
            framework.filters = [f for f in framework.filters if f.expires > now]
        new_offers: dict[str, list[Offer]] = {}
        for agent in self.agents_by_id.values():
            if agent.state != "active":
                continue
            free = agent.total - agent.used
            for offer in self.offers_by_id.values():
                if offer.agent_id == agent.id:
                    free = free - offer.resources
            order = sorted(enumerate(frameworks), key=lambda item: (self._share(item[1]), item[0]))
            for _, framework in order:
                candidate = free
                if agent.has_gpus and "GPU_RESOURCES" not in framework.capabilities:
                    if self.config.filter_gpu_resources:
                        continue
                    candidate = free.without("gpus")
                if not _allocatable(candidate):
                    continue
                role = next(
                    (
                        role
                        for role in framework.roles
                        if role not in framework.suppressed
                        and not any(
                            f.agent_id == agent.id
                            and f.role == role
                            and f.resources.contains(candidate)
                            for f in framework.filters
                        )
                    ),
                    None,
                )
                if role is None:
                    continue
                self._offer_seq += 1
                offer = Offer(
                    id=f"{self.master_id}-O{self._offer_seq - 1}",
                    framework_id=framework.id,
                    agent_id=agent.id,
                    role=role,
                    resources=candidate,
                    created=_now(),
                )
                if self.config.offer_timeout is not None and self._loop is not None:
                    offer.timer = self._loop.call_later(
                        self.config.offer_timeout, self._offer_timed_out, offer.id
                    )
                self.offers_by_id[offer.id] = offer
                new_offers.setdefault(framework.id, []).append(offer)
                free = free - candidate
        for framework_id, offers in new_offers.items():
            framework = self.frameworks_by_id[framework_id]
            framework.send(
                {"type": "OFFERS", "offers": {"offers": [self._offer_json(o) for o in offers]}}
            )

    # ------------------------------------------------------------- calls

    def _decline(self, framework: Framework, decline: JSON) -> None:
        for offer_id in decline.get("offer_ids", []):
            offer = self.offers_by_id.get(offer_id["value"])
            if offer is None or offer.framework_id != framework.id:
                continue  # "Ignoring decline of offer ... since it is no longer valid"
            self._remove_offer(offer)
            self._add_filter(framework, offer, offer.resources, decline.get("filters"))

    def _revive(self, framework: Framework, roles: list[str]) -> None:
        targets = set(roles) if roles else set(framework.roles)
        targets &= set(framework.roles)
        framework.suppressed -= targets
        framework.filters = [f for f in framework.filters if f.role not in targets]
        self._request_allocation()

    def _suppress(self, framework: Framework, roles: list[str]) -> None:
        targets = set(roles) if roles else set(framework.roles)
        framework.suppressed |= targets & set(framework.roles)

    def _validate_offers(self, framework: Framework, offer_ids: list[str]) -> str | None:
        """``validation::offer::validate``."""
        if not offer_ids:
            return "No offers specified"
        seen: set[str] = set()
        agent_id: str | None = None
        role: str | None = None
        for offer_id in offer_ids:
            if offer_id in seen:
                return f"Duplicate offer {offer_id} in offer list"
            seen.add(offer_id)
            offer = self.offers_by_id.get(offer_id)
            if offer is None or offer.framework_id != framework.id:
                return f"Offer {offer_id} is no longer valid"
            if agent_id is not None and offer.agent_id != agent_id:
                return (
                    "Aggregated offers must belong to one single agent. Offer "
                    f"{offer_id} uses agent {offer.agent_id} and offer {offer_ids[0]} "
                    f"uses agent {agent_id}"
                )
            if role is not None and offer.role != role:
                return (
                    "Aggregated offers must be allocated to the same role. Offer "
                    f"{offer_id} uses role {offer.role} and offer {offer_ids[0]} uses role {role}"
                )
            agent_id, role = offer.agent_id, offer.role
        return None

    def _accept(self, framework: Framework, accept: JSON) -> None:
        offer_ids = [o["value"] for o in accept.get("offer_ids", [])]
        operations: list[JSON] = accept.get("operations", [])
        error = self._validate_offers(framework, offer_ids)
        if error is not None:
            # The valid ones among them go back to the allocator unfiltered.
            for offer_id in offer_ids:
                offer = self.offers_by_id.get(offer_id)
                if offer is not None and offer.framework_id == framework.id:
                    self._remove_offer(offer)
            state = "TASK_DROPPED" if framework.partition_aware else "TASK_LOST"
            for operation in operations:
                for info in self._operation_tasks(operation):
                    self._master_update(
                        framework,
                        info["task_id"]["value"],
                        info["agent_id"]["value"],
                        state,
                        f"Task launched with invalid offers: {error}",
                        "REASON_INVALID_OFFERS",
                    )
            return
        offers = [self.offers_by_id[offer_id] for offer_id in offer_ids]
        for offer in offers:
            self._remove_offer(offer)
        agent = self.agents_by_id[offers[0].agent_id]
        role = offers[0].role
        remaining = Resources()
        for offer in offers:
            remaining = remaining + offer.resources
        for operation in operations:
            kind = operation.get("type")
            if kind == "LAUNCH":
                for info in operation.get("launch", {}).get("task_infos", []):
                    remaining = self._launch_task(framework, agent, role, info, remaining)
            elif kind == "LAUNCH_GROUP" and "launch_group" in operation:
                remaining = self._launch_group(
                    framework, agent, role, operation["launch_group"], remaining
                )
            else:
                logger.warning("ignoring unsupported operation %s", kind)
        self._add_filter(framework, offers[0], remaining, accept.get("filters"))

    @staticmethod
    def _operation_tasks(operation: JSON) -> list[JSON]:
        if operation.get("type") == "LAUNCH":
            return list(operation.get("launch", {}).get("task_infos", []))
        if operation.get("type") == "LAUNCH_GROUP":
            return list(operation.get("launch_group", {}).get("task_group", {}).get("tasks", []))
        return []

    def _task_error(
        self, framework: Framework, info: JSON, agent: Agent, role: str, remaining: Resources
    ) -> tuple[str | None, Resources]:
        """``validation::task::validate``: an error message, and what the task needs."""
        task_id = info["task_id"]["value"]
        problem = _validate_id(task_id)
        if problem is not None:
            return f"Task has an invalid TaskID: {problem}", Resources()
        if task_id in framework.tasks:
            return f"Task has duplicate ID: {task_id}", Resources()
        if task_id in framework.unreachable_tasks:
            return f"Task reuses the ID of an unreachable task: {task_id}", Resources()
        if info["agent_id"]["value"] != agent.id:
            return (
                f"Task uses invalid agent {info['agent_id']['value']} while agent "
                f"{agent.id} is expected",
                Resources(),
            )
        grace = _duration_seconds(info.get("kill_policy", {}).get("grace_period"))
        if grace is not None and grace < 0:
            return "Task's 'kill_policy.grace_period' must be non-negative", Resources()
        completion = _duration_seconds(info.get("max_completion_time"))
        if completion is not None and completion < 0:
            return "Task's `max_completion_time` must be non-negative", Resources()
        if not info.get("resources"):
            return "Task uses no resources", Resources()
        parsed = _parse_resources(info["resources"], role)
        if parsed.error is not None:
            return parsed.error, Resources()
        for variable in info.get("command", {}).get("environment", {}).get("variables", []):
            kind = variable.get("type", "VALUE")
            if kind == "VALUE" and "value" not in variable:
                return (
                    "Task's `CommandInfo` is invalid: Environment variable "
                    f"'{variable['name']}' of type 'VALUE' must have a value set",
                    Resources(),
                )
            if kind == "SECRET" and "secret" not in variable:
                return (
                    "Task's `CommandInfo` is invalid: Environment variable "
                    f"'{variable['name']}' of type 'SECRET' must have a secret set",
                    Resources(),
                )
        if ("executor" in info) == ("command" in info):
            return (
                "Task should have at least one (but not both) of CommandInfo or "
                "ExecutorInfo present",
                Resources(),
            )
        total = parsed.resources
        foreign = list(parsed.foreign)
        if "executor" in info:
            executor = info["executor"]
            if executor.get("type", "CUSTOM") != "CUSTOM":
                return "'ExecutorInfo.type' must be 'CUSTOM'", Resources()
            if "command" not in executor:
                return "'ExecutorInfo.command' must be set", Resources()
            key = (framework.id, agent.id, executor["executor_id"]["value"])
            if key not in self._executors:
                executor_resources = _parse_resources(executor.get("resources", []), role)
                if executor_resources.error is not None:
                    return (
                        f"Executor uses invalid resources: {executor_resources.error}",
                        Resources(),
                    )
                total = total + executor_resources.resources
                foreign += executor_resources.foreign
        if foreign or not remaining.contains(total):
            needed = total.describe(role)
            if foreign:
                needed += "; " + "; ".join(foreign)
            return (
                f"Total resources {needed} required by task and its executor is more than "
                f"available {remaining.describe(role)}",
                Resources(),
            )
        return None, total

    def _launch_task(
        self, framework: Framework, agent: Agent, role: str, info: JSON, remaining: Resources
    ) -> Resources:
        error, total = self._task_error(framework, info, agent, role, remaining)
        if error is not None:
            self._master_update(
                framework,
                info["task_id"]["value"],
                info["agent_id"]["value"],
                "TASK_ERROR",
                error,
                "REASON_TASK_INVALID",
            )
            return remaining
        executor_id = info["task_id"]["value"]
        if "executor" in info:
            executor_id = info["executor"]["executor_id"]["value"]
        self._add_task(framework, agent, role, info, total, executor_id, None)
        return remaining - total

    def _launch_group(
        self, framework: Framework, agent: Agent, role: str, launch: JSON, remaining: Resources
    ) -> Resources:
        executor: JSON = launch["executor"]
        infos: list[JSON] = launch["task_group"].get("tasks", [])
        executor_id = executor["executor_id"]["value"]
        key = (framework.id, agent.id, executor_id)
        error: str | None = None
        if executor.get("type") != "DEFAULT":
            error = "'ExecutorInfo.type' must be 'DEFAULT'"
        elif not infos:
            error = "Task group has no tasks"
        available = remaining
        executor_resources = Resources()
        if error is None and key not in self._executors:
            parsed = _parse_resources(executor.get("resources", []), role)
            if parsed.error is not None or parsed.foreign:
                error = f"Executor uses invalid resources: {parsed.error or parsed.foreign}"
            elif not available.contains(parsed.resources):
                error = (
                    f"Total resources {parsed.resources.describe(role)} required by task group "
                    f"and its executor are more than available {available.describe(role)}"
                )
            else:
                executor_resources = parsed.resources
                available = available - parsed.resources
        needs: list[Resources] = []
        ids = [info["task_id"]["value"] for info in infos]
        if error is None and len(set(ids)) != len(ids):
            error = "The task group has duplicate task IDs"
        for info in infos if error is None else []:
            if "executor" in info and info["executor"] != executor:
                error = f"Task '{info['task_id']['value']}' is invalid: 'TaskInfo.executor' must match the executor of the task group"
                break
            if "command" not in info:
                error = (
                    f"Task '{info['task_id']['value']}' is invalid: 'TaskInfo.command' must be set"
                )
                break
            probe = dict(info)
            probe.pop("executor", None)
            problem, total = self._task_error(framework, probe, agent, role, available)
            if problem is not None:
                error = f"Task '{info['task_id']['value']}' is invalid: {problem}"
                break
            available = available - total
            needs.append(total)
        if error is not None:
            for info in infos:
                self._master_update(
                    framework,
                    info["task_id"]["value"],
                    info["agent_id"]["value"],
                    "TASK_ERROR",
                    error,
                    "REASON_TASK_GROUP_INVALID",
                )
            return remaining
        if key not in self._executors:
            self._executors[key] = executor_resources
            agent.used = agent.used + executor_resources
        for info, total in zip(infos, needs, strict=True):
            self._add_task(framework, agent, role, info, total, executor_id, executor)
        return available

    def _add_task(
        self,
        framework: Framework,
        agent: Agent,
        role: str,
        info: JSON,
        resources: Resources,
        executor_id: str,
        group_executor: JSON | None,
    ) -> Task:
        container_id = str(uuid.uuid4())
        sandbox = (
            self.work_dir
            / "slaves"
            / agent.id
            / "frameworks"
            / framework.id
            / "executors"
            / executor_id
            / "runs"
            / container_id
        )
        grace = _duration_seconds(info.get("kill_policy", {}).get("grace_period"))
        task = Task(
            task_id=info["task_id"]["value"],
            name=info["name"],
            framework_id=framework.id,
            agent_id=agent.id,
            executor_id=executor_id,
            info=info,
            resources=resources,
            role=role,
            container_id=container_id,
            sandbox=sandbox,
            group_executor=group_executor,
            kill_grace=DEFAULT_KILL_GRACE_SECONDS if grace is None else grace,
        )
        for rule in self._launch_failures:
            if rule.remaining > 0 and rule.pattern.search(task.name):
                rule.remaining -= 1
                task.inject_failure = rule.message
                break
        self._launch_failures = [r for r in self._launch_failures if r.remaining > 0]
        framework.tasks[task.task_id] = task
        agent.used = agent.used + resources
        task.runner = self._spawn(self._run_task(task))
        return task

    # ------------------------------------------------------ status updates

    def _container_status(self, task: Task) -> JSON:
        agent = self.agents_by_id[task.agent_id]
        status: JSON = {
            "container_id": _id(task.container_id),
            "network_infos": [
                {"ip_addresses": [{"ip_address": _resolve(agent.hostname, self.config.ip)}]}
            ],
        }
        if task.pid is not None:
            status["executor_pid"] = task.pid
        return status

    def _agent_update(
        self,
        task: Task,
        state: str,
        *,
        source: str = "SOURCE_EXECUTOR",
        message: str | None = None,
        reason: str | None = None,
        container: bool = True,
    ) -> None:
        """A status update from the executor or agent: reliable, retried until acknowledged."""
        if task.finalized:
            return
        status: JSON = {
            "task_id": _id(task.task_id),
            "state": state,
            "source": source,
            "agent_id": _id(task.agent_id),
            "executor_id": _id(task.executor_id),
            "timestamp": _now(),
            "uuid": _new_uuid_b64(),
        }
        if message is not None:
            status["message"] = message
        if reason is not None:
            status["reason"] = reason
        if container:
            status["container_status"] = self._container_status(task)
        task.state = state
        task.statuses.append(status)
        if state in TERMINAL_STATES:
            task.ended_at = _now()
            self._release(task)
        task.pending.append(status)
        if len(task.pending) == 1:
            task.retry_interval = self.config.update_retry_interval
            self._forward_head(task)

    def _forward_head(self, task: Task) -> None:
        """Send the oldest unacknowledged update and schedule its retry."""
        if task.retry_handle is not None:
            task.retry_handle.cancel()
            task.retry_handle = None
        if not task.pending or task.finalized or self._loop is None:
            return
        head = task.pending[0]
        task.status_update_state = head["state"]
        framework = self.frameworks_by_id.get(task.framework_id)
        if framework is not None:
            framework.send({"type": "UPDATE", "update": {"status": head}})
        task.retry_handle = self._loop.call_later(task.retry_interval, self._retry_head, task)

    def _retry_head(self, task: Task) -> None:
        task.retry_handle = None
        if task.pending and not task.finalized:
            task.retry_interval = min(task.retry_interval * 2, self.config.update_retry_max)
            self._forward_head(task)

    def _master_update(
        self,
        framework: Framework,
        task_id: str,
        agent_id: str | None,
        state: str,
        message: str,
        reason: str,
        *,
        extra: JSON | None = None,
    ) -> JSON:
        """A status update generated by the master: no ``uuid``, never retried."""
        status: JSON = {
            "task_id": _id(task_id),
            "state": state,
            "source": "SOURCE_MASTER",
            "message": message,
            "reason": reason,
            "timestamp": _now(),
        }
        if agent_id is not None:
            status["agent_id"] = _id(agent_id)
        if extra:
            status.update(extra)
        framework.send({"type": "UPDATE", "update": {"status": status}})
        return status

    def _record_master_state(self, task: Task, state: str, message: str, reason: str) -> JSON:
        status: JSON = {
            "task_id": _id(task.task_id),
            "state": state,
            "source": "SOURCE_MASTER",
            "message": message,
            "reason": reason,
            "agent_id": _id(task.agent_id),
            "executor_id": _id(task.executor_id),
            "timestamp": _now(),
        }
        task.state = state
        task.status_update_state = state
        task.statuses.append(status)
        if task.ended_at is None:
            task.ended_at = _now()
        self._release(task)
        return status

    def _release(self, task: Task) -> None:
        """Give the task's resources (and an idle group executor's) back to its agent."""
        if task.released:
            return
        task.released = True
        agent = self.agents_by_id.get(task.agent_id)
        if agent is not None:
            agent.used = agent.used - task.resources
        if task.group_executor is not None:
            key = (task.framework_id, task.agent_id, task.executor_id)
            framework = self.frameworks_by_id.get(task.framework_id)
            siblings = [
                t
                for t in (framework.tasks.values() if framework else [])
                if t.executor_id == task.executor_id
                and t.agent_id == task.agent_id
                and not t.released
            ]
            if not siblings and key in self._executors:
                resources = self._executors.pop(key)
                if agent is not None:
                    agent.used = agent.used - resources
                # The default executor exits (status 0) once it has no task left;
                # the master knows it, so it tells the scheduler (Master::exitedExecutor).
                if framework is not None and not task.finalized:
                    framework.send(
                        {
                            "type": "FAILURE",
                            "failure": {
                                "agent_id": _id(task.agent_id),
                                "executor_id": _id(task.executor_id),
                                "status": 0,
                            },
                        }
                    )

    def _acknowledge(self, framework: Framework, acknowledge: JSON) -> None:
        task = framework.tasks.get(acknowledge["task_id"]["value"])
        if task is None or not task.pending:
            return
        try:
            head = base64.b64decode(task.pending[0]["uuid"])
            acked = base64.b64decode(acknowledge["uuid"])
        except (binascii.Error, ValueError):
            return
        if head != acked:
            logger.info("ignoring acknowledgement of an update that is not the task's oldest")
            return
        task.pending.popleft()
        if task.retry_handle is not None:
            task.retry_handle.cancel()
            task.retry_handle = None
        if task.pending:
            task.retry_interval = self.config.update_retry_interval
            self._forward_head(task)
        elif task.terminal:
            framework.completed_tasks[task.task_id] = framework.tasks.pop(task.task_id)

    # ------------------------------------------------------------- running

    def _task_environment(self, task: Task, command: JSON) -> dict[str, str]:
        agent = self.agents_by_id[task.agent_id]
        env = dict(os.environ) if self.config.inherit_env else {"PATH": _DEFAULT_PATH}
        env.setdefault("PATH", _DEFAULT_PATH)
        agent_ip = _resolve(agent.hostname, self.config.ip)
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
        for variable in command.get("environment", {}).get("variables", []):
            if variable.get("type", "VALUE") == "VALUE" and "value" in variable:
                env[variable["name"]] = variable["value"]
        env["MESOS_ALLOCATION_ROLE"] = task.role
        return env

    async def _run_task(self, task: Task) -> None:
        """The agent and the command executor: start, watch, report, clean up."""
        try:
            await self._run_task_inner(task)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("task %s: the test master failed to run it", task.task_id)
            if not task.terminal:
                self._agent_update(task, "TASK_FAILED", message=f"Test master error: {exc!r}")
        finally:
            if task.pid is not None:
                self._sweep(task.pid)

    async def _run_task_inner(self, task: Task) -> None:
        await asyncio.sleep(0)
        if task.finalized:
            return
        if task.kill_requested:
            self._agent_update(
                task,
                "TASK_KILLED",
                source="SOURCE_AGENT",
                reason="REASON_TASK_KILLED_DURING_LAUNCH",
                message="Task killed before delivery to the executor",
                container=False,
            )
            return
        if task.inject_failure is not None:
            self._agent_update(
                task,
                "TASK_FAILED",
                source="SOURCE_AGENT",
                reason="REASON_CONTAINER_LAUNCH_FAILED",
                message=f"Failed to launch container: {task.inject_failure}",
                container=False,
            )
            return
        if "executor" in task.info:
            self._agent_update(
                task,
                "TASK_FAILED",
                source="SOURCE_AGENT",
                reason="REASON_CONTAINER_LAUNCH_FAILED",
                message="Failed to launch container: custom executors are not supported "
                "by the tfmesos test master",
                container=False,
            )
            return
        command: JSON = task.info.get("command", {})
        task.sandbox.mkdir(parents=True, exist_ok=True)
        if command.get("uris"):
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(None, _fetch_uris, command["uris"], task.sandbox)
            except (OSError, ValueError) as exc:
                with open(task.sandbox / "stderr", "ab") as err:
                    err.write(f"Failed to fetch: {exc}\n".encode())
                self._agent_update(
                    task,
                    "TASK_FAILED",
                    source="SOURCE_AGENT",
                    reason="REASON_CONTAINER_LAUNCH_FAILED",
                    message="Failed to launch container: Failed to fetch all URIs for "
                    f"container '{task.container_id}': exited with status 1",
                    container=False,
                )
                return
            if task.finalized:
                return
        self._agent_update(task, "TASK_STARTING")
        value = command.get("value")
        if value is None:
            self._agent_update(
                task,
                "TASK_FAILED",
                message="Failed to launch task subprocess: the command has no 'value'",
            )
            return
        if command.get("shell", True):
            program = "/bin/sh"
            argv = ["sh", "-c", value]
        else:
            program = value
            argv = list(command.get("arguments", [])) or [value]
        env = self._task_environment(task, command)
        try:
            with (
                open(task.sandbox / "stdout", "wb") as out,
                open(task.sandbox / "stderr", "wb") as err,
            ):
                process = await asyncio.create_subprocess_exec(
                    argv[0],
                    *argv[1:],
                    executable=program,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    cwd=str(task.sandbox),
                    env=env,
                    start_new_session=True,
                )
        except OSError as exc:
            self._agent_update(
                task, "TASK_FAILED", message=f"Failed to launch task subprocess: {exc}"
            )
            return
        task.process = process
        task.pid = process.pid
        self._live_groups.add(process.pid)
        if self._reaper is not None:
            self._reaper.track(process.pid)
        if task.finalized:
            self._signal_group(process.pid, signal.SIGKILL)
            await process.wait()
            return
        self._agent_update(task, "TASK_RUNNING")
        if task.kill_requested:
            self._signal_kill(task)
        returncode = await process.wait()
        task.returncode = returncode
        if task.kill_timer is not None:
            task.kill_timer.cancel()
            task.kill_timer = None
        self._sweep(process.pid)
        if task.finalized:
            return
        message = f"Command {_describe_exit(returncode)}"
        if task.kill_requested:
            state = "TASK_KILLED"
        elif returncode == 0:
            state = "TASK_FINISHED"
        else:
            state = "TASK_FAILED"
        self._agent_update(task, state, message=message)
        if state != "TASK_FINISHED" and task.group_executor is not None:
            # The default executor kills the rest of the group when one task fails.
            for sibling in self._group_siblings(task):
                self._begin_kill(sibling, 0.0)

    def _group_siblings(self, task: Task) -> list[Task]:
        framework = self.frameworks_by_id.get(task.framework_id)
        if framework is None or task.group_executor is None:
            return []
        return [
            t
            for t in framework.tasks.values()
            if t is not task
            and t.group_executor is not None
            and t.executor_id == task.executor_id
            and t.agent_id == task.agent_id
            and not t.terminal
        ]

    def _signal_group(self, pgid: int | None, sig: int) -> None:
        """Signal a task's process group, only while it may still have processes."""
        if pgid is not None and pgid in self._live_groups:
            _killpg(pgid, sig)

    def _sweep(self, pgid: int) -> None:
        """Kill whatever is left in a task's process group (Mesos destroys the container)."""
        if pgid in self._live_groups:
            _killpg(pgid, signal.SIGKILL)
            self._live_groups.discard(pgid)
            if self._reaper is not None:
                self._reaper.untrack(pgid)

    def _finalize(self, task: Task) -> None:
        """Stop reporting on a task: no more updates, no retries."""
        task.finalized = True
        task.pending.clear()
        if task.retry_handle is not None:
            task.retry_handle.cancel()
            task.retry_handle = None

    def _shutdown_task(self, task: Task, grace: float) -> None:
        """Framework removed: SIGTERM the task's group, SIGKILL after ``grace``."""
        self._finalize(task)
        self._release(task)
        if task.process is not None and task.returncode is None and task.pid is not None:
            self._signal_group(task.pid, signal.SIGTERM)
            if self._loop is not None:
                if task.kill_timer is not None:
                    task.kill_timer.cancel()
                task.kill_timer = self._loop.call_later(
                    max(grace, 0.0), self._kill_group_if_alive, task
                )

    def _kill_group_if_alive(self, task: Task) -> None:
        self._signal_group(task.pid, signal.SIGKILL)

    def _begin_kill(self, task: Task, grace: float) -> None:
        """The command executor's kill: TASK_KILLING if wanted, SIGTERM, SIGKILL after grace."""
        if task.terminal or task.kill_requested:
            return
        task.kill_requested = True
        task.kill_grace = grace
        if task.process is not None and task.returncode is None:
            self._signal_kill(task)

    def _signal_kill(self, task: Task) -> None:
        framework = self.frameworks_by_id.get(task.framework_id)
        if framework is not None and "TASK_KILLING_STATE" in framework.capabilities:
            self._agent_update(task, "TASK_KILLING")
        if task.pid is None:
            return
        self._signal_group(task.pid, signal.SIGTERM)
        if self._loop is not None:
            task.kill_timer = self._loop.call_later(
                max(task.kill_grace, 0.0), self._kill_group_if_alive, task
            )

    def _kill(self, framework: Framework, kill: JSON) -> None:
        task_id = kill["task_id"]["value"]
        task = framework.tasks.get(task_id)
        if task is None:
            # Unknown to the master: Mesos answers with an explicit reconciliation.
            self._reconcile(
                framework,
                [
                    {
                        "task_id": kill["task_id"],
                        **({"agent_id": kill["agent_id"]} if "agent_id" in kill else {}),
                    }
                ],
            )
            return
        if "agent_id" in kill and kill["agent_id"]["value"] != task.agent_id:
            return
        agent = self.agents_by_id.get(task.agent_id)
        if agent is None or agent.state != "active":
            return
        grace = _duration_seconds(kill.get("kill_policy", {}).get("grace_period"))
        grace = task.kill_grace if grace is None else grace
        self._begin_kill(task, grace)
        for sibling in self._group_siblings(task):
            self._begin_kill(sibling, grace)

    def _shutdown_executor(self, framework: Framework, shutdown: JSON) -> None:
        executor_id = shutdown["executor_id"]["value"]
        agent_id = shutdown["agent_id"]["value"]
        for task in list(framework.tasks.values()):
            if task.executor_id == executor_id and task.agent_id == agent_id:
                self._begin_kill(task, 0.0)

    # ------------------------------------------------------- reconciliation

    def _reconcile(self, framework: Framework, tasks: list[JSON]) -> None:
        """``Master::reconcile`` (src/master/master.cpp), implicit and explicit."""
        if not tasks:
            for known in list(framework.tasks.values()):
                self._send_latest(framework, known)
            return
        aware = framework.partition_aware
        for item in tasks:
            task_id = item["task_id"]["value"]
            agent_id = item.get("agent_id", {}).get("value")
            task = framework.tasks.get(task_id)
            if task is not None:
                self._send_latest(framework, task)
                continue
            agent = self.agents_by_id.get(agent_id) if agent_id else None
            extra: JSON = {}
            if agent is not None and agent.state == "active":
                state, message = (
                    ("TASK_GONE" if aware else "TASK_LOST"),
                    ("Reconciliation: Task is unknown to the agent"),
                )
            elif agent is not None and agent.state == "unreachable":
                state, message = (
                    ("TASK_UNREACHABLE" if aware else "TASK_LOST"),
                    ("Reconciliation: Task is unreachable"),
                )
                if agent.unreachable_time is not None:
                    extra["unreachable_time"] = {"nanoseconds": int(agent.unreachable_time * 1e9)}
            elif agent is not None and agent.state == "gone":
                state, message = (
                    ("TASK_GONE_BY_OPERATOR" if aware else "TASK_LOST"),
                    ("Reconciliation: Task is gone"),
                )
            else:
                state, message = (
                    ("TASK_UNKNOWN" if aware else "TASK_LOST"),
                    ("Reconciliation: Task is unknown"),
                )
            self._master_update(
                framework, task_id, agent_id, state, message, "REASON_RECONCILIATION", extra=extra
            )

    def _send_latest(self, framework: Framework, task: Task) -> None:
        extra: JSON = {"executor_id": _id(task.executor_id)}
        for status in reversed(task.statuses):
            if "container_status" in status:
                extra["container_status"] = status["container_status"]
                break
        self._master_update(
            framework,
            task.task_id,
            task.agent_id,
            task.status_update_state or task.state,
            "Reconciliation: Latest task state",
            "REASON_RECONCILIATION",
            extra=extra,
        )

    def _reconcile_operations(self, framework: Framework, reconcile: JSON) -> None:
        # This master never has operations with feedback: every one asked about is unknown.
        for item in reconcile.get("operations", []):
            status: JSON = {
                "operation_id": item["operation_id"],
                "state": "OPERATION_UNKNOWN",
                "message": "Reconciliation: Operation is unknown",
            }
            if "agent_id" in item:
                status["agent_id"] = item["agent_id"]
            framework.send(
                {"type": "UPDATE_OPERATION_STATUS", "update_operation_status": {"status": status}}
            )

    # ---------------------------------------------------- fault injection

    def add_agent(
        self,
        *,
        hostname: str | None = None,
        cpus: float | None = None,
        mem: float | None = None,
        disk: float | None = None,
        gpus: int | None = None,
        ports: Ranges | str | None = None,
        attributes: Mapping[str, str | float] | None = None,
    ) -> str:
        """Register one more agent (defaults from the config); returns its agent ID."""
        config = self.config
        resources = Resources()
        for name, value in (
            ("cpus", config.cpus if cpus is None else cpus),
            ("mem", config.mem if mem is None else mem),
            ("disk", config.disk if disk is None else disk),
            ("gpus", config.gpus if gpus is None else gpus),
        ):
            if value:
                resources.scalars[name] = round(float(value) * _MILLI)
        if ports is None:
            port_ranges = parse_ranges(config.ports) if config.ports else []
        elif isinstance(ports, str):
            port_ranges = parse_ranges(ports)
        else:
            port_ranges = _normalize_ranges(ports)
        if port_ranges:
            resources.ranges["ports"] = port_ranges
        agent_id = f"{self.master_id}-S{self._agent_seq}"
        self._agent_seq += 1
        agent = Agent(
            id=agent_id,
            hostname=hostname or config.hostname,
            port=5051 + self._agent_seq - 1,
            total=resources,
            attributes=_parse_attributes(
                attributes if attributes is not None else config.attributes
            ),
        )
        self.agents_by_id[agent_id] = agent
        self._request_allocation()
        return agent_id

    def fail_next_launch(
        self, pattern: str, *, count: int = 1, message: str = "injected failure"
    ) -> None:
        """The next ``count`` tasks whose name matches the regular expression ``pattern``
        (``re.search``) are not run: their agent reports TASK_FAILED with reason
        REASON_CONTAINER_LAUNCH_FAILED, as when a container fails to launch."""
        self._launch_failures.append(_LaunchFailure(re.compile(pattern), count, message))

    def fail_next_call(
        self,
        call_type: str,
        *,
        count: int = 1,
        status: int = 503,
        message: str = "Master has not finished recovery",
    ) -> None:
        """Answer the next ``count`` otherwise valid calls of ``call_type`` with
        ``status`` and ``message``, and do nothing else with them.

        The master refuses calls it would otherwise take in this way: 503
        "Master has not finished recovery" while a newly elected master recovers
        its state (``Master::Http::scheduler``), 400 when a call carries a
        ``Mesos-Stream-Id`` that has just been replaced, 403 "Framework is not
        subscribed" after the connection broke. An offer named in a refused
        ACCEPT stays outstanding, as the master never saw the call.
        """
        if not 400 <= status <= 599:
            raise ValueError("status must be an HTTP error status (400-599)")
        if count < 1:
            raise ValueError("count must be at least 1")
        self._call_failures.append(_CallFailure(call_type, count, status, message))

    def kill_agent(self, agent_id: str | None = None, *, mode: str = "unreachable") -> str:
        """Lose an agent (the first active one if ``agent_id`` is None); returns its ID.

        Its tasks' process groups are killed and their frameworks get, from the
        master, without ``uuid``: ``mode="unreachable"`` (failed health checks)
        TASK_UNREACHABLE for PARTITION_AWARE frameworks, else TASK_LOST, with
        REASON_AGENT_REMOVED; ``mode="gone"`` (marked gone by the operator)
        TASK_GONE_BY_OPERATOR with REASON_AGENT_REMOVED_BY_OPERATOR for
        PARTITION_AWARE frameworks, else TASK_LOST with REASON_AGENT_REMOVED.
        Its offers are rescinded and every subscribed framework gets a FAILURE
        event with the ``agent_id``.
        """
        if mode not in ("unreachable", "gone"):
            raise ValueError("mode must be 'unreachable' or 'gone'")
        if agent_id is None:
            agent_id = next((a.id for a in self.agents_by_id.values() if a.state == "active"), None)
            if agent_id is None:
                raise ValueError("no active agent left")
        agent = self.agents_by_id[agent_id]
        if agent.state != "active":
            raise ValueError(f"agent {agent_id} is already {agent.state}")
        agent.state = mode
        agent.unreachable_time = _now()
        for offer in [o for o in self.offers_by_id.values() if o.agent_id == agent_id]:
            self._rescind(offer)
        for key in [k for k in self._executors if k[1] == agent_id]:
            del self._executors[key]
        for framework in list(self.frameworks_by_id.values()):
            aware = framework.partition_aware
            for task in [t for t in framework.tasks.values() if t.agent_id == agent_id]:
                was_terminal = task.terminal
                self._finalize(task)
                if task.pid is not None:
                    self._signal_group(task.pid, signal.SIGKILL)
                if was_terminal:
                    framework.completed_tasks[task.task_id] = framework.tasks.pop(task.task_id)
                    continue
                extra: JSON = {"executor_id": _id(task.executor_id)}
                if mode == "unreachable":
                    state = "TASK_UNREACHABLE" if aware else "TASK_LOST"
                    reason = "REASON_AGENT_REMOVED"
                    message = f"Agent {agent.hostname} is unreachable: health check timed out"
                    extra["unreachable_time"] = {"nanoseconds": int(agent.unreachable_time * 1e9)}
                else:
                    state = "TASK_GONE_BY_OPERATOR" if aware else "TASK_LOST"
                    reason = "REASON_AGENT_REMOVED_BY_OPERATOR" if aware else "REASON_AGENT_REMOVED"
                    message = f"Agent {agent.hostname} has been marked gone"
                status = self._master_update(
                    framework, task.task_id, agent_id, state, message, reason, extra=extra
                )
                task.state = state
                task.status_update_state = state
                task.statuses.append(status)
                task.ended_at = _now()
                task.released = True
                if mode == "unreachable":
                    framework.unreachable_tasks[task.task_id] = framework.tasks.pop(task.task_id)
                else:
                    framework.completed_tasks[task.task_id] = framework.tasks.pop(task.task_id)
            framework.send({"type": "FAILURE", "failure": {"agent_id": _id(agent_id)}})
        agent.used = Resources()
        return agent_id

    def drop_subscription(self, framework_id: str | None = None) -> list[str]:
        """Break the subscription connection(s) as a network failure would (all if None).

        The master then treats each framework as disconnected (failover timeout).
        Returns the framework IDs whose connection was dropped.
        """
        dropped: list[str] = []
        for framework in list(self.frameworks_by_id.values()):
            if framework_id is not None and framework.id != framework_id:
                continue
            if framework.subscription is not None:
                framework.subscription.close(abort=True)
                dropped.append(framework.id)
        return dropped

    def rescind_offer(self, offer_id: str | None = None) -> list[str]:
        """Rescind one outstanding offer (every one if None): RESCIND events. Returns the IDs."""
        offers = [
            o for o in list(self.offers_by_id.values()) if offer_id is None or o.id == offer_id
        ]
        if offer_id is not None and not offers:
            raise KeyError(f"no outstanding offer {offer_id}")
        for offer in offers:
            self._rescind(offer)
        return [o.id for o in offers]

    def set_leader(
        self,
        leader: bool,
        *,
        leader_address: str | None = None,
        location: str | None = None,
    ) -> None:
        """Make this master the leader, or a non-leader answering 307.

        A non-leader answers ``/api/v1/scheduler`` (and ``/redirect``) with
        ``307 Temporary Redirect`` and ``Location: //LEADER_ADDRESS/api/v1/scheduler``
        (protocol-relative, as Mesos sends it), or exactly ``location`` if given;
        with neither it answers 503 "No leader elected". Subscriptions stay as they are.
        """
        self.config.leader = leader
        self.config.leader_address = leader_address
        self.config.redirect_location = location
        if leader:
            self._request_allocation()

    def helper_pids(self) -> list[int]:
        """Processes of the master's own (its reaper), not of any task."""
        reaper = self._reaper
        process = reaper._process if reaper is not None else None
        return [process.pid] if process is not None else []

    def clear_calls(self) -> None:
        self.received_calls.clear()

    # --------------------------------------------------------- inspection

    def frameworks(self, *, include_completed: bool = False) -> list[JSON]:
        found = list(self.frameworks_by_id.values())
        if include_completed:
            found += list(self.completed_frameworks.values())
        return [f.snapshot() for f in found]

    def framework(self, framework_id: str) -> JSON:
        framework = self.frameworks_by_id.get(framework_id) or self.completed_frameworks.get(
            framework_id
        )
        if framework is None:
            raise KeyError(framework_id)
        snapshot = framework.snapshot()
        snapshot["removed"] = framework_id in self.completed_frameworks
        return snapshot

    def tasks(self, framework_id: str | None = None) -> list[JSON]:
        """Every task this master launched (known, unreachable and completed)."""
        return [
            task.snapshot()
            for framework in self._all_frameworks()
            if framework_id is None or framework.id == framework_id
            for task in self._framework_tasks(framework)
        ]

    def task(self, task_id: str, framework_id: str | None = None) -> JSON:
        task = self._find_task(task_id, framework_id)
        if task is None:
            raise KeyError(task_id)
        return task.snapshot()

    def calls(self, call_type: str | None = None) -> list[JSON]:
        """Requests to /api/v1/scheduler in arrival order: type, body, status, stream ID."""
        return [c for c in self.received_calls if call_type is None or c["type"] == call_type]

    def offers(self) -> list[JSON]:
        """The outstanding offers, as they were sent."""
        return [self._offer_json(o) for o in self.offers_by_id.values()]

    def agents(self) -> list[JSON]:
        out: list[JSON] = []
        for agent in self.agents_by_id.values():
            offered = Resources()
            for offer in self.offers_by_id.values():
                if offer.agent_id == agent.id:
                    offered = offered + offer.resources
            out.append(
                {
                    "id": agent.id,
                    "hostname": agent.hostname,
                    "port": agent.port,
                    "state": agent.state,
                    "resources": agent.total.summary(),
                    "used_resources": agent.used.summary(),
                    "offered_resources": offered.summary(),
                    "attributes": agent.attributes,
                }
            )
        return out

    def events(self, framework_id: str | None = None) -> list[JSON]:
        """Events sent to frameworks (HEARTBEATs left out), oldest first."""
        return [
            event
            for framework in self._all_frameworks()
            if framework_id is None or framework.id == framework_id
            for event in framework.events
        ]

    def state(self) -> JSON:
        return {
            "master_id": self.master_id,
            "url": self.url,
            "leader": self.config.leader,
            "frameworks": self.frameworks(include_completed=True),
            "tasks": self.tasks(),
            "offers": self.offers(),
            "agents": self.agents(),
        }

    async def wait_for(
        self, predicate: Callable[[], T | None], timeout: float = 10.0, interval: float = 0.02
    ) -> T:
        """Poll ``predicate`` on the loop until it returns something truthy; return it."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout}s")
            await asyncio.sleep(interval)

    async def wait_task_state(self, task_id: str, *states: str, timeout: float = 10.0) -> JSON:
        """Wait until the task's latest state is one of ``states`` (any terminal one if none)."""
        wanted = set(states) or set(TERMINAL_STATES)

        def check() -> JSON | None:
            task = self._find_task(task_id)
            return task.snapshot() if task is not None and task.state in wanted else None

        return await self.wait_for(check, timeout)

    def mesos_state(self) -> JSON:
        """A small subset of the master's ``/state`` JSON."""
        info = self.master_info

        def task_json(task: Task) -> JSON:
            data: JSON = {
                "id": task.task_id,
                "name": task.name,
                "framework_id": task.framework_id,
                "executor_id": "" if task.group_executor is None else task.executor_id,
                "slave_id": task.agent_id,
                "state": task.state,
                "role": task.role,
                "resources": task.resources.summary(),
                "statuses": [
                    {k: v for k, v in s.items() if k in ("state", "timestamp", "container_status")}
                    for s in task.statuses
                ],
            }
            if "container" in task.info:
                data["container"] = task.info["container"]
            return data

        def framework_json(framework: Framework) -> JSON:
            used = Resources()
            for task in framework.tasks.values():
                if not task.released:
                    used = used + task.resources
            offered = Resources()
            for offer in self._offers_of(framework):
                offered = offered + offer.resources
            data: JSON = {
                "id": framework.id,
                "name": framework.info.get("name"),
                "user": framework.info.get("user"),
                "roles": framework.roles,
                "active": framework.connected,
                "connected": framework.connected,
                "recovered": False,
                "failover_timeout": framework.failover_timeout,
                "capabilities": sorted(framework.capabilities),
                "hostname": framework.info.get("hostname", ""),
                "webui_url": framework.info.get("webui_url", ""),
                "registered_time": framework.registered_time,
                "used_resources": used.summary(),
                "offered_resources": offered.summary(),
                "tasks": [task_json(t) for t in framework.tasks.values()],
                "unreachable_tasks": [task_json(t) for t in framework.unreachable_tasks.values()],
                "completed_tasks": [task_json(t) for t in framework.completed_tasks.values()],
                "offers": [self._offer_json(o) for o in self._offers_of(framework)],
            }
            if not framework.multi_role:
                data["role"] = framework.info.get("role", "*")
            if framework.unregistered_time is not None:
                data["unregistered_time"] = framework.unregistered_time
            return data

        state: JSON = {
            "version": MESOS_VERSION,
            "id": self.master_id,
            "pid": info.get("pid"),
            "hostname": info.get("hostname"),
            "start_time": self._started_at,
            "activated_slaves": sum(a.state == "active" for a in self.agents_by_id.values()),
            "slaves": [
                {
                    "id": agent["id"],
                    "hostname": agent["hostname"],
                    "port": agent["port"],
                    "pid": f"slave(1)@{_resolve(agent['hostname'], self.config.ip)}:{agent['port']}",
                    "active": agent["state"] == "active",
                    "resources": agent["resources"],
                    "used_resources": agent["used_resources"],
                    "offered_resources": agent["offered_resources"],
                    "attributes": {
                        a["name"]: a.get("text", {}).get("value", a.get("scalar", {}).get("value"))
                        for a in agent["attributes"]
                    },
                }
                for agent in self.agents()
            ],
            "frameworks": [framework_json(f) for f in self.frameworks_by_id.values()],
            "completed_frameworks": [framework_json(f) for f in self.completed_frameworks.values()],
            "unregistered_frameworks": [],
        }
        if self.config.leader:
            state["leader"] = info.get("pid")
            state["leader_info"] = info
            state["elected_time"] = self._started_at
        elif self.config.leader_address:
            state["leader"] = f"master@{self.config.leader_address}"
        return state

    # ---------------------------------------------------- control endpoints

    def _control_routes(self, app: web.Application) -> None:
        """The ``/__test__/`` control API (JSON in, JSON out; 404/400 on bad input).

        ``GET  /__test__/state``            everything below in one object
        ``GET  /__test__/frameworks``       ``?completed=1`` adds removed ones
        ``GET  /__test__/frameworks/{id}``
        ``GET  /__test__/tasks``            ``?framework_id=``
        ``GET  /__test__/tasks/{id}``
        ``GET  /__test__/calls``            ``?type=DECLINE``
        ``GET  /__test__/offers``
        ``GET  /__test__/agents``
        ``GET  /__test__/events``           ``?framework_id=``
        ``POST /__test__/calls/clear``
        ``POST /__test__/fail_next_launch`` ``{"pattern": "...", "count": 1, "message": "..."}``
        ``POST /__test__/fail_next_call``   ``{"type": "ACCEPT", "count": 1, "status": 503, "message": "..."}``
        ``POST /__test__/kill_agent``       ``{"agent_id": "...", "mode": "unreachable"|"gone"}``
        ``POST /__test__/add_agent``        ``{"cpus":..,"mem":..,"disk":..,"gpus":..,"ports":"a-b"}``
        ``POST /__test__/drop_subscription`` ``{"framework_id": "..."}``
        ``POST /__test__/rescind_offer``    ``{"offer_id": "..."}``
        ``POST /__test__/leader``           ``{"leader": false, "leader_address": "h:p", "location": ".."}``
        """

        def handler(
            fn: Callable[[web.Request, JSON], Any],
        ) -> Callable[[web.Request], Awaitable[web.Response]]:
            async def handle(request: web.Request) -> web.Response:
                body: JSON = {}
                if request.method == "POST" and request.can_read_body:
                    try:
                        loaded = await request.json()
                    except ValueError:
                        return web.json_response({"error": "body is not JSON"}, status=400)
                    if loaded is not None and not isinstance(loaded, dict):
                        return web.json_response({"error": "body is not an object"}, status=400)
                    body = loaded or {}
                try:
                    result = fn(request, body)
                except KeyError as exc:
                    return web.json_response({"error": f"not found: {exc}"}, status=404)
                except (ValueError, TypeError, re.error) as exc:
                    return web.json_response({"error": str(exc)}, status=400)
                return web.json_response({"result": result})

            return handle

        q = "framework_id"
        routes: list[tuple[str, str, Callable[[web.Request, JSON], Any]]] = [
            ("GET", "/__test__/state", lambda r, b: self.state()),
            (
                "GET",
                "/__test__/frameworks",
                lambda r, b: self.frameworks(include_completed=r.query.get("completed") == "1"),
            ),
            ("GET", "/__test__/frameworks/{id}", lambda r, b: self.framework(r.match_info["id"])),
            ("GET", "/__test__/tasks", lambda r, b: self.tasks(r.query.get(q))),
            ("GET", "/__test__/tasks/{id}", lambda r, b: self.task(r.match_info["id"])),
            ("GET", "/__test__/calls", lambda r, b: self.calls(r.query.get("type"))),
            ("GET", "/__test__/offers", lambda r, b: self.offers()),
            ("GET", "/__test__/agents", lambda r, b: self.agents()),
            ("GET", "/__test__/events", lambda r, b: self.events(r.query.get(q))),
            ("POST", "/__test__/calls/clear", lambda r, b: self.clear_calls()),
            (
                "POST",
                "/__test__/fail_next_launch",
                lambda r, b: self.fail_next_launch(
                    str(b["pattern"]),
                    count=int(b.get("count", 1)),
                    message=str(b.get("message", "injected failure")),
                ),
            ),
            (
                "POST",
                "/__test__/fail_next_call",
                lambda r, b: self.fail_next_call(
                    str(b["type"]),
                    count=int(b.get("count", 1)),
                    status=int(b.get("status", 503)),
                    message=str(b.get("message", "Master has not finished recovery")),
                ),
            ),
            (
                "POST",
                "/__test__/kill_agent",
                lambda r, b: self.kill_agent(
                    b.get("agent_id"), mode=str(b.get("mode", "unreachable"))
                ),
            ),
            (
                "POST",
                "/__test__/add_agent",
                lambda r, b: self.add_agent(
                    hostname=b.get("hostname"),
                    cpus=b.get("cpus"),
                    mem=b.get("mem"),
                    disk=b.get("disk"),
                    gpus=b.get("gpus"),
                    ports=b.get("ports"),
                    attributes=b.get("attributes"),
                ),
            ),
            ("POST", "/__test__/drop_subscription", lambda r, b: self.drop_subscription(b.get(q))),
            ("POST", "/__test__/rescind_offer", lambda r, b: self.rescind_offer(b.get("offer_id"))),
            (
                "POST",
                "/__test__/leader",
                lambda r, b: self.set_leader(
                    bool(b.get("leader", True)),
                    leader_address=b.get("leader_address"),
                    location=b.get("location"),
                ),
            ),
        ]
        for method, path, fn in routes:
            app.router.add_route(method, path, handler(fn))


class ThreadedTestMaster:
    """A :class:`TestMaster` on its own event loop in a background thread.

    ``with ThreadedTestMaster(agents=2) as master:`` starts it on a free port of
    127.0.0.1 (keywords as for :class:`MasterConfig`) and stops it on exit,
    killing every task it started. Its methods mirror TestMaster's and are safe
    to call from any thread; :meth:`call` runs any function of the TestMaster on
    its loop.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, config: MasterConfig | None = None, **overrides: Any) -> None:
        self.config = dataclasses.replace(config or MasterConfig(), **overrides)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._master: TestMaster | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def __enter__(self) -> ThreadedTestMaster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> ThreadedTestMaster:
        if self._thread is not None:
            raise RuntimeError("already started")
        self._thread = threading.Thread(target=self._main, name="tfmesos-test-master", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the test master did not start")
        if self._error is not None:
            raise RuntimeError("the test master failed to start") from self._error
        import atexit

        atexit.register(self.stop)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop serving and kill every task; safe to call twice."""
        thread, loop, event = self._thread, self._loop, self._stop_event
        if thread is None or loop is None or event is None:
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(event.set)
        thread.join(timeout)
        self._thread = None
        import atexit

        atexit.unregister(self.stop)

    def _main(self) -> None:
        asyncio.run(self._amain())

    async def _amain(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        master = TestMaster(self.config)
        try:
            await master.start()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            with contextlib.suppress(Exception):
                await master.stop()
            return
        self._master = master
        self._ready.set()
        try:
            await self._stop_event.wait()
        finally:
            await master.stop()

    def call(self, fn: Callable[[TestMaster], T], timeout: float = 30.0) -> T:
        """Run ``fn(master)`` on the master's loop and return its result."""
        loop, master = self._loop, self._master
        if loop is None or master is None:
            raise RuntimeError("the test master is not running")

        async def run() -> T:
            return fn(master)

        return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout)

    @property
    def master(self) -> TestMaster:
        """The TestMaster itself: touch its state only through :meth:`call`."""
        if self._master is None:
            raise RuntimeError("the test master is not running")
        return self._master

    @property
    def url(self) -> str:
        return self.master.url

    @property
    def scheduler_url(self) -> str:
        return self.master.scheduler_url

    @property
    def port(self) -> int:
        return self.master.port

    @property
    def work_dir(self) -> Path:
        return self.master.work_dir

    def fail_next_launch(
        self, pattern: str, *, count: int = 1, message: str = "injected failure"
    ) -> None:
        self.call(lambda m: m.fail_next_launch(pattern, count=count, message=message))

    def fail_next_call(
        self,
        call_type: str,
        *,
        count: int = 1,
        status: int = 503,
        message: str = "Master has not finished recovery",
    ) -> None:
        self.call(
            lambda m: m.fail_next_call(call_type, count=count, status=status, message=message)
        )

    def kill_agent(self, agent_id: str | None = None, *, mode: str = "unreachable") -> str:
        return self.call(lambda m: m.kill_agent(agent_id, mode=mode))

    def add_agent(self, **kwargs: Any) -> str:
        return self.call(lambda m: m.add_agent(**kwargs))

    def drop_subscription(self, framework_id: str | None = None) -> list[str]:
        return self.call(lambda m: m.drop_subscription(framework_id))

    def rescind_offer(self, offer_id: str | None = None) -> list[str]:
        return self.call(lambda m: m.rescind_offer(offer_id))

    def set_leader(
        self, leader: bool, *, leader_address: str | None = None, location: str | None = None
    ) -> None:
        self.call(lambda m: m.set_leader(leader, leader_address=leader_address, location=location))

    def clear_calls(self) -> None:
        self.call(lambda m: m.clear_calls())

    def frameworks(self, *, include_completed: bool = False) -> list[JSON]:
        return self.call(lambda m: m.frameworks(include_completed=include_completed))

    def framework(self, framework_id: str) -> JSON:
        return self.call(lambda m: m.framework(framework_id))

    def tasks(self, framework_id: str | None = None) -> list[JSON]:
        return self.call(lambda m: m.tasks(framework_id))

    def task(self, task_id: str, framework_id: str | None = None) -> JSON:
        return self.call(lambda m: m.task(task_id, framework_id))

    def calls(self, call_type: str | None = None) -> list[JSON]:
        return self.call(lambda m: m.calls(call_type))

    def offers(self) -> list[JSON]:
        return self.call(lambda m: m.offers())

    def agents(self) -> list[JSON]:
        return self.call(lambda m: m.agents())

    def events(self, framework_id: str | None = None) -> list[JSON]:
        return self.call(lambda m: m.events(framework_id))

    def state(self) -> JSON:
        return self.call(lambda m: m.state())

    def wait_for(
        self,
        predicate: Callable[[TestMaster], T | None],
        timeout: float = 10.0,
        interval: float = 0.05,
    ) -> T:
        """Poll ``predicate(master)`` (run on the loop) until truthy; return its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.call(predicate)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout}s")
            time.sleep(interval)

    def wait_task_state(self, task_id: str, *states: str, timeout: float = 10.0) -> JSON:
        wanted = set(states) or set(TERMINAL_STATES)

        def check(master: TestMaster) -> JSON | None:
            task = master._find_task(task_id)
            return task.snapshot() if task is not None and task.state in wanted else None

        return self.wait_for(check, timeout)


# --------------------------------------------------------------------------- #
# Command line.
# --------------------------------------------------------------------------- #


def _parse_attribute_flag(text: str) -> dict[str, str | float]:
    """Mesos's ``--attributes`` form: ``rack:r1;zone:a;weight:2``."""
    out: dict[str, str | float] = {}
    for item in text.split(";"):
        if not item.strip():
            continue
        name, sep, value = item.partition(":")
        if not sep:
            raise argparse.ArgumentTypeError(f"attribute {item!r} is not name:value")
        out[name.strip()] = value.strip()
    return out


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tfmesos.testing.master",
        description="A test double of a Mesos master (v1 scheduler HTTP API) that runs "
        "accepted tasks as local processes.",
    )
    defaults = MasterConfig()
    parser.add_argument("--ip", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=5050, help="port to listen on (0: any)")
    parser.add_argument(
        "--hostname", default=None, help="hostname advertised for master and agents"
    )
    parser.add_argument("--agents", type=int, default=defaults.agents)
    parser.add_argument("--cpus", type=float, default=defaults.cpus)
    parser.add_argument("--mem", type=float, default=defaults.mem, help="MB per agent")
    parser.add_argument("--disk", type=float, default=defaults.disk, help="MB per agent (0: none)")
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument(
        "--gpu-agents", type=int, default=None, help="how many agents have the GPUs"
    )
    parser.add_argument("--ports", default=defaults.ports, help="e.g. 31000-32000")
    parser.add_argument(
        "--no-split-ports",
        action="store_true",
        help="give every agent the whole --ports range (by default agents on one host get disjoint slices)",
    )
    parser.add_argument(
        "--attributes", type=_parse_attribute_flag, default=None, help="rack:r1;zone:a"
    )
    parser.add_argument("--heartbeat-interval", type=float, default=defaults.heartbeat_interval)
    parser.add_argument("--allocation-interval", type=float, default=defaults.allocation_interval)
    parser.add_argument("--offer-timeout", type=float, default=None)
    parser.add_argument(
        "--update-retry-interval", type=float, default=defaults.update_retry_interval
    )
    parser.add_argument("--no-filter-gpu-resources", action="store_true")
    parser.add_argument("--work-dir", default=None, help="sandboxes go here (default: a temp dir)")
    parser.add_argument(
        "--inherit-env",
        action="store_true",
        help="tasks get this process's environment (default: PATH only, plus MESOS_*)",
    )
    parser.add_argument("--not-leader", action="store_true", help="answer 307 to scheduler calls")
    parser.add_argument(
        "--leader-address", default=None, help="host:port of the leader (with --not-leader)"
    )
    parser.add_argument("--redirect-location", default=None, help="exact Location for the 307")
    parser.add_argument("--log-level", default="INFO")
    return parser


async def _serve(config: MasterConfig) -> None:
    master = TestMaster(config)
    await master.start()
    print(
        f"tfmesos test master {master.master_id} listening on {master.url} "
        f"({config.agents} agents, work dir {master.work_dir})",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await master.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    config = MasterConfig(
        agents=args.agents,
        cpus=args.cpus,
        mem=args.mem,
        disk=args.disk,
        gpus=args.gpus,
        gpu_agents=args.gpu_agents,
        ports=args.ports,
        split_ports=not args.no_split_ports,
        hostname=args.hostname or args.ip,
        attributes=args.attributes,
        ip=args.ip,
        port=args.port,
        heartbeat_interval=args.heartbeat_interval,
        allocation_interval=args.allocation_interval,
        offer_timeout=args.offer_timeout,
        update_retry_interval=args.update_retry_interval,
        filter_gpu_resources=not args.no_filter_gpu_resources,
        work_dir=args.work_dir,
        inherit_env=args.inherit_env,
        leader=not args.not_leader,
        leader_address=args.leader_address,
        redirect_location=args.redirect_location,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
