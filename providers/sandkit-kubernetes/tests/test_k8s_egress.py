"""Egress policies of real pods: the owner's proxy pod decides, NetworkPolicy closes every
other way out.

All traffic goes to one server pod this module starts in the test namespace (`pkg.test`
and `other.test` both resolve to it through the proxy's hosts table), to the proxy pod, or
between box pods of this module; nothing else is ever contacted. What only NetworkPolicy
can refuse (a box ignoring the proxy variables, a box reaching another box) is checked
where the cluster enforces it (`SANDKIT_NETPOL=1`, as .ci/run exports it).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_support import CONNECT_PROBE, DROPPED, SESSION, server_pod
from sandkit_kubernetes.provider import KubernetesProvider
from sandkit_kubernetes.spec import LABEL_EGRESS_PROXY, proxy_pod_name

from sandkit import SandboxKey, Settings
from sandkit.testing.conformance import EgressConformance
from sandkit.testing.conformance.egress import FETCH, VIA_PROXY, run

pytestmark = pytest.mark.kubernetes

# Read at import: conftest clears SANDKIT_* variables before the tests run.
ENFORCED = os.environ.get("SANDKIT_NETPOL", "").strip() == "1"
OWNER = f"eg{SESSION}"
UPSTREAM = f"eg-upstream-{SESSION}"
PORT = 8080
BOUND_S = 120.0  # pods start, the proxy pod starts: generous for a loaded machine

SERVER = """
import http.server
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'upstream ' + self.path.encode() + b'\\n'
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.ThreadingHTTPServer(('0.0.0.0', PORT), Handler).serve_forever()
""".replace("PORT", str(PORT))


@pytest.fixture(scope="module")
def upstream(core: Any, namespace: str, image: str) -> Iterator[str]:
    """The IP of a plain HTTP server pod (not a box: no sandkit label selects it)."""
    manifest = server_pod(UPSTREAM, image, ["python3", "-c", SERVER], {})
    core.create_namespaced_pod(namespace, manifest)
    try:
        deadline = time.monotonic() + BOUND_S
        while True:
            status = core.read_namespaced_pod(UPSTREAM, namespace).status
            if status.phase == "Running" and status.pod_ip:
                break
            assert time.monotonic() < deadline, "the upstream pod did not start"
            time.sleep(0.3)
        yield str(status.pod_ip)
    finally:
        with contextlib.suppress(Exception):
            core.delete_namespaced_pod(UPSTREAM, namespace, grace_period_seconds=0)


def egress_settings(upstream: str) -> dict[str, Any]:
    return {
        "ceiling": {"mode": "open", "allow": [f"{upstream}/32:*"]},
        "policy": {"mode": "allow", "allow": ["pkg.test:*"]},
        "hosts": {"pkg.test": [upstream], "other.test": [upstream], "local.test": ["127.0.0.1"]},
    }


@pytest.fixture(scope="module")
def provider(
    options_for: Any, upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubernetesProvider]:
    root = tmp_path_factory.mktemp("egress-data")
    options = options_for(owner=OWNER, execute_enabled=True, egress=egress_settings(upstream))
    made = KubernetesProvider(Settings(data_root=root, providers={"kubernetes": options}))
    yield made
    with contextlib.suppress(Exception):
        made.shutdown()


@pytest.fixture
def box(provider: KubernetesProvider, request: pytest.FixtureRequest) -> Iterator[Any]:
    key = SandboxKey("egress", request.node.name[:60].replace("[", "-").replace("]", ""))
    sandbox = provider.acquire(key)
    yield sandbox
    provider.destroy(key)


def test_the_server_s_address_is_refused_as_a_literal(box: Any, upstream: str) -> None:
    """The ceiling allows the server's /32, the policy only the name `pkg.test`."""
    assert run(box, FETCH, f"http://pkg.test:{PORT}/whoami").exit_code == 0
    literal = run(box, FETCH, f"http://{upstream}:{PORT}/")
    assert literal.exit_code == 3 and "sandkit egress" in literal.stdout, literal


def test_an_allowed_name_that_resolves_to_a_denied_address_is_refused(
    provider: KubernetesProvider, box: Any
) -> None:
    """`local.test` is the operator's name for 127.0.0.1: allowing the name does not make
    the proxy's own loopback reachable (nothing is connected to)."""
    provider.set_egress(box.key, {"mode": "allow", "allow": ["local.test:*"]})
    refused = run(box, FETCH, f"http://local.test:{PORT}/")
    assert refused.exit_code == 3 and "sandkit egress" in refused.stdout, refused


