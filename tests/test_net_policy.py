"""The egress decision function (`sandkit.net.policy`), checked without sending a packet.

Addresses that must always be refused (loopback, link-local with the cloud metadata
services, the host, multicast, ...) are only ever checked here, against the decision:
no test sends traffic to them. Names resolve through a fake resolver.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandkit import ErrorCode, SandboxError
from sandkit.net import policy as policy_module
from sandkit.net.policy import (
    ALWAYS_DENIED,
    Decider,
    Policy,
    PolicyError,
    always_denied,
    is_public,
    parse_address,
    parse_rule,
)
from sandkit.network import EgressOptions, EgressPolicy

PUBLIC = "93.184.216.34"  # never contacted: these tests only decide
PUBLIC6 = "2606:2800:220:1:248:1893:25c8:1946"


def policy(mode: str = "allow", allow: list[str] | None = None, deny: list[str] | None = None):
    return Policy.from_dict({"mode": mode, "allow": allow or [], "deny": deny or []})


def resolver(table: dict[str, list[str]]):
    def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise OSError(-2, "Name or service not known")
        return table[host]

    return resolve


WORLD = resolver(
    {
        "pypi.org": [PUBLIC],
        "files.pythonhosted.org": [PUBLIC],
        "api.github.com": [PUBLIC6],
        "github.com": [PUBLIC],
        "evil.example": [PUBLIC],
        "rebind.example": ["127.0.0.1"],
        "meta.example": ["169.254.169.254"],
        "internal.example": ["10.1.2.3"],
        "mixed.example": ["169.254.169.254", PUBLIC],
        "mapped.example": ["::ffff:169.254.169.254"],
        "nat64.example": ["64:ff9b::a9fe:a9fe"],
        "sixtofour.example": ["2002:a9fe:a9fe::1"],
        "private6.example": ["fd12:3456::1"],
    }
)


# -- rules ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("pypi.org", "pypi.org"),
        ("PyPI.Org.", "pypi.org"),
        ("*.github.com", "*.github.com"),
        ("*.github.com:443", "*.github.com:443"),
        ("x.test:80,443", "x.test"),
        ("x.test:*", "x.test:*"),
        ("x.test:8000-8100,8050-8200,22", "x.test:22,8000-8200"),
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("10.1.2.3/8:*", "10.0.0.0/8:*"),
        ("203.0.113.7", "203.0.113.7/32"),
        ("2001:db8::/32", "[2001:db8::/32]"),
        ("[2001:db8::1]:443", "[2001:db8::1/128]:443"),
        ("bücher.example", "xn--bcher-kva.example"),
    ],
)
def test_rules_normalize(text: str, normal: str) -> None:
    assert parse_rule(text).text == normal


@pytest.mark.parametrize(
    "text",
    [
        "",
        "*",
        "*.",
        "*x.com",
        "a.*.com",
        "a..b",
        "-a.com",
        "x.com:0",
        "x.com:70000",
        "x.com:9-1",
        "x.com:http",
        "x.com:",
        "[2001:db8::1",
        "127.1",
        "2130706433",
        "0x7f.1",
        "a" * 300,
        "under score.com",
        "2001:db8::1/128:443",
    ],
)
def test_bad_rules_are_refused(text: str) -> None:
    with pytest.raises(PolicyError):
        parse_rule(text)


def test_default_ports_are_http_and_https() -> None:
    rule = parse_rule("pypi.org")
    assert rule.has_port(80) and rule.has_port(443) and not rule.has_port(22)
    assert parse_rule("pypi.org:*").has_port(22)


def test_wildcards_match_below_the_domain_only() -> None:
    rule = parse_rule("*.github.com")
    assert rule.matches_name("api.github.com", 443)
    assert rule.matches_name("a.b.github.com", 443)
    assert not rule.matches_name("github.com", 443)
    assert not rule.matches_name("evilgithub.com", 443)
    assert not rule.matches_name("github.com.evil.example", 443)


def test_mode_none_takes_no_rules() -> None:
    with pytest.raises(PolicyError):
        Policy.from_dict({"mode": "none", "allow": ["pypi.org"]})
    with pytest.raises(PolicyError):
        Policy.from_dict({"mode": "everything"})
    with pytest.raises(PolicyError):
        Policy.from_dict({"mode": "allow", "allow": ["x.test"] * 1, "extra": 1})


# -- decisions ------------------------------------------------------------------------


def test_none_refuses_everything() -> None:
    decision = Decider(policy("none")).decide("pypi.org", 443, WORLD)
    assert not decision.allowed and "policy none" in decision.reason


def test_allowed_name_connects_to_its_resolved_addresses() -> None:
    decision = Decider(policy(allow=["pypi.org"])).decide("pypi.org", 443, WORLD)
    assert decision.allowed and decision.addresses == (PUBLIC,)


def test_name_not_in_the_list_is_refused_without_resolving() -> None:
    def no_dns(host: str, port: int) -> list[str]:
        raise AssertionError("a refused name must not be resolved")

    decision = Decider(policy(allow=["pypi.org"])).decide("evil.example", 443, no_dns)
    assert not decision.allowed and "not in this sandbox's egress allow list" in decision.reason


def test_wrong_port_is_refused() -> None:
    decision = Decider(policy(allow=["pypi.org"])).decide("pypi.org", 22, WORLD)
    assert not decision.allowed


def test_deny_wins_over_allow_and_over_open() -> None:
    allow = Decider(policy(allow=["*.github.com"], deny=["api.github.com"]))
    assert not allow.decide("api.github.com", 443, WORLD).allowed
    opened = Decider(policy("open", deny=["evil.example", f"[{PUBLIC6}/128]:*"]))
    assert not opened.decide("evil.example", 443, WORLD).allowed
    assert not opened.decide("api.github.com", 443, WORLD).allowed  # by its address
    assert opened.decide("pypi.org", 443, WORLD).allowed


@pytest.mark.parametrize("mode", ["allow", "open"])
def test_names_resolving_to_local_addresses_are_refused(mode: str) -> None:
    decider = Decider(policy(mode, allow=["*.example"] if mode == "allow" else []))
    for name in ("rebind.example", "meta.example", "mapped.example", "nat64.example"):
        decision = decider.decide(name, 443, WORLD)
        assert not decision.allowed, name
        assert "no sandbox may reach" in decision.reason
    for name in ("internal.example", "private6.example"):
        decision = decider.decide(name, 443, WORLD)
        assert not decision.allowed and "private address" in decision.reason, name


def test_a_mixed_answer_connects_only_to_the_allowed_address() -> None:
    decision = Decider(policy(allow=["mixed.example"])).decide("mixed.example", 443, WORLD)
    assert decision.allowed and decision.addresses == (PUBLIC,)


def test_private_addresses_need_a_cidr_rule() -> None:
    with_cidr = Decider(policy(allow=["internal.example", "10.1.0.0/16"]))
    assert with_cidr.decide("internal.example", 443, WORLD).addresses == ("10.1.2.3",)
    assert with_cidr.decide("10.1.9.9", 443, WORLD).allowed  # the range by address
    assert not with_cidr.decide("10.2.0.1", 443, WORLD).allowed
    # Without a name rule, a CIDR rule allows a name only from the operator's hosts table
    # (never by looking the name up: see the DNS tests below).
    cidr_only = policy(allow=["10.1.0.0/16"])
    assert not Decider(cidr_only).decide("internal.example", 443, WORLD).allowed
    hosts = {"internal.example": ["10.1.2.3"]}
    assert Decider(cidr_only, hosts=hosts).decide("internal.example", 443, WORLD).allowed


def test_ip_literals_need_a_cidr_rule() -> None:
    names_only = Decider(policy(allow=["pypi.org"]))
    decision = names_only.decide(PUBLIC, 443, WORLD)
    assert not decision.allowed and "needs a CIDR rule" in decision.reason
    assert Decider(policy(allow=[f"{PUBLIC}/32"])).decide(PUBLIC, 443, WORLD).allowed
    assert Decider(policy("open")).decide(PUBLIC, 443, WORLD).allowed
    assert Decider(policy("open")).decide(f"[{PUBLIC6}]", 443, WORLD).allowed
    assert not Decider(policy("open")).decide("10.0.0.1", 443, WORLD).allowed


@pytest.mark.parametrize(
    "host",
    ["localhost", "LOCALHOST.", "app.localhost", "127.1", "2130706433", "0x7f000001", "0x7f.1"],
)
def test_local_names_and_numeric_tricks_are_refused(host: str) -> None:
    opened = Decider(policy("open", allow=["0.0.0.0/0:*"]))
    decision = opened.decide(host, 80, resolver({}))
    assert not decision.allowed


def test_the_hosts_table_is_trusted_with_private_addresses_not_with_local_ones() -> None:
    hosts = {"mirror.internal": ["10.9.8.7"], "loop.internal": ["127.0.0.1"]}
    decider = Decider(policy(allow=["mirror.internal", "loop.internal"]), hosts=hosts)
    assert decider.decide("mirror.internal", 443, WORLD).addresses == ("10.9.8.7",)
    assert not decider.decide("loop.internal", 443, WORLD).allowed
    # The table does not make a name allowed: the policy still has to name it.
    assert (
        not Decider(policy(allow=["pypi.org"]), hosts=hosts)
        .decide("mirror.internal", 443, WORLD)
        .allowed
    )


def test_the_hosts_own_addresses_are_refused() -> None:
    host_net = ipaddress.ip_network("172.17.0.1/32")
    decider = Decider(policy("open", allow=["172.16.0.0/12:*"]), denied=[host_net])
    assert not decider.decide("172.17.0.1", 2375, WORLD).allowed
    assert decider.decide("172.17.0.2", 2375, WORLD).allowed


def test_unresolvable_names_are_refused_with_the_reason() -> None:
    decision = Decider(policy("open")).decide("nowhere.example", 443, WORLD)
    assert not decision.allowed and "cannot resolve" in decision.reason


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.255.255.254",
        "0.0.0.0",
        "169.254.169.254",
        "169.254.170.2",
        "100.100.100.200",
        "168.63.129.16",
        "224.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fd00:ec2::254",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "64:ff9b::7f00:1",
        "2002:7f00:1::1",
        "::127.0.0.1",
    ],
)
def test_always_denied_addresses(address: str) -> None:
    assert always_denied(ipaddress.ip_address(address))
    everything = policy("open", allow=["0.0.0.0/0:*", "[::/0]:*"])
    assert not Decider(everything).decide(address, 80, WORLD).allowed
    hosts = {"trusted.internal": [address]}
    assert not Decider(everything, hosts=hosts).decide("trusted.internal", 80, WORLD).allowed


_ALWAYS = [n for n in ALWAYS_DENIED if n.prefixlen >= 8]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_ALWAYS), st.integers(min_value=0, max_value=2**32 - 1), st.booleans())
def test_no_policy_reaches_an_always_denied_address(net, offset: int, as_mapped: bool) -> None:
    address = net.network_address + (offset % net.num_addresses)
    if as_mapped and address.version == 4:
        address = ipaddress.IPv6Address("::ffff:" + str(address))
    everything = policy("open", allow=["0.0.0.0/0:*", "[::/0]:*", "*.example:*"])
    table = resolver({"x.example": [str(address)]})
    for decider in (Decider(everything), Decider(everything, hosts={"y.example": [str(address)]})):
        assert not decider.decide(str(address), 443, table).allowed
        assert not decider.decide("x.example", 443, table).allowed
        assert not decider.decide("y.example", 443, table).allowed


def test_public_and_private_classification() -> None:
    assert is_public(ipaddress.ip_address(PUBLIC))
    assert is_public(ipaddress.ip_address("::ffff:" + PUBLIC))
    for private in ("10.0.0.1", "172.16.5.4", "192.168.1.1", "100.64.0.1", "fd00::1"):
        assert not is_public(ipaddress.ip_address(private))


# -- ceilings and the settings model ----------------------------------------------------


def test_ceiling_covers() -> None:
    ceiling = policy(allow=["*.github.com", "pypi.org:*", "10.0.0.0/8:443"])
    assert policy(allow=["api.github.com", "*.api.github.com"]).problems_within(ceiling) == []
    assert policy(allow=["pypi.org:22"]).problems_within(ceiling) == []
    assert policy(allow=["10.1.0.0/16:443"]).problems_within(ceiling) == []
    assert policy(allow=["github.com"]).problems_within(ceiling)  # the apex is not below
    assert policy(allow=["10.1.0.0/16:80"]).problems_within(ceiling)
    assert policy(allow=["11.0.0.0/8"]).problems_within(ceiling)
    assert policy("open").problems_within(ceiling)
    opened = policy("open")
    assert policy(allow=["anything.example:*", f"{PUBLIC}/32"]).problems_within(opened) == []
    assert policy(allow=["10.0.0.0/8"]).problems_within(opened)  # private needs a cover
    assert policy("none").problems_within(policy("none")) == []


def test_the_ceilings_deny_rules_apply_to_every_box() -> None:
    options = EgressOptions(
        ceiling=EgressPolicy(mode="open", deny=["evil.example"]),
        policy=EgressPolicy(mode="allow", allow=["evil.example", "pypi.org"]),
    )
    enforced = Policy.from_dict(options.enforced(options.policy))
    decider = Decider(enforced)
    assert not decider.decide("evil.example", 443, WORLD).allowed
    assert decider.decide("pypi.org", 443, WORLD).allowed


def test_egress_options() -> None:
    assert not EgressOptions().enabled
    assert EgressOptions().command_env() == {}
    options = EgressOptions(ceiling=EgressPolicy(mode="allow", allow=["pypi.org"]))
    assert options.enabled and options.policy.mode == "none"
    env = options.command_env()
    assert env["https_proxy"] == env["HTTP_PROXY"] == "http://127.0.0.1:3128"
    assert "localhost" in env["no_proxy"]
    with pytest.raises(SandboxError) as info:
        options.check(EgressPolicy(mode="allow", allow=["evil.example"]))
    assert info.value.code is ErrorCode.ACCESS_DENIED and "evil.example" in info.value.message
    with pytest.raises(SandboxError) as info:
        EgressOptions().check(EgressPolicy(mode="open"))
    assert info.value.code is ErrorCode.ACCESS_DENIED
    with pytest.raises(ValueError, match=r"exceeds egress\.ceiling"):
        EgressOptions(
            policy=EgressPolicy(mode="open"), ceiling=EgressPolicy(mode="allow", allow=["a.test"])
        )
    with pytest.raises(ValueError, match="IP addresses"):
        EgressOptions(hosts={"mirror.test": ["not-an-address"]})
    assert EgressOptions(hosts={"Mirror.Test.": "10.0.0.1"}).hosts == {"mirror.test": ["10.0.0.1"]}


def test_policy_model_parses_and_reports() -> None:
    assert EgressPolicy.parse("open").mode == "open"
    parsed = EgressPolicy.parse({"mode": "allow", "allow": ["PyPI.org", "pypi.org", "*.x.test"]})
    assert parsed.allow == ("pypi.org", "*.x.test")
    for bad in ({"mode": "allow", "allow": ["*"]}, {"mode": "none", "allow": ["a.test"]}, "all"):
        with pytest.raises(SandboxError) as info:
            EgressPolicy.parse(bad)
        assert info.value.code is ErrorCode.INVALID_ARGUMENT


# -- an address in another form: allow rules match their own family only ----------------


def v6_forms(v4: str) -> dict[str, str]:
    """Every IPv6 spelling that embeds `v4` (the address itself is another host)."""
    n = int(ipaddress.IPv4Address(v4))
    six = ipaddress.IPv6Address
    return {
        "mapped": f"::ffff:{v4}",
        "mapped-hex": str(six((0xFFFF << 32) | n)),
        "translated": f"::ffff:0:{v4}",
        "compatible": f"::{v4}",
        "6to4": str(six((0x2002 << 112) | (n << 80) | 0x99)),
        "6to4-subnet": str(six((0x2002 << 112) | (n << 80) | (0x1234 << 64) | 5)),
        "nat64": f"64:ff9b::{v4}",
        "nat64-local/48": str(
            six((0x0064_FF9B_0001 << 80) | ((n >> 16) << 64) | ((n & 0xFFFF) << 40))
        ),
        "nat64-local/56": str(
            six((0x0064_FF9B_0001 << 80) | ((n >> 24) << 64) | ((n & 0xFFFFFF) << 32))
        ),
        "nat64-local/64": str(six((0x0064_FF9B_0001 << 80) | (n << 24))),
        "nat64-local/96": str(six((0x0064_FF9B_0001 << 80) | n)),
        "teredo": str(
            six(
                (0x20010000 << 96)
                | (0x4136E378 << 64)
                | (0x8000 << 48)
                | (0x63BF << 32)
                | (n ^ 0xFFFFFFFF)
            )
        ),
        "isatap": str(six((0xFD77 << 112) | (0x5EFE << 32) | n)),
        "isatap-global": str(six((0x2A00_1450 << 96) | (0x0200_5EFE << 32) | n)),
    }


FORMS_OF_10_77_0_10 = v6_forms("10.77.0.10")


@pytest.mark.parametrize("form", FORMS_OF_10_77_0_10, ids=list(FORMS_OF_10_77_0_10))
def test_an_ipv4_rule_never_allows_an_ipv6_address(form: str) -> None:
    """Issue 32 item 2: with allow 10.77.0.10/32:*, CONNECT [2002:a4d:a::99]:80 reached
    another server: the rule matched the IPv4 inside the 6to4 address, and the proxy
    connected to the IPv6 address itself."""
    address = FORMS_OF_10_77_0_10[form]
    decider = Decider(policy(allow=["10.77.0.10/32:*"]))
    assert decider.decide("10.77.0.10", 80, WORLD).allowed
    decision = decider.decide(f"[{address}]", 80, WORLD)
    assert not decision.allowed, (form, address, decision)
    # Nor when a name resolves to it.
    named = Decider(policy(allow=["pkg.example", "10.77.0.10/32:*"]))
    assert not named.decide("pkg.example", 80, resolver({"pkg.example": [address]})).allowed


def test_public_ipv4_rules_do_not_open_ipv6_either() -> None:
    decider = Decider(policy(allow=["8.8.8.8/32:443"]))
    for address in [*v6_forms("8.8.8.8").values(), "2002:808:808:1234::5"]:
        assert not decider.decide(f"[{address}]", 443, WORLD).allowed, address


def test_an_ipv6_rule_allows_its_own_addresses_only() -> None:
    sixtofour = Decider(policy(allow=["[2002:a4d:a::/48]:*"]))
    assert sixtofour.decide("[2002:a4d:a::99]", 80, WORLD).allowed  # what it names
    assert not sixtofour.decide("10.77.0.10", 80, WORLD).allowed
    mapped = Decider(policy(allow=["[::ffff:0:0/96]:*"]))
    assert not mapped.decide("10.77.0.10", 80, WORLD).allowed


@pytest.mark.parametrize("form", FORMS_OF_10_77_0_10, ids=list(FORMS_OF_10_77_0_10))
def test_deny_rules_see_every_form(form: str) -> None:
    address = FORMS_OF_10_77_0_10[form]
    assert parse_rule("10.77.0.10/32").matches_any_form(ipaddress.ip_address(address), 443)
    everything = ["0.0.0.0/0:*", "[::/0]:*"]
    decider = Decider(policy("open", allow=everything, deny=["10.77.0.10/32"]))
    assert not decider.decide(f"[{address}]", 443, WORLD).allowed
    allowed = Decider(policy("open", allow=everything, deny=["10.77.0.11/32"]))
    # The /96 place of 64:ff9b:1::/48 reads 0.0.0.0 from the other places' forms.
    if form not in ("nat64-local/48", "nat64-local/56", "nat64-local/64"):
        assert allowed.decide(f"[{address}]", 443, WORLD).allowed, form


@pytest.mark.parametrize("inner", ["127.0.0.1", "169.254.169.254", "0.0.0.0", "224.0.0.1"])
def test_always_denied_in_every_form(inner: str) -> None:
    everything = Decider(policy("open", allow=["0.0.0.0/0:*", "[::/0]:*", "*.example:*"]))
    for form, address in v6_forms(inner).items():
        assert always_denied(ipaddress.ip_address(address)), (form, address)
        assert not everything.decide(f"[{address}]", 443, WORLD).allowed, (form, address)
        table = resolver({"x.example": [address]})
        assert not everything.decide("x.example", 443, table).allowed, (form, address)
    host = ipaddress.ip_network("172.17.0.1/32")
    for form, address in v6_forms("172.17.0.1").items():
        assert always_denied(ipaddress.ip_address(address), [host]), form


def test_private_in_any_form_and_public_only_when_every_form_is() -> None:
    for form, address in v6_forms("10.77.0.10").items():
        assert not is_public(ipaddress.ip_address(address)), form
    assert is_public(ipaddress.ip_address("2002:808:808::1"))  # 6to4 of a public address
    assert is_public(ipaddress.ip_address("64:ff9b::8.8.8.8"))
    assert not is_public(ipaddress.ip_address("fd77::5efe:808:808"))  # ISATAP: fd77 counts
    assert not is_public(ipaddress.ip_address("::1"))


@pytest.mark.parametrize(
    "host",
    [
        "fe80::1%eth0",
        "[fe80::1%eth0]",
        "fe80::1%25eth0",
        f"{PUBLIC6}%eth0",
        f"[{PUBLIC6}%1]",
        "[10.77.0.10]",
        f"[{PUBLIC}]",
        "[127.1]",
        "[0x7f.1]",
        "[2130706433]",
    ],
)
def test_zones_and_ipv4_in_brackets_are_no_destination(host: str) -> None:
    """A zone names an interface of the proxy's machine; brackets hold IPv6 only."""
    everything = policy("open", allow=["0.0.0.0/0:*", "[::/0]:*"])
    assert not Decider(everything).decide(host, 443, WORLD).allowed
    assert parse_address(host) is None


