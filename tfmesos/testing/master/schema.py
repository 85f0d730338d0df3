"""Reading scheduler calls as the Mesos master reads them, and writing events.

Models ``3rdparty/stout/include/stout/protobuf.hpp`` (JSON to protobuf: proto
field names, enums as strings, ``bytes`` as base64, unknown fields dropped),
the messages of ``include/mesos/v1/scheduler/scheduler.proto`` and
``include/mesos/v1/mesos.proto`` a scheduler sends,
``validation::scheduler::call::validate`` and ``common::validation::validateID``
(``src/master/validation.cpp``) and RecordIO (``docs/recordio.md``).
``roles::validate`` (``src/common/roles.cpp``) is the double's own, in
:mod:`tfmesos.testing.master.roles`.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Mapping
from typing import Any

JSON = dict[str, Any]

NAME_MAX = 255


def recordio_encode(event: Mapping[str, Any]) -> bytes:
    """One RecordIO record (``docs/recordio.md``): decimal length, LF, the JSON bytes."""
    data = json.dumps(event, separators=(",", ":")).encode("utf-8")
    return str(len(data)).encode("ascii") + b"\n" + data


def duration_seconds(duration: JSON | None) -> float | None:
    """A ``DurationInfo`` in seconds (None when absent)."""
    if not duration or "nanoseconds" not in duration:
        return None
    return float(duration["nanoseconds"]) / 1e9


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


_ESCAPE = re.compile(r"\\\\|\\u([0-9a-fA-F]{4})")


def _lone_surrogate(text: str) -> int | None:
    """Where picojson stops on a ``\\u`` escape of half a surrogate pair (a
    low one, or a high one not followed by a low one), or None."""
    high_end: int | None = None
    for match in _ESCAPE.finditer(text):
        if high_end is not None and match.start() != high_end:
            return high_end  # no escape after the high half: picojson puts it back
        if match.group(1) is None:  # an escaped backslash: picojson took "\\" and not "u"
            if high_end is not None:
                return high_end + 1
            continue
        code = int(match.group(1), 16)
        if high_end is not None:
            if not 0xDC00 <= code <= 0xDFFF:
                return match.end()  # picojson read the second half's four digits
            high_end = None
        elif 0xD800 <= code <= 0xDBFF:
            high_end = match.end()
        elif 0xDC00 <= code <= 0xDFFF:
            return match.end()
    return high_end


def parse_call(body: bytes) -> JSON:
    """Parse a JSON ``scheduler::Call`` as the master does, or raise :class:`ProtocolError`.

    The result is the call as the master understands it: unknown fields and
    unknown values of optional enums dropped, numbers given as strings read as
    numbers, a lone value for a repeated field taken as a list of one.
    """
    try:
        text = body.decode("utf-8")
        value = json.loads(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(400, f"Failed to parse body into JSON: {exc}") from None
    lone = _lone_surrogate(text)
    if lone is not None:
        # Python's json takes "\udcff" (what json.dumps writes for a byte
        # that is not UTF-8, read with surrogateescape); Mesos's picojson
        # refuses it (_parse_codepoint), and says the rest of the line
        # (picojson::_parse, 3rdparty/picojson-1.3.0).
        rest = "".join(c for c in text[lone:].partition("\n")[0] if c >= " ")
        raise ProtocolError(
            400, f"Failed to parse body into JSON: syntax error at line 1 near: {rest}"
        )
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


def validate_call(call: JSON) -> None:
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
        # stout's UUID::fromBytes: 16 bytes whose version nibble boost knows
        # (1 to 5); anything else is one message, whatever is wrong with it.
        if len(raw) != 16 or not 1 <= raw[6] >> 4 <= 5:
            raise fail("Not a valid UUID")
        if kind == "ACKNOWLEDGE_OPERATION_STATUS" and "agent_id" not in call[payload or ""]:
            raise fail("Expecting 'agent_id' to be present")
    if (
        kind == "UPDATE_FRAMEWORK"
        and call["update_framework"]["framework_info"].get("id") != call["framework_id"]
    ):
        raise fail("'framework_id' differs from 'update_framework.framework_info.id'")


def validate_id(value: str) -> str | None:
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
