"""Local execute under many threads: with the sandbox's process bounds vs without.

    PYTHONPATH=src python3 bench/local_execute_bench.py [--threads 50] [--calls 10] [--rounds 3]

Each of `--threads` threads owns a local sandbox and runs `true` `--calls`
times, all at once. The baseline, measured in the same run, is the same load
with the bounds switched off (commands started directly). The ratio is the
cost of the bounds: the cgroup launcher (or the rlimit step where no cgroup
can be made). Rounds alternate bounded and unbounded so drift hits both.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from timing import percentiles  # noqa: E402

from sandkit import SandboxKey, Settings  # noqa: E402
from sandkit.local import LocalProvider, LocalSandbox  # noqa: E402


def unbounded(sandbox: LocalSandbox) -> LocalSandbox:
    """The same sandbox's runtime with its context's bounds removed (the baseline)."""
    runtime = sandbox.runtime
    runtime.context = runtime.context.replace(bounds=None)
    return sandbox


def load(sandboxes: list[LocalSandbox], calls: int) -> list[float]:
    samples: list[float] = []
    lock = threading.Lock()

    def run(sandbox: LocalSandbox) -> None:
        mine = []
        for _ in range(calls):
            start = time.perf_counter()
            result = sandbox.execute("true")
            mine.append(time.perf_counter() - start)
            assert result.exit_code == 0, result
        with lock:
            samples.extend(mine)

    threads = [threading.Thread(target=run, args=(s,)) for s in sandboxes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return samples


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bounded_provider = LocalProvider(Settings(data_root=Path(tmp) / "b", execute_enabled=True))
        plain_provider = LocalProvider(Settings(data_root=Path(tmp) / "p", execute_enabled=True))
        try:
            bounded = [
                bounded_provider.acquire(SandboxKey("bench", f"t{i}")) for i in range(args.threads)
            ]
            mechanism = getattr(bounded[0].runtime.context.bounds, "mechanism", "none")
            plain = [
                unbounded(plain_provider.acquire(SandboxKey("bench", f"t{i}")))
                for i in range(args.threads)
            ]
            rows: dict[str, list[float]] = {"bounded": [], "unbounded": []}
            for _ in range(args.rounds):
                rows["bounded"] += load(bounded, args.calls)
                rows["unbounded"] += load(plain, args.calls)
        finally:
            bounded_provider.shutdown()
            plain_provider.shutdown()
    stats = {name: percentiles(samples) for name, samples in rows.items()}
    print(f"local execute `true`, {args.threads} threads x {args.calls} calls x {args.rounds}")
    print(f"bounds: {mechanism}")
    print("| | p50 | p95 | n |")
    print("|---|---|---|---|")
    for name, row in stats.items():
        print(f"| {name} | {row['p50'] * 1000:.1f} ms | {row['p95'] * 1000:.1f} ms | {row['n']} |")
    ratio = stats["bounded"]["p50"] / stats["unbounded"]["p50"]
    print(f"bounded / unbounded p50: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
