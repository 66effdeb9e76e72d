"""E2B provider over the Docker-backed stand-in SDK: carriers, lifecycle, calls per step.

    SANDKIT_TEST_IMAGE=sandkit/base:debian12 python3 bench/e2b_bench.py

The stand-in replaces E2B's control plane with a local Docker engine, so
the latencies are this machine's, not the cloud's; what carries over to
the real service is the number of service calls each step makes (each one
a round trip to E2B's API or to envd in the sandbox), printed alongside.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROVIDER = ROOT / "providers" / "sandkit-e2b"
sys.path[:0] = [str(PROVIDER / "src"), str(PROVIDER / "tests"), str(ROOT / "src"), str(ROOT)]

import docker  # noqa: E402
from e2b_standin import Cloud  # noqa: E402
from sandkit_e2b.provider import E2BProvider  # noqa: E402
from tests.docker_support import default_base_image  # noqa: E402
from timing import percentiles, timed  # noqa: E402

from sandkit import SandboxKey, Settings  # noqa: E402


def in_ms(samples: list[float]) -> dict[str, float]:
    stats = percentiles(samples)
    return {
        "p50_ms": round(stats["p50"] * 1000, 3),
        "p95_ms": round(stats["p95"] * 1000, 3),
        "n": len(samples),
    }


class Bench:
    def __init__(self, image: str, data_root: Path) -> None:
        self.cloud = Cloud(docker.from_env(), {"base": image}, "bench-" + uuid.uuid4().hex[:8])
        self.data_root = data_root
        self.providers: list[E2BProvider] = []

    def provider(self, **options: Any) -> E2BProvider:
        opts = {"api_key": "bench", "maintenance_interval_s": 0, "shutdown": "kill", **options}
        provider = E2BProvider(
            Settings(data_root=self.data_root, providers={"e2b": opts}),
            sandbox_class=self.cloud.sandbox_class(),
        )
        self.providers.append(provider)
        return provider

    def calls(self) -> int:
        return sum(self.cloud.calls.values())

    def step(self, fn: Callable[[], Any]) -> tuple[float, dict[str, int]]:
        before = dict(self.cloud.calls)
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        diff = {
            k: v - before.get(k, 0) for k, v in self.cloud.calls.items() if v != before.get(k, 0)
        }
        return elapsed, diff

    def close(self) -> None:
        for provider in self.providers:
            provider.shutdown()
        self.cloud.remove_all()


def carrier_numbers(bench: Bench, carrier: str, reads: int, execs: int) -> dict[str, Any]:
    extra = {"http_scheme": "http"} if carrier == "http" else {}
    provider = bench.provider(carrier=carrier, owner=f"bench-{carrier}", **extra)
    box = provider.acquire(SandboxKey("bench", carrier))
    box.write_file("small.txt", "".join(f"line {i}\n" for i in range(20)))
    out: dict[str, Any] = {
        "read_file": in_ms(timed(lambda: box.read_file("small.txt"), reads, warmup=10)),
        "execute_true": in_ms(timed(lambda: box.execute("true"), execs, warmup=10)),
    }
    # 16 threads x 25 reads on one sandbox: wall time, and stdin calls per request.
    before = bench.cloud.calls["commands.send_stdin"]
    start = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda _: [box.read_file("small.txt") for _ in range(25)], range(16)))
    wall = time.perf_counter() - start
    sends = bench.cloud.calls["commands.send_stdin"] - before
    out["parallel_400_reads_s"] = round(wall, 3)
    out["send_stdin_per_request"] = round(sends / 400, 3) if carrier == "stdio" else None
    return out


def lifecycle_numbers(bench: Bench, rounds: int) -> dict[str, Any]:
    steps: dict[str, list[float]] = {}
    calls: dict[str, dict[str, int]] = {}

    def record(name: str, fn: Callable[[], Any]) -> None:
        elapsed, diff = bench.step(fn)
        steps.setdefault(name, []).append(elapsed)
        calls[name] = diff

    for i in range(rounds):
        key = SandboxKey("bench", f"life-{i}")
        first = bench.provider(owner="bench-life")
        second = bench.provider(owner="bench-life")  # a restarted process
        record("cold acquire (create + set-up + agent)", partial(first.acquire, key))
        first.acquire(key).write_file("f.txt", "x\n")
        record("warm acquire (channel alive)", partial(first.acquire, key))
        record("acquire after a restart (list + connect)", partial(second.acquire, key))
        record("release (stop agent + pause)", partial(second.release, key))
        record("acquire a paused sandbox (resume)", partial(second.acquire, key))
        record("destroy (sync back + kill)", partial(second.destroy, key))
    return {
        name: {**in_ms(samples), "service_calls": calls[name]} for name, samples in steps.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--image", default=None)
    parser.add_argument("--reads", type=int, default=300)
    parser.add_argument("--execs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import os

    image = args.image or os.environ.get("SANDKIT_TEST_IMAGE") or default_base_image()
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(image, Path(tmp) / "data")
        try:
            results = {
                "stdio": carrier_numbers(bench, "stdio", args.reads, args.execs),
                "http": carrier_numbers(bench, "http", args.reads, args.execs),
                "lifecycle": lifecycle_numbers(bench, args.rounds),
            }
        finally:
            bench.close()
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for carrier in ("stdio", "http"):
        r = results[carrier]
        read, run = r["read_file"], r["execute_true"]
        line = (
            f"{carrier:5}  read_file p50 {read['p50_ms']} ms p95 {read['p95_ms']} ms"
            f" | execute(true) p50 {run['p50_ms']} ms"
            f" | 400 reads / 16 threads {r['parallel_400_reads_s']} s"
        )
        if r["send_stdin_per_request"] is not None:
            line += f" | send_stdin per request {r['send_stdin_per_request']}"
        print(line)
    for name, r in results["lifecycle"].items():
        print(
            f"{name:45} p50 {r['p50_ms']:9.1f} ms  p95 {r['p95_ms']:9.1f} ms"
            f"  calls {r['service_calls']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
