"""The table of the test master's faults, and the faces made from it.

A method of :class:`~tfmesos.testing.master.faults.Faults` marked with
:func:`fault` is recorded in :data:`FAULTS`; from that one entry come the
TestMaster and ThreadedTestMaster methods (:func:`with_faults`) and the
``/__test__/`` POST route (:meth:`Fault.from_body`). A new fault is one marked
method; tests/test_testing_master_faults.py checks every face.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from tfmesos.testing.master.faults import Faults

# How a value read from a JSON body becomes each annotated type (the annotations
# are strings, from ``from __future__ import annotations``).
_FROM_JSON: dict[str, Callable[[Any], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "str | None": lambda value: None if value is None else str(value),
    "int | None": lambda value: None if value is None else int(value),
}


@dataclasses.dataclass(frozen=True)
class FaultParameter:
    name: str
    annotation: str
    """The parameter's type as written, one of ``_FROM_JSON``'s keys."""
    keyword_only: bool
    default: Any
    """``inspect.Parameter.empty`` for a required parameter."""
    body_key: str
    """Its key in the HTTP route's JSON body."""

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty


@dataclasses.dataclass(frozen=True)
class Fault:
    name: str
    parameters: tuple[FaultParameter, ...]
    returns: str
    doc: str
    """The first paragraph of the method's docstring, on one line."""
    path: str
    """Its route: ``POST`` with the parameters as a JSON object."""
    signature: inspect.Signature
    docstring: str | None
    """The method's docstring as written: the faces' methods have it too."""

    def from_body(self, faults: Faults, body: Mapping[str, Any]) -> Any:
        """Apply the fault with the parameters of an HTTP route's JSON body: a
        missing required key raises KeyError (404), a value of the wrong kind
        ValueError or TypeError (400)."""
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for parameter in self.parameters:
            if parameter.required:
                raw = body[parameter.body_key]
            else:
                raw = body.get(parameter.body_key, parameter.default)
            value = _FROM_JSON[parameter.annotation](raw)
            if parameter.keyword_only:
                kwargs[parameter.name] = value
            else:
                args.append(value)
        return getattr(faults, self.name)(*args, **kwargs)


FAULTS: dict[str, Fault] = {}
"""Every fault, by name, in the order Faults declares them (filled as
:mod:`tfmesos.testing.master.faults` is imported, which the package does)."""

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def fault(
    *,
    path: str | None = None,
    body_keys: Mapping[str, str] | None = None,
    http_defaults: Mapping[str, Any] | None = None,
) -> Callable[[F], F]:
    """Record the method as a fault in FAULTS. ``path`` defaults to
    ``/__test__/NAME``; ``body_keys`` renames parameters in the JSON body;
    ``http_defaults`` gives a parameter that Python requires a default over HTTP."""

    def record(method: F) -> F:
        signature = inspect.signature(method)
        parameters: list[FaultParameter] = []
        for parameter in list(signature.parameters.values())[1:]:
            annotation = str(parameter.annotation)
            if annotation not in _FROM_JSON:
                raise TypeError(f"fault {method.__name__}: no JSON reading of {annotation}")
            default = (http_defaults or {}).get(parameter.name, parameter.default)
            parameters.append(
                FaultParameter(
                    parameter.name,
                    annotation,
                    parameter.kind is inspect.Parameter.KEYWORD_ONLY,
                    default,
                    (body_keys or {}).get(parameter.name, parameter.name),
                )
            )
        doc = inspect.getdoc(method) or ""
        FAULTS[method.__name__] = Fault(
            docstring=method.__doc__,
            name=method.__name__,
            parameters=tuple(parameters),
            returns=str(signature.return_annotation),
            doc=" ".join(doc.split("\n\n")[0].split()),
            path=path or f"/__test__/{method.__name__}",
            signature=signature,
        )
        return method

    return record


def with_faults(
    apply: Callable[[Any, Callable[[Faults], Any]], Any],
) -> Callable[[type[T]], type[T]]:
    """A class decorator that gives the class one method per fault of FAULTS,
    each running its Faults method through ``apply(self, fn)`` (``fn`` takes
    the Faults): how the TestMaster and the ThreadedTestMaster get theirs."""

    def install(cls: type[T]) -> type[T]:
        # The table fills as faults.py's methods are defined: make sure it has.
        import tfmesos.testing.master.faults  # noqa: F401

        for entry in FAULTS.values():
            setattr(cls, entry.name, _face_method(cls, entry, apply))
        return cls

    return install


def _face_method(
    cls: type, entry: Fault, apply: Callable[[Any, Callable[[Faults], Any]], Any]
) -> Callable[..., Any]:
    name = entry.name

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return apply(self, lambda faults: getattr(faults, name)(*args, **kwargs))

    method.__name__ = name
    method.__qualname__ = f"{cls.__qualname__}.{name}"
    method.__module__ = cls.__module__
    method.__doc__ = entry.docstring
    method.__signature__ = entry.signature  # type: ignore[attr-defined]
    return method
