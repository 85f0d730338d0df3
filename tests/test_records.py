"""tfmesos.records: a record behaves as the dataclass it reads as, for what
its users do with one (make, compare, hash, print, match, and not change a
frozen one), each checked against a real dataclass of the same fields."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest

from tfmesos.records import record

pytestmark = pytest.mark.unit


@record(frozen=True)
class FrozenRecord:
    name: str
    code: int = 0
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class FrozenDataclass:
    name: str
    code: int = 0
    tags: tuple[str, ...] = ()


@record
class MutableRecord:
    name: str
    seen: int = 0
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.doubled = self.seen * 2


@dataclass
class MutableDataclass:
    name: str
    seen: int = 0
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.doubled = self.seen * 2


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [(("a",), {}), (("a", 3), {}), (("a",), {"tags": ("x",)}), ((), {"name": "b", "code": 2})],
)
def test_a_frozen_record_is_made_printed_compared_and_hashed_as_a_dataclass(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    made, reference = FrozenRecord(*args, **kwargs), FrozenDataclass(*args, **kwargs)
    assert repr(made) == repr(reference).replace("FrozenDataclass", "FrozenRecord")
    assert made == FrozenRecord(*args, **kwargs)
    assert made != FrozenRecord("other")
    assert made != reference  # type: ignore[comparison-overlap]  # another class
    assert hash(made) == hash(FrozenRecord(*args, **kwargs))
    assert FrozenRecord.__match_args__ == FrozenDataclass.__match_args__


def test_a_frozen_record_cannot_be_changed() -> None:
    made = FrozenRecord("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.code = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del made.name


def test_a_mutable_record_runs_its_post_init_and_is_not_hashable() -> None:
    made, reference = MutableRecord("a", 2), MutableDataclass("a", 2)
    assert made.doubled == reference.doubled == 4
    made.seen = 5
    assert made == MutableRecord("a", 5)
    assert MutableRecord("a").notes is not MutableRecord("a").notes  # a new list each
    assert MutableRecord.__hash__ is None
    assert MutableDataclass.__hash__ is None


@pytest.mark.parametrize(
    ("args", "kwargs", "says"),
    [
        ((), {}, "missing 1 required positional argument: 'name'"),
        (("a", 1, (), 9), {}, "positional arguments but 5 were given"),
        (("a",), {"nope": 1}, "got an unexpected keyword argument 'nope'"),
        (("a",), {"name": "b"}, "got multiple values for argument 'name'"),
    ],
)
def test_bad_arguments_are_refused_as_a_dataclass_refuses_them(
    args: tuple[Any, ...], kwargs: dict[str, Any], says: str
) -> None:
    for cls in (FrozenRecord, FrozenDataclass):
        with pytest.raises(TypeError, match=says.replace("(", r"\(").replace(")", r"\)")):
            cls(*args, **kwargs)


def test_a_class_a_record_cannot_make_is_refused() -> None:
    with pytest.raises(TypeError, match="make it a dataclass"):

        @record
        class Own:
            name: str

            def __repr__(self) -> str:
                return "own"
