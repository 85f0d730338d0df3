"""Running a whole replica-mode job: launcher, backend, signals, exit status."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Any

from tfmesos.backends import create_backend
from tfmesos.backends.base import advertised_host
from tfmesos.errors import ClusterStartError, JobFailedError
from tfmesos.launcher import Launcher
from tfmesos.spec import ClusterSpec

__all__ = ["backend_options", "run_replica_job"]

logger = logging.getLogger("tfmesos")


def backend_options(
    backend: str,
    *,
    master: str | None = None,
    log_dir: str | None = None,
    reconnect_timeout: float = 120.0,
    checkpoint: bool = False,
) -> dict[str, Any]:
    """The options each backend takes, from the ones the user may give."""
    if backend == "local":
        return {"log_dir": log_dir}
    return {
        "master": master,
        "log_dir": log_dir,
        "reconnect_timeout": reconnect_timeout,
        "checkpoint": checkpoint,
    }


def run_replica_job(spec: ClusterSpec, backend: str, **options: Any) -> int:
    """Run the job to its end and return ``tfrun``'s exit status."""
    return asyncio.run(_run(spec, backend, backend_options(backend, **options)))


async def _run(spec: ClusterSpec, backend_name: str, options: dict[str, Any]) -> int:
    backend = create_backend(backend_name, spec, **options)
    chief = None
    if backend_name != "local":
        from tfmesos.backends.local import LocalBackend

        # Remote tasks must reach the chief: it listens on this host's name.
        chief = LocalBackend(spec, host=advertised_host(), log_dir=options.get("log_dir"))
    launcher = Launcher(spec, backend, chief_backend=chief)
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    received: list[int] = []

    def on_signal(signum: int) -> None:
        if not received:
            received.append(signum)
            logger.warning("%s received: stopping every task", signal.Signals(signum).name)
            main.cancel()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        await launcher.start()
        await launcher.wait_for_workers()
        return 0
    except JobFailedError as exc:
        logger.error("job failed: %s", exc)
        return exc.exit_code
    except ClusterStartError as exc:
        logger.error("the cluster did not come up: %s", exc)
        return 1
    except asyncio.CancelledError:
        if not received:
            raise
        return 128 + received[0]
    finally:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(launcher.stop())
