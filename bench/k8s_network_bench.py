"""What the network features cost on Kubernetes, in one run (issue 15).

    export KUBECONFIG=...   # deploy/dev-cluster/up.sh prints it
    python3 bench/k8s_network_bench.py [--k8s-image IMAGE] [--fetches 200] [--requests 200]
                                       [--cold 5] [--json]

Everything talks only to pods this script starts, in a namespace of its own (deleted at
the end): a plain HTTP server pod (`pkg.test` through the proxy's hosts table), and a small
HTTP server in a box.

- egress proxy latency: --fetches sequential urllib GETs of http://pkg.test:8080/ from a box
  with an egress policy (through the owner's proxy pod) vs the same script in a box of a
  provider without egress (straight to the server pod's IP), same node, same image;
- exposed port: GET / of a box's server on a new connection, to the whole response by its
  Content-Length, over the provider's unix socket (the port-forward opens per connection,
  through the API server) vs straight to the pod IP from this machine (the dev cluster's
  node reaches pod IPs), interleaved one by one;
- cold acquire: a fresh key -> agent answering, with an egress policy vs without, interleaved
  (the first acquire of the egress owner also starts its proxy pod: reported apart).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for extra in (ROOT / "src", ROOT / "providers" / "sandkit-kubernetes" / "src"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from sandkit_kubernetes.provider import KubernetesProvider  # noqa: E402
from timing import ms, percentiles  # noqa: E402

from sandkit import SandboxKey, Settings  # noqa: E402
from sandkit.net.proxy import short_unix_path  # noqa: E402

PORT = 8080
BOX_PORT = 8000
LOOP = """
import json, sys, time, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
samples = []
for _ in range(n + 5):
    t = time.perf_counter()
    urllib.request.urlopen(url, timeout=20).read()
    samples.append(time.perf_counter() - t)
