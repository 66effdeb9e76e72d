"""sandkit's egress policies in E2B's network options (`allow_out`, `deny_out`,
`allow_internet_access`), and what cannot be said in them.

E2B filters a sandbox's outbound traffic itself; sandkit only chooses the options. What
E2B documents (the API models in SDK 2.63.0, and its "internet access" page for the
ports) and what follows for the mapping:

- `deny_out` takes IPv4 ranges and addresses only, no names;
- `allow_out` takes ranges, addresses, names and `*.domain` wildcards (below the domain,
  not the domain itself, as sandkit's wildcards), and **wins over `deny_out`**: the
  opposite of sandkit, where deny rules win. Allowing "only these" is therefore
  `deny_out: [0.0.0.0/0]` plus an allow list;
- names are matched on HTTP port 80 (Host header) and TLS port 443 (SNI) only; ranges
  cover every port. There is no port anywhere else in the options.

So a sandkit rule maps exactly when:

- a name rule has the default ports (80 and 443): `pypi.org`, `*.github.com`;
- an address rule is IPv4 and has every port (`10.1.0.0/16:*`): its range goes into
  `allow_out` minus the always-denied ranges and the policy's deny ranges (cut out of it,
  since E2B's allow list would otherwise win over them);
- a deny rule is an IPv4 range: it goes into `deny_out` (its ports are ignored: E2B denies
  the whole range, which is stricter, never wider).

Anything else would widen or change the policy silently, so it is refused with
`INVALID_ARGUMENT` and a message that says what to write instead: name rules with other
ports, address rules without `:*`, IPv6 rules, deny rules on names, and deny ranges next
to name rules in mode `allow` (E2B lets an allowed name through whatever its address, so a
deny range cannot limit it).

Mode `none` is `allow_internet_access: false` with `deny_out: [0.0.0.0/0]`; `open` has no
allow list and denies the always-denied and private ranges (`sandkit.net.policy`), so a
private range needs an address rule as on the other providers. Every mode's `deny_out`
lists the always-denied IPv4 ranges (loopback, link-local and metadata, multicast,
reserved).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sandkit.errors import ErrorCode, SandboxError
from sandkit.net.policy import ALWAYS_DENIED, DEFAULT_PORTS, PRIVATE_RANGES, Policy, Rule

ALL_TRAFFIC = "0.0.0.0/0"
# E2B's list sizes are not documented; a policy whose ranges split into more is refused.
MAX_ENTRIES = 512

ALWAYS_DENIED_V4: tuple[ipaddress.IPv4Network, ...] = tuple(
    n for n in ALWAYS_DENIED if isinstance(n, ipaddress.IPv4Network)
)
PRIVATE_V4: tuple[ipaddress.IPv4Network, ...] = tuple(
    n for n in PRIVATE_RANGES if isinstance(n, ipaddress.IPv4Network)
)


class E2BNetwork(BaseModel):
    """What the provider sends to E2B for one policy: at create (`allow_internet_access=`
    and `network=`) and whole to `update_network` (which replaces the previous config)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allow_internet_access: bool
    allow_out: tuple[str, ...] = Field(default=(), max_length=MAX_ENTRIES)
    deny_out: tuple[str, ...] = Field(default=(), max_length=MAX_ENTRIES)

    def network_opts(self) -> dict[str, Any]:
        """`SandboxNetworkOpts` / `SandboxNetworkUpdate` lists (an empty list left out)."""
        opts: dict[str, Any] = {"deny_out": list(self.deny_out)}
        if self.allow_out:
            opts["allow_out"] = list(self.allow_out)
        return opts

    def update(self) -> dict[str, Any]:
        """The whole `SandboxNetworkUpdate`: what is left out would be cleared by E2B."""
        return {**self.network_opts(), "allow_internet_access": self.allow_internet_access}


def _refuse(rule: Rule, why: str) -> SandboxError:
    return SandboxError(
        ErrorCode.INVALID_ARGUMENT, f"egress rule {rule.text} cannot be enforced on E2B: {why}"
    )


