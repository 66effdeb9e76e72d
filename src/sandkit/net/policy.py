"""Egress policy: the rules of one box, and the one function that decides a connection.

A policy has a mode and two rule lists:

- `none`: nothing leaves the box;
- `allow`: only destinations an `allow` rule names;
- `open`: every public destination;

and in every mode `deny` rules win over `allow` rules. A rule is a host name
(`pypi.org`), a wildcard for the names below a domain (`*.github.com`, not
`github.com` itself) or an address range (`10.1.2.0/24`, `2001:db8::/32`), with
ports after a colon (`:443`, `:8000-8100`, `:80,443`, `:*` for any); without
ports a rule means 80 and 443.

An address rule allows exactly the address family it is written in: `10.0.0.0/8`
never allows an IPv6 address, whatever IPv4 address that embeds (IPv4-mapped, 6to4,
NAT64, Teredo, ...), because the proxy connects to the IPv6 address itself and
that is another host. Refusals go the other way: deny rules, the always-denied
ranges and the private check look through every such form.

Whatever a policy says, `Decider` refuses:

- names that are no host names (`localhost`, `*.localhost`, numeric tricks such
  as `2130706433` or `0x7f.1` that resolvers read as addresses) and IPv6 zones
  (`fe80::1%eth0`);
- addresses no sandbox may reach: loopback, link-local (cloud metadata lives
  there: 169.254.169.254, and fd00:ec2::254), unspecified, multicast, reserved,
  other metadata services (100.100.100.200, 168.63.129.16) and the host's own
  addresses the proxy is told about — also when they hide inside an IPv6 form
  (IPv4-mapped or -translated, IPv4-compatible, 6to4, Teredo, NAT64, ISATAP);
- private (non-global) addresses, unless an `allow` CIDR rule covers them or the
  name comes from the operator's own hosts table: a public name an attacker
  controls cannot be pointed at the internal network (DNS rebinding);
- an IP literal unless a CIDR rule (or mode `open`, for public addresses) allows
  it: domain rules match names only.

A name is resolved only when the policy could allow it by name (a name rule that
matches it, or mode `open`) and it is not in the hosts table: a CIDR rule never
makes the proxy look a name up, so a box cannot carry data out in the names it
asks for (DNS exfiltration). The proxy resolves names itself, as absolute names,
and connects only to the addresses this decision returned, so what was checked is
what is reached.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import socket
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Tuple, Union

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
Ports = Tuple[Tuple[int, int], ...]  # inclusive ranges, sorted and merged

MODES = ("none", "allow", "open")
MODE_ORDER = {mode: index for index, mode in enumerate(MODES)}
DEFAULT_PORTS: Ports = ((80, 80), (443, 443))
MAX_RULES = 256
MAX_RULE_CHARS = 300
MAX_PORT_ITEMS = 64
MAX_HOST_CHARS = 253


def _nets(*texts: str) -> Tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(t) for t in texts)


# Never reachable from a box, whatever its policy.
ALWAYS_DENIED: Tuple[IPNetwork, ...] = _nets(
    "0.0.0.0/8",  # "this network"; 0.0.0.0 reaches the proxy itself
    "127.0.0.0/8",  # loopback
    "169.254.0.0/16",  # link-local: AWS/GCP/Azure/OpenStack metadata at 169.254.169.254
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved, and the broadcast address
    "100.100.100.200/32",  # Alibaba Cloud metadata
    "168.63.129.16/32",  # Azure wire server
    "::/128",
    "::1/128",
    "fe80::/10",  # link-local
    "fec0::/10",  # site-local (deprecated)
    "ff00::/8",  # multicast
    "fd00:ec2::254/128",  # AWS metadata over IPv6
)
# Not global: reachable only through a CIDR rule or the operator's hosts table.
PRIVATE_RANGES: Tuple[IPNetwork, ...] = _nets(
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "fc00::/7",
    "2001:db8::/32",
    "::ffff:0:0/96",
    "64:ff9b::/96",
    "64:ff9b:1::/48",
    "2002::/16",
    "2001::/32",
    "::/96",  # IPv4-compatible (deprecated)
    "::ffff:0:0:0/96",  # IPv4-translated (SIIT)
)
# IPv6 forms whose meaning is the IPv4 address inside them (they are judged by it).
_V6 = ipaddress.IPv6Network
MAPPED = _V6("::ffff:0:0/96")
TRANSLATED = _V6("::ffff:0:0:0/96")
COMPATIBLE = _V6("::/96")
NAT64_WELL_KNOWN = _V6("64:ff9b::/96")
NAT64_LOCAL = _V6("64:ff9b:1::/48")  # RFC 8215: the operator picks /48 to /96 inside it
SIXTOFOUR = _V6("2002::/16")
TEREDO = _V6("2001::/32")
TRANSITION: Tuple[ipaddress.IPv6Network, ...] = (
    MAPPED,
    TRANSLATED,
    COMPATIBLE,
    NAT64_WELL_KNOWN,
    NAT64_LOCAL,
    SIXTOFOUR,
    TEREDO,
)
_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")


class PolicyError(ValueError):
    """A rule or policy that does not parse; the message says what to write instead."""


# -- host names and addresses -------------------------------------------------------


def parse_address(text: str) -> Optional[IPAddress]:
    """`text` as an IP address, else None. Brackets may hold only an IPv6 address; a
    zone (`fe80::1%eth0`) is no address here: a scope names an interface of the
    proxy's machine, never a destination of a box."""
    value = text.strip()
    bracketed = value.startswith("[") and value.endswith("]")
    if bracketed:
        value = value[1:-1]
    if "%" in value:
        return None
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    if bracketed and address.version != 6:
        return None
    return address