print(json.dumps(sorted(samples[5:])))
"""
SERVER = """
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header('Content-Length', '3'); self.end_headers()
        self.wfile.write(b'ok\\n')
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(('0.0.0.0', PORT), H).serve_forever()
"""


def start_upstream(core: Any, namespace: str, image: str) -> str:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "upstream"},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "securityContext": {"runAsUser": 1000, "runAsNonRoot": True},
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", SERVER.replace("PORT", str(PORT))],
                }
            ],
        },
    }
    core.create_namespaced_pod(namespace, manifest)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        status = core.read_namespaced_pod("upstream", namespace).status
        if status.phase == "Running" and status.pod_ip:
            return str(status.pod_ip)
        time.sleep(0.2)
    raise SystemExit("the upstream pod did not start")


def provider(root: Path, image: str, namespace: str, owner: str, egress: Any) -> Any:
    options: dict[str, Any] = {
        "image": image,
        "image_pull_policy": "Never",
        "owner": owner,
        "namespace": namespace,
        "reap_interval_s": 0,
        "expose": {"enabled": True},
    }
    if egress is not None:
        options["egress"] = egress
    return KubernetesProvider(Settings(data_root=root, providers={"kubernetes": options}))


def loop_in(box: Any, url: str, n: int) -> dict[str, float]:
    box.write_file("loop.py", LOOP)
    result = box.execute(f"python3 loop.py {url} {n}", timeout=600)
    if result.exit_code != 0:
        raise SystemExit(f"the loop failed in the box: {result.stdout}{result.stderr}")
    return percentiles(json.loads(result.stdout))


def get_over(connect: Any) -> tuple[float, float]:
    """(seconds to the connection, seconds to the whole response by its Content-Length):
    what an HTTP client waits for. (The port-forward's stream ends ~1 s after the server
    closed its side; a client that has the body does not wait for that.)"""
    start = time.perf_counter()
    with connect() as s:
        opened = time.perf_counter()
        s.sendall(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            body += s.recv(65536)
    return opened - start, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--k8s-image",
        default=os.environ.get("SANDKIT_K8S_TEST_IMAGE") or "docker.io/sandkit/sandbox:debian12",
    )
    parser.add_argument("--fetches", type=int, default=200)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--cold", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from kubernetes import client, config

    config.load_kube_config()
    core = client.CoreV1Api()
    tag = uuid.uuid4().hex[:8]
    namespace = f"bench-net-{tag}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    root = Path(tempfile.mkdtemp(prefix="sandkit-bench-"))
    made: list[Any] = []
    out: dict[str, Any] = {}
    try:
        ip = start_upstream(core, namespace, args.k8s_image)
        egress = {
            "ceiling": {"mode": "open", "allow": [f"{ip}/32:*"]},
            "policy": {"mode": "allow", "allow": ["pkg.test:*"]},
            "hosts": {"pkg.test": [ip]},
        }
        with_egress = provider(root / "e", args.k8s_image, namespace, f"bn{tag}e", egress)
        plain = provider(root / "p", args.k8s_image, namespace, f"bn{tag}p", None)
        made += [with_egress, plain]
        start = time.perf_counter()
        box = with_egress.acquire(SandboxKey("bench", "egress"))
        out["first_acquire_with_proxy_start_s"] = time.perf_counter() - start
        direct_box = plain.acquire(SandboxKey("bench", "direct"))
        out["egress_via_proxy"] = loop_in(box, f"http://pkg.test:{PORT}/", args.fetches)
        out["egress_direct"] = loop_in(direct_box, f"http://{ip}:{PORT}/", args.fetches)

        box.spawn(f"exec python3 -m http.server {BOX_PORT} --bind 0.0.0.0")
        endpoint = with_egress.expose(box.key, BOX_PORT)
        pod_ip = core.read_namespaced_pod(box.pod_name, namespace).status.pod_ip
        assert endpoint.unix_socket is not None
        short, done = short_unix_path(endpoint.unix_socket)

        def over_forward() -> socket.socket:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(30)
            s.connect(short)
            return s

        deadline = time.monotonic() + 60
        while True:
            try:
                get_over(lambda: socket.create_connection((pod_ip, BOX_PORT), 5))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        forward, direct = [], []
        for _ in range(args.requests):
            forward.append(get_over(over_forward)[1])
            direct.append(get_over(lambda: socket.create_connection((pod_ip, BOX_PORT), 5))[1])
        done()
        out["expose_port_forward"] = percentiles(forward)
        out["expose_direct_pod_ip"] = percentiles(direct)

        cold: dict[str, list[float]] = {"with_policy": [], "without": []}
        for i in range(args.cold):
            for name, prov in (("with_policy", with_egress), ("without", plain)):
                key = SandboxKey("bench", f"cold-{name}-{i}")
                start = time.perf_counter()
                prov.acquire(key).execute("true")
                cold[name].append(time.perf_counter() - start)
                prov.destroy(key)
        out["cold_acquire"] = {k: percentiles(v) for k, v in cold.items()}
    finally:
        for p in made:
            try:
                p.shutdown()
            except Exception as exc:  # report, go on
                print(f"shutdown: {exc}", file=sys.stderr)
        core.delete_namespace(namespace)

    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    via, straight = out["egress_via_proxy"], out["egress_direct"]
    print(
        f"egress: proxy p50 {ms(via['p50'])} p95 {ms(via['p95'])}; direct p50 "
        f"{ms(straight['p50'])} p95 {ms(straight['p95'])}; added p50 "
        f"{ms(via['p50'] - straight['p50'])}"
    )
    fw, dr = out["expose_port_forward"], out["expose_direct_pod_ip"]
    print(
        f"exposed port: port-forward p50 {ms(fw['p50'])} p95 {ms(fw['p95'])}; pod IP p50 "
        f"{ms(dr['p50'])} p95 {ms(dr['p95'])}"
    )
    for name, c in out["cold_acquire"].items():
        print(f"cold acquire {name}: p50 {c['p50']:.2f} s p95 {c['p95']:.2f} s")
    first = out["first_acquire_with_proxy_start_s"]
    print(f"first acquire incl. the proxy pod's start: {first:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
