"""How :class:`~tfmesos.mesos.scheduler.SchedulerClient` talks HTTP: a seam that
only moves bytes, while the client keeps the policy.

Like Mesos's scheduler library, two connections: :meth:`Transport.open_stream`
sends SUBSCRIBE and returns once the headers are in, and :meth:`Transport.post`
sends any other call. Neither redirects nor retries. A failure is a
:class:`TransportError` worded for the user; two end the client at once because
no retry can mend them: a TLS handshake failing on its merits
(:class:`TLSError`) and refused credentials (:class:`AuthenticationError`). TLS
is configured from ``LIBPROCESS_SSL_*`` as libprocess does
(:func:`client_tls`). :class:`AiohttpTransport` is the real one; the tests
script an in-memory one.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NoReturn, Protocol

import aiohttp
from yarl import URL

from tfmesos.errors import EXIT_NOT_PERMITTED, TFMesosError

__all__ = [
    "AiohttpTransport",
    "AuthenticationError",
    "ClientTLS",
    "EventStream",
    "TLSError",
    "Transport",
    "TransportError",
    "client_tls",
    "describe",
    "speaks_tls",
]

logger = logging.getLogger("tfmesos")

LIBPROCESS_CIPHERS = (
    "AES128-SHA:AES256-SHA:RC4-SHA:DHE-RSA-AES128-SHA:DHE-DSS-AES128-SHA:"
    "DHE-RSA-AES256-SHA:DHE-DSS-AES256-SHA"
)
"""libprocess's default ``LIBPROCESS_SSL_CIPHERS`` (``openssl.cpp``). A master
left at the defaults speaks TLS 1.2 with these only (AES128-SHA and AES256-SHA,
as it sets no DH parameters), none of which Python's default context offers:
the client offers them after its own, so that such a master is reached, while
one configured with better ciphers gets those."""
CA_FLAG = "--ssl-ca"
CA_FILE = "LIBPROCESS_SSL_CA_FILE"
CA_DIR = "LIBPROCESS_SSL_CA_DIR"
CERT_FILE = "LIBPROCESS_SSL_CERT_FILE"
KEY_FILE = "LIBPROCESS_SSL_KEY_FILE"
VERIFY = ("LIBPROCESS_SSL_VERIFY_SERVER_CERT", "LIBPROCESS_SSL_VERIFY_CERT")
"""The variable libprocess reads, then its legacy alias."""
TLS_PROBE_TIMEOUT = 3.0
"""How long a master that hung up on plain HTTP is given to answer a TLS
handshake (a TLS server answers at once; anything else is not asked for long:
the probe delays the retry of a master merely lost)."""
CREDENTIALS_HINT = "--principal and --secret-file, or $MESOS_PRINCIPAL and $MESOS_SECRET"


class TransportError(Exception):
    """The master could not be reached, or the connection broke; the text says it
    all."""


class TLSError(TFMesosError):
    """TLS with the master cannot work as configured: its certificate is not
    trusted or names another address, it refused the handshake, or the CA or
    the client certificate cannot be loaded. Not a :class:`TransportError`:
    the client gives up at once instead of retrying."""


class AuthenticationError(TFMesosError):
    """The master answered ``401`` to the credentials, or lack of them; not
    retried."""

    exit_status = EXIT_NOT_PERMITTED


@dataclass(frozen=True)
class ClientTLS:
    """How the client speaks TLS to masters (``https``)."""

    context: ssl.SSLContext
    trusted: str
    """What the master's certificate must chain to, in words for a message
    (``the CAs in /etc/mesos/ca.pem ($LIBPROCESS_SSL_CA_FILE)``)."""
    verifying: bool


def _flag_value(name: str, value: str) -> bool:
    # stout's flags::parse<bool>, as masters.default_scheme reads LIBPROCESS_SSL_ENABLED.
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise TLSError(f"{name}={value!r}: expected true, false, 1 or 0")


def _cannot_load(what: str, exc: Exception) -> NoReturn:
    if isinstance(exc, ssl.SSLError):
        why = _describe_ssl_error(exc)
    elif isinstance(exc, OSError):
        why = exc.strerror or str(exc)
    else:
        why = str(exc) or type(exc).__name__
    raise TLSError(f"cannot load {what}: {why}") from None


def _no_passphrase() -> str:
    raise TLSError("it is encrypted (a key with a passphrase cannot be used)")


def client_tls(ca: str | None = None, environ: Mapping[str, str] | None = None) -> ClientTLS:
    """The TLS context for masters, from ``ca`` (``--ssl-ca``) and the
    ``LIBPROCESS_SSL_*`` variables in ``environ``, read as libprocess reads
    them (docs/mesos.md lists them). Unlike libprocess, the master's
    certificate is always verified against the address dialled, because the
    framework's secret goes over this connection; only
    ``LIBPROCESS_SSL_VERIFY_SERVER_CERT=false``, set explicitly, turns that
    off, with a warning. A CA, certificate or value that cannot be loaded is a
    :class:`TLSError`."""
    environ = os.environ if environ is None else environ
    settings = [(name, _flag_value(name, environ[name])) for name in VERIFY if name in environ]
    verifying = not settings or any(value for _, value in settings)
    context, trusted = _trusting(ca, environ)
    if not verifying:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        trusted = "no CA (the certificate is not verified)"
        logger.warning(
            "Mesos: the master's TLS certificate is not verified (%s=%s): "
            "whoever is in between sees the framework's secret",
            *next((n, environ[n]) for n, value in settings if not value),
        )
    _offer_ciphers(context, environ)
    _present_certificate(context, environ)
    return ClientTLS(context, trusted, verifying)


def _trusting(ca: str | None, environ: Mapping[str, str]) -> tuple[ssl.SSLContext, str]:
    """A context trusting ``ca``, the ``LIBPROCESS_SSL_CA_*`` ones, or the
    system's; and which."""
    if ca is not None:
        cafile, capath = (None, ca) if os.path.isdir(ca) else (ca, None)
        trusted = f"the CA{'s in' if capath else ' in'} {ca} ({CA_FLAG})"
    else:
        cafile, capath = environ.get(CA_FILE) or None, environ.get(CA_DIR) or None
        named = [f"{v} (${n})" for n, v in ((CA_FILE, cafile), (CA_DIR, capath)) if v]
        trusted = f"the CAs in {' and '.join(named)}" if named else "the system's CAs"
    if not (cafile or capath):
        return ssl.create_default_context(), trusted
    # Those only, as libprocess loads them (SSL_CTX_load_verify_locations)
    # instead of the defaults.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cafile=cafile, capath=capath)
    except (OSError, ValueError) as exc:
        _cannot_load(trusted, exc)
    return context, trusted