def normalize_host(text: str) -> str:
    """A host name in the form rules are matched against: lowercase, ASCII (IDNA),
    no trailing dot. Raises PolicyError for anything that is not a host name."""
    if not isinstance(text, str):
        raise PolicyError("a host name must be a string")
    host = text.strip().rstrip(".").lower()
    if not host:
        raise PolicyError("empty host name")
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise PolicyError("%r is not a valid host name" % text[:80]) from None
    if len(host) > MAX_HOST_CHARS:
        raise PolicyError("host name longer than %d characters" % MAX_HOST_CHARS)
    labels = host.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        raise PolicyError("%r is not a valid host name" % text[:80])
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        # Resolvers read "2130706433", "127.1" or "0x7f.1" as addresses.
        raise PolicyError("%r is a number, not a host name" % text[:80])
    return host


def _v4(value: int) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(value & 0xFFFFFFFF)


def _nat64_local(packed: int) -> List[ipaddress.IPv4Address]:
    """The IPv4 address at each place RFC 6052 may put it under a /48, /56, /64 or /96
    prefix (the operator's length is not known here): a /48../64 place counts where its
    reserved octet (bits 64-71) and its suffix are zero, the /96 place always."""
    found = [_v4(packed)]  # /96
    if (packed >> 56) & 0xFF:
        return found
    places = (
        (0xFFFFFFFFFF, ((packed >> 64) & 0xFFFF) << 16 | (packed >> 40) & 0xFFFF),  # /48
        (0xFFFFFFFF, ((packed >> 64) & 0xFF) << 24 | (packed >> 32) & 0xFFFFFF),  # /56
        (0xFFFFFF, packed >> 24),  # /64
    )
    found.extend(_v4(value) for suffix, value in places if not packed & suffix)
    return found


def _embedded(address: IPAddress) -> List[IPAddress]:
    """The address and every IPv4 address hidden in its IPv6 form. Only for refusing:
    an address counts as denied or private when any of these is."""
    found: List[IPAddress] = [address]
    if not isinstance(address, ipaddress.IPv6Address):
        return found
    packed = int(address)
    compatible = address in COMPATIBLE and packed > 1  # ::a.b.c.d (:: and ::1: their own)
    if compatible or any(address in net for net in (MAPPED, TRANSLATED, NAT64_WELL_KNOWN)):
        found.append(_v4(packed))
    elif address in NAT64_LOCAL:
        found.extend(_nat64_local(packed))
    elif address.sixtofour is not None:
        found.append(address.sixtofour)
    elif address.teredo is not None:
        found.extend(address.teredo)  # the server, and the client (XOR'd back)
    if (packed >> 32) & 0xFCFFFFFF == 0x00005EFE:  # ISATAP interface id ::[02]00:5efe:a.b.c.d
        found.append(_v4(packed))
    return found


