"""Egress policies and exposed ports on E2B: what the provider asks E2B for.

**Enforcement is E2B's, and it is verified here only as the options sent to the
(stand-in) API.** The E2B cloud cannot be reached from the machine these tests were
written on, so nothing here shows that E2B's filter lets the allowed destinations through
and stops the rest, or that a sandbox URL refuses a request without its traffic token.
What is checked: the mapping from each kind of sandkit policy to `allow_out` /
`deny_out` / `allow_internet_access` (each payload also built by the installed SDK's own
request builders), that a policy change on a running sandbox replaces the whole config
(the deny list never dropped), that the stored policy is sent again after a pause and by
a new provider, that destroy forgets it, the refusals (beyond the ceiling:
`ACCESS_DENIED`; not expressible in E2B's options: `INVALID_ARGUMENT`, at `set_egress`
and at the provider's start), and the exposed ports' URLs, token header, capacity and
unexpose. The stand-in does not enforce the options: its containers keep Docker's
bridge network (e2b_standin.py says why).

The shared `EgressConformance` and `ExposeConformance` do not run here, and cannot on the
stand-in: the egress suite sends real traffic through sandkit's proxy (its proxy
variables, its refusal messages, a hosts table making test names resolve) and asks for
`pkg.test:*`, a name rule on every port, which E2B cannot express; the expose suite
expects a server on the box's loopback to be reached and `unexpose` or a release to
close the port, while on E2B what reaches a port is E2B's edge and an E2B sandbox URL
cannot be closed (unexpose only makes sandkit forget it). One test below does send
traffic: the preview gateway to a server in a stand-in container, which checks the
gateway's side (the endpoint's URL and token header), not E2B's edge.
"""

from __future__ import annotations

import asyncio
import ipaddress
import shlex
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from e2b.sandbox.sandbox_api import build_network_config, build_network_update_body
from e2b_standin import Cloud
from sandkit_e2b.network import ALL_TRAFFIC, ALWAYS_DENIED_V4, PRIVATE_V4, E2BNetwork, to_e2b
from sandkit_e2b.provider import ENVD_PORT, TRAFFIC_TOKEN_HEADER, E2BProvider

from sandkit import ErrorCode, SandboxKey, Settings
from sandkit.network import EgressPolicy
from sandkit.testing.conformance.suite import raises_code

Factory = Callable[..., E2BProvider]

ALWAYS = [str(n) for n in ALWAYS_DENIED_V4]
PRIVATE = [str(n) for n in PRIVATE_V4]
CEILING = {"mode": "allow", "allow": ["*.org:*", "*.pythonhosted.org", "10.0.0.0/8:*"]}
DEFAULT = {"mode": "allow", "allow": ["pypi.org"]}
EGRESS = {"ceiling": CEILING, "policy": DEFAULT}


def mapped(policy: Any, ceiling: Any = None) -> E2BNetwork:
    wanted = EgressPolicy.parse(policy)
    if ceiling is not None:
        return to_e2b(wanted.compiled().under(EgressPolicy.parse(ceiling).compiled()))
    return to_e2b(wanted.compiled())


def key(name: str) -> SandboxKey:
    return SandboxKey("network", name)


def covered(entries: tuple[str, ...] | list[str]) -> list[ipaddress.IPv4Network]:
    return list(ipaddress.collapse_addresses(ipaddress.IPv4Network(e) for e in entries))


# -- the mapping (no Docker) -------------------------------------------------------------


def test_none_is_no_internet_and_the_always_denied_ranges() -> None:
    network = mapped("none")
    assert network.allow_internet_access is False
    assert network.allow_out == ()
    assert network.deny_out == (ALL_TRAFFIC, *ALWAYS)
    assert "169.254.0.0/16" in network.deny_out and "127.0.0.0/8" in network.deny_out
    assert network.update() == {"deny_out": [ALL_TRAFFIC, *ALWAYS], "allow_internet_access": False}


def test_allow_lists_names_wildcards_and_ranges_over_a_deny_all() -> None:
    network = mapped(
        {"mode": "allow", "allow": ["PyPI.org", "*.pythonhosted.org", "10.1.0.0/16:*"]}
    )
    assert network.allow_internet_access is True
    assert network.allow_out == ("pypi.org", "*.pythonhosted.org", "10.1.0.0/16")
    assert network.deny_out == (ALL_TRAFFIC, *ALWAYS, *PRIVATE)
    # What the SDK itself builds from it (create and update).
    body = build_network_config(network.network_opts())
    assert body is not None and body["allow_out"] == list(network.allow_out)
    update = build_network_update_body(network.update())
    assert update.deny_out == list(network.deny_out) and update.allow_internet_access is True


