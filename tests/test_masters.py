"""Reading the masters' ZooKeeper group as Mesos does, without a server
(tests/test_zookeeper.py runs the same against a real one)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tfmesos import SpecError
from tfmesos.mesos.masters import (
    MasterAddress,
    MasterInfo,
    Member,
    ZooKeeperSource,
    default_scheme,
    group_members,
    leading_member,
    master_info_from_node,
    parse_masters,
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