def always_denied(address: IPAddress, extra: Iterable[IPNetwork] = ()) -> bool:
    """Loopback, link-local, metadata, multicast, unspecified, reserved, or in `extra`
    (the host's own addresses) — in any of its forms."""
    extra = tuple(extra)
    for form in _embedded(address):
        for net in ALWAYS_DENIED + extra:
            if form.version == net.version and form in net:
                return True
    return False


def is_public(address: IPAddress) -> bool:
    """Globally routable, in every form it takes: a transition form (6to4, NAT64, ...)
    is as public as the IPv4 inside it, any other address must be global itself and
    anything embedded in it too."""
    forms = _embedded(address)
    transition = isinstance(address, ipaddress.IPv6Address) and any(
        address in net for net in TRANSITION
    )
    if not transition:
        if any(address.version == n.version and address in n for n in PRIVATE_RANGES):
            return False
        if not address.is_global:
            return False
    return all(f.is_global for f in forms[1:]) and (len(forms) > 1 or not transition)


# -- rules --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Rule:
    """One entry of an allow or deny list (see the module doc for the syntax)."""

    text: str  # the normalized form, e.g. "*.github.com:443"
    host: Optional[str] = None  # names: the host, or the domain below which a wildcard matches
    wildcard: bool = False
    network: Optional[IPNetwork] = None
    ports: Optional[Ports] = DEFAULT_PORTS  # None: any port

    def has_port(self, port: int) -> bool:
        return self.ports is None or any(lo <= port <= hi for lo, hi in self.ports)

    def matches_name(self, name: str, port: int) -> bool:
        if self.host is None or not self.has_port(port):
            return False
        if self.wildcard:
            return name.endswith("." + self.host)
        return name == self.host

    def matches_address(self, address: IPAddress, port: int) -> bool:
        """As an allow rule: the address itself, in the family the rule is written in
        (an IPv4 rule never allows an IPv6 address that embeds one of its addresses:
        the proxy would connect to the IPv6 address, another host)."""
        net = self.network
        if net is None or not self.has_port(port):
            return False
        return address.version == net.version and address in net

    def matches_any_form(self, address: IPAddress, port: int) -> bool:
        """As a deny rule: the address or any IPv4 address hidden in it."""
        net = self.network
        if net is None or not self.has_port(port):
            return False
        return any(f.version == net.version and f in net for f in _embedded(address))

    def covers(self, other: Rule) -> bool:
        """Everything `other` allows, this rule allows too (ceiling checks)."""
        if not _ports_cover(self.ports, other.ports):
            return False
        if self.network is not None:
            net = other.network
            return net is not None and _subnet(net, self.network)
        if other.host is None or self.host is None:
            return False
        if not self.wildcard:
            return not other.wildcard and other.host == self.host
        return (other.host == self.host and other.wildcard) or other.host.endswith("." + self.host)

    def reaches_private(self) -> bool:
        """An address rule that includes non-global space (needs a ceiling's cover)."""
        net = self.network
        if net is None:
            return False
        return any(
            p.version == net.version and net.overlaps(p) for p in PRIVATE_RANGES + ALWAYS_DENIED
        )


def _subnet(inner: IPNetwork, outer: IPNetwork) -> bool:
    if isinstance(inner, ipaddress.IPv4Network) and isinstance(outer, ipaddress.IPv4Network):
        return inner.subnet_of(outer)
    if isinstance(inner, ipaddress.IPv6Network) and isinstance(outer, ipaddress.IPv6Network):
        return inner.subnet_of(outer)
    return False


def _ports_cover(outer: Optional[Ports], inner: Optional[Ports]) -> bool:
    if outer is None:
        return True
    if inner is None:
        return False
    return all(any(o_lo <= lo and hi <= o_hi for o_lo, o_hi in outer) for lo, hi in inner)