def test_deny_and_always_denied_ranges_are_cut_out_of_allowed_ranges() -> None:
    # E2B's allow list wins over its deny list, so the holes are made in the allow list.
    network = mapped(
        {"mode": "allow", "allow": ["10.0.0.0/8:*", "169.0.0.0/8:*"], "deny": ["10.1.0.0/16"]}
    )
    expected = [
        *ipaddress.IPv4Network("10.0.0.0/8").address_exclude(ipaddress.IPv4Network("10.1.0.0/16")),
        *ipaddress.IPv4Network("169.0.0.0/8").address_exclude(
            ipaddress.IPv4Network("169.254.0.0/16")
        ),
    ]
    assert covered(network.allow_out) == list(ipaddress.collapse_addresses(expected))
    assert "10.1.0.0/16" in network.deny_out and network.deny_out[0] == ALL_TRAFFIC


def test_open_denies_the_always_denied_private_and_deny_ranges() -> None:
    network = mapped(
        {
            "mode": "open",
            "allow": ["pypi.org:*", "10.2.0.0/16:*"],  # the name adds nothing to open
            "deny": ["203.0.113.7/32", "198.51.100.0/24:22"],
        }
    )
    assert network.allow_internet_access is True
    assert network.allow_out == ("10.2.0.0/16",)  # back from the private ranges
    assert ALL_TRAFFIC not in network.deny_out
    assert network.deny_out == (*ALWAYS, *PRIVATE, "203.0.113.7/32")  # ports: all, stricter
    # 198.51.100.0/24 is a private range already (listed once).
    assert network.deny_out.count("198.51.100.0/24") == 1


def test_the_ceilings_deny_ranges_reach_every_policy() -> None:
    network = mapped({"mode": "open"}, ceiling={"mode": "open", "deny": ["8.8.8.0/24"]})
    assert "8.8.8.0/24" in network.deny_out


@pytest.mark.parametrize(
    ("policy", "hint"),
    [
        ({"mode": "allow", "allow": ["pypi.org:443"]}, "write pypi.org (ports 80 and 443)"),
        ({"mode": "allow", "allow": ["*.github.com:*"]}, "write *.github.com (ports 80"),
        ({"mode": "allow", "allow": ["git.example.com:22"]}, "HTTP port 80 and TLS port 443"),
        ({"mode": "allow", "allow": ["10.0.0.0/8"]}, "write 10.0.0.0/8:*"),
        ({"mode": "allow", "allow": ["10.0.0.0/8:443"]}, "cover every port"),
        ({"mode": "allow", "allow": ["[2001:db8::/32]:*"]}, "IPv4"),
        ({"mode": "open", "deny": ["[2001:db8::/32]"]}, "IPv4"),
        ({"mode": "open", "deny": ["evil.example.com"]}, "address ranges only"),
        ({"mode": "allow", "allow": ["*.org"], "deny": ["gist.example.org"]}, "ranges only"),
        ({"mode": "allow", "allow": ["pypi.org"], "deny": ["10.0.0.0/8"]}, "allow list wins"),
    ],
)
def test_what_e2b_cannot_express_is_refused(policy: dict[str, Any], hint: str) -> None:
    with raises_code(ErrorCode.INVALID_ARGUMENT) as info:
        mapped(policy)
    assert hint in info.value.message and "cannot be enforced on E2B" in info.value.message


def test_too_many_ranges_after_the_cuts_are_refused() -> None:
    deny = [f"10.{i}.{j}.0/24" for i in range(8) for j in range(0, 256, 8)][:255]
    with raises_code(ErrorCode.INVALID_ARGUMENT) as info:
        mapped({"mode": "allow", "allow": ["10.0.0.0/8:*"], "deny": deny})
    assert "fewer, wider ranges" in info.value.message


def provider_with(**options: Any) -> E2BProvider:
    """A provider that is only constructed (no SDK call is made)."""
    fields = {"providers": {"e2b": {"api_key": "k", "maintenance_interval_s": 0, **options}}}
    return E2BProvider(Settings(**fields), sandbox_class=object)