def _offer_ciphers(context: ssl.SSLContext, environ: Mapping[str, str]) -> None:
    """Python's own ciphers, then ``LIBPROCESS_SSL_CIPHERS`` (or libprocess's default)."""
    ours = [c["name"] for c in context.get_ciphers() if c.get("protocol") != "TLSv1.3"]
    extra = environ.get("LIBPROCESS_SSL_CIPHERS") or LIBPROCESS_CIPHERS
    try:
        context.set_ciphers(":".join([*ours, extra]))
    except ssl.SSLError:
        raise TLSError(f"LIBPROCESS_SSL_CIPHERS={extra!r}: no cipher OpenSSL knows") from None


def _present_certificate(context: ssl.SSLContext, environ: Mapping[str, str]) -> None:
    """Load the client certificate and key that ``LIBPROCESS_SSL_CERT_FILE``
    and ``LIBPROCESS_SSL_KEY_FILE`` name, if any."""
    cert, key = environ.get(CERT_FILE) or None, environ.get(KEY_FILE) or None
    if key and not cert:
        raise TLSError(f"${KEY_FILE} is set but not ${CERT_FILE}: the key needs its certificate")
    if not cert:
        return
    what = f"the client certificate {cert} (${CERT_FILE})"
    if key:
        what += f" and its key {key} (${KEY_FILE})"
    try:
        context.load_cert_chain(cert, key, password=_no_passphrase)
    except (OSError, ValueError, TLSError) as exc:
        _cannot_load(what, exc)


