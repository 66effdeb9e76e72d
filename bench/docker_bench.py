"""Docker provider benchmarks: the agent over one exec socket vs. a fresh `docker exec`.

    python3 bench/docker_bench.py [--image TAG] [--reads 500] [--execs 200] [--cold 10]

Everything runs in one process against one engine, in the same run:

- read_file of a small file through the agent vs. `container.exec_run(["cat", path])`;
- execute("true") through the agent vs. `container.exec_run(["true"])`;
- the same two through the agent over carrier http (its own container, on the
  owner's internal network: `carrier: http`, `network_mode: none`);
- cold acquire (create + copy the agent in + start + first answer), p50 over --cold keys,
  for both carriers;
- grep over a large tree (the image's Python standard library copied into the
  workspace) through the agent vs. the same ripgrep run by `docker exec` in the
  same container.

Targets (issue 3): agent read p50 <= 2 ms and >= 20x faster than exec_run;
cold acquire p50 <= 1 s; in-container grep <= 1.3x raw rg. Exit code 1 if one is missed.
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
for extra in (ROOT / "src", ROOT / "providers" / "sandkit-docker" / "src"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from sandkit_docker.provider import DockerProvider  # noqa: E402
from timing import ms, percentiles, timed  # noqa: E402

from sandkit import SandboxKey, Settings  # noqa: E402
from sandkit.boxkit import RG_PATH  # noqa: E402

WORKSPACE = "/mnt/user-data/workspace"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--image",
        default=os.environ.get("SANDKIT_TEST_IMAGE") or "sandkit/base:debian12",
        help="image with python3 (default: SANDKIT_TEST_IMAGE or sandkit/base:debian12)",
    )
    parser.add_argument("--reads", type=int, default=500, help="agent read_file samples")
    parser.add_argument("--execs", type=int, default=200, help="agent execute samples")
    parser.add_argument("--raw", type=int, default=50, help="exec_run samples (slow)")
    parser.add_argument("--cold", type=int, default=10, help="cold acquires")
    parser.add_argument("--greps", type=int, default=15, help="grep samples per engine")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    owner = f"sandkit-bench-{uuid.uuid4().hex[:8]}"
    data_root = Path(tempfile.mkdtemp(prefix="sandkit-bench-"))
    settings = Settings(
        data_root=data_root,
        providers={
            "docker": {"image": args.image, "pull": "never", "owner": owner, "reap_interval_s": 0}
        },
    )
    provider = DockerProvider(settings)
    http_options = {**settings.provider_options("docker"), "owner": owner + "-http"}
    http_provider = DockerProvider(
        settings.model_copy(update={"providers": {"docker": {**http_options, "carrier": "http"}}})
    )
    results: dict[str, Any] = {"image": args.image}
    try:
        results.update(bench_cold(provider, args.cold))
        results.update(bench_cold(http_provider, args.cold, suffix="_http"))
        results.update(bench_round_trips(provider, http_provider, args))
        results.update(bench_grep(provider, args.greps))
    finally:
        provider.shutdown()
        http_provider.shutdown()
    report(results, args.json)
    return 0 if all(results["targets"].values()) else 1


def bench_cold(provider: DockerProvider, n: int, suffix: str = "") -> dict[str, Any]:
    provider.acquire(SandboxKey("bench", "warm-up"))  # first use builds the agent payload
    provider.destroy(SandboxKey("bench", "warm-up"))
    samples = []
    for i in range(n):
        key = SandboxKey("bench", f"cold-{i}")
        start = time.perf_counter()
        provider.acquire(key)
        samples.append(time.perf_counter() - start)
        provider.destroy(key)
    return {"cold_acquire" + suffix: percentiles(samples)}


def bench_round_trips(
    provider: DockerProvider, http_provider: DockerProvider, args: argparse.Namespace
) -> dict[str, Any]:
    key = SandboxKey("bench", "round-trips")
    sb = provider.acquire(key)
    small = "".join(f"line {i} of a small file\n" for i in range(20))
    sb.write_file("small.txt", small)
    http_sb = http_provider.acquire(key)
    http_sb.write_file("small.txt", small)
    container = provider.client.containers.get(provider.options.owner + "-" + key.sandbox_id)
    path = f"{WORKSPACE}/small.txt"
    user = provider.options.user

    same = sb.read_file(path).content.encode()
    assert container.exec_run(["cat", path], user=user).output == same
    out: dict[str, Any] = {
        "read_agent": percentiles(timed(lambda: sb.read_file(path), args.reads)),
        "read_agent_http": percentiles(timed(lambda: http_sb.read_file(path), args.reads)),
        "read_exec_run": percentiles(
            timed(lambda: container.exec_run(["cat", path], user=user), args.raw)
        ),
        "execute_agent": percentiles(timed(lambda: sb.execute("true"), args.execs)),
        "execute_agent_http": percentiles(timed(lambda: http_sb.execute("true"), args.execs)),
        "execute_exec_run": percentiles(
            timed(lambda: container.exec_run(["true"], user=user), args.raw)
        ),
    }
    return out


def bench_grep(provider: DockerProvider, n: int) -> dict[str, Any]:
    key = SandboxKey("bench", "grep")
    sb = provider.acquire(key)
    stdlib = sb.execute("python3 -c 'import sysconfig; print(sysconfig.get_path(\"stdlib\"))'")
    source = stdlib.stdout.strip()
    tree = f"{WORKSPACE}/stdlib"
    # Without __pycache__ (which the agent's ignore list skips), so both sides
    # scan the same files; only venv/ (one file) remains ignored by the agent.
    copied = sb.execute(
        f"cp -r {source} {tree} && find {tree} -name __pycache__ -prune -exec rm -rf {{}} + "
        f"&& find {tree} -type f | wc -l",
        timeout=300,
    )
    assert copied.exit_code == 0, copied.stderr
    files = int(copied.stdout.strip())
    size = sb.execute(f"du -sm {tree} | cut -f1").stdout.strip()
    container = provider.client.containers.get(provider.options.owner + "-" + key.sandbox_id)
    user = provider.options.user
    pattern = "def __init__"
    # Same work on both sides: every file scanned, one count per file, case-insensitive.
    raw_cmd = [RG_PATH, "--no-config", "--count", "--ignore-case", "-e", pattern, "--", tree]

    def agent() -> Any:
        return sb.grep(pattern, tree, output_mode="count", max_results=500)

    def raw() -> Any:
        return container.exec_run(raw_cmd, user=user)

    agent_result = agent()
    raw_result = raw()
    assert raw_result.exit_code == 0, raw_result.output[:500]
    raw_total = sum(int(line.rsplit(b":", 1)[1]) for line in raw_result.output.splitlines())
    agent_total = sum(c.count for c in agent_result.counts)
    agent_samples = timed(agent, n, warmup=2)
    raw_samples = timed(raw, n, warmup=2)
    # rg alone, without docker exec's set-up: started by the agent's execute
    # (one shell + rg), duration measured inside the box.
    command = " ".join(raw_cmd) + " >/dev/null"
    inside = [sb.execute(command).duration_ms / 1000 for _ in range(n)]
    return {
        "grep_tree": {
            "files": files,
            "mib": size,
            "pattern": pattern,
            "matches_agent": agent_total,
            "matches_rg": raw_total,
            "files_agent": len(agent_result.counts),
            "truncated_agent": agent_result.truncated,
        },
        "grep_agent": percentiles(agent_samples),
        "grep_rg_docker_exec": percentiles(raw_samples),
        "grep_rg_inside": percentiles(inside),
    }


def report(results: dict[str, Any], as_json: bool) -> None:
    read_ratio = results["read_exec_run"]["p50"] / results["read_agent"]["p50"]
    exec_ratio = results["execute_exec_run"]["p50"] / results["execute_agent"]["p50"]
    grep_ratio = results["grep_agent"]["p50"] / results["grep_rg_docker_exec"]["p50"]
    http_ratio = results["read_exec_run"]["p50"] / results["read_agent_http"]["p50"]
    results["ratios"] = {
        "read_exec_run_over_agent": read_ratio,
        "read_exec_run_over_agent_http": http_ratio,
        "execute_exec_run_over_agent": exec_ratio,
        "grep_agent_over_rg": grep_ratio,
    }
    results["targets"] = {
        "agent read p50 <= 2 ms": results["read_agent"]["p50"] <= 0.002,
        "agent read >= 20x faster than exec_run": read_ratio >= 20,
        "cold acquire p50 <= 1 s": results["cold_acquire"]["p50"] <= 1.0,
        "in-container grep <= 1.3x raw rg": grep_ratio <= 1.3,
    }
    if as_json:
        print(json.dumps(results, indent=2))
        return
    rows = [
        ("read_file, small file: agent (stdio)", "read_agent"),
        ("read_file, small file: agent (http)", "read_agent_http"),
        ('exec_run(["cat", path])', "read_exec_run"),
        ('execute("true"): agent (stdio)', "execute_agent"),
        ('execute("true"): agent (http)', "execute_agent_http"),
        ('exec_run(["true"])', "execute_exec_run"),
        ("cold acquire (stdio)", "cold_acquire"),
        ("cold acquire (http)", "cold_acquire_http"),
        ("grep (count) over the tree: agent", "grep_agent"),
        ("rg --count by docker exec", "grep_rg_docker_exec"),
        ("rg --count started inside the box (execute duration)", "grep_rg_inside"),
    ]
    print(f"image: {results['image']}")
    tree = results["grep_tree"]
    print(
        f"grep tree: {tree['files']} files, {tree['mib']} MiB, pattern {tree['pattern']!r}, "
        f"matches agent={tree['matches_agent']} rg={tree['matches_rg']}"
    )
    print()
    print("| measurement | p50 | p95 | n |")
    print("|---|---|---|---|")
    for label, name in rows:
        r = results[name]
        print(f"| {label} | {ms(r['p50'])} | {ms(r['p95'])} | {r['n']} |")
    print()
    print(f"exec_run / agent, read_file: {read_ratio:.0f}x; execute: {exec_ratio:.0f}x")
    print(f"exec_run / agent over http, read_file: {http_ratio:.0f}x")
    inside_ratio = results["grep_agent"]["p50"] / results["grep_rg_inside"]["p50"]
    print(
        f"agent grep / rg by docker exec: {grep_ratio:.2f}x; "
        f"agent grep / rg started inside the box: {inside_ratio:.2f}x"
    )
    print()
    for target, ok in results["targets"].items():
        print(f"{'PASS' if ok else 'MISS'}  {target}")


if __name__ == "__main__":
    sys.exit(main())