@pytest.mark.parametrize(
    ("egress", "hint"),
    [
        ({"policy": {"mode": "allow", "allow": ["pypi.org:*"]}}, "the policy: egress rule"),
        ({"ceiling": {"mode": "open", "deny": ["evil.test"]}}, "the ceiling's deny rules"),
        (
            {"ceiling": {"mode": "open", "deny": ["10.0.0.0/8"]}, "policy": DEFAULT},
            "allow list wins",
        ),
        ({"ceiling": {"mode": "open"}, "hosts": {"pkg.test": ["10.0.0.5"]}}, "hosts table"),
    ],
)
def test_settings_e2b_cannot_carry_are_refused_at_start(egress: dict[str, Any], hint: str) -> None:
    with raises_code(ErrorCode.INVALID_ARGUMENT) as info:
        provider_with(egress=egress)
    assert hint in info.value.message and "providers.e2b.egress" in info.value.message


def test_a_ceiling_allow_rule_is_only_a_bound() -> None:
    # `*.org:*` could not be a rule of a box, but it bounds ones that can (pypi.org).
    provider = provider_with(egress=EGRESS)
    with raises_code(ErrorCode.INVALID_ARGUMENT):
        provider.set_egress(key("bound"), {"mode": "allow", "allow": ["pypi.org:*"]})


def test_allow_internet_access_is_e2bs_open_internet_not_a_policy() -> None:
    with raises_code(ErrorCode.INVALID_ARGUMENT) as info:
        provider_with(allow_internet_access=True, egress=EGRESS)
    assert "allow_internet_access must stay false" in info.value.message
    provider = provider_with(allow_internet_access=True)
    assert provider.egress(key("raw")) is None
    with raises_code(ErrorCode.INVALID_ARGUMENT):
        provider.set_egress(key("raw"), "none")


def test_egress_and_restricted_urls_shape_the_sandbox_spec() -> None:
    k = key("spec")
    plain = provider_with()._spec(k)
    assert provider_with(egress=EGRESS)._spec(k) != plain
    assert provider_with(expose={"enabled": True})._spec(k) != plain
    # The HTTP carrier reaches the agent at the sandbox URL: those stay public.
    assert provider_with(expose={"enabled": True}, carrier="http")._spec(k) == plain


# -- over the stand-in ------------------------------------------------------------------


def last_update(cloud: Cloud, sandbox_id: str) -> dict[str, Any]:
    updates = cloud.network(sandbox_id).updates
    assert updates, "no update_network was sent"
    return updates[-1]


def e2b_id(provider: E2BProvider, k: SandboxKey) -> str:
    box = provider._boxes.box(k)
    assert box.e2b_id is not None
    return box.e2b_id


def started(make_provider: Factory, name: str) -> tuple[E2BProvider, SandboxKey, str]:
    """A provider with the test's egress settings, the running sandbox of key `name`, and
    that sandbox's E2B id."""
    provider = make_provider(egress=EGRESS)
    k = key(name)
    provider.acquire(k)
    return provider, k, e2b_id(provider, k)


@pytest.mark.docker
def test_create_sends_the_default_policy_and_set_egress_replaces_it_whole(
    make_provider: Factory, cloud: Cloud
) -> None:
    provider, k, sandbox_id = started(make_provider, "running")
    sent = cloud.network(sandbox_id)
    assert sent.allow_internet_access is True
    assert sent.created == {"allow_out": ["pypi.org"], "deny_out": [ALL_TRAFFIC, *ALWAYS, *PRIVATE]}
    assert sent.updates == []  # a new sandbox gets its policy at create
    assert provider.egress(k) == EgressPolicy.parse(DEFAULT)

    before = cloud.calls["update_network"]
    wanted = {"mode": "allow", "allow": ["*.pythonhosted.org", "10.3.0.0/16:*"]}
    assert provider.set_egress(k, wanted) == EgressPolicy.parse(wanted)
    assert cloud.calls["update_network"] == before + 1
    assert last_update(cloud, sandbox_id) == {
        "allow_out": ["*.pythonhosted.org", "10.3.0.0/16"],
        "deny_out": [ALL_TRAFFIC, *ALWAYS, *PRIVATE],
        "allow_internet_access": True,
    }
    provider.set_egress(k, "none")
    assert last_update(cloud, sandbox_id) == {
        "deny_out": [ALL_TRAFFIC, *ALWAYS],
        "allow_internet_access": False,
    }
    assert provider.egress(k) == EgressPolicy.parse("none")
    # The box still works (the agent's channel is not E2B's egress).
    assert provider.acquire(k).execute("echo fine").stdout.strip() == "fine"


