"""NetworkPolicy is enforced, not only stored: connections between pods the test starts.

Runs where the cluster enforces NetworkPolicy: the dev cluster started with
``SANDKIT_NETPOL=1 deploy/dev-cluster/up.sh`` (kube-network-policies; up.sh annotates the node
with ``sandkit.dev/network-policy``), or any cluster when ``SANDKIT_NETPOL=1`` is set for the
test run (a policy-capable CNI). Without either it skips, under ``CI=true`` too; with
``SANDKIT_NETPOL=1`` exported it must pass. Every connection goes to a pod of this module's own
namespaces; a denied one is a dropped SYN, so each attempt waits a short connect timeout and
every wait for a policy to take effect is bounded generously (it takes milliseconds here).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from k8s_support import CONNECT_PROBE, DROPPED, SESSION, SESSION_LABEL, server_pod
from test_k8s_helm import helm, render  # noqa: F401 - `helm` is a fixture

pytestmark = pytest.mark.kubernetes

# Read at import: conftest clears SANDKIT_* variables before the tests run.
EXPECTED = os.environ.get("SANDKIT_NETPOL", "").strip() == "1"
ANNOTATION = "sandkit.dev/network-policy"  # set by deploy/dev-cluster/up.sh (lib.sh)
PORT = 8080  # the plain server's
AGENT_PORT = 8765  # the chart's sandboxes.agentPort (its NetworkPolicy opens only this)
OWNER = f"np{SESSION}"
PEERS = f"sandkit-np-{SESSION}"  # server, client (also labelled as the chart's backend)
BOXES = f"sandkit-npbox-{SESSION}"  # two pods labelled as the chart's sandbox pods
SETTLE_S = 90.0  # bound on a policy change taking effect; only a failure waits it out


@pytest.fixture(scope="module")
def enforcer(core: Any) -> str:
    """Who enforces NetworkPolicy here, or skip (not a failure: enforcement is opt-in)."""
    for node in core.list_node(_request_timeout=10).items:
        found = (node.metadata.annotations or {}).get(ANNOTATION)
        if found:
            return str(found)
    if EXPECTED:
        return "the cluster's CNI (SANDKIT_NETPOL=1)"
    pytest.skip(
        "NetworkPolicy is not enforced on this cluster: start the dev cluster with "
        "SANDKIT_NETPOL=1 deploy/dev-cluster/up.sh (or set SANDKIT_NETPOL=1 where the CNI "
        "enforces it)"
    )


def pod(name: str, port: int, labels: dict[str, str]) -> dict[str, Any]:
    """A hardened pod of the offline image serving HTTP on `port` (image set later)."""
    command = ["python3", "-m", "http.server", str(port), "--bind", "0.0.0.0"]
    return server_pod(name, "IMAGE", command, labels)


def box_labels() -> dict[str, str]:
    """The labels the chart's NetworkPolicy selects sandbox pods by (sandbox owner OWNER)."""
    return {"app.kubernetes.io/component": "sandkit-sandbox", "sandkit.owner": OWNER}


@pytest.fixture(scope="module")
def pods(enforcer: str, core: Any, image: str) -> Iterator[dict[str, tuple[str, str]]]:
    """name -> (namespace, pod IP) of four running pods in two namespaces made here."""
    from kubernetes import client

    made = {
        "server": (PEERS, pod("server", PORT, {"np": "server"})),
        "client": (
            PEERS,
            pod("client", PORT, {"np": "client", "app.kubernetes.io/name": "sandkit-backend"}),
        ),
        "box1": (BOXES, pod("box1", AGENT_PORT, box_labels())),
        "box2": (BOXES, pod("box2", AGENT_PORT, box_labels())),
    }
    try:
        for ns in (PEERS, BOXES):
            labels = {SESSION_LABEL: SESSION}
            meta = client.V1ObjectMeta(name=ns, labels=labels)
            core.create_namespace(client.V1Namespace(metadata=meta))
        for ns, spec in made.values():
            spec["spec"]["containers"][0]["image"] = image
            core.create_namespaced_pod(ns, spec)
        ips: dict[str, tuple[str, str]] = {}
        deadline = time.monotonic() + 180
        while len(ips) < len(made):
            assert time.monotonic() < deadline, f"pods not running after 180 s: {sorted(ips)}"
            for name, (ns, _) in made.items():
                status = core.read_namespaced_pod(name, ns).status
                if status.phase == "Running" and status.pod_ip:
                    ips[name] = (ns, status.pod_ip)
            time.sleep(0.3)
        yield ips
    finally:
        for ns in (PEERS, BOXES):
            with contextlib.suppress(Exception):
                core.delete_namespace(ns, grace_period_seconds=0)


@pytest.fixture(scope="module")
def connect(core: Any, pods: dict[str, tuple[str, str]]) -> Callable[[str, str, int], str]:
    """connect(from_pod, to_pod, port) -> "open" or "closed <error>", from inside from_pod."""
    from kubernetes import client
    from kubernetes.stream import stream

    api = client.CoreV1Api(client.ApiClient(core.api_client.configuration))

    def attempt(source: str, target: str, port: int) -> str:
        out = stream(
            api.connect_get_namespaced_pod_exec,
            source,
            pods[source][0],
            command=["python3", "-c", CONNECT_PROBE, pods[target][1], str(port)],
            stdin=False,
            stdout=True,
            stderr=True,
            tty=False,
        )
        return str(out).strip()

    return attempt