# -- names: resolved only when a name rule could allow them (DNS exfiltration) ----------


class CountingResolver:
    """A resolver stub: every name it is asked for, in order."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        if host not in self.table:
            raise OSError(-2, "Name or service not known")
        return self.table[host]


def test_a_cidr_rule_alone_never_gets_a_name_resolved() -> None:
    """Issue 32 item 3: with any CIDR rule, `<data>.exfil.test` was resolved (and so sent
    to the outside resolver) before it was refused."""
    dns = CountingResolver({"pkg.test": [PUBLIC], "c2VjcmV0.exfil.test": ["10.77.0.10"]})
    for rules in (["10.0.0.0/8:*"], ["0.0.0.0/0:*", "[::/0]:*"], ["pkg.test", "10.0.0.0/8:*"]):
        decider = Decider(policy(allow=rules))
        for name in ("c2VjcmV0.exfil.test", "x.c2VjcmV0.exfil.test.", "C2VJCMV0.EXFIL.TEST"):
            decision = decider.decide(name, 80, dns)
            assert not decision.allowed and "not in this sandbox's egress allow list" in (
                decision.reason
            )
    assert dns.asked == []


def test_only_names_a_rule_could_allow_are_resolved() -> None:
    dns = CountingResolver({"pkg.test": [PUBLIC], "a.mirror.test": [PUBLIC]})
    hosts = {"table.test": ["10.77.0.10"]}
    decider = Decider(
        policy(allow=["pkg.test:443", "*.mirror.test", "10.77.0.0/16:*"], deny=["bad.mirror.test"]),
        hosts=hosts,
    )
    assert not decider.decide("pkg.test", 22, dns).allowed  # the name's rule is for 443
    assert not decider.decide("mirror.test", 443, dns).allowed  # the wildcard's apex
    assert not decider.decide("bad.mirror.test", 443, dns).allowed  # denied by name
    assert decider.decide("table.test", 443, dns).addresses == ("10.77.0.10",)  # the table
    assert dns.asked == []
    assert decider.decide("pkg.test", 443, dns).allowed
    assert decider.decide("a.mirror.test", 443, dns).allowed
    assert dns.asked == ["pkg.test", "a.mirror.test"]
    # Mode open lets any public name through, so it resolves any name (not denied).
    opened = Decider(policy("open", deny=["*.exfil.test"]))
    assert not opened.decide("c2VjcmV0.exfil.test", 443, dns).allowed
    assert not opened.decide("nowhere.test", 443, dns).allowed
    assert dns.asked == ["pkg.test", "a.mirror.test", "nowhere.test"]


def test_the_system_resolver_is_asked_for_the_absolute_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No search domain of the proxy's resolv.conf is tried first: `pypi.org` is looked up
    as `pypi.org.`, never as `pypi.org.<search domain>` (another name, another answer)."""
    asked: list[str] = []

    def fake_getaddrinfo(host: str, port: int, *args: object, **kwargs: object) -> list[object]:
        asked.append(host)
        return [(2, 1, 6, "", (PUBLIC, port))]

    monkeypatch.setattr(policy_module.socket, "getaddrinfo", fake_getaddrinfo)
    assert Decider(policy(allow=["pypi.org"])).decide("PyPI.org", 443).addresses == (PUBLIC,)
    assert asked == ["pypi.org."]