class TestKubernetesEgressConformance(EgressConformance):
    @pytest.fixture
    def egress_provider(self, provider: KubernetesProvider) -> KubernetesProvider:
        return provider

    @pytest.fixture
    def upstream_port(self) -> int:
        return PORT


def test_the_proxy_serves_only_addresses_of_known_boxes(
    provider: KubernetesProvider, box: Any, core: Any, namespace: str
) -> None:
    """From this machine (which NetworkPolicy does not police): the proxy itself refuses."""
    pod = core.read_namespaced_pod(proxy_pod_name(provider.options), namespace)
    with socket.create_connection((pod.status.pod_ip, 3128), timeout=20) as s:
        s.sendall(f"GET http://pkg.test:{PORT}/ HTTP/1.1\r\nHost: pkg.test\r\n\r\n".encode())
        first = s.recv(4096).decode("latin-1").splitlines()[0]
    assert " 403 " in first and "no known sandbox" in first


@pytest.fixture
def enforced() -> None:
    if not ENFORCED:
        pytest.skip(
            "NetworkPolicy is not enforced here: SANDKIT_NETPOL=1 with a cluster that "
            "enforces it (.ci/run starts the dev cluster so)"
        )


def test_a_box_cannot_go_around_the_proxy(
    enforced: None, provider: KubernetesProvider, box: Any, upstream: str, core: Any, namespace: str
) -> None:
    assert run(box, CONNECT_PROBE, upstream, str(PORT)).stdout.strip() == DROPPED
    other = provider.acquire(SandboxKey("egress", "neighbour"))
    try:
        other.spawn(f"exec python3 -m http.server {PORT} --bind 0.0.0.0")
        ip = core.read_namespaced_pod(other.pod_name, namespace).status.pod_ip
        # The neighbour listens (seen from inside its own pod), yet the box cannot reach it.
        deadline = time.monotonic() + BOUND_S
        while run(other, CONNECT_PROBE, "127.0.0.1", str(PORT)).stdout.strip() != "open":
            assert time.monotonic() < deadline, "the neighbour's server did not start"
            time.sleep(0.3)
        assert run(box, CONNECT_PROBE, ip, str(PORT)).stdout.strip() == DROPPED
        assert " 403 " in run(box, VIA_PROXY, f"http://{ip}:{PORT}/").stdout
    finally:
        provider.destroy(SandboxKey("egress", "neighbour"))
    # And the way it may take stays open.
    assert run(box, FETCH, f"http://pkg.test:{PORT}/").exit_code == 0


def test_shutdown_removes_the_proxy_pod_and_the_policies(
    options_for: Any, upstream: str, tmp_path: Path, core: Any, namespace: str
) -> None:
    from kubernetes import client

    owner = f"{OWNER}s"
    options = options_for(owner=owner, execute_enabled=True, egress=egress_settings(upstream))
    made = KubernetesProvider(Settings(data_root=tmp_path, providers={"kubernetes": options}))
    sandbox = made.acquire(SandboxKey("egress", "shutdown"))
    assert run(sandbox, FETCH, f"http://pkg.test:{PORT}/").exit_code == 0
    selector = f"{LABEL_EGRESS_PROXY}={owner}"
    net = client.NetworkingV1Api(core.api_client)
    assert len(net.list_namespaced_network_policy(namespace, label_selector=selector).items) == 2
    made.shutdown()
    assert core.list_namespaced_pod(namespace, label_selector=selector).items == []
    assert net.list_namespaced_network_policy(namespace, label_selector=selector).items == []


def test_the_proxy_pod_is_not_a_box(provider: KubernetesProvider, box: Any, core: Any) -> None:
    """The kit's sweeps (count, reaping, shutdown of boxes) never see it as one."""
    name = proxy_pod_name(provider.options)
    pod = core.read_namespaced_pod(name, provider.options.namespace)
    assert "sandkit.owner" not in (pod.metadata.labels or {})
    assert name not in {p.metadata.name for p in provider._list_boxes()}
    assert box.pod_name in {p.metadata.name for p in provider._list_boxes()}
