"""The command line: ``python -m tfmesos.testing.master --port 5050 --agents 3 ...``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from tfmesos.testing.master.master import TestMaster
from tfmesos.testing.master.state import MasterConfig
from tfmesos.testing.portholder import port_taken


def _parse_attribute_flag(text: str) -> dict[str, str | float]:
    """Mesos's ``--attributes`` form: ``rack:r1;zone:a;weight:2``."""
    out: dict[str, str | float] = {}
    for item in text.split(";"):
        if not item.strip():
            continue
        name, sep, value = item.partition(":")
        if not sep:
            raise argparse.ArgumentTypeError(f"attribute {item!r} is not name:value")
        out[name.strip()] = value.strip()
    return out


def _parse_delay_flag(text: str) -> tuple[float, float]:
    """``--call-delay``: ``LOW-HIGH`` seconds (``0-0.3``), or one number for a fixed delay."""
    low, sep, high = text.partition("-")
    try:
        bounds = (float(low), float(high)) if sep else (float(low), float(low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not LOW-HIGH seconds") from None
    if not 0 <= bounds[0] <= bounds[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 <= LOW <= HIGH")
    return bounds


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tfmesos.testing.master",
        description="A test double of a Mesos master (v1 scheduler HTTP API) that runs "
        "accepted tasks as local processes.",
    )
    defaults = MasterConfig()
    parser.add_argument("--ip", default="127.0.0.1", help="address to listen on")
    parser.add_argument(
        "--port", type=int, default=5050, help="port to listen on (0: any free one)"
    )
    parser.add_argument(
        "--address-file",
        type=Path,
        default=None,
        metavar="FILE",
        help='once it listens, write its host:port to FILE (for tfrun -m "$(cat FILE)"; '
        "with --port 0); removed when it stops",
    )
    parser.add_argument(
        "--hostname", default=None, help="hostname advertised for master and agents"
    )
    parser.add_argument("--agents", type=int, default=defaults.agents)
    parser.add_argument("--cpus", type=float, default=defaults.cpus)
    parser.add_argument("--mem", type=float, default=defaults.mem, help="MB per agent")
    parser.add_argument("--disk", type=float, default=defaults.disk, help="MB per agent (0: none)")
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument(
        "--gpu-agents", type=int, default=None, help="how many agents have the GPUs"
    )
    parser.add_argument("--ports", default=defaults.ports, help="e.g. 31000-32000")
    parser.add_argument(
        "--no-split-ports",
        action="store_true",
        help="give every agent the whole --ports range (by default agents on one host get disjoint slices)",
    )
    parser.add_argument(
        "--attributes", type=_parse_attribute_flag, default=None, help="rack:r1;zone:a"
    )
    parser.add_argument("--heartbeat-interval", type=float, default=defaults.heartbeat_interval)
    parser.add_argument("--allocation-interval", type=float, default=defaults.allocation_interval)
    parser.add_argument("--offer-timeout", type=float, default=None)
    parser.add_argument(
        "--update-retry-interval", type=float, default=defaults.update_retry_interval
    )
    parser.add_argument("--no-filter-gpu-resources", action="store_true")
    parser.add_argument(
        "--work-dir",
        default=None,
        help="sandboxes go here (default: a new temporary directory, kept when the master "
        "stops unless --remove-work-dir)",
    )
    parser.add_argument(
        "--remove-work-dir",
        action="store_true",
        help="remove the temporary work directory, with the tasks' sandboxes, when the "
        "master stops (default: keep it, and say where it is)",
    )
    parser.add_argument(
        "--inherit-env",
        action="store_true",
        help="tasks get this process's environment (default: PATH only, plus MESOS_*)",
    )
    parser.add_argument("--not-leader", action="store_true", help="answer 307 to scheduler calls")
    parser.add_argument(
        "--leader-address", default=None, help="host:port of the leader (with --not-leader)"
    )
    parser.add_argument("--redirect-location", default=None, help="exact Location for the 307")
    parser.add_argument(
        "--call-delay",
        type=_parse_delay_flag,
        default=None,
        metavar="LOW-HIGH",
        help="hold each scheduler call a random LOW-HIGH seconds (e.g. 0-0.3) before "
        "taking it, as a loaded network would",
    )
    parser.add_argument(
        "--call-delay-seed", type=int, default=None, help="seed of --call-delay's randomness"
    )
    parser.add_argument(
        "--no-root-submissions",
        action="store_true",
        help="refuse frameworks whose user is root (the master's --root_submissions=false)",
    )
    parser.add_argument("--log-level", default="INFO")
    return parser


class PortTaken(Exception):
    """The master's port is taken: one line says so, and nothing is left."""


def _write_address(path: Path, address: str) -> None:
    """Write ``address`` to ``path`` atomically, so a waiting reader never sees
    half."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(address + "\n")
    os.replace(temporary, path)


async def _serve(config: MasterConfig, address_file: Path | None = None) -> None:
    master = TestMaster(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # Before it says it listens: a signal from whoever waited for that line
    # stops it cleanly, and it says where the sandboxes are.
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    try:
        await master.start()
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise PortTaken(port_taken(config.port, config.ip)) from None
    try:
        if address_file is not None:
            _write_address(address_file, master.url.removeprefix("http://"))
        print(
            f"tfmesos test master {master.master_id} listening on {master.url} "
            f"({config.agents} agent{'s' if config.agents != 1 else ''}, "
            f"work dir {master.work_dir})",
            flush=True,
        )
        await stop.wait()
    finally:
        if address_file is not None:
            with contextlib.suppress(OSError):
                address_file.unlink()
        await master.stop()
        kept = config.work_dir is not None or config.keep_work_dir
        print(
            f"tfmesos test master {master.master_id} stopped; the tasks' sandboxes "
            + (f"are kept in {master.work_dir}" if kept else f"in {master.work_dir} are removed"),
            flush=True,
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    config = MasterConfig(
        agents=args.agents,
        cpus=args.cpus,
        mem=args.mem,
        disk=args.disk,
        gpus=args.gpus,
        gpu_agents=args.gpu_agents,
        ports=args.ports,
        split_ports=not args.no_split_ports,
        hostname=args.hostname or args.ip,
        attributes=args.attributes,
        ip=args.ip,
        port=args.port,
        heartbeat_interval=args.heartbeat_interval,
        allocation_interval=args.allocation_interval,
        offer_timeout=args.offer_timeout,
        update_retry_interval=args.update_retry_interval,
        filter_gpu_resources=not args.no_filter_gpu_resources,
        work_dir=args.work_dir,
        keep_work_dir=not args.remove_work_dir,
        inherit_env=args.inherit_env,
        leader=not args.not_leader,
        leader_address=args.leader_address,
        redirect_location=args.redirect_location,
        call_delay=args.call_delay,
        call_delay_seed=args.call_delay_seed,
        root_submissions=not args.no_root_submissions,
    )
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve(config, args.address_file))
    except PortTaken as exc:
        print(
            f"python -m tfmesos.testing.master: {exc}: choose another with --port PORT "
            "(--port 0: any free one, written to --address-file FILE)",
            file=sys.stderr,
        )
        return 1
    return 0
