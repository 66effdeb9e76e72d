"""Round trip of small operations: in-process Runtime vs the agent over stdio and HTTP.

    PYTHONPATH=src python3 bench/agent_bench.py [--iterations 2000] [--json]

The agent runs as a local child process (`python3 -I agent.pyz --stdio`, and
`--http 127.0.0.1:0`), so the numbers are the protocol's own cost: JSON-RPC
framing, the pipe or socket, the reader thread; no Docker in between.
"""

from __future__ import annotations

import argparse
import json
import platform
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.remote_support import (  # noqa: E402
    CountingOpener,
    local_sandbox,
    make_context,
    make_mapping,
    start_http_agent,
    stdio_sandbox,
)

from sandkit.remote import RemoteSandbox  # noqa: E402
from sandkit.transports.http import HttpTransport  # noqa: E402


def measure(fn: Callable[[], Any], iterations: int, warmup: int = 100) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(iterations):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return {
        "p50_ms": statistics.median(samples),
        "p95_ms": samples[int(len(samples) * 0.95) - 1],
        "mean_ms": statistics.fmean(samples),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    n = args.iterations

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        context = make_context(make_mapping(root / "thread"))
        small = root / "thread" / "workspace" / "small.txt"
        small.write_text("".join(f"line {i}\n" for i in range(20)))

        local = local_sandbox(context)
        remote, opener = stdio_sandbox(context, CountingOpener())
        agent = start_http_agent(context, root, token=secrets.token_urlsafe(32))
        over_http = RemoteSandbox(HttpTransport(agent.url, agent.token), "sk-bench")
        try:
            rows = {
                "read_file in-process": measure(lambda: local.read_file("small.txt"), n),
                "read_file stdio agent": measure(lambda: remote.read_file("small.txt"), n),
                "read_file http agent": measure(lambda: over_http.read_file("small.txt"), n),
                "ping stdio agent": measure(remote.ping, n),
                "execute('true') in-process": measure(lambda: local.execute("true"), n // 10),
                "execute('true') stdio agent": measure(lambda: remote.execute("true"), n // 10),
            }
        finally:
            remote.close()
            over_http.close()
            agent.stop()
            opener.kill_all()

    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"python {platform.python_version()}, {platform.machine()}, {n} iterations")
    print("| operation | p50 ms | p95 ms | mean ms |")
    print("|---|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {row['p50_ms']:.3f} | {row['p95_ms']:.3f} | {row['mean_ms']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