def from_host(ip: str, port: int, uid: int | None = None) -> str:
    """The same probe from this machine, as this process's user or as `uid`."""
    done = subprocess.run(
        ["/usr/bin/python3", "-c", CONNECT_PROBE, ip, str(port)],
        capture_output=True,
        text=True,
        timeout=60,
        user=uid,
        group=uid,
    )
    return done.stdout.strip() or done.stderr.strip()


def settles(probe: Callable[[], str], want: str) -> str:
    """Probe until the answer is `want`, within SETTLE_S; the last answer."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        got = probe()
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.3)


@pytest.fixture
def policies(core: Any) -> Iterator[Callable[[str, dict[str, Any]], None]]:
    """apply(namespace, policy): created now, deleted after the test."""
    from kubernetes import client

    net = client.NetworkingV1Api(core.api_client)
    made: list[tuple[str, str]] = []

    def apply(ns: str, policy: dict[str, Any]) -> None:
        net.create_namespaced_network_policy(ns, policy)
        made.append((ns, policy["metadata"]["name"]))

    yield apply
    for ns, name in made:
        with contextlib.suppress(Exception):
            net.delete_namespaced_network_policy(name, ns)


def policy(name: str, selector: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name},
        "spec": {"podSelector": {"matchLabels": selector}, **spec},
    }


def to_server(port: int = PORT) -> list[dict[str, Any]]:
    return [{"to": [{"podSelector": {"matchLabels": {"np": "server"}}}], "ports": [{"port": port}]}]


def test_egress_policy_on_the_client(
    connect: Callable[[str, str, int], str], policies: Any
) -> None:
    def probe() -> str:
        return connect("client", "server", PORT)

    assert settles(probe, "open") == "open", "without a policy the client must reach the server"
    policies(PEERS, policy("deny-egress", {"np": "client"}, policyTypes=["Egress"], egress=[]))
    assert settles(probe, DROPPED) == DROPPED, "deny-all egress left the server open"
    assert probe() == DROPPED  # and it stays so
    allow = policy("allow-server", {"np": "client"}, policyTypes=["Egress"], egress=to_server())
    policies(PEERS, allow)
    assert settles(probe, "open") == "open", "an egress rule to the server did not open it"
    # A port the rule does not name is dropped, not refused by the server (nothing listens there).
    assert connect("client", "server", PORT + 1) == DROPPED


def test_ingress_policy_on_the_server(
    connect: Callable[[str, str, int], str], policies: Any
) -> None:
    def probe() -> str:
        return connect("client", "server", PORT)

    assert settles(probe, "open") == "open"
    policies(PEERS, policy("deny-ingress", {"np": "server"}, policyTypes=["Ingress"], ingress=[]))
    assert settles(probe, DROPPED) == DROPPED, "deny-all ingress left the server open"
    peer = {"podSelector": {"matchLabels": {"np": "client"}}}
    allow = policy(
        "allow-client", {"np": "server"}, policyTypes=["Ingress"], ingress=[{"from": [peer]}]
    )
    policies(PEERS, allow)
    assert settles(probe, "open") == "open", "an ingress rule from the client did not open it"


def test_the_charts_network_policy(
    connect: Callable[[str, str, int], str],
    policies: Any,
    pods: dict[str, tuple[str, str]],
    helm: str,  # noqa: F811 - the fixture imported above
) -> None:
    """The chart's policy as rendered: sandboxes reach nothing, only the backend reaches them."""
    # Before: every path below is open, so a "closed" after is the policy's doing.
    assert settles(lambda: connect("box1", "box2", AGENT_PORT), "open") == "open"
    assert settles(lambda: connect("box1", "server", PORT), "open") == "open"
    rendered = render(
        helm, f"sandboxNamespace.name={BOXES}", f"sandboxes.owner={OWNER}", namespace=PEERS
    )[("NetworkPolicy", "sandkit-sandboxes")]
    policies(BOXES, {**rendered, "metadata": {"name": rendered["metadata"]["name"]}})

    def box_to_box() -> str:
        return connect("box1", "box2", AGENT_PORT)

    assert settles(box_to_box, DROPPED) == DROPPED, "a sandbox reached another one"
    assert connect("box1", "server", PORT) == DROPPED, "a sandbox reached a pod outside"
    assert connect("client", "box1", AGENT_PORT) == "open", "the backend must reach the agent port"
    # The node itself: kube-network-policies lets every connection of a root-owned socket on
    # the node through (kubelet probes; here also the provider, which runs on the host in the
    # tests); other users' connections are judged like any peer's.
    if os.geteuid() == 0:
        assert from_host(pods["box1"][1], AGENT_PORT) == "open"
        assert from_host(pods["box1"][1], AGENT_PORT, uid=65534) == DROPPED
