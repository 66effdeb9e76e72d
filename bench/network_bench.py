"""What the network features cost on Docker, in one run (issue 15).

    python3 bench/network_bench.py [--boxes 20] [--requests 300] [--concurrent 200]
                                   [--fetches 200] [--cold 5] [--json]

Everything talks only to servers this script starts: the test upstreams of
tests/net_support.py (an internal Docker network, `pkg.test`) and a small HTTP server in
each box.

- gateway vs direct: GET / of a box's server through `sandkit gateway` (a separate
  process, uvicorn, token in a header) and directly over the exposed port's socket (what
  the gateway itself connects to), interleaved one by one; p50 overhead = p50(gateway) -
  p50(direct). Each request is a new connection to the box's server (HTTP/1.0 there).
- concurrency: --concurrent requests at once through the gateway, spread over --boxes boxes,
  each held open 1 s by the box's server; errors counted, and the boxes' servers report
  how many requests they held at the same moment.
- egress proxy latency: --fetches sequential GETs of http://pkg.test/ with urllib in a box
  (relay + proxy) vs the same script in an upstream container (direct, no proxy).
- cold acquire: a fresh key -> agent answering, with an egress policy vs without, interleaved.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for extra in (ROOT, ROOT / "src", ROOT / "providers" / "sandkit-docker" / "src"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import docker  # noqa: E402
import httpx  # noqa: E402
import yaml  # noqa: E402
from sandkit_docker.provider import DockerProvider  # noqa: E402
from tests.docker_support import default_base_image  # noqa: E402
from tests.net_support import start_upstreams  # noqa: E402
from timing import percentiles  # noqa: E402

from sandkit import SandboxKey, Settings  # noqa: E402
from sandkit.gateway.tokens import sign  # noqa: E402
from sandkit.net.proxy import short_unix_path  # noqa: E402

OWNER = f"bench-net-{uuid.uuid4().hex[:6]}"
LABELS = {"sandkit.bench": OWNER}
SECRET = "bench-secret-" + uuid.uuid4().hex
PORT = 8000
# A box's server: GET / answers at once, /slow after 1 s; /peak: most requests in flight.
SERVER = r"""
import http.server, threading, time
lock = threading.Lock(); state = {"now": 0, "peak": 0}
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with lock:
            state["now"] += 1; state["peak"] = max(state["peak"], state["now"])
        try:
            if self.path.startswith("/slow"):
                time.sleep(1.0)
            body = str(state["peak"]).encode() if self.path == "/peak" else b"ok"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        finally:
            with lock:
                state["now"] -= 1
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer.request_queue_size = 256
http.server.ThreadingHTTPServer(("127.0.0.1", 8000), H).serve_forever()
"""
FETCH = r"""
import sys, time, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
opener = urllib.request.build_opener()
samples = []
for i in range(n + 5):
    t = time.perf_counter()
    opener.open(url, timeout=30).read()
    if i >= 5:
        samples.append(time.perf_counter() - t)