def _v4(rule: Rule) -> ipaddress.IPv4Network:
    network = rule.network
    if not isinstance(network, ipaddress.IPv4Network):
        raise _refuse(rule, "E2B's network rules are IPv4 ranges (its 'all traffic' is 0.0.0.0/0)")
    return network


def _minus(
    networks: list[ipaddress.IPv4Network], cut: list[ipaddress.IPv4Network]
) -> list[ipaddress.IPv4Network]:
    """`networks` with every range of `cut` taken out of them."""
    out = list(networks)
    for hole in cut:
        kept: list[ipaddress.IPv4Network] = []
        for network in out:
            if not network.overlaps(hole):
                kept.append(network)
            elif not network.subnet_of(hole):
                kept.extend(network.address_exclude(hole))
            if len(kept) > MAX_ENTRIES:
                raise SandboxError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"egress policy cannot be enforced on E2B: its allow ranges less its deny "
                    f"ranges make more than {MAX_ENTRIES} entries; use fewer, wider ranges",
                )
        out = kept
    return sorted(set(out))


def _texts(networks: list[ipaddress.IPv4Network]) -> list[str]:
    return [str(n) for n in networks]


def to_e2b(policy: Policy) -> E2BNetwork:
    """E2B's options for `policy` (the enforced one: the ceiling's deny rules added), or
    INVALID_ARGUMENT for a rule E2B cannot express without widening it."""
    if policy.mode == "none":
        return E2BNetwork(
            allow_internet_access=False,
            deny_out=(ALL_TRAFFIC, *_texts(list(ALWAYS_DENIED_V4))),
        )
    names = [rule for rule in policy.allow if rule.network is None]
    deny: list[ipaddress.IPv4Network] = []
    for rule in policy.deny:
        if rule.network is None:
            raise _refuse(
                rule,
                "E2B's deny list takes address ranges only; narrow the allow rules instead",
            )
        deny.append(_v4(rule))
        if policy.mode == "allow" and names:
            raise _refuse(
                rule,
                f"E2B's allow list wins over its deny list, so a deny range cannot limit where "
                f"the allowed name {names[0].text} connects; drop the deny range or the name rules",
            )
    allow: list[ipaddress.IPv4Network] = []
    for rule in policy.allow:
        if rule.network is not None:
            network = _v4(rule)
            if rule.ports is not None:
                raise _refuse(
                    rule,
                    f"E2B's address rules cover every port; write {network}:* to allow all "
                    "of them, or leave the range out",
                )
            allow.append(network)
        elif policy.mode == "allow" and rule.ports != DEFAULT_PORTS:
            shown = ("*." if rule.wildcard else "") + str(rule.host)
            raise _refuse(
                rule,
                "E2B matches names on HTTP port 80 and TLS port 443 only; write "
                f"{shown} (ports 80 and 443)",
            )
        # mode open: a name rule allows nothing that open does not (dropped).
    allowed = _minus(allow, [*ALWAYS_DENIED_V4, *deny])
    denied = [*ALWAYS_DENIED_V4, *PRIVATE_V4, *deny]
    if policy.mode == "allow":
        allow_out = [*(r.text for r in names), *_texts(allowed)]
        deny_out = [ALL_TRAFFIC, *_texts(denied)]
    else:  # open: every destination but the denied ranges, and the allowed ranges back
        allow_out = _texts(allowed)
        deny_out = _texts(denied)
    deny_out = list(dict.fromkeys(deny_out))
    if len(allow_out) > MAX_ENTRIES or len(deny_out) > MAX_ENTRIES:
        raise SandboxError(
            ErrorCode.INVALID_ARGUMENT,
            f"egress policy cannot be enforced on E2B: more than {MAX_ENTRIES} entries",
        )
    return E2BNetwork(
        allow_internet_access=True, allow_out=tuple(allow_out), deny_out=tuple(deny_out)
    )