@pytest.mark.docker
def test_refusals_store_nothing_and_send_nothing(make_provider: Factory, cloud: Cloud) -> None:
    provider, k, _ = started(make_provider, "refusals")
    before = cloud.calls["update_network"]
    with raises_code(ErrorCode.ACCESS_DENIED):
        provider.set_egress(k, {"mode": "allow", "allow": ["example.com"]})  # beyond the ceiling
    with raises_code(ErrorCode.ACCESS_DENIED):
        provider.set_egress(k, "open")
    with raises_code(ErrorCode.INVALID_ARGUMENT):
        provider.set_egress(k, {"mode": "allow", "allow": ["pypi.org:22"]})  # within it
    with raises_code(ErrorCode.INVALID_ARGUMENT):
        provider.set_egress(k, {"mode": "allow", "allow": ["10.0.0.0/8"]})  # ports 80, 443
    assert cloud.calls["update_network"] == before
    assert provider.egress(k) == EgressPolicy.parse(DEFAULT)


@pytest.mark.docker
def test_the_policy_outlives_a_pause_and_a_new_provider_and_goes_with_destroy(
    make_provider: Factory, cloud: Cloud
) -> None:
    provider, k, sandbox_id = started(make_provider, "survives")
    first = {"mode": "allow", "allow": ["files.pythonhosted.org"]}
    provider.set_egress(k, first)
    provider.release(k)  # paused
    assert cloud.state(sandbox_id) == "paused"

    # Changed while paused: stored, sent at the next connect.
    second = {"mode": "allow", "allow": ["pypi.org", "10.9.0.0/16:*"]}
    before = cloud.calls["update_network"]
    provider.set_egress(k, second)
    assert cloud.calls["update_network"] == before
    provider.acquire(k)  # resumes
    assert cloud.state(sandbox_id) == "running" and e2b_id(provider, k) == sandbox_id
    assert cloud.calls["update_network"] == before + 1
    assert last_update(cloud, sandbox_id)["allow_out"] == ["pypi.org", "10.9.0.0/16"]

    # A new provider (a restarted process) knows it and sends it when it connects.
    again = make_provider(egress=EGRESS)
    assert again.egress(k) == EgressPolicy.parse(second)
    again.set_egress(k, first)  # held by the other instance: the running sandbox follows
    assert last_update(cloud, sandbox_id)["allow_out"] == ["files.pythonhosted.org"]
    before = cloud.calls["update_network"]
    again.acquire(k)  # connects to the running sandbox: sends the policy again
    assert e2b_id(again, k) == sandbox_id
    assert cloud.calls["update_network"] == before + 1
    assert last_update(cloud, sandbox_id)["allow_out"] == ["files.pythonhosted.org"]

    again.destroy(k)
    assert again.egress(k) == EgressPolicy.parse(DEFAULT)
    assert make_provider(egress=EGRESS).egress(k) == EgressPolicy.parse(DEFAULT)


@pytest.mark.docker
def test_without_egress_settings_sandboxes_are_made_as_before(
    make_provider: Factory, cloud: Cloud
) -> None:
    provider = make_provider()
    k = key("plain")
    provider.acquire(k)
    sent = cloud.network(e2b_id(provider, k))
    assert sent.allow_internet_access is False and sent.created is None
    assert provider.egress(k) == EgressPolicy.parse("none")
    with raises_code(ErrorCode.ACCESS_DENIED):
        provider.set_egress(k, DEFAULT)
    with raises_code(ErrorCode.INVALID_ARGUMENT):
        provider.expose(k, 3000)  # expose.enabled is false


# -- exposed ports -----------------------------------------------------------------------


@pytest.fixture
def e2b_hosts(cloud: Cloud) -> Iterator[None]:
    """get_host in E2B's form for one test."""
    cloud.host_style = "e2b"
    try:
        yield
    finally:
        cloud.host_style = "address"


