"""Fast start (issue 14): warm-pool claims, cold acquire and the first grep, each against a
baseline measured in the same run.

    python3 bench/start_bench.py [--platforms docker,kubernetes] [--seq 30] [--burst 50]
        [--cold 20] [--greps 20] [--k8s-pool 3] [--k8s-claims 10] [--k8s-cold 6] [--json]

Docker (image SANDKIT_TEST_IMAGE or sandkit/base:debian12):
- warm pool: --seq new threads one after the other (the pool full again before each), then
  one burst of --burst new threads at once against a pool of --burst; `acquire` and
  `acquire` -> first `execute("true")`; baseline: the cold acquire below;
- cold `acquire` -> first `execute("true")` vs. a bare docker SDK `containers.create +
  start + exec_run(["true"])` of the same image, plain and with the box's hardening
  options, interleaved; the engine calls and the agent's first answer of a cold acquire;
- the first grep in a fresh agent vs. the same grep again in the same box (--greps boxes),
  and then a query of the same kind the box has not run (informational: the first-query
  cost of a warm agent).

Kubernetes (the dev cluster; SANDKIT_K8S_TEST_IMAGE or docker.io/sandkit/sandbox:debian12,
a namespace of its own, deleted at the end):
- warm pool claims (storage hostPath) -> first command; baseline: the cold acquire below;
- cold `acquire` vs. a bare pod of the same image and security context: create -> Running
  -> one exec of `true`, interleaved; the provider's steps of a cold acquire.

Targets (issue 14), exit code 1 if one is missed: warm claim -> first command p50 <= 30 ms
(Docker), <= 60 ms (Kubernetes); burst acquire p99 <= 150 ms; Docker cold <= 1.1x bare (p50);
Kubernetes cold <= 1.2 s; first grep <= 1.5x the warm one (p50).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import sysconfig
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
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

from timing import loadavg, percentiles  # noqa: E402

from sandkit import SandboxKey, Settings  # noqa: E402
from sandkit.boxkit import BoxSandbox  # noqa: E402

BENCH_LABEL = "sandkit.bench"  # on every bare container/pod of a run: the run id
READY_S = 600.0  # waiting for a pool to fill; only a failure waits it out
# A literal (case-insensitive, the default) and a regex with \w: the Unicode tables a
# fresh agent once built on its first grep. Each with a query of the same kind that the
# box has not run: what any query costs a warm agent the first time (its regex compiled,
# ripgrep's code for it cold), against which the fresh agent's own cost shows.
GREPS = [
    ("def __init__", {}, "return self"),
    (r"def \w+\(self", {"case_sensitive": True}, r"class \w+\("),
]
ENGINE_CALLS = (
    "create_container",
    "start",
    "inspect_container",
    "containers",
    "exec_create",
    "exec_start",
)


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message} (load {loadavg()})", file=sys.stderr)


class Steps:
    """Wall time spent in chosen methods, summed per sample (where a cold start goes)."""

    def __init__(self) -> None:
        self._now: dict[str, float] = defaultdict(float)
        self._lock = threading.Lock()
        self.samples: list[dict[str, float]] = []

    def wrap(self, obj: Any, names: Iterable[str]) -> None:
        for name in names:
            fn = getattr(obj, name)

            def timed(*a: Any, _fn: Any = fn, _name: str = name, **kw: Any) -> Any:
                start = time.perf_counter()
                try:
                    return _fn(*a, **kw)
                finally:
                    with self._lock:
                        self._now[_name] += time.perf_counter() - start

            setattr(obj, name, timed)

    def take(self, total: float) -> None:
        with self._lock:
            self.samples.append({**self._now, "total": total})
            self._now.clear()

    def medians_ms(self) -> dict[str, float]:
        names = sorted({n for s in self.samples for n in s})
        return {n: 1000 * statistics.median(s.get(n, 0.0) for s in self.samples) for n in names}


def to_first_command(acquire: Callable[[], Any]) -> tuple[float, float]:
    """Seconds to `acquire()` and to its box's first `execute("true")` answered."""
    t0 = time.perf_counter()
    box = acquire()
    t1 = time.perf_counter()
    assert box.execute("true").exit_code == 0
    return t1 - t0, time.perf_counter() - t0


