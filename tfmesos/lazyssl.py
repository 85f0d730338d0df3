"""asyncio without :mod:`ssl` until something asks for ssl.

asyncio imports ssl (and OpenSSL with it: ~10 ms of CPU, a tenth of
``tfrun``'s imports) for TLS alone, which a local job without ``--tls-cert``
never uses. :func:`import_asyncio` imports asyncio with ssl hidden, so that
asyncio's own ``try: import ssl`` finds none, then hands asyncio the real
module the moment anything imports it (``--tls-cert``, the Mesos backend's
HTTP client): from then on asyncio is as if ssl had been there all along.
"""

from __future__ import annotations

import importlib.machinery
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["import_asyncio"]


def import_asyncio() -> None:
    """Import asyncio without ssl, unless either is imported already."""
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return
    sys.modules["ssl"] = None  # type: ignore[assignment]  # `import ssl` raises ImportError
    try:
        import asyncio  # noqa: F401
    finally:
        del sys.modules["ssl"]
    sys.meta_path.insert(0, _SslFinder())


def _give_asyncio(ssl: ModuleType) -> None:
    """What asyncio's modules would hold, had ssl been importable when they
    were imported: the module, and sslproto's errors that mean "again"."""
    for name, module in list(sys.modules.items()):
        asyncios = name == "asyncio" or name.startswith("asyncio.")
        if asyncios and module is not None and "ssl" in vars(module) and module.ssl is None:
            setattr(module, "ssl", ssl)  # noqa: B010 - a module's attribute, by name
    sslproto = sys.modules.get("asyncio.sslproto")
    if sslproto is not None and not hasattr(sslproto, "SSLAgainErrors"):
        setattr(sslproto, "SSLAgainErrors", (ssl.SSLWantReadError, ssl.SSLSyscallError))  # noqa: B010


class _SslFinder:
    """Finds ssl as the standard path finder does, and gives it to asyncio
    once it is loaded; then leaves the import system as it was. (Not an
    ``importlib.abc`` class: importlib.abc imports importlib.resources, and
    that tempfile.)"""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "ssl":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _GivingLoader(spec.loader)  # type: ignore[assignment]  # a Loader by its methods
        return spec


class _GivingLoader:
    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _give_asyncio(module)
