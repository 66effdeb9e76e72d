"""Processes benchmarks (issue 12): streamed output, background processes, execute's cost.

    python3 bench/process_bench.py [--provider docker|kubernetes|both] [--lines 200] [--json]
        [--image IMAGE] [--k8s-image IMAGE] [--carrier stdio|http] [--exec-pause-ms 10]
    (kubernetes: export KUBECONFIG=$(deploy/dev-cluster/up.sh) first)

In one run, per provider, against one warm box (carrier stdio unless --carrier http):

- event latency: a python3 in the box prints its CLOCK_MONOTONIC (one clock for the
  whole host: boxes share the kernel) every 10 ms; the client subtracts it from the
  time it receives the line. Over execute_stream; over a long poll of process_output
  (wait_s); and over the baseline without an agent, a fresh exec per poll that reads
  the new part of the same lines from a file (`exec_run` / a pods/exec stream);
- throughput: `head -c 256M | tr` streamed through execute_stream (exec_stream_bytes
  raised), against the same command's bytes read through the engine's own exec;
- spawn + first process_output (with the output there) of `echo hi`;
- execute of a short command against the same command run by subprocess *inside* the
  box (timed there, by python3), at p50 and p95: with a pause before each call on both
  sides (--exec-pause-ms, 10 by default: an agent's calls come between model turns, and
  a box starts the next command's shell in such a pause, runtime/readyshell.py) and back
  to back (information: each call then starts its own shell).

Targets: event latency p50 <= 5 ms; throughput >= 0.5x the engine's exec; spawn + first
output p50 <= 10 ms; execute (paused) <= 1.3x subprocess at p50 and p95. Exit code 1 if one
is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for extra in (
    ROOT / "src",
    ROOT / "providers" / "sandkit-docker" / "src",
    ROOT / "providers" / "sandkit-kubernetes" / "src",
):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from timing import ms, percentiles, timed  # noqa: E402

from sandkit import SandboxKey, Settings  # noqa: E402
from sandkit.models import ExecuteResult, OutputChunk  # noqa: E402
from sandkit.sandbox import Sandbox  # noqa: E402

WORKSPACE = "/mnt/user-data/workspace"
MIB = 1 << 20
TICKER = (
    "python3 -u -c 'import sys, time\n"
    "for i in range({n}): print(repr(time.monotonic())); time.sleep(0.01)'"
)
SHORT_COMMANDS = ("true", 'find /usr/lib/python3* -maxdepth 1 -name "*.py" | head -n 20')
IN_BOX_TIMER = """
import json, statistics, subprocess, sys, time
cmd, n, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
shell = "/bin/bash"
samples = []
for _ in range(n + 3):
    time.sleep(pause)
    t = time.perf_counter()
    subprocess.run([shell, "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    samples.append(time.perf_counter() - t)
samples = sorted(samples[3:])
print(json.dumps({"p50": statistics.median(samples),
                  "p95": statistics.quantiles(samples, n=100, method="inclusive")[94]}))
"""


def _lags(lines: list[tuple[float, str]]) -> list[float]:
    """Receive time minus print time, for every line that carries a timestamp."""
    lags = []
    for received, text in lines:
        for line in text.splitlines():
            try:
                lags.append(received - float(line))
            except ValueError:
                continue
    return lags


def latency_stream(box: Sandbox, n: int) -> dict[str, float]:
    got: list[tuple[float, str]] = []
    for item in box.execute_stream(TICKER.format(n=n)):
        if isinstance(item, OutputChunk):
            got.append((time.monotonic(), item.text))
    return percentiles(_lags(got))


def latency_long_poll(box: Sandbox, n: int) -> dict[str, float]:
    info = box.spawn(TICKER.format(n=n))
    got: list[tuple[float, str]] = []
    offset = 0
    while True:
        out = box.process_output(info.handle, since=offset, wait_s=5)
        now = time.monotonic()
        if out.stdout:
            got.append((now, out.stdout))
        offset = out.offset
        if not out.running and not out.chunks:
            break
    return percentiles(_lags(got))


def latency_fresh_exec(box: Sandbox, exec_read: Callable[[str], bytes], n: int) -> dict[str, float]:
    """The ticker writes to a file; each poll is a fresh exec that reads what is new."""
    log = f"/tmp/ticker-{uuid.uuid4().hex[:8]}"
    info = box.spawn(f"{TICKER.format(n=n)} > {log}")
    got: list[tuple[float, str]] = []
    offset = 0
    partial = b""
    while True:
        data = exec_read(f"tail -c +{offset + 1} {log} 2>/dev/null")
        now = time.monotonic()
        offset += len(data)
        data = partial + data
        complete, _, partial = data.rpartition(b"\n")
        if complete:
            got.append((now, complete.decode()))
        if not box.wait_process(info.handle, timeout=0).running and not data:
            break
    return percentiles(_lags(got))


def throughput(box: Sandbox, exec_count: Callable[[str], int], size: int) -> dict[str, float]:
    command = f"head -c {size} /dev/zero | tr '\\0' a"
    start = time.perf_counter()
    streamed = 0
    result = None
    for item in box.execute_stream(command, timeout=600):
        if isinstance(item, OutputChunk):
            streamed += len(item.text)
        else:
            result = item
    ours = time.perf_counter() - start
    assert isinstance(result, ExecuteResult) and result.exit_code == 0
    start = time.perf_counter()
    raw = exec_count(command)
    engine = time.perf_counter() - start
    return {
        "bytes": streamed,
        "raw_bytes": raw,
        "ours_mib_s": streamed / MIB / ours,
        "engine_mib_s": raw / MIB / engine,
        "ratio": (streamed / ours) / (raw / engine),
    }


def spawn_first_output(box: Sandbox, n: int) -> dict[str, float]:
    def once() -> None:
        info = box.spawn("echo hi")
        out = box.process_output(info.handle, wait_s=5)
        while "hi" not in out.stdout:
            out = box.process_output(info.handle, since=out.offset, wait_s=5)
        box.wait_process(info.handle, timeout=5)

    return percentiles(timed(once, n))


def execute_vs_subprocess(box: Sandbox, n: int, pause_s: float) -> dict[str, Any]:
    """Per command, {"paused": ..., "back_to_back": ...}: ours and the in-box baseline,
    both with the same pause before each call."""
    results: dict[str, Any] = {}
    box.write_file("timer.py", IN_BOX_TIMER)
    for command in SHORT_COMMANDS:
        rows = {}
        for label, pause in (("paused", pause_s), ("back_to_back", 0.0)):
            ours = percentiles(timed(lambda c=command: box.execute(c), n, pause_s=pause))
            argv = f"python3 timer.py {json.dumps(command)} {n} {pause}"
            baseline = json.loads(box.execute(argv, timeout=600).stdout)
            rows[label] = {
                "pause_s": pause,
                "execute": ours,
                "subprocess_in_box": baseline,
                "ratio_p50": ours["p50"] / baseline["p50"],
                "ratio_p95": ours["p95"] / baseline["p95"],
            }
        results[command] = rows
    return results


# -- providers -----------------------------------------------------------------------------


def docker_provider(
    data_root: Path, image: str, stream_bytes: int, carrier: str
) -> tuple[Any, Any]:
    from sandkit_docker.provider import DockerProvider

    owner = f"sandkit-bench-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        data_root=data_root,
        limits={"exec_stream_bytes": stream_bytes, "exec_max_timeout_s": 3600},
        providers={
            "docker": {
                "image": image,
                "pull": "never",
                "owner": owner,
                "reap_interval_s": 0,
                "carrier": carrier,
            }
        },
    )
    provider = DockerProvider(settings)
    key = SandboxKey("bench", "processes")
    box = provider.acquire(key)
    container = provider.client.containers.get(f"{owner}-{key.sandbox_id}")

    def exec_read(command: str) -> bytes:
        return bytes(container.exec_run(["sh", "-c", command], user="1000:1000").output)

    def exec_count(command: str) -> int:
        result = container.exec_run(["sh", "-c", command], stream=True, user="1000:1000")
        return sum(len(chunk) for chunk in result.output)

    return provider, (box, exec_read, exec_count)


def kubernetes_provider(
    data_root: Path, image: str, stream_bytes: int, carrier: str
) -> tuple[Any, Any]:
    from kubernetes import client, config
    from kubernetes.stream import stream
    from sandkit_kubernetes.provider import KubernetesProvider
    from sandkit_kubernetes.spec import CONTAINER

    owner = f"bench-{uuid.uuid4().hex[:8]}"
    # A namespace of its own (the chart's `sandkit` need not exist), deleted at shutdown.
    namespace = f"{owner}-ns"
    config.load_kube_config()
    core = client.CoreV1Api()
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    settings = Settings(
        data_root=data_root,
        limits={"exec_stream_bytes": stream_bytes, "exec_max_timeout_s": 3600},
        providers={
            "kubernetes": {
                "image": image,
                "image_pull_policy": "Never",
                "owner": owner,
                "namespace": namespace,
                "reap_interval_s": 0,
                "carrier": carrier,
            }
        },
    )
    provider = KubernetesProvider(settings)
    shutdown = provider.shutdown

    def shutdown_and_clean() -> None:
        try:
            shutdown()
        finally:
            core.delete_namespace(namespace)

    provider.shutdown = shutdown_and_clean  # type: ignore[method-assign]
    try:
        box = provider.acquire(SandboxKey("bench", "processes"))
    except BaseException:
        provider.shutdown()
        raise

    def open_exec(command: str) -> Any:
        return stream(
            provider.core.connect_get_namespaced_pod_exec,
            box.pod_name,  # type: ignore[attr-defined]
            namespace,
            command=["sh", "-c", command],
            container=CONTAINER,
            stdin=False,
            stdout=True,
            stderr=False,
            tty=False,
            binary=True,
            _preload_content=False,
        )

    def exec_read(command: str) -> bytes:
        ws = open_exec(command)
        data = bytearray()
        while ws.is_open():
            ws.update(timeout=5)
            data += ws.read_stdout() or b""
        ws.close()
        return bytes(data)

    def exec_count(command: str) -> int:
        ws = open_exec(command)
        total = 0
        while ws.is_open():
            ws.update(timeout=5)
            total += len(ws.read_stdout() or b"")
        ws.close()
        return total

    return provider, (box, exec_read, exec_count)


def run(name: str, factory: Callable[..., Any], args: argparse.Namespace) -> dict[str, Any]:
    data_root = Path(tempfile.mkdtemp(prefix="sandkit-bench-"))
    size = args.mib * MIB
    image = args.k8s_image if name == "kubernetes" else args.image
    provider, (box, exec_read, exec_count) = factory(data_root, image, size + MIB, args.carrier)
    try:
        box.execute("true")
        return {
            "event_latency_stream": latency_stream(box, args.lines),
            "event_latency_long_poll": latency_long_poll(box, args.lines),
            "event_latency_fresh_exec": latency_fresh_exec(box, exec_read, args.lines),
            "throughput": throughput(box, exec_count, size),
            "spawn_first_output": spawn_first_output(box, args.spawns),
            "execute_vs_subprocess": execute_vs_subprocess(
                box, args.execs, args.exec_pause_ms / 1000
            ),
        }
    finally:
        provider.shutdown()


def report(name: str, r: dict[str, Any]) -> list[str]:
    missed = []
    print(f"== {name}")
    for label in ("stream", "long_poll", "fresh_exec"):
        p = r[f"event_latency_{label}"]
        print(f"  event latency {label:<11} p50 {ms(p['p50'])}  p95 {ms(p['p95'])}  (n={p['n']})")
    t = r["throughput"]
    print(
        f"  throughput: stream {t['ours_mib_s']:.0f} MiB/s vs engine exec "
        f"{t['engine_mib_s']:.0f} MiB/s = {t['ratio']:.2f}x ({t['bytes'] / MIB:.0f} MiB)"
    )
    s = r["spawn_first_output"]
    print(f"  spawn + first output p50 {ms(s['p50'])}  p95 {ms(s['p95'])}")
    for command, rows in r["execute_vs_subprocess"].items():
        for label, e in rows.items():
            print(
                f"  execute {command[:40]!r} {label} ({e['pause_s'] * 1000:g} ms before each): "
                f"p50 {ms(e['execute']['p50'])} vs subprocess in box "
                f"{ms(e['subprocess_in_box']['p50'])} ({e['ratio_p50']:.2f}x); p95 "
                f"{ms(e['execute']['p95'])} vs {ms(e['subprocess_in_box']['p95'])} "
                f"({e['ratio_p95']:.2f}x)"
            )
        paused = rows["paused"]
        if paused["ratio_p50"] > 1.3 or paused["ratio_p95"] > 1.3:
            missed.append(f"{name}: execute {command!r} over 1.3x")
    if r["event_latency_stream"]["p50"] > 0.005:
        missed.append(f"{name}: event latency p50 over 5 ms")
    if t["ratio"] < 0.5:
        missed.append(f"{name}: throughput under 0.5x")
    if s["p50"] > 0.010:
        missed.append(f"{name}: spawn + first output p50 over 10 ms")
    return missed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--provider", choices=("docker", "kubernetes", "both"), default="both")
    parser.add_argument(
        "--image", default=os.environ.get("SANDKIT_TEST_IMAGE") or "sandkit/base:debian12"
    )
    parser.add_argument(
        "--k8s-image",
        default=os.environ.get("SANDKIT_K8S_TEST_IMAGE") or "docker.io/sandkit/sandbox:debian12",
        help="the image in the cluster's runtime (the dev cluster's, as the provider tests)",
    )
    parser.add_argument(
        "--carrier", choices=("stdio", "http"), default="stdio", help="how calls reach the agent"
    )
    parser.add_argument("--lines", type=int, default=200, help="ticker lines per latency run")
    parser.add_argument("--mib", type=int, default=256, help="MiB for the throughput run")
    parser.add_argument("--spawns", type=int, default=100)
    parser.add_argument("--execs", type=int, default=100)
    parser.add_argument(
        "--exec-pause-ms", type=float, default=10.0, help="pause before each timed execute"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    # A SIGTERM (a `timeout` wrapper) unwinds like Ctrl-C, so the boxes (and on
    # Kubernetes the run's namespace) are removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    factories = {"docker": docker_provider, "kubernetes": kubernetes_provider}
    names = list(factories) if args.provider == "both" else [args.provider]
    results = {name: run(name, factories[name], args) for name in names}
    missed = [m for name in names for m in report(name, results[name])]
    if args.json:
        print(json.dumps(results, indent=2))
    for line in missed:
        print("MISSED:", line)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
