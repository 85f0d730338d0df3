"""What tfrun says, and how it ends, where the last adversarial run found it
saying too much, too little or the wrong thing (issue 27; issue 26, point 6).

- A master that speaks only TLS, dialled with ``http``: one line that says
  so and how to reach it, at once, not a master lost ("Server disconnected").
- A task refused at the rendezvous while the job stops is expected, not news.
- A signal while tfrun says its verdict: the verdict in full, 128 + the
  signal, no traceback.
- A user's path with a control character in it is shown quoted.
- What a local or Slurm user is told to do names what applies to them, not
  only Mesos.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ROOT, JobProcesses, tfrun_argv
from tfmesos.mesos.transport import AiohttpTransport, TLSError

API = "/api/v1/scheduler"


# -- a master that speaks only TLS, dialled with http ---------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.test_real_mesos_security import PKI

    return PKI.make(tmp_path_factory.mktemp("pki"))


@contextlib.contextmanager
def tls_only_server(pki: Any) -> Iterator[int]:
    """A TLS server on 127.0.0.1 (its port) configured as libprocess
    configures a master's: it handshakes, and hangs up on plain HTTP."""
    from tests.test_real_mesos_security import libprocess_server_context, tls_proxy

    context = libprocess_server_context(*pki.cert("master"))
    with tls_proxy(1, context) as proxy:  # handshakes only: nothing is forwarded
        yield proxy.port


def answered_with_tls(port: int) -> str:
    return (
        f"the Mesos master at http://127.0.0.1:{port} answered with TLS: it serves https "
        f"only; give -m https://127.0.0.1:{port} (or set LIBPROCESS_SSL_ENABLED=true, so "
        "that every master, ZooKeeper's too, is dialled with https; its certificate must "
        "chain to --ssl-ca FILE|DIR, $LIBPROCESS_SSL_CA_FILE / $LIBPROCESS_SSL_CA_DIR, or "
        "else the system's CAs)"
    )


@pytest.mark.e2e
def test_a_tls_master_dialled_with_http_is_named_as_tls_by_the_transport(pki: Any) -> None:
    async def subscribe(port: int) -> BaseException:
        transport = AiohttpTransport()
        try:
            await transport.open_stream(f"http://127.0.0.1:{port}{API}", b"{}", {})
        except BaseException as exc:  # what it raised is the subject
            return exc
        finally:
            await transport.aclose()
        raise AssertionError("a TLS server answered plain HTTP")

    with tls_only_server(pki) as port:
        error = asyncio.run(subscribe(port))
    assert isinstance(error, TLSError), repr(error)
    assert str(error) == answered_with_tls(port)


@pytest.mark.e2e
def test_tfrun_at_a_tls_master_given_as_http_says_so_in_one_line_at_once(
    pki: Any, job_procs: JobProcesses
) -> None:
    """Before: the client took the hang-up for a master lost, tried until
    --connect-timeout was spent, and said only "Server disconnected" (or
    "Connection reset by peer")."""
    with tls_only_server(pki) as port:
        started = time.monotonic()
        result = subprocess.run(
            tfrun_argv("-m", f"127.0.0.1:{port}", "-w", "2", "--", "true"),
            capture_output=True,
            text=True,
            env=job_procs.env(),
            cwd=ROOT,
            timeout=120,
        )
        elapsed = time.monotonic() - started
    assert result.returncode == 125, result.stderr
    (line,) = result.stderr.splitlines()
    assert line == f"tfrun: error: the mesos backend failed: {answered_with_tls(port)}", line
    # At once: well within the first-contact budget (--connect-timeout, 10 s).
    assert elapsed < 8, (elapsed, line)
    assert job_procs.wait_gone(10) == []