@pytest.mark.docker
@pytest.mark.usefixtures("e2b_hosts")
def test_expose_gives_the_sandbox_url_with_its_traffic_token(
    make_provider: Factory, cloud: Cloud
) -> None:
    provider = make_provider(expose={"enabled": True, "max_ports": 2})
    k = key("ports")
    with raises_code(ErrorCode.UNAVAILABLE):
        provider.expose(k, 3000)  # not acquired
    provider.acquire(k)
    sandbox_id = e2b_id(provider, k)
    sent = cloud.network(sandbox_id)
    assert sent.created == {"allow_public_traffic": False}  # URLs need the token
    token = sent.traffic_access_token
    assert token

    endpoint = provider.expose(k, 3000)
    assert endpoint.url == f"https://3000-{sandbox_id}.e2b.app"
    assert endpoint.unix_socket is None
    assert endpoint.headers == {TRAFFIC_TOKEN_HEADER: token}
    assert (endpoint.user_id, endpoint.thread_id, endpoint.port) == (k.user_id, k.thread_id, 3000)
    assert provider.expose(k, 3000) == endpoint
    assert provider.endpoint(k, 3000) == endpoint and provider.endpoint(k, 3001) is None

    provider.expose(k, 3001)
    with raises_code(ErrorCode.CAPACITY):
        provider.expose(k, 3002)  # expose.max_ports
    with raises_code(ErrorCode.INVALID_ARGUMENT):
        provider.expose(k, ENVD_PORT)  # E2B's own daemon
    assert [e.port for e in provider.exposed(k)] == [3000, 3001]

    # unexpose: sandkit forgets the port (the gateway stops routing to it); E2B's URL
    # itself cannot be closed, the token still guards it.
    provider.unexpose(k, 3001)
    assert [e.port for e in provider.exposed(k)] == [3000]
    assert provider.endpoint(k, 3001) is None
    provider.unexpose(k, 3001)  # nothing to do
    provider.unexpose(key("never"), 3001)

    # Ports end with the box, as on the other providers; another instance has none.
    assert make_provider(expose={"enabled": True}).exposed(k) == []
    provider.release(k)
    assert provider.exposed(k) == [] and provider.endpoint(k, 3000) is None
    provider.acquire(k)  # resumed: connect returns the same token
    assert provider.exposed(k) == []
    assert provider.expose(k, 3000).headers == {TRAFFIC_TOKEN_HEADER: token}


# A server that answers with the traffic token header it was sent (and how many).
ECHO = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        got = self.headers.get_all('e2b-traffic-access-token') or []
        body = ('%d %s' % (len(got), ','.join(got))).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(('0.0.0.0', int(sys.argv[1])), H).serve_forever()
"""
GATEWAY_SECRET = "e2b-network-test-secret-of-enough-length"


@pytest.mark.docker
def test_the_preview_gateway_sends_the_token_and_only_the_token(
    make_provider: Factory, cloud: Cloud
) -> None:
    httpx = pytest.importorskip("httpx", reason="the gateway extra is not installed")
    from sandkit.gateway.app import PreviewGateway

    # The stand-in's get_host gives the container's address: plain HTTP, E2B's edge
    # replaced by Docker's bridge. What is checked is the gateway's side.
    provider = make_provider(expose={"enabled": True}, http_scheme="http")
    k = key("gateway")
    box = provider.acquire(k)
    box.write_file("echo.py", ECHO)
    box.spawn(shlex.join(["python3", "echo.py", "8080"]))
    endpoint = provider.expose(k, 8080)
    token = endpoint.headers[TRAFFIC_TOKEN_HEADER]
    app = PreviewGateway(provider, [GATEWAY_SECRET], public_url="http://gateway.test")

    async def get(extra: dict[str, str]) -> tuple[int, str]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, timeout=30) as client:
            answer = await client.get(
                f"http://gateway.test/{k.sandbox_id}/8080/",
                headers={"X-Sandkit-Preview-Token": app.sign(k, 8080), **extra},
            )
            return int(answer.status_code), answer.text

    deadline = time.monotonic() + 60
    while True:
        status, text = asyncio.run(get({}))
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert (status, text) == (200, f"1 {token}")
    # A visitor's own token header is dropped, not sent next to the provider's.
    assert asyncio.run(get({TRAFFIC_TOKEN_HEADER: "forged"})) == (200, f"1 {token}")
