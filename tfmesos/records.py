"""Records: dataclasses made cheaply, for the value classes on tfrun's path.

Making a dataclass compiles each of its generated methods at import, ~0.6-1 ms
of every tfrun's start per class (docs/benchmarks.md, "The fixed cost"); a
record gets the same methods written once, here. To mypy, and to its users, a
record is a dataclass (``@record`` reads as ``@dataclass``); what it lacks is
``dataclasses.fields``, ``replace`` and ``asdict``: a class that needs them
stays a dataclass.
"""

from __future__ import annotations

import dataclasses

__all__ = ["record"]

TYPE_CHECKING = False
"""As ``typing.TYPE_CHECKING``, without importing typing (as tfmesos/__init__.py)."""
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    _T = TypeVar("_T")


def _record(cls: type[_T] | None = None, /, *, frozen: bool = False) -> Any:
    """:func:`record` at run time: ``@dataclass`` or ``@dataclass(frozen=True)``
    for a class whose fields are its own annotations, each with a plain
    default, a ``field(default=...)``, a ``field(default_factory=...)`` or none.
    It adds what such a dataclass has (``__init__`` calling ``__post_init__``,
    ``__repr__``, ``__eq__``, ``__hash__``, ``__match_args__``, and, frozen,
    ``__setattr__`` and ``__delattr__`` raising ``FrozenInstanceError``)
    as methods written once, here, rather than compiled for each class at
    import: a dataclass costs ~0.6-1 ms of every tfrun's start to make
    (docs/benchmarks.md, "The fixed cost"). No ``dataclasses.fields`` or
    ``replace``: a class that needs them stays a dataclass."""

    def wrap(cls: type[_T]) -> type[_T]:
        return _make_record(cls, frozen)

    return wrap if cls is None else wrap(cls)


def _make_record(cls: type[_T], frozen: bool) -> type[_T]:
    own = cls.__dict__
    names = tuple(own.get("__annotations__", {}))
    if cls.__bases__ != (object,) or any(
        str(own["__annotations__"][name]).startswith(("ClassVar", "InitVar")) for name in names
    ):
        raise TypeError(f"{cls.__qualname__}: a record has its own fields only (make a dataclass)")
    defaults: dict[str, object] = {}
    factories: dict[str, Callable[[], object]] = {}
    for name in names:
        if name not in own:
            continue
        value = own[name]
        if isinstance(value, dataclasses.Field):
            if value.default_factory is not dataclasses.MISSING:
                factories[name] = value.default_factory
                delattr(cls, name)
                continue
            if value.default is dataclasses.MISSING:
                delattr(cls, name)
                continue
            value = value.default
            setattr(cls, name, value)
        defaults[name] = value
    qualname = cls.__qualname__
    set_field = object.__setattr__ if frozen else setattr
    post_init = own.get("__post_init__")

    def __init__(self: object, *args: object, **kwargs: object) -> None:
        if len(args) > len(names):
            raise TypeError(
                f"{qualname}.__init__() takes {len(names) + 1} positional arguments "
                f"but {len(args) + 1} were given"
            )
        for name, value in zip(names, args, strict=False):
            set_field(self, name, value)
        for name in names[len(args) :]:
            if name in kwargs:
                value = kwargs.pop(name)
            elif name in defaults:
                value = defaults[name]
            elif name in factories:
                value = factories[name]()
            else:
                raise TypeError(
                    f"{qualname}.__init__() missing 1 required positional argument: {name!r}"
                )
            set_field(self, name, value)
        if kwargs:
            name = next(iter(kwargs))
            raise TypeError(
                f"{qualname}.__init__() got multiple values for argument {name!r}"
                if name in names
                else f"{qualname}.__init__() got an unexpected keyword argument {name!r}"
            )
        if post_init is not None:
            post_init(self)

    def values(self: object) -> tuple[object, ...]:
        return tuple([getattr(self, name) for name in names])

    def __repr__(self: object) -> str:
        shown = ", ".join([f"{name}={getattr(self, name)!r}" for name in names])
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self: object, other: object) -> bool:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    def __hash__(self: object) -> int:
        return hash(values(self))

    def __setattr__(self: object, name: str, value: object) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)  # type: ignore[misc]

    def __delattr__(self: object, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)  # type: ignore[misc]

    made: Any = cls
    methods: list[Callable[..., Any]] = [__init__, __repr__, __eq__]
    if frozen:
        methods += [__hash__, __setattr__, __delattr__]
    for method in methods:
        if method.__name__ in own:
            raise TypeError(f"{qualname} defines {method.__name__}: make it a dataclass")
        method.__qualname__ = f"{qualname}.{method.__name__}"
        setattr(cls, method.__name__, method)
    if not frozen:
        if "__hash__" in own:
            raise TypeError(f"{qualname} defines __hash__: make it a dataclass")
        made.__hash__ = None  # as a mutable dataclass's
    made.__match_args__ = names  # type: ignore[misc]  # as a dataclass's, once made
    return cls


if TYPE_CHECKING:
    from dataclasses import dataclass as record
else:
    record = _record
    """``@record`` or ``@record(frozen=True)``: a dataclass to mypy, and
    ``@dataclass`` or ``@dataclass(frozen=True)`` to its users, made cheaply
    (:func:`_record`)."""
