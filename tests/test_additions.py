"""A wire's additions file read sans IO (lnk_common.additions) and the one host rule it
shares with the spec (lnk_common.hostentry): whole, byte by byte, with trailing data,
at its limits, and fuzzed. The real sandboxes are tests/test_allow.py."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_common import additions
from lnk_common.additions import (
    MAX_ADDITIONS,
    MAX_ADDITIONS_BYTES,
    AdditionsError,
    Entry,
    check_endpoint,
    check_host,
    encode_additions,
    parse_additions,
)
from lnk_common.hostentry import HostEntryError, normal_endpoint_entry, normal_host_entry
from lnk_wrap.spec import SpecError, parse_spec
from tests.conftest import fuzz


def document(*hosts: str, version: object = 1) -> bytes:
    return json.dumps({"version": version, "hosts": [
        {"host": host, "added": "2026-12-04T23:00:00Z", "by": "alice (uid 1000)"}
        for host in hosts]}).encode()


def test_a_file_is_read_whole_and_normalised_as_the_spec_normalises() -> None:
    entries = parse_additions(document("Docs.Example.COM.", "*.example.org:8443",
                                       "docs.example.com"))
    assert [entry.host for entry in entries] == ["docs.example.com", "*.example.org:8443"]
    assert entries[0].by == "alice (uid 1000)"
    assert parse_additions(encode_additions(entries))[1].as_json() == entries[1].as_json()


@pytest.mark.parametrize(("data", "why"), [
    (b"", "not JSON"), (b"[]", "version"), (document("a.com", version=2), "version"),
    (b'{"version": 1}', "not a list"), (b'{"version": 1, "hosts": ["a.com"]}', "\"host\""),
    (document("*"), "every host"), (document("a.com:99999"), "out of range"),
    (document("127.0.0.1"), "loopback"), (document("169.254.169.254"), "metadata"),
    (document("localhost"), "this machine"), (document("a b"), "not a host name"),
    (b'{"version": 1, "hosts": [{"host": "a.com", "by": 7}]}', "short string"),
    (document("a.com") + b"trailing", "not JSON"),
])
def test_what_is_no_additions_file_is_refused_with_its_reason(data: bytes, why: str) -> None:
    with pytest.raises(AdditionsError, match=None) as raised:
        parse_additions(data)
    assert why in str(raised.value)
    assert "\n" not in str(raised.value)


def test_every_prefix_of_a_file_parses_or_raises_its_own_error() -> None:
    data = document("docs.example.com", "*.example.org")
    for end in range(len(data)):
        with contextlib.suppress(AdditionsError):
            parse_additions(data[:end])


def test_the_limits_hold_at_their_number() -> None:
    hosts = [f"h{index}.example.com" for index in range(MAX_ADDITIONS)]
    assert len(parse_additions(document(*hosts))) == MAX_ADDITIONS
    with pytest.raises(AdditionsError, match=f"more than {MAX_ADDITIONS} hosts"):
        parse_additions(document(*hosts, "one.more.example.com"))
    padded = document("a.com")[:-1] + b" " * (MAX_ADDITIONS_BYTES - len(document("a.com"))) \
        + b"}"
    assert len(padded) == MAX_ADDITIONS_BYTES and parse_additions(padded)[0].host == "a.com"
    with pytest.raises(AdditionsError, match="larger than"):
        parse_additions(padded + b" ")
    # The largest file of MAX_ADDITIONS hosts of the longest shape fits under the limit.
    longest = ".".join(["a" * 61] * 4)[:251]
    entries = tuple(Entry(f"*.{index:03d}{longest[3:]}:65535", "x" * 20, "y" * 40)
                    for index in range(MAX_ADDITIONS))
    assert len(encode_additions(entries)) < MAX_ADDITIONS_BYTES


@given(st.binary(max_size=512))
@fuzz(4)
def test_any_bytes_parse_or_raise_the_one_error(data: bytes) -> None:
    try:
        entries = parse_additions(data)
    except AdditionsError:
        return
    assert all(entry.host == check_host(entry.host) for entry in entries)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["version", "hosts", "host", "added", "by", "x"]), inner, max_size=4),
    max_leaves=20)


@given(_JSON)
@fuzz(4)
def test_any_json_document_parses_or_raises_the_one_error(value: object) -> None:
    with contextlib.suppress(AdditionsError):
        parse_additions(json.dumps(value).encode())


_HOSTISH = st.text(alphabet="abcxyz019-_.*:AZ ", min_size=0, max_size=24)


@given(_HOSTISH)
@fuzz(4)
def test_allow_takes_a_host_exactly_when_the_spec_takes_it(text: str) -> None:
    """One rule: what `allow` takes as a name is what a spec's [network] hosts takes,
    normalised alike (allow refuses more only: addresses that are never a host)."""
    spec = (f'[network]\nmode = "proxy"\nhosts = [{json.dumps(text)}]\n').encode()
    try:
        policy = parse_spec(spec, file="s.toml", env={"HOME": "/root", "LNK_HOME": "/tmp/x"})
        from_spec: str | None = policy.hosts[0]
    except SpecError:
        from_spec = None
    try:
        from_rule: str | None = normal_host_entry(text)
    except HostEntryError:
        from_rule = None
    assert from_rule == from_spec
    try:
        from_allow: str | None = check_host(text)
    except AdditionsError:
        from_allow = None
    assert from_allow in (from_spec, None)
    if from_allow is None and from_spec is not None:
        name = from_spec.partition(":")[0]
        assert name == "localhost" or name.endswith(".localhost") \
            or name.replace(".", "").isdigit()


def test_the_reader_takes_a_change_at_once_and_fails_closed(tmp_path: Path) -> None:
    settings = str(tmp_path)
    assert additions.added_hosts(settings, "w").hosts == ()
    additions.update_additions(settings, "w", lambda entries: (
        *entries, Entry("a.example.com", "t", "me")))
    assert additions.added_hosts(settings, "w").hosts == ("a.example.com",)
    # A change at the same size, at once, is seen (the file had not settled: not kept).
    additions.update_additions(settings, "w", lambda entries: (Entry("b.example.com", "t",
                                                                     "me"),))
    assert additions.added_hosts(settings, "w").hosts == ("b.example.com",)
    path = additions.additions_path(settings, "w")
    Path(path).write_bytes(b"{ not json")
    found = additions.added_hosts(settings, "w")
    assert found.hosts == () and "cannot be taken: not JSON" in found.problem
    os.chmod(path, 0)
    os.unlink(path)
    os.mkdir(path)  # a folder where the file is: unreadable, so nothing more goes
    found = additions.added_hosts(settings, "w")
    assert found.hosts == () and "cannot be read" in found.problem


def test_a_change_that_raises_writes_nothing(tmp_path: Path) -> None:
    settings = str(tmp_path)
    additions.update_additions(settings, "w", lambda entries: (Entry("a.com", "t", "me"),))
    before = Path(additions.additions_path(settings, "w")).read_bytes()

    def refuse(entries: tuple[Entry, ...]) -> tuple[Entry, ...]:
        raise AdditionsError("no")

    with pytest.raises(AdditionsError):
        additions.update_additions(settings, "w", refuse)
    with pytest.raises(AdditionsError, match="the most it keeps"):
        additions.update_additions(settings, "w", lambda entries: tuple(
            Entry(f"h{index}.com", "t", "me") for index in range(MAX_ADDITIONS + 1)))
    assert Path(additions.additions_path(settings, "w")).read_bytes() == before
    assert sorted(os.listdir(tmp_path / "sandbox" / "wires" / "w")) == ["allowed",
                                                                         "allowed.lock"]


def test_endpoints_are_read_by_the_endpoints_rule_and_kept_apart() -> None:
    data = json.dumps({"version": 1, "hosts": [{"host": "db.example.com:5432"}],
                       "endpoints": [{"host": "DB.example.com.:05432"},
                                     {"host": "*.rs.example.com:27017"}]}).encode()
    entries = parse_additions(data)
    assert [(entry.host, entry.tcp) for entry in entries] == [
        ("db.example.com:5432", False), ("db.example.com:5432", True),
        ("*.rs.example.com:27017", True)]
    again = parse_additions(encode_additions(entries))
    assert [(entry.host, entry.tcp) for entry in again] == [(entry.host, entry.tcp)
                                                            for entry in entries]
    for bad, why in (("db.example.com", "names its port"), ("10.0.0.1:5432", "is a name"),
                     ("*:5432", "every host"), ("x.localhost:1", "this machine")):
        with pytest.raises(AdditionsError, match=why):
            parse_additions(json.dumps({"version": 1, "hosts": [],
                                        "endpoints": [{"host": bad}]}).encode())
    many = [{"host": f"h{index}.example.com:1"} for index in range(MAX_ADDITIONS)]
    with pytest.raises(AdditionsError, match="more than"):
        parse_additions(json.dumps({"version": 1, "hosts": [{"host": "a.com"}],
                                    "endpoints": many}).encode())


@given(st.text(alphabet="abcxyz019-_.*:[]AZ ", min_size=0, max_size=24))
@fuzz(4)
def test_allow_tcp_takes_an_endpoint_exactly_when_the_spec_takes_it(text: str) -> None:
    spec = f'[tcp]\nendpoints = [{json.dumps(text)}]\n'.encode()
    try:
        policy = parse_spec(spec, file="s.toml", env={"HOME": "/root", "LNK_HOME": "/tmp/x"})
        from_spec: str | None = policy.endpoints[0]
    except SpecError:
        from_spec = None
    try:
        from_rule: str | None = normal_endpoint_entry(text)
    except HostEntryError:
        from_rule = None
    assert from_rule == from_spec
    try:
        from_allow: str | None = check_endpoint(text)
    except AdditionsError:
        from_allow = None
    assert from_allow == from_spec or (from_allow is None and from_spec is not None
                                       and ".localhost:" in from_spec)


@pytest.mark.parametrize("kind", ["fifo", "link", "folder"])
def test_what_is_not_a_regular_file_is_never_waited_on_nor_followed(
        tmp_path: Path, kind: str) -> None:
    """A FIFO where the file is would hang a reader that opened it plainly (the proxy's
    loop); a link could point anywhere. Neither is read: no additions, and why."""
    settings = str(tmp_path)
    path = Path(additions.additions_path(settings, "w"))
    path.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link":
        target = tmp_path / "elsewhere"
        target.write_bytes(document("a.example.com"))
        path.symlink_to(target)
    else:
        path.mkdir()
    found = additions.added_hosts(settings, "w")
    assert found.hosts == () and "cannot be read" in found.problem, found.problem
    with pytest.raises(AdditionsError, match=str(path)):
        additions.read_entries(settings, "w")


def test_an_unsettled_file_is_parsed_again_only_when_its_bytes_changed(tmp_path: Path) -> None:
    """Within SETTLE_NS of a change the file is read at every look (its stat cannot tell
    a change) but parsed again only when its bytes differ: the same bytes give the very
    same answer, and a change in place at the same size, at once, is seen."""
    settings = str(tmp_path)
    additions.update_additions(settings, "w", lambda entries: (
        Entry("a.example.com", "t", "me"), Entry("db.example.com:5432", "t", "me", tcp=True)))
    first = additions.added_hosts(settings, "w")
    assert first.hosts == ("a.example.com",) and first.endpoints == ("db.example.com:5432",)
    assert additions.added_hosts(settings, "w") is first
    path = Path(additions.additions_path(settings, "w"))
    changed = path.read_bytes().replace(b"a.example.com", b"b.example.com")
    with path.open("r+b") as handle:  # the same inode and size: only the bytes tell
        handle.write(changed)
    assert additions.added_hosts(settings, "w").hosts == ("b.example.com",)
