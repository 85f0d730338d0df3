"""The Mesos fetcher (``src/launcher/fetcher.cpp``): a task's ``CommandInfo.uris``
copied into its sandbox before the command starts."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from tfmesos.testing.master.schema import JSON

_ARCHIVES = (".tar", ".tgz", ".tar.gz", ".tbz2", ".tar.bz2", ".txz", ".tar.xz", ".zip")


def fetch_uris(uris: Sequence[JSON], sandbox: Path) -> None:
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
