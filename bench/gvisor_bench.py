"""What gVisor costs: the same operations on runc and on gVisor boxes, in the same run.

    python3 bench/gvisor_bench.py [--targets docker,kubernetes] [--ops 200] [--execs 100]
                                  [--greps 10] [--cold 5] [--json]

For each platform (Docker: `runtime` runc vs runsc; Kubernetes: the default runtime vs the
RuntimeClass `gvisor`), interleaved so that machine load hits both alike:

- op latency: read_file and write_file of a small file through the agent (stdio carrier);
- execute("true"): the shell started in the box and reaped;
- grep: a content search over a tree of ~2,000 Python files (the image's standard library
  copied into the workspace), counts only;
- cold acquire: a fresh key -> box running -> agent answering, p50 over --cold keys;
- idle memory: what the platform charges an idle box with its agent, from the box's memory
  cgroup on this host (usage minus page cache, but with shmem, where gVisor keeps its
  processes' memory: RSS + shmem + kernel), p50 over the cold boxes, 2 s after their first
  answer.

Needs what .ci/run sets up: the Docker engine with the runsc runtime
(`SANDKIT_GVISOR=1 deploy/docker/dockerd.sh up`), the dev cluster with the RuntimeClass
(`SANDKIT_GVISOR=1 deploy/dev-cluster/up.sh`), the base image. Prints a table (and JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for extra in (
    ROOT,
    ROOT / "src",
    ROOT / "providers" / "sandkit-docker" / "src",
    ROOT / "providers" / "sandkit-kubernetes" / "src",
    ROOT / "providers" / "sandkit-kubernetes" / "tests",
):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from hostmem import cgroup_memory_bytes, container_memory_bytes  # noqa: E402
from timing import percentiles  # noqa: E402

from sandkit import SandboxKey, Settings  # noqa: E402
from sandkit.config import LimitsSettings  # noqa: E402
from sandkit.provider import SandboxProvider  # noqa: E402
from sandkit.sandbox import Sandbox  # noqa: E402

WORKSPACE = "/mnt/user-data/workspace"
OWNER = f"bench-gv-{uuid.uuid4().hex[:6]}"
# Under gVisor the pod's podPidsLimit (256) counts the Sentry's tasks too (docs/security.md).
K8S_GVISOR_PROCESSES = 96


def docker_providers(root: Path, image: str) -> dict[str, Any]:
    from sandkit_docker.provider import DockerProvider

    def make(runtime: str | None) -> Callable[[], SandboxProvider]:
        options: dict[str, Any] = {
            "image": image,
            "pull": "never",
            "owner": f"{OWNER}-{runtime or 'runc'}",
            "reap_interval_s": 0,
        }
        if runtime:
            options.update(runtime=runtime, pids_limit=1024)
        settings = Settings(
            data_root=root / (runtime or "runc"),
            execute_enabled=True,
            providers={"docker": options},
        )
        return lambda: DockerProvider(settings)

    return {"runc": make(None), "gvisor": make("runsc"), "_memory": docker_memory}


def kubernetes_providers(root: Path) -> dict[str, Any]:
    from k8s_support import kubeconfig_path, sandbox_image
    from kubernetes import client, config
    from sandkit_kubernetes.provider import KubernetesProvider

    kubeconfig = kubeconfig_path()
    assert kubeconfig, "no kubeconfig: export KUBECONFIG=$(deploy/dev-cluster/up.sh)"
    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    core = client.CoreV1Api(client.ApiClient(configuration))
    namespace = f"{OWNER}-ns"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))

    def make(runtime_class: str | None) -> Callable[[], SandboxProvider]:
        options: dict[str, Any] = {
            "image": sandbox_image(),
            "image_pull_policy": "Never",
            "kubeconfig": kubeconfig,
            "namespace": namespace,
            "owner": f"{OWNER}-{runtime_class or 'runc'}",
            "storage": "hostPath",
            "reap_interval_s": 0,
        }
        limits = LimitsSettings()
        if runtime_class:
            options["runtime_class_name"] = runtime_class
            limits = LimitsSettings(exec_max_processes=K8S_GVISOR_PROCESSES)
        settings = Settings(
            data_root=root / f"k8s-{runtime_class or 'runc'}",
            execute_enabled=True,
            limits=limits,
            providers={"kubernetes": options},
        )
        return lambda: KubernetesProvider(settings)

    made: dict[str, Any] = {"runc": make(None), "gvisor": make("gvisor")}
    made["_cleanup"] = lambda: core.delete_namespace(namespace)
    made["_memory"] = kubernetes_memory(core, namespace)
    return made


def docker_memory(sandbox_id: str) -> int | None:
    import docker

    client = docker.from_env()
    found = client.containers.list(filters={"label": f"sandkit.sandbox-id={sandbox_id}"})
    return container_memory_bytes(found[0].id) if found else None


def kubernetes_memory(core: Any, namespace: str) -> Callable[[str], int | None]:
    def of(sandbox_id: str) -> int | None:
        pods = core.list_namespaced_pod(
            namespace, label_selector=f"sandkit.sandbox-id={sandbox_id}"
        ).items
        for pod in pods:
            uid = pod.metadata.uid
            for qos in ("besteffort", "burstable", ""):
                base = Path("/sys/fs/cgroup/memory/kubepods", qos, f"pod{uid}")
                got = cgroup_memory_bytes(base)
                if got is not None:
                    return got
        return None

    return of


def seed_tree(box: Sandbox) -> str:
    found = box.execute("python3 -c 'import sysconfig; print(sysconfig.get_path(\"stdlib\"))'")
    source = found.stdout.strip()
    tree = f"{WORKSPACE}/stdlib"
    done = box.execute(f"rm -rf {tree} && cp -r {source} {tree}")
    assert done.exit_code == 0, done
    return tree


def sample(fn: Callable[[], Any], n: int) -> list[float]:
    fn()
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def bench_platform(
    factories: dict[str, Any], args: argparse.Namespace
) -> dict[str, dict[str, Any]]:
    memory_of: Callable[[str], int | None] = factories["_memory"]
    results: dict[str, dict[str, Any]] = {}
    runtimes = [name for name in factories if not name.startswith("_")]
    providers = {name: factories[name]() for name in runtimes}
    try:
        boxes = {n: p.acquire(SandboxKey("bench", f"warm-{n}")) for n, p in providers.items()}
        trees = {name: seed_tree(box) for name, box in boxes.items()}
        for box in boxes.values():
            box.write_file(f"{WORKSPACE}/small.txt", "hello\n" * 20)
        raw: dict[str, dict[str, list[float]]] = {name: {} for name in runtimes}
        # Interleaved rounds: both runtimes see the same machine load.
        rounds = 5
        for _ in range(rounds):
            for name, box in boxes.items():
                r = raw[name]
                r.setdefault("read_file", []).extend(
                    sample(lambda b=box: b.read_file(f"{WORKSPACE}/small.txt"), args.ops // rounds)
                )
                r.setdefault("write_file", []).extend(
                    sample(
                        lambda b=box: b.write_file(f"{WORKSPACE}/w.txt", "x" * 100),
                        args.ops // rounds,
                    )
                )
                r.setdefault("execute", []).extend(
                    sample(lambda b=box: b.execute("true"), args.execs // rounds)
                )
                r.setdefault("grep", []).extend(
                    sample(
                        lambda b=box, t=trees[name]: b.grep(
                            "def [a-z_]+\\(self", t, output_mode="count", max_results=500
                        ),
                        max(1, args.greps // rounds),
                    )
                )
        for _ in range(args.cold):
            for name, provider in providers.items():
                key = SandboxKey("bench", f"cold-{uuid.uuid4().hex[:8]}")
                start = time.perf_counter()
                box = provider.acquire(key)
                box.list_dir(WORKSPACE)
                raw[name].setdefault("cold_acquire", []).append(time.perf_counter() - start)
                time.sleep(2.0)
                mem = memory_of(key.sandbox_id)
                if mem is not None:
                    raw[name].setdefault("idle_memory", []).append(float(mem))
                provider.destroy(key)
        for name in runtimes:
            results[name] = {}
            for op, samples in raw[name].items():
                one = {"p50": samples[0], "p95": samples[0], "n": 1}
                results[name][op] = percentiles(samples) if len(samples) > 1 else one
    finally:
        for provider in providers.values():
            provider.shutdown()
        cleanup = factories.get("_cleanup")
        if cleanup:
            cleanup()
    return results


def table(platform: str, results: dict[str, dict[str, Any]]) -> str:
    lines = [
        f"| {platform}: figure | runc | gVisor | gVisor / runc |",
        "|---|---|---|---|",
    ]
    for op in ("read_file", "write_file", "execute", "grep", "cold_acquire", "idle_memory"):
        a, b = results["runc"].get(op), results["gvisor"].get(op)
        if not a or not b:
            continue
        if op == "idle_memory":
            fa, fb = f"{a['p50'] / 2**20:.1f} MiB", f"{b['p50'] / 2**20:.1f} MiB"
            label = "idle memory of a box (p50)"
        else:
            fa = f"{a['p50'] * 1000:.2f} / {a['p95'] * 1000:.2f} ms"
            fb = f"{b['p50'] * 1000:.2f} / {b['p95'] * 1000:.2f} ms"
            label = f"{op} p50 / p95 (n={a['n']})"
        lines.append(f"| {label} | {fa} | {fb} | {b['p50'] / a['p50']:.1f}x |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--targets", default="docker,kubernetes")
    parser.add_argument(
        "--image", default=os.environ.get("SANDKIT_TEST_IMAGE") or "sandkit/base:debian12"
    )
    parser.add_argument("--ops", type=int, default=200, help="read/write samples per runtime")
    parser.add_argument("--execs", type=int, default=100, help="execute samples per runtime")
    parser.add_argument("--greps", type=int, default=10, help="grep samples per runtime")
    parser.add_argument("--cold", type=int, default=5, help="cold acquires per runtime")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sandkit-gvisor-bench-"))
    out: dict[str, Any] = {}
    for platform in args.targets.split(","):
        if platform == "docker":
            factories = docker_providers(root, args.image)
        elif platform == "kubernetes":
            factories = kubernetes_providers(root)
        else:
            parser.error(f"unknown target {platform}")
        out[platform] = bench_platform(factories, args)
        print(table(platform, out[platform]))
        print()
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