def parse_ports(text: str) -> Optional[Ports]:
    """`*` (any), or comma-separated ports and ranges: `443`, `80,443`, `8000-8100`."""
    value = text.strip()
    if value == "*":
        return None
    items = [item.strip() for item in value.split(",")]
    if not value or len(items) > MAX_PORT_ITEMS:
        raise PolicyError("ports must be *, or up to %d ports or ranges" % MAX_PORT_ITEMS)
    ranges = []
    for item in items:
        lo_text, dash, hi_text = item.partition("-")
        if not lo_text.isdigit() or (dash and not hi_text.isdigit()):
            raise PolicyError("%r is not a port or a port range" % item[:40])
        lo = int(lo_text)
        hi = int(hi_text) if dash else lo
        if not 1 <= lo <= hi <= 65535:
            raise PolicyError("port %r is outside 1-65535 (or the range is reversed)" % item[:40])
        ranges.append((lo, hi))
    merged: List[Tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def _ports_text(ports: Optional[Ports]) -> str:
    if ports is None:
        return ":*"
    if ports == DEFAULT_PORTS:
        return ""
    return ":" + ",".join(str(lo) if lo == hi else "%d-%d" % (lo, hi) for lo, hi in ports)


def parse_rule(text: Any) -> Rule:
    """One rule from its text; PolicyError says what is wrong with it."""
    if not isinstance(text, str):
        raise PolicyError("a rule must be a string such as 'pypi.org' or '10.0.0.0/8:443'")
    value = text.strip()
    if not value:
        raise PolicyError("empty rule")
    if len(value) > MAX_RULE_CHARS:
        raise PolicyError("rule longer than %d characters" % MAX_RULE_CHARS)
    ports: Optional[Ports] = DEFAULT_PORTS
    if value.startswith("["):
        inside, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise PolicyError("%r: write an IPv6 rule as [2001:db8::/32]:443" % value[:80])
        target = inside
        if rest:
            ports = parse_ports(rest[1:])
    elif value.count(":") == 1:
        target, _, port_text = value.partition(":")
        ports = parse_ports(port_text)
    else:
        target = value  # a name, an IPv4 rule, or a bare IPv6 rule (no ports)
    target = target.strip()
    try:
        network = ipaddress.ip_network(target, strict=False)
    except ValueError:
        network = None
    if network is not None:
        text_form = str(network) if network.version == 4 else "[%s]" % network
        return Rule(text_form + _ports_text(ports), network=network, ports=ports)
    if ":" in target:
        raise PolicyError("%r: write an IPv6 rule with ports as [2001:db8::/32]:443" % value[:80])
    wildcard = target.startswith("*.")
    name = target[2:] if wildcard else target
    if "*" in name:
        raise PolicyError(
            "%r: a wildcard is only '*.' before a domain, e.g. *.github.com" % value[:80]
        )
    host = normalize_host(name)
    return Rule(("*." if wildcard else "") + host + _ports_text(ports), host, wildcard, None, ports)


# -- policies -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Policy:
    mode: str = "none"
    allow: Tuple[Rule, ...] = ()
    deny: Tuple[Rule, ...] = ()

    @classmethod
    def from_dict(cls, data: Any) -> Policy:
        if not isinstance(data, Mapping):
            raise PolicyError("a policy is an object with mode, allow and deny")
        unknown = set(data) - {"mode", "allow", "deny"}
        if unknown:
            raise PolicyError("unknown policy field(s): %s" % ", ".join(sorted(unknown)))
        mode = data.get("mode", "none")
        if mode not in MODES:
            raise PolicyError("mode must be one of %s, not %r" % (", ".join(MODES), mode))
        lists = []
        for name in ("allow", "deny"):
            items = data.get(name) or []
            if not isinstance(items, (list, tuple)):
                raise PolicyError("%s must be a list of rules" % name)
            lists.append(tuple(_dedupe(parse_rule(item) for item in items)))
        allow, deny = lists
        if len(allow) + len(deny) > MAX_RULES:
            raise PolicyError("a policy has at most %d rules" % MAX_RULES)
        if mode == "none" and (allow or deny):
            raise PolicyError("mode none takes no rules (nothing leaves the box)")
        return cls(mode, allow, deny)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "mode": self.mode,
            "allow": [r.text for r in self.allow],
            "deny": [r.text for r in self.deny],
        }

    def problems_within(self, ceiling: Policy) -> List[str]:
        """Why this policy asks for more than `ceiling` permits (empty: it does not)."""
        if MODE_ORDER[self.mode] > MODE_ORDER[ceiling.mode]:
            return ["mode %s is above the ceiling's mode %s" % (self.mode, ceiling.mode)]
        if self.mode == "none":
            return []
        problems = []
        for rule in self.allow:
            if ceiling.mode == "open" and not rule.reaches_private():
                continue
            if not any(c.covers(rule) for c in ceiling.allow):
                problems.append("allow rule %s is not covered by the ceiling" % rule.text)
        return problems

    def under(self, ceiling: Policy) -> Policy:
        """What the proxy enforces: this policy with the ceiling's deny rules added."""
        if self.mode == "none":
            return self
        deny = tuple(_dedupe(self.deny + ceiling.deny))
        return Policy(self.mode, self.allow, deny)


