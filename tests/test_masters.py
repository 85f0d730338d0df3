"""Reading the masters' ZooKeeper group as Mesos does, without a server
(tests/test_zookeeper.py runs the same against a real one)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import ROOT, JobProcesses, tfrun_argv
from tfmesos import SpecError
from tfmesos.mesos.masters import MasterAddress, ZooKeeperSource, default_scheme, parse_masters
from tfmesos.mesos.transport import AiohttpTransport, TLSError
from tfmesos.mesos.zookeeper import (
    MasterInfo,
    Member,
    group_members,
    leading_member,
    master_info_from_node,
)


@pytest.mark.parametrize(
    ("location", "scheme", "url"),
    [
        # What a real master's 307 says (Master::Http::redirect, src/master/http.cpp).
        ("//10.0.0.2:5051/master/api/v1/scheduler", "http", "http://10.0.0.2:5051"),
        ("//m2.example:5050/master/api/v1/scheduler", "https", "https://m2.example:5050"),
        ("https://m2:5050/master/api/v1/scheduler?x=1", "http", "https://m2:5050"),
    ],
)
def test_a_redirect_location_keeps_only_scheme_host_and_port(
    location: str, scheme: str, url: str
) -> None:
    assert MasterAddress.parse(location, scheme).url == url


def test_group_members_are_read_as_group_cpp_does() -> None:
    children = [
        "json.info_0000000004",
        "log_replicas",  # not a member
        "info_0000000002",
        "0000000003",  # unlabelled: a bare UPID
        "json.info_",  # no sequence
        "other_0000000007",
        "info_9999999999",  # beyond int32
        "",
    ]
    assert group_members(children) == [
        Member("info_0000000002", "info", 2),
        Member("0000000003", None, 3),
        Member("json.info_0000000004", "json.info", 4),
        Member("other_0000000007", "other", 7),
    ]
    assert leading_member(["json.info_0000000009", "info_0000000010"]) == Member(
        "json.info_0000000009", "json.info", 9
    )
    assert leading_member(["log_replicas"]) is None


def test_the_pid_is_dialled_before_any_other_field() -> None:
    info = MasterInfo(
        pid="master@10.0.0.1:5051",
        ip=0x0200000A,
        port=5052,
        hostname="h",
        address_hostname="h",
        address_ip="10.0.0.3",
        address_port=5053,
    )
    assert info.address().url == "http://10.0.0.1:5051"
    assert info.address("https").url == "https://10.0.0.1:5051"


@pytest.mark.parametrize(
    ("info", "url"),
    [
        (
            MasterInfo(address_ip="10.0.0.3", address_port=5053, hostname="h"),
            "http://10.0.0.3:5053",
        ),
        # 10.0.0.2 as s_addr on a little-endian host (MESOS-1201).
        (MasterInfo(ip=0x0200000A, port=5052, hostname="h"), "http://10.0.0.2:5052"),
        (MasterInfo(ip=0, port=5052, hostname="h"), "http://h:5052"),
        (MasterInfo(address_hostname="a", address_port=1, hostname="h", port=2), "http://a:1"),
        (MasterInfo(pid="master@m.example:5050"), "http://m.example:5050"),
        (MasterInfo(pid="master@[::1]:5050"), "http://[::1]:5050"),
    ],
)
def test_without_a_pid_the_ip_comes_before_the_host_name(info: MasterInfo, url: str) -> None:
    assert info.address().url == url


@pytest.mark.parametrize(
    ("label", "data"),
    [
        (None, b"not a pid"),
        (None, b"master@h:notaport"),
        ("info", b"\x0a\x05ab"),  # truncated string
        ("info", b"\x10"),  # truncated varint
        ("info", b"\x0b"),  # a group
        ("info", b"\x22\x00"),  # an empty pid
        ("info", b"\x12\x00"),  # ip as bytes: the wrong wire type
        ("json.info", b"[]"),
        ("json.info", b'{"pid": 5}'),
        ("json.info", b'{"address": {"ip": "10.0.0.1"}}'),  # no port
        ("other", b"{}"),
    ],
)
def test_data_that_cannot_be_read_is_a_value_error(label: str | None, data: bytes) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each with its own message
        master_info_from_node(label, data).address()


@given(st.binary(max_size=200))
def test_the_protobuf_reader_never_crashes(data: bytes) -> None:
    with contextlib.suppress(ValueError):
        MasterInfo.from_protobuf(data)


@pytest.mark.parametrize(
    ("environ", "scheme"),
    [
        ({}, "http"),
        ({"LIBPROCESS_SSL_ENABLED": "true"}, "https"),
        ({"LIBPROCESS_SSL_ENABLED": "1"}, "https"),
        ({"LIBPROCESS_SSL_ENABLED": "false", "SSL_ENABLED": "true"}, "http"),
        ({"SSL_ENABLED": "true"}, "https"),
        ({"SSL_ENABLED": "0"}, "http"),
    ],
)
def test_the_scheme_follows_libprocess_ssl(environ: dict[str, str], scheme: str) -> None:
    assert default_scheme(environ) == scheme
    zk = parse_masters("zk://z1:2181/mesos", environ)
    assert zk == ZooKeeperSource("z1:2181", "/mesos", None, scheme)
    # Only where no scheme is given.
    masters = parse_masters("m1:5050,http://m2:5050", environ)
    assert [m.url for m in masters] == [f"{scheme}://m1:5050", "http://m2:5050"]  # type: ignore[union-attr]


def test_a_bad_ssl_setting_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="LIBPROCESS_SSL_ENABLED='yes'"):
        parse_masters("zk://z1:2181/mesos", {"LIBPROCESS_SSL_ENABLED": "yes"})


# -- zk:// credentials and file:// masters, read as Mesos reads them ------------------


@pytest.mark.parametrize(
    ("url", "hosts", "path", "auth"),
    [
        # zookeeper::URL::parse (include/mesos/zookeeper/url.hpp): the
        # credentials end at the LAST '@' before the path's first '/'.
        ("zk://u:p@ss@z1:2181,z2:2181/mesos", "z1:2181,z2:2181", "/mesos", "u:p@ss"),
        ("zk://u:a:b@@c@z1:2181/a/b/", "z1:2181", "/a/b", "u:a:b@@c"),
        ("zk://u:secret@z1:2181/mesos", "z1:2181", "/mesos", "u:secret"),
        ("zk://z1:2181/mesos", "z1:2181", "/mesos", None),
    ],
)
def test_zk_credentials_end_at_the_last_at_sign(
    url: str, hosts: str, path: str, auth: str | None
) -> None:
    source = parse_masters(url)
    assert source == ZooKeeperSource(hosts, path, auth)
    assert isinstance(source, ZooKeeperSource)
    assert source.auth == auth
    if auth:
        assert auth.partition(":")[2] not in repr(source)  # the password is never shown


@pytest.mark.parametrize(
    "url", ["zk://u:hunter2@z1:2181", "zk://u:hunter2@/mesos", "zk://@z1:2181/mesos"]
)
def test_a_bad_zk_url_is_a_spec_error_that_hides_the_password(url: str) -> None:
    with pytest.raises(SpecError, match="bad ZooKeeper URL") as caught:
        parse_masters(url)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("10.0.0.1:5050\n", [MasterAddress("http", "10.0.0.1", 5050)]),
        (
            "  m1:5050,https://m2:5051  \n",
            [MasterAddress("http", "m1", 5050), MasterAddress("https", "m2", 5051)],
        ),
        ("zk://u:p@w@z1:2181/mesos\n", ZooKeeperSource("z1:2181", "/mesos", "u:p@w")),
    ],
)
def test_a_file_url_is_read_once_and_its_content_parsed(
    tmp_path: Path, content: str, expected: object
) -> None:
    # MasterDetector::create (src/master/detector/detector.cpp): all after
    # file:// is the path; the content, trimmed, is a master spec itself.
    spec = tmp_path / "master"
    spec.write_text(content)
    assert parse_masters(f"file://{spec}") == expected
    # A file naming another file is followed too.
    outer = tmp_path / "outer"
    outer.write_text(f"file://{spec}\n")
    assert parse_masters(f" file://{outer} ") == expected


def test_a_file_url_that_cannot_be_read_is_one_spec_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(SpecError) as caught:
        parse_masters(f"file://{missing}")
    assert str(caught.value) == (
        f"Mesos master file://{missing}: cannot read {missing}: No such file or directory"
    )
    empty = tmp_path / "empty"
    empty.write_text(" \n")
    with pytest.raises(SpecError, match=rf"{empty} is empty \(it should name the master\)$"):
        parse_masters(f"file://{empty}")
    with pytest.raises(SpecError, match="Is a directory"):
        parse_masters(f"file://{tmp_path}")
    loop = tmp_path / "loop"
    loop.write_text(f"file://{loop}")
    with pytest.raises(SpecError, match="file:// in a row"):
        parse_masters(f"file://{loop}")


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("zk://z1:99999/mesos", "bad ZooKeeper URL 'zk://z1:99999/mesos': server 'z1:99999': "),
        ("zk://u:hunter2@z1:2181,z2:x/mesos", "bad ZooKeeper URL 'zk://***@z1:2181,z2:x/mesos': "),
        ("zk://z1:0/mesos", "server 'z1:0': port 0 is not between 1 and 65535"),
    ],
)
def test_a_bad_zookeeper_server_is_named_in_its_zk_url(url: str, said: str) -> None:
    # It was said as an http:// master address: 'http://z1:99999'.
    with pytest.raises(SpecError) as caught:
        parse_masters(url)
    assert said in str(caught.value)
    assert "http" not in str(caught.value) and "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    "given", ["10.0.0.1:5050/mesos", "https://m1:5050/api/v1/scheduler", "m1,m2:5050/x"]
)
def test_a_master_address_with_a_path_is_refused_not_cut(given: str) -> None:
    # The path was dropped without a word: a proxy's prefix, say, unused.
    with pytest.raises(SpecError, match="an address takes no path"):
        parse_masters(given)


@pytest.mark.parametrize("given", ["m1:5050/", "http://m1:5050/#/", "http://m1:5050#/frameworks"])
def test_a_master_s_web_ui_address_is_its_address(given: str) -> None:
    assert parse_masters(given) == [MasterAddress("http", "m1", 5050)]


API = "/api/v1/scheduler"


# -- a master that speaks only TLS, dialled with http ---------------------------


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


@pytest.mark.unit
def test_a_plain_server_that_hangs_up_is_still_a_master_lost_and_retried() -> None:
    """Only an answer in TLS makes the hang-up a TLS master: a plain server
    that hangs up (a master going down) is asked once, briefly, and stays a
    TransportError, which the client retries."""
    from tfmesos.mesos.transport import TransportError

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        writer.close()

    async def scenario() -> BaseException:
        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport = AiohttpTransport()
        try:
            await transport.open_stream(f"http://127.0.0.1:{port}{API}", b"{}", {})
        except BaseException as exc:  # what it raised is the subject
            return exc
        finally:
            await transport.aclose()
            server.close()
        raise AssertionError("a server that hangs up answered")

    error = asyncio.run(scenario())
    assert type(error) is TransportError, repr(error)


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