samples.sort()
print(samples[len(samples) // 2])
"""


_HELD: list[Any] = []  # directory descriptors behind long socket paths, held to the end


def box_client(endpoint: Any) -> httpx.Client:
    """A client straight to an exposed port's socket (what the gateway connects to)."""
    path, done = short_unix_path(endpoint.unix_socket)
    _HELD.append(done)
    return httpx.Client(transport=httpx.HTTPTransport(uds=path))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def options(image: str, upstreams: Any, egress: bool) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "image": image,
        "pull": "never",
        "owner": OWNER + ("" if egress else "-plain"),
        "labels": LABELS,
        "reap_interval_s": 0,
        "max_running": 64,
    }
    if egress:
        opts["egress"] = {
            "policy": {"mode": "allow", "allow": ["pkg.test:*"]},
            "hosts": upstreams.hosts(),
            "network": upstreams.network,
        }
        opts["expose"] = {"enabled": True}
    return opts


def run_gateway(config: Path, port: int) -> subprocess.Popen[bytes]:
    sandkit = Path(sys.executable).parent / "sandkit"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDKIT_")}
    proc = subprocess.Popen(
        [str(sandkit), "--config", str(config), "gateway", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return proc
        if proc.poll() is not None:
            raise RuntimeError(f"the gateway exited: {proc.stderr.read().decode()[-800:]}")  # type: ignore[union-attr]
        time.sleep(0.1)
    raise RuntimeError("the gateway did not listen")


def latency(gw_port: int, endpoints: dict[SandboxKey, Any], n: int) -> dict[str, Any]:
    key, endpoint = next(iter(endpoints.items()))
    token = sign(SECRET, key, PORT, 3600)
    url = f"http://127.0.0.1:{gw_port}/{key.sandbox_id}/{PORT}/"
    direct_client = box_client(endpoint)
    gw_client = httpx.Client(headers={"x-sandkit-preview-token": token})
    direct, gateway = [], []
    with direct_client, gw_client:
        for i in range(n + 10):
            for client, target, out in (
                (direct_client, "http://localhost/", direct),
                (gw_client, url, gateway),
            ):
                start = time.perf_counter()
                response = client.get(target)
                took = time.perf_counter() - start
                assert response.status_code == 200 and response.text == "ok", response.text
                if i >= 10:
                    out.append(took)
    d, g = percentiles(direct), percentiles(gateway)
    return {"direct": d, "gateway": g, "p50_overhead_ms": (g["p50"] - d["p50"]) * 1000}


async def concurrency(gw_port: int, keys: list[SandboxKey], total: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=total + 10, max_keepalive_connections=0)
    errors: list[str] = []
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def one(i: int) -> None:
            key = keys[i % len(keys)]
            token = sign(SECRET, key, PORT, 3600)
            try:
                r = await client.get(
                    f"http://127.0.0.1:{gw_port}/{key.sandbox_id}/{PORT}/slow",
                    headers={"x-sandkit-preview-token": token},
                )
                if r.status_code != 200 or r.text != "ok":
                    errors.append(f"{r.status_code} {r.text[:80]}")
            except httpx.HTTPError as exc:
                errors.append(repr(exc))

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(total)))
        wall = time.perf_counter() - start
    return {
        "requests": total,
        "boxes": len(keys),
        "errors": len(errors),
        "wall_s": wall,
        "first_errors": errors[:3],
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--boxes", type=int, default=20)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrent", type=int, default=200)
    parser.add_argument("--fetches", type=int, default=200)
    parser.add_argument("--cold", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    client = docker.from_env()
    image = os.environ.get("SANDKIT_TEST_IMAGE") or default_base_image()
    work = Path(tempfile.mkdtemp(prefix="sknet-bench-"))
    result: dict[str, Any] = {}
    ups = start_upstreams(client, image, OWNER, LABELS, work / "srv")
    upstreams = next(ups)
    providers: list[DockerProvider] = []
    gateway_proc = None
    try:
        opts = options(image, upstreams, egress=True)
        config = work / "sandkit.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "provider": "docker",
                    "data_root": str(work / "data"),
                    "gateway": {"secrets": [SECRET]},
                    "providers": {"docker": opts},
                }
            )
        )
        net = DockerProvider(Settings(data_root=work / "data", providers={"docker": opts}))
        plain = DockerProvider(
            Settings(
                data_root=work / "plain", providers={"docker": options(image, upstreams, False)}
            )
        )
        providers += [net, plain]
        start = time.perf_counter()
        first = net.acquire(SandboxKey("bench", "first"))
        result["first_acquire_with_proxy_start_s"] = time.perf_counter() - start
        keys = [SandboxKey("bench", f"box-{i}") for i in range(args.boxes)]
        endpoints = {}
        for key in keys:
            box = net.acquire(key)
            box.write_file("server.py", SERVER)
            box.spawn("exec python3 server.py")
        for key in keys:
            endpoints[key] = net.expose(key, PORT)
            deadline = time.monotonic() + 60
            with box_client(endpoints[key]) as c:
                while True:
                    with contextlib.suppress(httpx.HTTPError):
                        if c.get("http://localhost/").status_code == 200:
                            break
                    assert time.monotonic() < deadline, "a box's server did not start"
                    time.sleep(0.2)
        port = free_port()
        gateway_proc = run_gateway(config, port)
        result["latency"] = latency(port, endpoints, args.requests)
        result["concurrency"] = asyncio.run(concurrency(port, keys, args.concurrent))
        peaks = 0
        for key in keys:
            with box_client(endpoints[key]) as c:
                peaks += int(c.get("http://localhost/peak").text)
        result["concurrency"]["held_at_once_by_the_boxes"] = peaks
        # Egress: the same urllib loop through relay + proxy (box) and direct (upstream).
        script = shlex.quote(FETCH)
        via = first.execute(f"python3 -c {script} http://pkg.test/hello.txt {args.fetches}")
        assert via.exit_code == 0, via.stdout + via.stderr
        other = upstreams.containers[1]
        code, out = other.exec_run(
            ["python3", "-c", FETCH, f"http://{upstreams.ip}/hello.txt", str(args.fetches)]
        )
        assert code == 0, out
        proxy_p50, direct_p50 = float(via.stdout), float(out)
        result["egress"] = {
            "proxy_p50_ms": proxy_p50 * 1000,
            "direct_p50_ms": direct_p50 * 1000,
            "added_p50_ms": (proxy_p50 - direct_p50) * 1000,
        }
        cold: dict[str, list[float]] = {"with_policy": [], "without": []}
        for i in range(args.cold):
            for name, provider in (("with_policy", net), ("without", plain)):
                key = SandboxKey("bench", f"cold-{name}-{i}")
                start = time.perf_counter()
                provider.acquire(key).list_dir()
                cold[name].append(time.perf_counter() - start)
                provider.destroy(key)
        result["cold_acquire"] = {name: percentiles(v) for name, v in cold.items()}
    finally:
        if gateway_proc is not None:
            gateway_proc.terminate()
            with contextlib.suppress(Exception):
                gateway_proc.wait(timeout=10)
        for provider in providers:
            with contextlib.suppress(Exception):
                provider.shutdown()
        ups.close()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    lat, conc, eg, cold_r = (
        result["latency"],
        result["concurrency"],
        result["egress"],
        result["cold_acquire"],
    )
    print(f"gateway vs direct ({args.requests} each, interleaved):")
    for name in ("direct", "gateway"):
        p = lat[name]
        print(f"  {name:8} p50 {p['p50'] * 1000:6.2f} ms  p95 {p['p95'] * 1000:6.2f} ms")
    print(f"  p50 overhead {lat['p50_overhead_ms']:.2f} ms")
    print(
        f"concurrency: {conc['requests']} requests over {conc['boxes']} boxes, "
        f"{conc['errors']} errors, {conc['held_at_once_by_the_boxes']} held at once, "
        f"{conc['wall_s']:.2f} s"
    )
    print(
        f"egress: proxy p50 {eg['proxy_p50_ms']:.2f} ms, direct {eg['direct_p50_ms']:.2f} ms, "
        f"added {eg['added_p50_ms']:.2f} ms"
    )
    for name, p in cold_r.items():
        print(f"cold acquire {name:11} p50 {p['p50']:.2f} s  p95 {p['p95']:.2f} s")
    print(
        f"first acquire incl. the proxy's start: {result['first_acquire_with_proxy_start_s']:.2f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