def _dedupe(rules: Iterable[Rule]) -> List[Rule]:
    seen = set()
    out = []
    for rule in rules:
        if rule.text not in seen:
            seen.add(rule.text)
            out.append(rule)
    return out


# -- deciding -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Decision:
    """`allowed` with the addresses to connect to, or a refusal and its reason; `resolve`:
    the name passed and must be resolved, then checked with `check_addresses` (only
    ever set for a name the policy could allow by name, see `Decider.check_name`)."""

    allowed: bool
    reason: str = ""
    addresses: Tuple[str, ...] = ()
    resolve: bool = False


def _denied(reason: str) -> Decision:
    return Decision(False, reason)


Resolver = Callable[[str, int], List[str]]


def absolute(name: str) -> str:
    """`name` as the resolver must be asked for it: fully qualified, so that the search
    list of the proxy's resolv.conf never turns `pypi.org` into another name first."""
    return name if name.endswith(".") else name + "."


def system_resolve(host: str, port: int) -> List[str]:
    """The proxy's system resolver (its resolv.conf), asked for the absolute name."""
    infos = socket.getaddrinfo(absolute(host), port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class Decider:
    """Decides the connections of one box: `policy` plus the operator's `hosts` table
    (name -> addresses, trusted like /etc/hosts) and `denied` (the host's addresses)."""

    def __init__(
        self,
        policy: Policy,
        hosts: Optional[Mapping[str, Iterable[str]]] = None,
        denied: Iterable[IPNetwork] = (),
    ) -> None:
        self.policy = policy
        self.hosts: Dict[str, Tuple[str, ...]] = {
            normalize_host(name): tuple(str(a) for a in addresses)
            for name, addresses in (hosts or {}).items()
        }
        self.denied: Tuple[IPNetwork, ...] = tuple(denied)

    def decide(self, host: str, port: int, resolve: Resolver = system_resolve) -> Decision:
        """The whole decision, resolving with `resolve` only when `check_name` says so."""
        first = self.check_name(host, port)
        if not first.resolve:
            return first
        name = normalize_host(host)
        try:
            addresses = resolve(name, port)
        except OSError as exc:
            return _denied("cannot resolve %s (%s)" % (name, exc.strerror or exc))
        return self.check_addresses(name, port, addresses)

    def check_name(self, host: str, port: int) -> Decision:
        """Everything that can be said before resolving. An IP literal or a hosts-table
        name is decided here; a name comes back with `resolve` set only when the policy
        could allow it by name (mode open, or an allow rule naming it): a CIDR rule
        alone never gets a box's name looked up, which would carry data out in it."""
        policy = self.policy
        if not isinstance(port, int) or not 1 <= port <= 65535:
            return _denied("port %r is outside 1-65535" % (port,))
        if policy.mode == "none":
            return _denied("egress is off for this sandbox (policy none)")
        if not isinstance(host, str):
            return _denied("a host must be a string")
        if "%" in host:  # an IPv6 zone names an interface of the proxy's machine
            return _denied("%r: no destination has a '%%' (an IPv6 zone)" % host[:80])
        literal = parse_address(host)
        if literal is not None:
            return self._check(str(literal), port, [str(literal)], literal=True)
        try:
            name = normalize_host(host)
        except PolicyError as exc:
            return _denied(str(exc))
        if name == "localhost" or name.endswith(".localhost"):
            return _denied("%s is this machine; no sandbox may reach it" % name)
        if any(rule.matches_name(name, port) for rule in policy.deny):
            return _denied("%s:%d is denied by this sandbox's egress policy" % (name, port))
        if name in self.hosts:  # the operator's table: its addresses, nothing looked up
            return self._check(name, port, list(self.hosts[name]), vetted=True)
        if policy.mode == "allow" and not self._name_allowed(name, port):
            return _denied("%s:%d is not in this sandbox's egress allow list" % (name, port))
        return Decision(True, resolve=True)

    def by_name(self) -> bool:
        """Whether a host name can change a decision of this policy (an allow name rule
        in mode allow, or a deny name rule): then a TLS server name must be checked too.
        Otherwise only addresses count, and the name a client presents changes nothing."""
        policy = self.policy
        if policy.mode == "none":
            return False
        names_allow = policy.mode == "allow" and any(r.host is not None for r in policy.allow)
        return names_allow or any(r.host is not None for r in policy.deny)

    def check_addresses(self, name: str, port: int, addresses: Iterable[str]) -> Decision:
        """A resolved name: the addresses it may be reached at, or why none."""
        return self._check(name, port, list(addresses))

    def _name_allowed(self, name: str, port: int) -> bool:
        return any(rule.matches_name(name, port) for rule in self.policy.allow)

    def _check(
        self,
        name: str,
        port: int,
        addresses: List[str],
        literal: bool = False,
        vetted: bool = False,
    ) -> Decision:
        policy = self.policy
        name_ok = not literal and (policy.mode == "open" or self._name_allowed(name, port))
        usable: List[str] = []
        reasons: List[str] = []
        for text in addresses:
            address = parse_address(text)
            if address is None:
                continue
            reason = self._address_problem(name, port, address, name_ok, literal, vetted)
            if reason:
                reasons.append(reason)
            elif str(address) not in usable:
                usable.append(str(address))
        if usable:
            return Decision(True, addresses=tuple(usable))
        return _denied(reasons[0] if reasons else "%s has no usable address" % name)

    def _address_problem(
        self,
        name: str,
        port: int,
        address: IPAddress,
        name_ok: bool,
        literal: bool,
        vetted: bool,
    ) -> str:
        shown = name if literal else "%s (%s)" % (name, address)
        if always_denied(address, self.denied):
            return (
                "%s is an address no sandbox may reach (loopback, link-local, metadata or the host)"
                % shown
            )
        policy = self.policy
        if any(rule.matches_any_form(address, port) for rule in policy.deny):
            return "%s:%d is denied by this sandbox's egress policy" % (shown, port)
        cidr_ok = any(rule.matches_address(address, port) for rule in policy.allow)
        if not is_public(address) and not cidr_ok and not vetted:
            return "%s is a private address; only a CIDR rule in the policy allows it" % shown
        if cidr_ok or name_ok or (literal and policy.mode == "open"):
            return ""
        if literal:
            return "%s:%d: an IP address needs a CIDR rule (domain rules match names)" % (
                shown,
                port,
            )
        return "%s:%d is not in this sandbox's egress allow list" % (name, port)


def load_networks(items: Iterable[Any]) -> Tuple[IPNetwork, ...]:
    """Address ranges from text, skipping what does not parse."""
    out = []
    for item in items:
        try:
            out.append(ipaddress.ip_network(str(item).split("%", 1)[0], strict=False))
        except ValueError:
            continue
    return tuple(out)


def host_names(hosts: Mapping[str, Any]) -> FrozenSet[str]:
    return frozenset(normalize_host(name) for name in hosts)