_SSL_TEXT = re.compile(r"^\[[^\]]*\]\s*(.*?)\s*(\(_ssl\.c:\d+\))?$")

_UNTRUSTED = {2, 18, 19, 20, 21}
"""X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT, DEPTH_ZERO_SELF_SIGNED_CERT,
SELF_SIGNED_CERT_IN_CHAIN, UNABLE_TO_GET_ISSUER_CERT_LOCALLY,
UNABLE_TO_VERIFY_LEAF_SIGNATURE: the chain ends at no CA we trust."""
_MISNAMED = {62, 64}
"""X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH."""
_CLIENT_CERT_ALERTS = (
    "SSLV3_ALERT_BAD_CERTIFICATE",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    "TLSV1_ALERT_UNKNOWN_CA",
    "SSLV3_ALERT_HANDSHAKE_FAILURE",
    "TLSV1_ALERT_ACCESS_DENIED",
)


def _describe_ssl_error(error: ssl.SSLError) -> str:
    """``certificate verify failed: self-signed certificate`` rather than
    ``[SSL: CERTIFICATE_VERIFY_FAILED] ... (_ssl.c:1006)``."""
    if isinstance(error, ssl.SSLCertVerificationError) and error.verify_message:
        return f"certificate verify failed: {error.verify_message.rstrip('.')}"
    text = str(error.args[1]) if len(error.args) > 1 else str(error)
    match = _SSL_TEXT.match(text)
    if match and match.group(1):
        return match.group(1)
    if error.reason:
        return str(error.reason).lower().replace("_", " ")
    return text or type(error).__name__


def _ssl_error(exc: BaseException) -> ssl.SSLError | None:
    """The SSL error behind an aiohttp or socket error, if one is."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return None
        # aiohttp's wrappers first: they are SSLErrors too, without the details.
        if isinstance(seen, aiohttp.ClientConnectorCertificateError):
            inner = seen.certificate_error
            if isinstance(inner, ssl.SSLError):
                return inner
        elif isinstance(seen, aiohttp.ClientConnectorError):
            if isinstance(seen.os_error, ssl.SSLError):
                return seen.os_error
        elif isinstance(seen, ssl.SSLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _refused(error: ssl.SSLError) -> bool:
    """A handshake that failed on its merits (a certificate, an alert, no
    common protocol), not a connection that dropped in the middle of it."""
    return isinstance(error, ssl.SSLCertVerificationError) or type(error) is ssl.SSLError


_TLS_ALERT = re.compile(r"^(SSLV3|TLSV1|TLSV13)_ALERT_")
"""An SSL error's reason when the peer sent a TLS alert: it speaks TLS."""


