"""The name remote tasks dial to reach this machine (the launcher, the chief).

Not ``socket.getfqdn()``, which can return ``localhost`` where ``hostname -f``
gives the name. A loopback name would make a remote task dial itself, so one is
never chosen; without another name :func:`advertised_host` says to set
``TFMESOS_ADVERTISE_HOST``.
"""

from __future__ import annotations

import ipaddress
import os
import socket

from tfmesos.errors import SpecError

__all__ = ["ADVERTISE_ENV", "advertised_host", "choose_host", "is_loopback_name", "own_name"]

ADVERTISE_ENV = "TFMESOS_ADVERTISE_HOST"
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
_ROUTE_PROBE = "192.0.2.1"
"""TEST-NET-1 (RFC 5737): a UDP socket "connected" to it tells which local
address the default route uses; no packet is sent."""


def is_loopback_name(host: str) -> bool:
    """``localhost`` and its kin, or a loopback address: names no other host can dial."""
    name = host.strip().lower().rstrip(".")
    if not name or name in _LOOPBACK_NAMES or name.startswith("localhost."):
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def choose_host(fqdn: str, hostname: str, route_address: str | None) -> str | None:
    """The first of this machine's fully qualified name, its host name and the
    address of its default route that is not a loopback name; None if none is."""
    for candidate in (fqdn, hostname, route_address or ""):
        if candidate and not is_loopback_name(candidate):
            return candidate
    return None


def _route_address() -> str | None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((_ROUTE_PROBE, 9))
            address: str = probe.getsockname()[0]
            return address
    except OSError:
        return None


def own_name() -> str | None:
    """This machine's first name that is not a loopback one, or None."""
    return choose_host(socket.getfqdn(), socket.gethostname(), _route_address())


def advertised_host() -> str:
    """``TFMESOS_ADVERTISE_HOST`` if set (the user's word, taken as given), else
    this machine's first name that is not a loopback one.

    Raise :class:`~tfmesos.errors.SpecError` when there is none: a task on
    another host could never reach this one.
    """
    chosen = os.environ.get(ADVERTISE_ENV)
    if chosen:
        return chosen
    fqdn, hostname = socket.getfqdn(), socket.gethostname()
    host = choose_host(fqdn, hostname, _route_address())
    if host is None:
        raise SpecError(
            f"this machine has no name other tasks can dial (its names, {fqdn!r} and "
            f"{hostname!r}, are loopback ones, and it has no network route): set "
            f"{ADVERTISE_ENV} to a name or address the cluster's agents can reach"
        )
    return host
