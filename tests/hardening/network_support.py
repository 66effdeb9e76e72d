"""The servers the network attacks aim at, per kind: a lab that only this test session made.

Each lab has two upstream servers of the test's own (`tests/net_support.UPSTREAM`: plain
HTTP, HTTPS with a certificate the test made for `pkg.test` and `other.test`, and a DNS
server answering names the test chose) and the egress settings that name them:

- `pkg.test` is the first server, the one name the default policy allows;
- `other.test` is the second server, denied by the default policy;
- `local.test` is the operator's name for 127.0.0.1, which no policy can make reachable.

Docker: the servers are containers on an `internal` network the lab creates, the only
network the egress proxy joins. Kubernetes: they are pods in the session's namespace
(ports 8080/8443/5353, as a pod may not bind low ports). Nothing else is ever contacted:
every address an attack names is one of these servers, the proxy, a box of the test, or
the box's own loopback.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandkit.provider import SandboxProvider
from sandkit.sandbox import Sandbox

from .targets import NAMESPACE, SESSION, SESSION_LABEL

START_S = 120.0  # servers, pods and proxies start within this on a loaded machine


@dataclass(frozen=True)
class NetLab:
    """What a kind's attacks need to know about its servers and its provider options."""

    options: dict[str, Any]  # provider options: egress (and expose) on the lab's servers
    upstream_ip: str  # pkg.test
    other_ip: str  # other.test
    http_port: int
    tls_port: int
    dns_port: int
    ca_pem: str
    # The proxy's own address as boxes would name it (host, port).
    proxy_address: Callable[[SandboxProvider], tuple[str, int]]
    # A box's own network address, None where a box has none (Docker: loopback only).
    box_address: Callable[[Sandbox], str | None]


def _egress(upstream_ip: str, other_ip: str, ceiling: list[str]) -> dict[str, Any]:
    return {
        "ceiling": {"mode": "open", "allow": ceiling},
        "policy": {"mode": "allow", "allow": ["pkg.test:*"]},
        "hosts": {
            "pkg.test": [upstream_ip],
            "other.test": [other_ip],
            "local.test": ["127.0.0.1"],
        },
    }


def _server_files(work: Path) -> dict[str, str]:
    """The servers' files: a page, the certificate and key, the DNS names, the script."""
    from tests.net_support import UPSTREAM, make_certificate

    work.mkdir(parents=True, exist_ok=True)
    make_certificate(work, ["pkg.test", "other.test"])
    return {
        "www/hello.txt": "hello through the proxy\n",
        "cert.pem": (work / "cert.pem").read_text(),
        "key.pem": (work / "key.pem").read_text(),
        "dns.json": json.dumps({"exfil.test": "127.0.0.1"}),
        "upstream.py": UPSTREAM,
    }


# -- docker -----------------------------------------------------------------------------


@contextlib.contextmanager
def docker_lab(kind: str, work: Path) -> Iterator[NetLab]:
    from sandkit_docker.network import proxy_name

    from tests.docker_support import default_base_image, require_docker
    from tests.net_support import start_upstreams

    client = require_docker()
    labels = {SESSION_LABEL: SESSION}
    upstreams = start_upstreams(
        client, default_base_image(), f"hn{SESSION}-{kind}", labels, work / "srv"
    )
    lab = next(upstreams)
    try:
        options = {
            "egress": {
                **_egress(lab.ip, lab.other_ip, [f"{lab.subnet}:*"]),
                "network": lab.network,
                "dns": [lab.ip],
            },
            "expose": {"enabled": True},
        }

        def proxy_address(provider: SandboxProvider) -> tuple[str, int]:
            container = client.containers.get(proxy_name(provider.options))  # type: ignore[attr-defined]
            networks = container.attrs["NetworkSettings"]["Networks"]
            return networks[lab.network]["IPAddress"], 3128

        yield NetLab(
            options=options,
            upstream_ip=lab.ip,
            other_ip=lab.other_ip,
            http_port=80,
            tls_port=443,
            dns_port=53,
            ca_pem=lab.ca.read_text(),
            proxy_address=proxy_address,
            box_address=lambda box: None,
        )
    finally:
        upstreams.close()


