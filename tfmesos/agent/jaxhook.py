"""Make ``jax.distributed.initialize()`` with no arguments work in a tfrun task,
without the program importing tfmesos.

JAX finds its cluster environment among the ``ClusterEnv`` subclasses imported,
so :mod:`tfmesos.agent.jaxcluster` must be imported before the program calls
``initialize()``, but never into a process that does not use JAX.
``tfmesos-jax.pth`` imports this module at start-up when
``TFMESOS_DISTRIBUTED`` is set (only tfrun's tasks); it installs a
``sys.meta_path`` finder that, once JAX's ``jax._src.clusters`` has run,
imports :mod:`tfmesos.agent.jaxcluster`, then removes itself. It uses only
``importlib``'s documented finder and loader protocol. Standard library only,
and nothing imported here: every Python in a task runs it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__all__ = ["GATE", "WATCHED", "install"]

GATE = "TFMESOS_DISTRIBUTED"
"""The variable the ``.pth`` line looks for (:func:`tfmesos.common.taskenv.task_environment`
sets it in every task)."""

WATCHED = "jax._src.clusters"
"""The package that defines JAX's ``ClusterEnv`` and its detectors."""


def _register() -> None:
    try:
        import tfmesos.agent.jaxcluster  # noqa: F401  (defining the class registers it)
    except Exception as error:
        # A JAX whose internals moved: the program still imports JAX, and
        # initialize() without arguments says what it lacks, as without tfrun.
        import warnings

        warnings.warn(
            f"tfmesos could not register its JAX cluster environment: {error!r}",
            RuntimeWarning,
            stacklevel=2,
        )


class _ThenRegister:
    """A module's own loader that registers tfmesos's environment once the module
    has run."""

    def __init__(self, loader: object) -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> object:
        return getattr(self._loader, name)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)  # type: ignore[attr-defined]
        _register()


class _Finder:
    """Finds :data:`WATCHED` through the later finders, and wraps its loader."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != WATCHED:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec: ModuleSpec | None = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _ThenRegister(spec.loader)  # type: ignore[assignment]
                return spec
        return None


def install() -> None:
    """Watch for JAX (once per process; JAX already imported: register now)."""
    if WATCHED in sys.modules:
        _register()
    elif not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


install()
