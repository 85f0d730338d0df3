"""Resources as Mesos compares them: scalars in thousandths, and ranges.

Models ``Value.Scalar`` and ``Value.Ranges`` of ``include/mesos/v1/mesos.proto``
(fixed point with three decimals; ranges by containment), ``Resources`` and its
``stringify`` (``src/v1/resources.cpp``), the allocator's default
``--min_allocatable_resources`` (``cpus:0.01|mem:32``) and the agent's
``--attributes`` (``src/common/attributes.cpp``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence

from tfmesos.testing.master.schema import JSON

# Scalars are fixed point with three decimals (mesos.proto `Value.Scalar`).
MILLI = 1000
# The allocator's default --min_allocatable_resources: "cpus:0.01|mem:32".
_MIN_CPUS_MILLI = 10
_MIN_MEM_MILLI = 32 * MILLI

Ranges = list[tuple[int, int]]
AGENT_SCALAR_ORDER = ("gpus", "cpus", "mem", "disk")
"""The scalars an agent has, in the order it lists them (see :meth:`Resources.names`)."""


def normalize_ranges(ranges: Iterable[tuple[int, int]]) -> Ranges:
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
    value = milli / MILLI
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

    def __add__(self, other: Resources) -> Resources:
        out = self.copy()
        for name, value in other.scalars.items():
            out.scalars[name] = out.scalars.get(name, 0) + value
        for name, ranges in other.ranges.items():
            out.ranges[name] = normalize_ranges(out.ranges.get(name, []) + ranges)
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

    def names(self, order: Sequence[str] = ()) -> list[str]:
        """The names here, in the order Mesos keeps them: ``order``'s first, then
        as an agent offers them: ports, then GPUs, cpus, mem and disk, then
        others by name (``HierarchicalAllocatorProcess::generateOffers``)."""
        present = [n for n, v in self.scalars.items() if v > 0]
        present += [n for n, r in self.ranges.items() if r]
        agent_scalars = {name: index for index, name in enumerate(AGENT_SCALAR_ORDER)}

        def offered(name: str) -> tuple[int, int, str]:
            if name in self.ranges:
                return (0, 0, name)
            return (1, agent_scalars.get(name, len(agent_scalars)), name)

        first = [name for name in dict.fromkeys(order) if name in present]
        return first + sorted((n for n in present if n not in first), key=offered)

    def to_json(self, allocation_role: str | None) -> list[JSON]:
        """The ``repeated Resource`` an offer carries (role "*": unreserved)."""
        out: list[JSON] = []
        for name in self.names():
            resource: JSON = {"name": name}
            if name in self.ranges:
                resource["type"] = "RANGES"
                resource["ranges"] = {
                    "range": [{"begin": b, "end": e} for b, e in self.ranges[name]]
                }
            else:
                resource["type"] = "SCALAR"
                resource["scalar"] = {"value": self.scalars[name] / MILLI}
            resource["role"] = "*"
            if allocation_role is not None:
                resource["allocation_info"] = {"role": allocation_role}
            out.append(resource)
        return out

    def describe(self, allocation_role: str | None = None, order: Sequence[str] = ()) -> str:
        """Like Mesos's ``stringify(Resources)``: ``cpus(allocated: r):1; ports(...):[1-2]``,
        in the order of :meth:`names`."""
        tag = f"(allocated: {allocation_role})" if allocation_role is not None else ""
        parts = [
            f"{name}{tag}:"
            + (
                _format_ranges(self.ranges[name])
                if name in self.ranges
                else _format_scalar(self.scalars[name])
            )
            for name in self.names(order)
        ]
        return "; ".join(parts) if parts else "{}"

    def summary(self) -> JSON:
        """Like the resource maps of Mesos's ``/state``: ``{"cpus": 1.0, "ports": "[...]"}``."""
        out: JSON = {name: value / MILLI for name, value in sorted(self.scalars.items())}
        for name, ranges in sorted(self.ranges.items()):
            if ranges:
                out[name] = _format_ranges(ranges)
        return out


def allocatable(resources: Resources) -> bool:
    """The default ``--min_allocatable_resources`` of the allocator: cpus:0.01 | mem:32."""
    return (
        resources.scalars.get("cpus", 0) >= _MIN_CPUS_MILLI
        or resources.scalars.get("mem", 0) >= _MIN_MEM_MILLI
    )


@dataclasses.dataclass
class ParsedResources:
    resources: Resources
    error: str | None = None
    # Resources of a kind this master never offers (reserved, revocable, SET,
    # persistent, from a provider, or allocated to another role): never contained.
    foreign: list[str] = dataclasses.field(default_factory=list)
    allocation_roles: set[str] = dataclasses.field(default_factory=set)


def parse_resources(items: Sequence[JSON], offer_role: str) -> ParsedResources:
    """Read a task's ``repeated Resource`` after the master injected the offer's role."""
    parsed = ParsedResources(Resources())
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
            amount = round(value * MILLI)
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
            parsed.resources.ranges[name] = normalize_ranges(
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
    return normalize_ranges(ranges)


def split_ranges(ranges: Ranges, parts: int) -> list[Ranges]:
    """Cut ranges into ``parts`` disjoint slices of (nearly) equal size."""
    ports = [p for b, e in ranges for p in range(b, e + 1)]
    size, extra = divmod(len(ports), parts)
    out: list[Ranges] = []
    start = 0
    for index in range(parts):
        count = size + (1 if index < extra else 0)
        chunk = ports[start : start + count]
        start += count
        out.append(normalize_ranges((p, p) for p in chunk))
    return out


def parse_attributes(attributes: Mapping[str, str | float] | None) -> list[JSON]:
    """Agent attributes: numbers become SCALAR, ``[a-b]`` RANGES, anything else TEXT."""
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