# -- kubernetes -------------------------------------------------------------------------

K8S_PORTS = (8080, 8443, 5353)
# Small requests, also for the gVisor kind: its target asks Guaranteed QoS (500m each, for
# the memory-hog cases), and two such boxes here beside another module's on the two-core
# node left pods unschedulable (CAPACITY) in a CI run. Nothing here uses much memory.
K8S_BOX_RESOURCES = {
    "requests": {"cpu": "10m", "memory": "64Mi"},
    "limits": {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "1Gi"},
}
# Writes the files handed over in SERVER_FILES (JSON) under /tmp/srv, then runs the server.
K8S_BOOT = """
import json, os, sys
root = '/tmp/srv'
for name, text in json.loads(os.environ['SERVER_FILES']).items():
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)
sys.argv = [os.path.join(root, 'upstream.py'), root, sys.argv[1], sys.argv[2]]
exec(compile(open(sys.argv[0]).read(), sys.argv[0], 'exec'))
"""


@contextlib.contextmanager
def kubernetes_lab(kind: str, work: Path) -> Iterator[NetLab]:
    from k8s_support import require_cluster, sandbox_image, server_pod

    _, core = require_cluster()
    files = json.dumps(_server_files(work))
    ports = ",".join(str(port) for port in K8S_PORTS)
    roles = ("up", "other")
    names = [f"hn{SESSION}-{kind}-{role}" for role in roles]
    for name, role in zip(names, roles, strict=True):
        manifest = server_pod(
            name, sandbox_image(), ["python3", "-u", "-c", K8S_BOOT, role, ports], {}
        )
        manifest["spec"]["containers"][0]["env"] = [{"name": "SERVER_FILES", "value": files}]
        core.create_namespaced_pod(NAMESPACE, manifest)
    try:
        ips = [_running_ip(core, name) for name in names]

        def proxy_address(provider: SandboxProvider) -> tuple[str, int]:
            return provider._egress.proxy_ip(), 3128  # type: ignore[attr-defined]

        def box_address(box: Sandbox) -> str | None:
            pod = core.read_namespaced_pod(box.pod_name, NAMESPACE)  # type: ignore[attr-defined]
            return str(pod.status.pod_ip)

        yield NetLab(
            options={
                "egress": _egress(ips[0], ips[1], [f"{ip}/32:*" for ip in ips]),
                "expose": {"enabled": True},
                "resources": K8S_BOX_RESOURCES,
            },
            upstream_ip=ips[0],
            other_ip=ips[1],
            http_port=K8S_PORTS[0],
            tls_port=K8S_PORTS[1],
            dns_port=K8S_PORTS[2],
            ca_pem=(work / "cert.pem").read_text(),
            proxy_address=proxy_address,
            box_address=box_address,
        )
    finally:
        for name in names:
            with contextlib.suppress(Exception):
                core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


def _running_ip(core: Any, name: str) -> str:
    """The pod's IP once its server said it is ready."""
    deadline = time.monotonic() + START_S
    while True:
        status = core.read_namespaced_pod(name, NAMESPACE).status
        if status.phase == "Running" and status.pod_ip:
            with contextlib.suppress(Exception):
                if "ready" in core.read_namespaced_pod_log(name, NAMESPACE):
                    return str(status.pod_ip)
        assert status.phase in ("Pending", "Running"), f"server pod {name}: {status.phase}"
        assert time.monotonic() < deadline, f"server pod {name} did not start"
        time.sleep(0.3)


LABS: dict[str, Callable[[str, Path], contextlib.AbstractContextManager[NetLab]]] = {
    "docker": docker_lab,
    "docker-gvisor": docker_lab,
    "kubernetes": kubernetes_lab,
    "kubernetes-gvisor": kubernetes_lab,
}
