"""Kubernetes provider benchmarks: the agent over one exec stream vs. a fresh exec per operation.

    export KUBECONFIG=$(deploy/dev-cluster/up.sh)
    python3 bench/kubernetes_bench.py [--image IMAGE] [--cold 8] [--reads 300] [--raw 30] [--json]

Everything runs in one process against one cluster, in the same run:

- cold acquire: pod create -> Running (watched) -> agent installed and answering, p50 over
  --cold fresh keys (each pod deleted after);
- warm round trip: read_file of a small file and execute("true") through the agent, over the
  default stdio carrier (one long-lived pods/exec stream) and over the HTTP carrier;
- the same two operations as a fresh `kubernetes.stream.stream()` exec each (`cat FILE`,
  `true`), the way a provider without an agent does it.

Targets (issue 4): cold acquire p50 <= 5 s; agent op p50 <= 5 ms and >= 10x faster than a
fresh exec per operation. Exit code 1 if one is missed.
"""

from __future__ import annotations

import argparse
import json
import os
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
from sandkit_kubernetes.spec import CONTAINER  # noqa: E402
from timing import ms, percentiles, timed  # noqa: E402

from sandkit import SandboxKey, Settings  # noqa: E402

WORKSPACE = "/mnt/user-data/workspace"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--image",
        default=os.environ.get("SANDKIT_K8S_TEST_IMAGE") or "docker.io/sandkit/sandbox:debian12",
    )
    parser.add_argument("--pull", default="Never", help="imagePullPolicy (default Never)")
    parser.add_argument("--namespace", default=f"sandkit-bench-{uuid.uuid4().hex[:6]}")
    parser.add_argument("--cold", type=int, default=8, help="cold acquires")
    parser.add_argument("--reads", type=int, default=300, help="agent samples per operation")
    parser.add_argument("--raw", type=int, default=30, help="fresh-exec samples (slow)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(client_configuration=configuration)
    core = client.CoreV1Api(client.ApiClient(configuration))
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=args.namespace)))
    data_root = Path(tempfile.mkdtemp(prefix="sandkit-bench-"))
    results: dict[str, Any] = {"image": args.image}
    providers = []
    try:
        for carrier in ("stdio", "http"):
            settings = Settings(
                data_root=data_root,
                providers={
                    "kubernetes": {
                        "namespace": args.namespace,
                        "image": args.image,
                        "image_pull_policy": args.pull,
                        "owner": f"bench-{carrier}",
                        "carrier": carrier,
                        "reap_interval_s": 0,
                    }
                },
            )
            providers.append(KubernetesProvider(settings))
        stdio, http = providers
        results.update(bench_cold(stdio, args.cold))
        results.update(bench_round_trips(stdio, http, configuration, args))
    finally:
        for provider in providers:
            provider.shutdown()
        core.delete_namespace(args.namespace)
    report(results, args.json)
    return 0 if all(results["targets"].values()) else 1


def bench_cold(provider: KubernetesProvider, n: int) -> dict[str, Any]:
    warm = SandboxKey("bench", "warm-up")  # builds the payload, warms the API connection
    provider.acquire(warm)
    provider.destroy(warm)
    samples = []
    for i in range(n):
        key = SandboxKey("bench", f"cold-{i}")
        start = time.perf_counter()
        provider.acquire(key)
        samples.append(time.perf_counter() - start)
        provider.destroy(key)
    return {"cold_acquire": percentiles(samples)}


def bench_round_trips(
    stdio: KubernetesProvider, http: KubernetesProvider, configuration: Any, args: Any
) -> dict[str, Any]:
    from kubernetes import client
    from kubernetes.stream import stream

    key = SandboxKey("bench", "round-trips")
    sb = stdio.acquire(key)
    sb.write_file("small.txt", "".join(f"line {i} of a small file\n" for i in range(20)))
    path = f"{WORKSPACE}/small.txt"
    hb = http.acquire(SandboxKey("bench", "round-trips-http"))
    hb.write_file("small.txt", "".join(f"line {i} of a small file\n" for i in range(20)))

    def fresh_exec(argv: list[str]) -> str:
        # A CoreV1Api per call: stream() patches its client while connecting.
        api = client.CoreV1Api(client.ApiClient(configuration))
        return str(
            stream(
                api.connect_get_namespaced_pod_exec,
                sb.pod_name,
                args.namespace,
                command=argv,
                container=CONTAINER,
                stdin=False,
                stdout=True,
                stderr=True,
                tty=False,
            )
        )

    assert fresh_exec(["cat", path]) == sb.read_file(path).content
    return {
        "read_agent_stdio": percentiles(timed(lambda: sb.read_file(path), args.reads)),
        "read_agent_http": percentiles(timed(lambda: hb.read_file(path), args.reads)),
        "read_fresh_exec": percentiles(timed(lambda: fresh_exec(["cat", path]), args.raw)),
        "execute_agent_stdio": percentiles(timed(lambda: sb.execute("true"), args.reads)),
        "execute_agent_http": percentiles(timed(lambda: hb.execute("true"), args.reads)),
        "execute_fresh_exec": percentiles(timed(lambda: fresh_exec(["true"]), args.raw)),
    }


def report(results: dict[str, Any], as_json: bool) -> None:
    read_ratio = results["read_fresh_exec"]["p50"] / results["read_agent_stdio"]["p50"]
    exec_ratio = results["execute_fresh_exec"]["p50"] / results["execute_agent_stdio"]["p50"]
    results["ratios"] = {
        "read_fresh_over_agent": read_ratio,
        "execute_fresh_over_agent": exec_ratio,
    }
    results["targets"] = {
        "cold acquire p50 <= 5 s": results["cold_acquire"]["p50"] <= 5.0,
        "agent op p50 <= 5 ms": results["read_agent_stdio"]["p50"] <= 0.005,
        "agent op >= 10x faster than a fresh exec": read_ratio >= 10,
    }
    if as_json:
        print(json.dumps(results, indent=2))
        return
    rows = [
        ("cold acquire (pod create -> Running -> agent answers)", "cold_acquire"),
        ("read_file, small file: agent over the exec stream (stdio)", "read_agent_stdio"),
        ("read_file, small file: agent over HTTP", "read_agent_http"),
        ('fresh stream() exec of ["cat", path]', "read_fresh_exec"),
        ('execute("true"): agent, stdio', "execute_agent_stdio"),
        ('execute("true"): agent, HTTP', "execute_agent_http"),
        ('fresh stream() exec of ["true"]', "execute_fresh_exec"),
    ]
    print(f"image: {results['image']}")
    print()
    print("| measurement | p50 | p95 | n |")
    print("|---|---|---|---|")
    for label, name in rows:
        r = results[name]
        print(f"| {label} | {ms(r['p50'])} | {ms(r['p95'])} | {r['n']} |")
    print()
    print(f"fresh exec / agent (stdio): read_file {read_ratio:.0f}x; execute {exec_ratio:.0f}x")
    print()
    for target, ok in results["targets"].items():
        print(f"{'PASS' if ok else 'MISS'}  {target}")


if __name__ == "__main__":
    sys.exit(main())