async def speaks_tls(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` answers a TLS handshake as a TLS server does:
    completes it, or refuses it with a TLS alert. Nothing is verified (what
    is asked is only whether it speaks TLS), and nothing is sent after."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    # A master at libprocess's defaults shares none of Python's own ciphers.
    context.set_ciphers(f"DEFAULT:{LIBPROCESS_CIPHERS}")
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=context), timeout
        )
    except ssl.SSLError as exc:
        return bool(_TLS_ALERT.match(str(exc.reason or "")))
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.wait_closed()
    return True


def _answered_with_tls(where: URL) -> str:
    """What to say of a master dialled with ``http`` that answered in TLS."""
    https = where.with_scheme("https").origin()
    return (
        f"the Mesos master at {where.origin()} answered with TLS: it serves https only; "
        f"give -m {https} (or set LIBPROCESS_SSL_ENABLED=true, so that every master, "
        f"ZooKeeper's too, is dialled with https; its certificate must chain to "
        f"{CA_FLAG} FILE|DIR, ${CA_FILE} / ${CA_DIR}, or else the system's CAs)"
    )


class EventStream(Protocol):
    """The answer to SUBSCRIBE: status and headers now, the body in chunks."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    async def read_chunk(self) -> bytes:
        """The next piece of the body as it comes (any size); ``b""`` at its end."""
        ...

    async def text(self) -> str:
        """The whole body as text (for an answer other than ``200``)."""
        ...

    def close(self) -> None:
        """Drop the connection; a pending :meth:`read_chunk` ends."""
        ...


class Transport(Protocol):
    async def open_stream(
        self, url: str, body: bytes, headers: Mapping[str, str]
    ) -> EventStream: ...

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> tuple[int, str]:
        """Send one call; its answer's status and text."""
        ...

    async def get(self, url: str, timeout: float) -> tuple[int, str]:
        """GET ``url``: its status and Content-Type."""
        ...

    async def aclose(self) -> None: ...


def describe(exc: BaseException) -> str:
    """An aiohttp or socket error in one line (``Cannot connect: Connection
    refused``; ``TLS handshake failed: certificate verify failed: ...``), not
    the errno's repr or an SSL error number read as an errno."""
    tls = _ssl_error(exc)
    if tls is not None:
        return f"TLS handshake failed: {_describe_ssl_error(tls)}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        error = exc.os_error
        if error.errno is not None and error.errno > 0:
            why = os.strerror(error.errno)
        else:  # a resolver's error (socket.gaierror): negative codes
            why = error.strerror or str(error) or type(error).__name__
        return f"Cannot connect: {why}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _AiohttpStream:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers

    async def read_chunk(self) -> bytes:
        try:
            return await self._response.content.readany()
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportError(describe(exc)) from exc

    async def text(self) -> str:
        try:
            return await self._response.text()
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportError(describe(exc)) from exc
        finally:
            self._response.release()

    def close(self) -> None:
        self._response.close()


class AiohttpTransport:
    """HTTP/1.1 over one aiohttp session, whose pool keeps the SUBSCRIBE stream
    apart from the connection calls go out on. ``auth``: the principal and
    secret for HTTP Basic; ``ssl_ca``: the CA for ``https`` masters (the rest
    of TLS is read when the first ``https`` master is dialled)."""

    def __init__(
        self,
        auth: tuple[str, str] | None = None,
        connect_timeout: float = 10,
        ssl_ca: str | None = None,
    ) -> None:
        # RFC 7617's Basic credentials, as the master's basic authenticator
        # reads them (the secret goes nowhere else).
        self._authorization = (
            "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode() if auth else None
        )
        self._principal = auth[0] if auth else None
        self._connect_timeout = connect_timeout
        self._ssl_ca = ssl_ca
        self._tls: ClientTLS | None = None
        self._session: aiohttp.ClientSession | None = None

    def _headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        own = dict(headers)
        if self._authorization is not None:
            own["Authorization"] = self._authorization
        return own

    def _ssl(self, url: str) -> ssl.SSLContext | bool:
        """The TLS context for ``url`` (``True``, aiohttp's default, for ``http``)."""
        if not url.startswith("https:"):
            return True
        if self._tls is None:
            self._tls = client_tls(self._ssl_ca)
        return self._tls.context

    def _failed(self, url: str, exc: BaseException) -> TransportError:
        """``exc`` as a retried :class:`TransportError`, or :class:`TLSError` for
        a failed handshake."""
        tls = _ssl_error(exc)
        if tls is not None and _refused(tls):
            raise TLSError(self._handshake_failure(url, tls)) from None
        return TransportError(describe(exc))

    def _handshake_failure(self, url: str, error: ssl.SSLError) -> str:
        where = URL(url)
        text = f"TLS handshake with {where.origin()} failed: {_describe_ssl_error(error)}"
        trusted = self._tls.trusted if self._tls is not None else "the system's CAs"
        code = getattr(error, "verify_code", None)
        if code in _UNTRUSTED:
            text += (
                f"; tfmesos trusted {trusted}: give the CA that signed the master's "
                f"certificate with {CA_FLAG} FILE|DIR, or ${CA_FILE} / ${CA_DIR}"
            )
        elif code in _MISNAMED:
            text += (
                f"; the master's certificate must name the address dialled, {where.host} "
                "(a master found through ZooKeeper is dialled by its IP address, "
                "which its certificate must then hold as a subjectAltName)"
            )
        elif error.reason == "WRONG_VERSION_NUMBER":
            text += (
                "; is the master serving TLS? (https is dialled for an https:// master, "
                "or for any when LIBPROCESS_SSL_ENABLED is true)"
            )
        elif error.reason in _CLIENT_CERT_ALERTS:
            text += (
                "; if the master requires a client certificate, give it with "
                f"${CERT_FILE} and ${KEY_FILE}"
            )
        return text

    def _refused_credentials(self, url: str) -> AuthenticationError:
        where = URL(url).origin()
        if self._principal is None:
            return AuthenticationError(
                f"the Mesos master at {where} demands authentication (401 Unauthorized) "
                f"and no credentials were given: give a principal and its secret "
                f"({CREDENTIALS_HINT})"
            )
        return AuthenticationError(
            f"the Mesos master at {where} refused the credentials of principal "
            f"{self._principal!r} (401 Unauthorized): check the principal and its secret "
            f"({CREDENTIALS_HINT})"
        )

    def _open(self) -> aiohttp.ClientSession:
        # Made on first use: a session belongs to the running loop.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout),
            )
        return self._session

    async def open_stream(self, url: str, body: bytes, headers: Mapping[str, str]) -> EventStream:
        try:
            response = await self._open().post(
                url,
                data=body,
                headers=self._headers(headers),
                allow_redirects=False,
                ssl=self._ssl(url),
            )
        except (aiohttp.ClientError, OSError) as exc:
            # A server that speaks only TLS hangs up on plain HTTP ("Server
            # disconnected", a reset), which reads as a master lost: asked
            # once, in TLS, it says what it is, and no retry can mend that.
            where = URL(url)
            if (
                where.scheme == "http"
                and not isinstance(exc, aiohttp.ClientConnectorError)
                and where.host is not None
                and where.port is not None
                and await speaks_tls(
                    where.host, where.port, min(self._connect_timeout, TLS_PROBE_TIMEOUT)
                )
            ):
                raise TLSError(_answered_with_tls(where)) from None
            raise self._failed(url, exc) from exc
        if response.status == 401:
            response.release()
            raise self._refused_credentials(url)
        return _AiohttpStream(response)

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> tuple[int, str]:
        # A call's failure, whatever it is, is a TransportError (or, for a
        # 401, an answer): the client reports it to the call's caller, who
        # judges; only SUBSCRIBE's end the client (open_stream).
        try:
            async with self._open().post(
                url,
                data=body,
                headers=self._headers(headers),
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=timeout),
                ssl=self._ssl(url),
            ) as response:
                return response.status, await response.text()
        except asyncio.TimeoutError:
            raise TransportError(f"no answer within {timeout:g}s") from None
        except TLSError as exc:
            raise TransportError(str(exc)) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportError(describe(exc)) from exc

    async def get(self, url: str, timeout: float) -> tuple[int, str]:
        status, content_type, _ = await self._get(url, timeout, body=False)
        return status, content_type

    async def read(self, url: str, timeout: float) -> tuple[int, bytes]:
        """GET ``url`` (a master's ``/state``, an agent's ``/files/read``)
        with this transport's credentials and TLS: its status and body."""
        status, _, data = await self._get(url, timeout, body=True)
        return status, data

    async def _get(self, url: str, timeout: float, *, body: bool) -> tuple[int, str, bytes]:
        """GET ``url``: its status, its Content-Type and, if ``body``, its body."""
        try:
            async with self._open().get(
                url,
                headers=self._headers({}),
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=timeout),
                ssl=self._ssl(url),
            ) as response:
                data = await response.read() if body else b""
                return response.status, response.headers.get("Content-Type", ""), data
        except asyncio.TimeoutError:
            raise TransportError(f"no answer within {timeout:g}s") from None
        except TLSError as exc:
            raise TransportError(str(exc)) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportError(describe(exc)) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