# -- Docker -----------------------------------------------------------------------------


def docker_provider(root: Path, image: str, owner: str, **options: Any) -> Any:
    from sandkit_docker.provider import DockerProvider

    fields = {"image": image, "pull": "never", "owner": owner, "reap_interval_s": 0, **options}
    return DockerProvider(Settings(data_root=root / owner, providers={"docker": fields}))


@contextlib.contextmanager
def shut_after(provider: Any, out: dict[str, Any]) -> Any:
    """Shut the provider down at the end, whatever happens; say how long and what was left."""
    try:
        yield provider
    finally:
        start = time.perf_counter()
        try:
            provider.shutdown()
        except Exception as exc:
            out["shutdown_error"] = str(exc)[:300]
        out["shutdown_s"] = time.perf_counter() - start


def docker_pool(args: argparse.Namespace, root: Path, run: str) -> dict[str, Any]:
    size = args.burst
    provider = docker_provider(
        root, args.image, f"sk14-{run}-pool", warm_pool={"size": size, "refill_interval_s": 0.2}
    )
    out: dict[str, Any] = {"pool_size": size}
    pool = provider._pool
    with shut_after(provider, out):
        start = time.perf_counter()
        assert pool.wait_ready(size, READY_S), f"the pool did not fill to {size}"
        out["fill_s"] = time.perf_counter() - start
        seq = []
        for i in range(args.seq):
            assert pool.wait_ready(size, READY_S)
            key = SandboxKey("bench", f"seq-{run}-{i}")
            seq.append(to_first_command(lambda k=key: provider.acquire(k)))
            out["seq_claimed"] = out.get("seq_claimed", 0) + claimed(provider, key)
            provider.destroy(key)
        assert pool.wait_ready(size, READY_S)
        time.sleep(1.0)  # the last refill's start settles
        keys = [SandboxKey("bench", f"burst-{run}-{i}") for i in range(size)]
        barrier = threading.Barrier(size)

        def one(key: SandboxKey) -> tuple[float, float]:
            barrier.wait()
            return to_first_command(lambda: provider.acquire(key))

        with ThreadPoolExecutor(size) as workers:
            burst = list(workers.map(one, keys))
        out["burst_claimed"] = sum(claimed(provider, key) for key in keys)
        for name, got in (("seq", seq), ("burst", burst)):
            out[f"{name}_acquire"] = percentiles([a for a, _ in got])
            out[f"{name}_first_command"] = percentiles([f for _, f in got])
    return out


def claimed(provider: Any, key: SandboxKey) -> bool:
    """Is the key's box a claimed pool box? (It keeps its pool label.)"""
    attrs = provider._inspect(key)
    return attrs is not None and "sandkit.pool" in attrs["Config"]["Labels"]


def hardened(options: Any) -> dict[str, Any]:
    """create() options of a bare container with the box's hardening (no sandkit mounts)."""
    kwargs = {
        "user": options.user,
        "init": options.init,
        "cap_drop": list(options.cap_drop) or None,
        "security_opt": list(options.security_opt) or None,
        "network_mode": options.network_mode,
        "read_only": options.read_only_rootfs,
        "tmpfs": dict(options.tmpfs) or None,
        "mem_limit": options.mem_limit,
        "memswap_limit": options.mem_limit,
        "nano_cpus": int(options.cpus * 1e9) or None,
        "pids_limit": options.pids_limit or None,
    }
    return {k: v for k, v in kwargs.items() if v is not None}


