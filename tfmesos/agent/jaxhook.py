"""``jax.distributed.initialize()`` with no arguments, in a tfrun task.

JAX learns the number of processes and this process's id from a cluster
environment: a subclass of JAX's ``ClusterEnv``, registered when its module
is imported (JAX's own: Slurm, Open MPI, Kubernetes, Cloud TPU). tfmesos's
(:mod:`tfmesos.agent.jaxcluster`) must therefore be imported into the user's
program before it calls ``initialize()``, without the program importing
tfmesos, and without importing JAX into a process that never does.

tfmesos installs ``tfmesos-jax.pth`` in site-packages (``setup.py``). Python
runs its one line at every start-up; the line imports this module only when
``TFMESOS_DISTRIBUTED`` is set, which tfrun sets in every task and nothing
else does (elsewhere the line costs one dictionary lookup). This module puts a
finder at the head of ``sys.meta_path`` that looks for nothing but JAX's
``jax._src.clusters``: when a program imports JAX, the finder lets the usual
finders find that package and, once the package has run (JAX's detectors
defined), imports :mod:`tfmesos.agent.jaxcluster`, which registers tfmesos's
environment before them (a wrapped loader: ``importlib``'s documented
finder and loader protocol). Then the finder takes itself out. A process that
never imports JAX pays one string comparison per module it imports.

Standard library only, and nothing imported here: every Python in a task
runs it.
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
    """A module's own loader, which registers tfmesos's environment once the
    module has run. Everything else is the loader's (``__getattr__``)."""

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
    """Finds nothing itself: for :data:`WATCHED` it asks the finders after it
    and hands back their spec with its loader wrapped."""

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
