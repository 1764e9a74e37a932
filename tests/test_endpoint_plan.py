"""The plan of what listens where inside a sandbox (lnk_common.endpoints), the address
book, the policy's argv for [tcp], [lan] and [localhost], and the [lan] rule of the
proxy's decision: sans IO, no sandbox."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_common.endpoints import (
    MAX_GIVEN_NAMES,
    MAX_KEPT_NAMES,
    AddressBook,
    EndpointError,
    Listener,
    entries,
    fixed_names,
    has_dns,
    lan_addresses,
    listeners,
    own_address,
    own_index,
    parse_entry,
)
from lnk_common.policy import Policy, PolicyArgvError
from lnk_proxy.decide import MachineFacts, address_refusal, matching_rule, parse_hosts


def test_the_plan_golden() -> None:
    plan = listeners(proxy=True, endpoints=("db.example.com:5432", "*.mongodb.net:27017",
                                            "db.example.com:5433"),
                     lan=("192.168.1.20:8123", "printer.local:631", "[fd00::20]:80", "nas"),
                     localhost_ports=(6379,))
    assert plan == [
        Listener("proxy", "127.0.0.1", 3128),
        Listener("dns", "127.0.0.1", 53, udp=True),
        Listener("dns", "127.0.0.1", 53),
        Listener("relay", "127.0.0.1", 6379),
        Listener("relay", "::1", 6379),
        Listener("endpoint", "0.0.0.0", 27017),  # noqa: S104 - the sandbox's loopback only
        Listener("endpoint", "127.53.0.1", 5432),
        Listener("endpoint", "127.53.0.1", 5433),
        Listener("endpoint", "192.168.1.20", 8123),
        Listener("endpoint", "127.53.0.2", 631),
        Listener("endpoint", "fd00::20", 80),
        Listener("endpoint", "127.53.0.3", 80),
        Listener("endpoint", "127.53.0.3", 443),
    ]


def test_no_dns_without_a_name_to_look_up() -> None:
    assert not has_dns(entries((), ("10.0.0.5:22",)))
    assert listeners(proxy=False, endpoints=(), lan=("10.0.0.5:22",),
                     localhost_ports=()) == [Listener("endpoint", "10.0.0.5", 22)]
    assert lan_addresses(entries((), ("10.0.0.5:22", "10.0.0.5:80", "x.lan"))) == ["10.0.0.5"]
    assert has_dns(entries(("db.x:1",), ()))


def test_a_star_port_serves_fixed_names_on_it_too() -> None:
    plan = listeners(proxy=False, endpoints=("a.x:9", "*.y:9"), lan=(), localhost_ports=())
    assert [item for item in plan if item.role == "endpoint"] == [
        Listener("endpoint", "0.0.0.0", 9)]  # noqa: S104


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"proxy": True, "localhost_ports": (3128,)}, "the proxy's own port"),
    ({"endpoints": ("a.x:1",), "localhost_ports": (53,)}, "the sandbox's DNS"),
    ({"endpoints": ("*.x:53",)}, "the sandbox's DNS"),
    ({"endpoints": ("*.x:8080",), "localhost_ports": (8080,)}, r"a \[localhost\] port"),
])
def test_collisions_are_refused_with_what_holds_the_port(kwargs: dict[str, object],
                                                         words: str) -> None:
    arguments: dict[str, object] = {"proxy": False, "endpoints": (), "lan": (),
                                    "localhost_ports": ()}
    arguments.update(kwargs)
    with pytest.raises(EndpointError, match=words):
        listeners(**arguments)  # type: ignore[arg-type]


def test_entries_parse() -> None:
    entry = parse_entry("*.mongodb.net:27017", lan=False)
    assert (entry.name, entry.ports, entry.wildcard, entry.literal) == (
        "mongodb.net", (27017,), True, False)
    assert parse_entry("[fd00::1]:80", lan=True).name == "fd00::1"
    assert parse_entry("nas", lan=True).ports == (80, 443)
    for bad, lan in (("db.x", False), ("*.x:1", True), ("x:0", False), ("[::1]x", True)):
        with pytest.raises(EndpointError):
            parse_entry(bad, lan=lan)


def test_own_addresses_and_their_indexes() -> None:
    assert own_address(0) == "127.53.0.1"
    assert own_address(254) == "127.53.0.255"
    assert own_address(255) == "127.53.1.0"
    assert own_address(MAX_GIVEN_NAMES - 1) == "127.53.255.254"
    with pytest.raises(EndpointError):
        own_address(MAX_GIVEN_NAMES)
    for text in ("127.53.0.0", "127.53.255.255", "127.54.0.1", "127.53.1", "127.53.01a.1",
                 "127.53.256.1"):
        assert own_index(text) is None, text


@given(st.integers(min_value=0, max_value=MAX_GIVEN_NAMES - 1))
def test_own_index_inverts_own_address(index: int) -> None:
    address = own_address(index)
    assert own_index(address) == index
    assert ipaddress.ip_address(address) in ipaddress.ip_network("127.53.0.0/16")


def test_the_book_gives_fixed_names_first_and_keeps_what_it_gave() -> None:
    book = AddressBook(fixed_names(entries(("db.x:5432", "*.y:1"), ("nas.lan",))))
    assert book.give("db.x") == "127.53.0.1"
    assert book.give("nas.lan") == "127.53.0.2"
    assert book.give("a.y") == "127.53.0.3"
    assert book.give("b.y") == "127.53.0.4"
    assert book.give("a.y") == "127.53.0.3"
    assert book.name_at("127.53.0.4") == "b.y"
    assert book.name_at("127.53.0.5") is None
    assert book.name_at("127.0.0.1") is None


def test_the_book_stops_giving_at_its_limit() -> None:
    book = AddressBook([])
    for number in range(MAX_KEPT_NAMES):
        assert book.give(f"n{number}.y") == own_address(number)
    assert book.give("one-more.y") is None
    assert book.give("n0.y") == own_address(0)  # a name given is kept
    assert MAX_KEPT_NAMES <= MAX_GIVEN_NAMES


def test_policy_argv_round_trip_with_endpoints_lan_and_ports() -> None:
    policy = Policy(settings="/s", endpoints=("db.x:5432", "*.y:1"),
                    lan=("10.0.0.5:22", "[fd00::1]:80", "nas"), localhost_ports=(6379, 11434),
                    calls_per_minute=5)
    argv = policy.to_argv()
    assert argv[:2] == ["--settings", "/s"]
    assert Policy.from_argv(argv) == policy
    assert policy.has_wire() and policy.needs_proxy()
    assert "--pause" in argv
    relay_only = Policy(settings="/s", localhost_ports=(1,))
    assert relay_only.has_wire() and not relay_only.needs_proxy()
    assert not Policy(settings="/s").has_wire()


@pytest.mark.parametrize("argv", [
    ["--settings", "/s", "--localhost-port", "0"],
    ["--settings", "/s", "--localhost-port", "65536"],
    ["--settings", "/s", "--localhost-port", "http"],
    ["--settings", "/s", "--endpoint", "-x:1"],
    ["--settings", "/s", "--lan", "a b:1"],
])
def test_policy_argv_refuses(argv: list[str]) -> None:
    with pytest.raises(PolicyArgvError):
        Policy.from_argv(argv)


class _Facts(MachineFacts):
    def is_local(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        return str(address) == "192.168.1.2"

    def on_network(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        return address in ipaddress.ip_network("192.168.1.0/24")


def test_lan_lets_this_machine_networks_by_but_never_this_machine() -> None:
    facts = _Facts()
    peer = ipaddress.ip_address("192.168.1.20")
    assert "own networks" in (address_refusal(peer, facts) or "")
    assert address_refusal(peer, facts, lan=True) is None
    for never in ("192.168.1.2", "127.0.0.1", "169.254.169.254", "::ffff:192.168.1.2"):
        assert address_refusal(ipaddress.ip_address(never), facts, lan=True), never


def test_a_lan_rule_is_found_before_an_ordinary_one() -> None:
    rules = (*parse_hosts(("nas.lan:80",)), *parse_hosts(("nas.lan", "[FD00::0001]:22"),
                                                          lan=True))
    assert matching_rule(rules, "nas.lan", 80) is rules[1]
    assert matching_rule(rules, "fd00::1", 22) is rules[2]
    assert matching_rule(rules, "nas.lan", 22) is None


# -- a running sandbox's added endpoints: the places a name needs (lnk_proxy.added_endpoints)

# A `*.` endpoint's port, on every address of the sandbox's own loopback (nothing else).
EVERY = "0.0.0.0"  # noqa: S104


def _giver(book: AddressBook) -> Callable[[str], str | None]:
    return book.give


def test_an_added_name_gets_an_address_no_other_has_on_each_of_its_ports() -> None:
    from lnk_proxy.added_endpoints import missing_places

    book = AddressBook(["allowed.lnkt"])  # the spec's endpoint: 127.53.0.1
    made = {("127.53.0.1", 7)}
    rules = parse_hosts(("denied.lnkt:7", "denied.lnkt:5432"))
    assert missing_places("denied.lnkt", rules, made, _giver(book)) == [
        ("127.53.0.2", 7), ("127.53.0.2", 5432)]
    # Stable for the run: asked again, the same address; made, nothing is missing.
    assert missing_places("denied.lnkt", rules[:1], made, _giver(book)) == [("127.53.0.2", 7)]
    made |= {("127.53.0.2", 7), ("127.53.0.2", 5432)}
    assert missing_places("denied.lnkt", rules, made, _giver(book)) == []


def test_a_wildcard_addition_needs_its_port_on_every_address_once() -> None:
    from lnk_proxy.added_endpoints import missing_places

    book = AddressBook([])
    rules = parse_hosts(("*.lnkt:7", "denied.lnkt:7"))
    # One socket on 0.0.0.0:7 serves both rules' names: no address of the name's own.
    assert missing_places("denied.lnkt", rules, set(), _giver(book)) == [(EVERY, 7)]
    assert missing_places("other.lnkt", rules[:1], {(EVERY, 7)}, _giver(book)) == []
    # A spec's `*.` socket on that port serves an added name too.
    assert missing_places("x.lnkt", parse_hosts(("x.lnkt:7",)), {(EVERY, 7)},
                          _giver(book)) == []


def test_an_added_name_past_the_last_address_is_refused_saying_so() -> None:
    from lnk_proxy.added_endpoints import PlacingError, missing_places

    with pytest.raises(PlacingError, match="every address"):
        missing_places("denied.lnkt", parse_hosts(("denied.lnkt:7",)), set(),
                       lambda _name: None)


@pytest.mark.parametrize("argv", [
    ["--namespace-fd", "3"],
    ["--namespace-fd", "x", "--proxy-fd", "4", "--place", "127.53.0.1:7"],
    ["--namespace-fd", "3", "--proxy-fd", "4", "--place", "10.0.0.1:7"],
    ["--namespace-fd", "3", "--proxy-fd", "4", "--place", "127.0.0.1:7"],
    ["--namespace-fd", "3", "--proxy-fd", "4", "--place", "127.53.0.1:0"],
    ["--namespace-fd", "3", "--proxy-fd", "4", "--place", "127.53.0.1"],
    ["--namespace-fd", "3", "--proxy-fd", "4", "--endpoint", "a.lnkt:7"],
    ["--namespace-fd", "3", "--proxy-fd", "4",
     *[part for port in range(1, 66) for part in ("--place", f"0.0.0.0:{port}")]],
    # `--dns`: only the sandbox's DNS, 127.0.0.1:53, once, before any place.
    ["--namespace-fd", "3", "--proxy-fd", "4", "--dns", "127.0.0.1:54"],
    ["--namespace-fd", "3", "--proxy-fd", "4", "--dns", "0.0.0.0:53"],
    ["--namespace-fd", "3", "--proxy-fd", "4", "--dns", "127.0.0.1:53", "--dns",
     "127.0.0.1:53"],
    ["--namespace-fd", "3", "--proxy-fd", "4", "--place", "127.53.0.1:7", "--dns",
     "127.0.0.1:53"],
    ["--namespace-fd", "3", "--proxy-fd", "4", "--place", "127.0.0.1:53"],
])
def test_the_helper_for_a_running_sandbox_refuses_a_place_that_is_no_endpoints(
    argv: list[str], capsys: pytest.CaptureFixture[str],
) -> None:
    """`lnk-sandbox-dns-helper --namespace-fd`: only an endpoint's own addresses (or
    0.0.0.0 for a `*.` port), each with a port, at most MAX_PLACES; one line, exit 1,
    before any namespace is joined."""
    from lnk_dns.helper import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 1
    said = capsys.readouterr().err
    assert said.startswith("lnk-sandbox-dns-helper: ") and said.count("\n") == 1, said


def test_the_helper_for_a_running_sandbox_takes_max_places_at_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """At the limit the places are taken, and what fails is the next step (joining a
    namespace through a descriptor that is none), not the count."""
    from lnk_dns.helper import main
    from lnk_dns.places import MAX_PLACES

    places = [part for port in range(1, MAX_PLACES + 1) for part in ("--place", f"{EVERY}:{port}")]
    with pytest.raises(SystemExit) as exited:
        main(["--namespace-fd", "999", "--proxy-fd", "998", *places])
    assert exited.value.code == 1
    said = capsys.readouterr().err
    assert "Bad file descriptor" in said and "places at once" not in said, said


def test_the_helper_for_a_running_sandbox_takes_the_dns_alone_or_before_places(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--dns 127.0.0.1:53` alone, or before places, is taken: what fails is joining a
    namespace through a descriptor that is none."""
    from lnk_dns.helper import main

    for places in ([], ["--place", "127.53.0.1:7"]):
        with pytest.raises(SystemExit) as exited:
            main(["--namespace-fd", "999", "--proxy-fd", "998", "--dns", "127.0.0.1:53",
                  *places])
        assert exited.value.code == 1
        said = capsys.readouterr().err
        assert "Bad file descriptor" in said, said