def docker_cold(args: argparse.Namespace, root: Path, run: str) -> dict[str, Any]:
    import docker

    provider = docker_provider(root, args.image, f"sk14-{run}-cold")
    out: dict[str, Any] = {}
    with shut_after(provider, out):
        warm = SandboxKey("bench", "warm-up")  # builds the payload, warms the engine
        provider.acquire(warm).execute("true")
        provider.destroy(warm)
        steps = Steps()
        steps.wrap(provider.client.api, ENGINE_CALLS)
        steps.wrap(BoxSandbox, ["ping"])  # opens the channel: exec, agent start, initialize
        bare_client = docker.from_env()
        samples: dict[str, list[float]] = defaultdict(list)

        def sandkit(i: int) -> None:
            key = SandboxKey("bench", f"cold-{run}-{i}")
            acquired, first = to_first_command(lambda: provider.acquire(key))
            steps.take(acquired)
            samples["sandkit_acquire"].append(acquired)
            samples["sandkit_first_command"].append(first)
            provider.destroy(key)

        def bare(name: str, extra: dict[str, Any]) -> Callable[[int], None]:
            def once(i: int) -> None:
                t0 = time.perf_counter()
                c = bare_client.containers.create(
                    args.image, ["sleep", "infinity"], labels={BENCH_LABEL: run}, **extra
                )
                c.start()
                assert c.exec_run(["true"], user=extra.get("user", "")).exit_code == 0
                samples[name].append(time.perf_counter() - t0)
                c.remove(force=True, v=True)

            return once

        order = [sandkit, bare("bare", {}), bare("bare_hardened", hardened(provider.options))]
        try:
            for i in range(args.cold):
                for step in order[i % 3 :] + order[: i % 3]:  # each goes first in turn
                    step(i)
        finally:
            for c in bare_client.containers.list(all=True, filters={"label": BENCH_LABEL}):
                if c.labels.get(BENCH_LABEL) == run:
                    c.remove(force=True, v=True)
        out.update({name: percentiles(got) for name, got in samples.items()})
        out["steps_ms"] = steps.medians_ms()
    return out


def grep_corpus(root: Path) -> Path:
    """Python source of a few packages of the host's standard library, once per run."""
    stdlib = Path(sysconfig.get_path("stdlib"))
    corpus = root / "corpus"
    for package in ("json", "email", "asyncio", "http", "logging", "unittest", "concurrent"):
        shutil.copytree(
            stdlib / package, corpus / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    return corpus


def docker_grep(args: argparse.Namespace, root: Path, run: str) -> dict[str, Any]:
    provider = docker_provider(root, args.image, f"sk14-{run}-grep")
    corpus = grep_corpus(root)
    out: dict[str, Any] = {"files": sum(1 for p in corpus.rglob("*") if p.is_file())}
    times: dict[str, list[float]] = defaultdict(list)
    with shut_after(provider, out):
        for i in range(args.greps + 1):  # the first box builds the payload: not counted
            pattern, options, other = GREPS[i % len(GREPS)]
            key = SandboxKey("bench", f"grep-{run}-{i}")
            workspace = provider._layout(key).user_data_dir / "workspace"
            shutil.copytree(corpus, workspace / "src")
            box = provider.acquire(key)
            box.execute("true")  # the agent is up and answering: what is left is the grep
            took = []
            for query in (pattern, pattern, other):
                t0 = time.perf_counter()
                assert box.grep(query, "src", max_results=100, **options).matches
                took.append(time.perf_counter() - t0)
            provider.destroy(key)
            if i:
                times[f"{pattern} first"].append(took[0])
                times[f"{pattern} warm"].append(took[1])
                times[f"{pattern} new query"].append(took[2])
    out.update({name: percentiles(got) for name, got in times.items()})
    return out


def bench_docker(args: argparse.Namespace, run: str) -> dict[str, Any]:
    import docker

    root = Path(tempfile.mkdtemp(prefix=f"sk14-{run}-"))
    out: dict[str, Any] = {"image": args.image, "engine": docker.from_env().version()["Version"]}
    try:
        for name, fn in (("pool", docker_pool), ("cold", docker_cold), ("grep", docker_grep)):
            say(f"docker {name}")
            out[name] = fn(args, root, run)
    finally:
        client = docker.from_env()  # whatever a crash left: the run's owners only
        for c in client.containers.list(all=True, filters={"name": f"sk14-{run}-"}):
            with contextlib.suppress(Exception):
                c.remove(force=True, v=True)
        shutil.rmtree(root, ignore_errors=True)
    return out


# -- Kubernetes -------------------------------------------------------------------------


def k8s_provider(root: Path, args: argparse.Namespace, ns: str, owner: str, **o: Any) -> Any:
    from sandkit_kubernetes.provider import KubernetesProvider

    fields = {
        "namespace": ns,
        "image": args.k8s_image,
        "image_pull_policy": "Never",
        "owner": owner,
        "reap_interval_s": 0,
        **o,
    }
    return KubernetesProvider(Settings(data_root=root / owner, providers={"kubernetes": fields}))


def k8s_pool(args: argparse.Namespace, root: Path, ns: str, run: str) -> dict[str, Any]:
    size = args.k8s_pool
    provider = k8s_provider(
        root, args, ns, f"sk14-{run}-pool", warm_pool={"size": size, "refill_interval_s": 0.2}
    )
    out: dict[str, Any] = {"pool_size": size}
    pool = provider._pool
    with shut_after(provider, out):
        start = time.perf_counter()
        assert pool.wait_ready(size, READY_S), f"the pool did not fill to {size}"
        out["fill_s"] = time.perf_counter() - start
        got, claimed = [], 0
        for i in range(args.k8s_claims):
            assert pool.wait_ready(size, READY_S)
            key = SandboxKey("bench", f"kseq-{run}-{i}")
            got.append(to_first_command(lambda k=key: provider.acquire(k)))
            claimed += "-pool-" in provider.acquire(key).pod_name
            provider.destroy(key)
        out["claimed"] = claimed
        out["acquire"] = percentiles([a for a, _ in got])
        out["first_command"] = percentiles([f for _, f in got])
    return out


def bare_pod(args: argparse.Namespace, options: Any, name: str, run: str) -> dict[str, Any]:
    """A pod of the same image with the box's security context and resources, no agent."""
    o = options
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {BENCH_LABEL: run}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": o.termination_grace_s,
            "securityContext": {
                "runAsNonRoot": o.uid != 0,
                "runAsUser": o.uid,
                "runAsGroup": o.gid,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "bare",
                    "image": args.k8s_image,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "infinity"],
                    "resources": dict(o.resources),
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": o.read_only_root_filesystem,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def k8s_cold(args: argparse.Namespace, root: Path, ns: str, run: str) -> dict[str, Any]:
    from kubernetes import watch
    from kubernetes.stream import stream

    provider = k8s_provider(root, args, ns, f"sk14-{run}-cold")
    out: dict[str, Any] = {}
    with shut_after(provider, out):
        warm = SandboxKey("bench", "warm-up")
        provider.acquire(warm).execute("true")
        provider.destroy(warm)
        core = k8s_core()
        steps = Steps()
        steps.wrap(provider, ("_create", "_wait_running", "_open_stream"))
        steps.wrap(BoxSandbox, ["ping"])
        samples: dict[str, list[float]] = defaultdict(list)

        def sandkit(i: int) -> None:
            key = SandboxKey("bench", f"kcold-{run}-{i}")
            acquired, first = to_first_command(lambda: provider.acquire(key))
            steps.take(acquired)
            samples["sandkit_acquire"].append(acquired)
            samples["sandkit_first_command"].append(first)
            provider.destroy(key)

        def bare(i: int) -> None:
            name = f"bare-{run}-{i}"
            t0 = time.perf_counter()
            pod = core.create_namespaced_pod(ns, bare_pod(args, provider.options, name, run))
            for event in watch.Watch().stream(
                core.list_namespaced_pod,
                ns,
                field_selector=f"metadata.name={name}",
                resource_version=pod.metadata.resource_version,
                timeout_seconds=120,
            ):
                status = event["object"].status
                if status.phase == "Running":
                    break
            else:
                raise AssertionError(f"bare pod {name} did not run")
            t1 = time.perf_counter()
            stream(
                k8s_core().connect_get_namespaced_pod_exec,
                name,
                ns,
                command=["true"],
                stdin=False,
                stdout=True,
                stderr=True,
                tty=False,
            )
            samples["bare_running"].append(t1 - t0)
            samples["bare_first_command"].append(time.perf_counter() - t0)
            core.delete_namespaced_pod(name, ns, grace_period_seconds=0)

        for i in range(args.k8s_cold):
            for step in (sandkit, bare) if i % 2 == 0 else (bare, sandkit):
                step(i)
        out.update({name: percentiles(got) for name, got in samples.items()})
        out["steps_ms"] = steps.medians_ms()
    return out


def k8s_core() -> Any:
    """A CoreV1Api of its own (the exec stream patches its ApiClient)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(client_configuration=configuration)
    return client.CoreV1Api(client.ApiClient(configuration))


def bench_kubernetes(args: argparse.Namespace, run: str) -> dict[str, Any]:
    from kubernetes import client

    core = k8s_core()
    ns = f"sk14-{run}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    root = Path(tempfile.mkdtemp(prefix=f"sk14-k8s-{run}-"))
    out: dict[str, Any] = {"image": args.k8s_image}
    try:
        for name, fn in (("pool", k8s_pool), ("cold", k8s_cold)):
            say(f"kubernetes {name}")
            out[name] = fn(args, root, ns, run)
    finally:
        with contextlib.suppress(Exception):
            core.delete_namespace(ns, grace_period_seconds=0)
        shutil.rmtree(root, ignore_errors=True)
    return out


# -- report -----------------------------------------------------------------------------


def targets(r: dict[str, Any]) -> list[tuple[str, float, float, str]]:
    """(target, measured, limit, unit) of every target this run measured."""
    d, k = r.get("docker", {}), r.get("kubernetes", {})
    got: list[tuple[str, float, float, str]] = []

    def add(name: str, value: float, limit: float, unit: str) -> None:
        got.append((name, value, limit, unit))

    if "pool" in d:
        p = d["pool"]
        add("Docker warm claim -> first command p50", p["seq_first_command"]["p50"] * 1e3, 30, "ms")
        # The issue's "p99 for a burst of 50 acquires": acquire returns a box that has
        # answered (its channel open); -> first command is in the table beside it.
        burst = p["burst_acquire"]["p99"] * 1e3
        add(f"Docker burst of {p['pool_size']}: acquire p99", burst, 150, "ms")
    if "cold" in d:
        c = d["cold"]
        ratio = c["sandkit_first_command"]["p50"] / c["bare"]["p50"]
        add("Docker cold acquire -> first command / bare create+start+exec", ratio, 1.1, "x")
    for pattern, _, _ in GREPS if "grep" in d else []:
        ratio = d["grep"][f"{pattern} first"]["p50"] / d["grep"][f"{pattern} warm"]["p50"]
        add(f"first grep / warm grep (p50), `{pattern}`", ratio, 1.5, "x")
    if "pool" in k:
        add(
            "Kubernetes claim -> first command p50",
            k["pool"]["first_command"]["p50"] * 1e3,
            60,
            "ms",
        )
    if "cold" in k:
        add("Kubernetes cold acquire p50", k["cold"]["sandkit_acquire"]["p50"], 1.2, "s")
    return got


def report(r: dict[str, Any]) -> None:
    print(f"run {r['run']}, {r['started']}; load average {r['load_start']} -> {r['load_end']}")
    print("\n| measurement | p50 | p95 | p99 | n |\n|---|---:|---:|---:|---:|")

    def row(label: str, s: dict[str, Any]) -> None:
        cells = " | ".join(f"{s[q] * 1e3:.1f} ms" for q in ("p50", "p95", "p99"))
        print(f"| {label} | {cells} | {s['n']} |")

    d, k = r.get("docker", {}), r.get("kubernetes", {})
    if "pool" in d:
        p = d["pool"]
        row("Docker warm claim, one at a time: acquire", p["seq_acquire"])
        row("Docker warm claim, one at a time: acquire -> first command", p["seq_first_command"])
        row(f"Docker burst of {p['pool_size']} at once: acquire", p["burst_acquire"])
        row(f"Docker burst of {p['pool_size']}: acquire -> first command", p["burst_first_command"])
    if "cold" in d:
        c = d["cold"]
        row("Docker cold acquire", c["sandkit_acquire"])
        row("Docker cold acquire -> first command", c["sandkit_first_command"])
        row("bare SDK create + start + exec_run(true)", c["bare"])
        row("bare, with the box's hardening options", c["bare_hardened"])
    if "grep" in d:
        for pattern, _, other in GREPS:
            row(f"first grep in a fresh agent, `{pattern}`", d["grep"][f"{pattern} first"])
            row(f"the same grep again, `{pattern}`", d["grep"][f"{pattern} warm"])
            row(f"then a query it has not run, `{other}`", d["grep"][f"{pattern} new query"])
    if "pool" in k:
        row("Kubernetes warm claim: acquire", k["pool"]["acquire"])
        row("Kubernetes warm claim: acquire -> first command", k["pool"]["first_command"])
    if "cold" in k:
        c = k["cold"]
        row("Kubernetes cold acquire", c["sandkit_acquire"])
        row("Kubernetes cold acquire -> first command", c["sandkit_first_command"])
        row("bare pod create -> Running", c["bare_running"])
        row("bare pod create -> Running -> exec true", c["bare_first_command"])
    print()
    if "pool" in d:
        p = d["pool"]
        print(
            f"Docker pool of {p['pool_size']} filled in {p['fill_s']:.1f} s; claims: "
            f"{p['seq_claimed']} of {p['seq_acquire']['n']} one at a time, "
            f"{p['burst_claimed']} of {p['burst_acquire']['n']} in the burst"
        )
    for name, section in (("Docker", d), ("Kubernetes", k)):
        if "pool" in section and "cold" in section:
            claim = section["pool"].get("seq_first_command") or section["pool"]["first_command"]
            cold = section["cold"]["sandkit_first_command"]["p50"]
            print(f"{name}: a warm claim is {cold / claim['p50']:.0f}x faster than a cold start")
        if "cold" in section:
            steps = ", ".join(f"{n} {v:.0f}" for n, v in section["cold"]["steps_ms"].items())
            print(f"{name} cold acquire, p50 per step (ms): {steps}")
    if "pool" in k:
        print(
            f"Kubernetes pool of {k['pool']['pool_size']} filled in {k['pool']['fill_s']:.1f} "
            f"s; {k['pool']['claimed']} of {k['pool']['first_command']['n']} were claims"
        )
    print("\n| target | measured | limit | |\n|---|---:|---:|---|")
    for name, value, limit, unit in r["targets"]:
        verdict = "pass" if value <= limit else "MISS"
        print(f"| {name} | {value:.2f} {unit} | {limit} {unit} | {verdict} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--platforms", default="docker,kubernetes")
    parser.add_argument(
        "--image", default=os.environ.get("SANDKIT_TEST_IMAGE") or "sandkit/base:debian12"
    )
    parser.add_argument(
        "--k8s-image",
        default=os.environ.get("SANDKIT_K8S_TEST_IMAGE") or "docker.io/sandkit/sandbox:debian12",
    )
    parser.add_argument("--seq", type=int, default=30, help="warm claims one at a time")
    parser.add_argument("--burst", type=int, default=50, help="pool size = claims at once")
    parser.add_argument("--cold", type=int, default=20, help="cold acquires (and bare of each)")
    parser.add_argument(
        "--greps", type=int, default=20, help="fresh boxes for the first grep (half per query)"
    )
    parser.add_argument("--k8s-pool", type=int, default=3, help="Kubernetes pool size")
    parser.add_argument("--k8s-claims", type=int, default=10, help="Kubernetes warm claims")
    parser.add_argument("--k8s-cold", type=int, default=6, help="Kubernetes cold acquires")
    parser.add_argument("--json", action="store_true", help="print the raw results as JSON")
    args = parser.parse_args()
    platforms = set(args.platforms.split(","))
    run = uuid.uuid4().hex[:6]
    r: dict[str, Any] = {"run": run, "started": time.strftime("%F %T"), "load_start": loadavg()}
    if "docker" in platforms:
        r["docker"] = bench_docker(args, run)
    if "kubernetes" in platforms:
        r["kubernetes"] = bench_kubernetes(args, run)
    r["load_end"] = loadavg()
    r["targets"] = targets(r)
    print(json.dumps(r, indent=2)) if args.json else report(r)
    return 0 if all(value <= limit for _, value, limit, _ in r["targets"]) else 1


if __name__ == "__main__":
    sys.exit(main())
