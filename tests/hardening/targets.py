"""The providers the hardening suite attacks, each built the way its own tests build it.

A `Target` knows how to make a provider of its kind on a data root, how to list
the boxes of ours that exist (running or not), and how to kill a box out from
under the provider (a crashed container, an evicted pod) and tell when it is
really dead. Local has no box: its "boxes" are the sandboxes the provider
still tracks, and it cannot be killed from outside (`can_kill_box` is False).

Docker and Kubernetes are real (a local engine, the dev cluster); E2B runs over
the Docker-backed stand-in of `providers/sandkit-e2b/tests/e2b_standin.py`,
because the E2B cloud is not reachable here.

`docker-gvisor` and `kubernetes-gvisor` are the same two targets with boxes in gVisor
(`runtime: runsc`, `runtime_class_name: gvisor`; see tests/gvisor_support.py). Under
gVisor the host's pids cgroup counts the sandbox's host tasks (about two per process,
plus ~25 for the Sentry), so the box's process bound is the in-kernel one the agent
sets (runtime/appkernel.py, `exec_max_processes`), and the host limit must leave room
for it: GVISOR_DOCKER_PIDS on Docker; on Kubernetes, where the node's podPidsLimit
(256) is the host limit, exec_max_processes is GVISOR_K8S_PROCESSES.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandkit import SandboxKey, Settings
from sandkit.config import LimitsSettings
from sandkit.provider import SandboxProvider

ROOT = Path(__file__).resolve().parents[2]
for _name, _dist in (
    ("sandkit_docker", "sandkit-docker"),
    ("sandkit_kubernetes", "sandkit-kubernetes"),
    ("sandkit_e2b", "sandkit-e2b"),
):
    if importlib.util.find_spec(_name) is None:  # not installed: run from the tree
        sys.path.insert(0, str(ROOT / "providers" / _dist / "src"))
for _tests in ("sandkit-kubernetes", "sandkit-e2b"):  # k8s_support, e2b_standin
    _path = str(ROOT / "providers" / _tests / "tests")
    if _path not in sys.path:
        sys.path.append(_path)

KINDS = ("local", "docker", "kubernetes", "e2b", "docker-gvisor", "kubernetes-gvisor")
GVISOR_KINDS = ("docker-gvisor", "kubernetes-gvisor")
POOL_KINDS = ("docker", "kubernetes", *GVISOR_KINDS)  # providers with warm pools
# Host tasks a gVisor box may use on Docker: room for exec_max_processes (256) processes.
GVISOR_DOCKER_PIDS = 1024
# Processes a gVisor pod may have under the dev cluster's podPidsLimit of 256 host tasks.
GVISOR_K8S_PROCESSES = 96

# A provider process started by a test (to be killed and restarted) shares the session.
SESSION = os.environ.get("SANDKIT_HARDENING_SESSION") or uuid.uuid4().hex[:10]
SESSION_LABEL = "sandkit.test-session"
OWNER = f"hard-{SESSION}"
NAMESPACE = f"sandkit-hardening-{SESSION}"

# Configured on every provider; the secrets tests look for it everywhere.
SECRET = "sk-hardening-5e1f0c9a7d3b-never-print"
# A runaway pattern costs seconds, not the default half minute.
LIMITS = LimitsSettings(search_timeout_s=3.0)

API_KEY = "e2b_standin_hardening_key"  # the stand-in accepts any key
# A killed box must be dead within this (polled: a quiet machine waits a second at most).
DEATH_WAIT_S = 60.0

Factory = Callable[..., SandboxProvider]


@dataclasses.dataclass
class Target:
    """One provider kind, ready to build providers and to inspect what they left behind."""

    kind: str
    build: Callable[[Settings, dict[str, Any]], SandboxProvider]
    list_boxes: Callable[[SandboxProvider], list[str]]
    kill: Callable[[SandboxKey], float] | None = None
    isolates_execute: bool = True  # False for local: commands run on the host
    cleanup: Callable[[], None] = lambda: None

    @property
    def can_kill_box(self) -> bool:
        return self.kill is not None

    def make(
        self,
        data_root: Path,
        *,
        secrets: list[str] | None = None,
        limits: LimitsSettings = LIMITS,
        options: dict[str, Any] | None = None,
        **settings: Any,
    ) -> SandboxProvider:
        """A provider of this kind with execute on and the hardening secret configured."""
        fields: dict[str, Any] = {
            "data_root": data_root,
            "execute_enabled": True,
            "secrets": [SECRET] if secrets is None else secrets,
            "limits": limits,
            **settings,
        }
        return self.build(Settings(**fields), dict(options or {}))

    def boxes(self, provider: SandboxProvider) -> list[str]:
        """Our boxes that still exist (any state): what must be empty after shutdown."""
        return self.list_boxes(provider)

    def kill_box(self, key: SandboxKey) -> float:
        """Kill the box of `key` as its platform would, and wait until it is really dead.

        Returns when (time.monotonic) it was first seen dead. A kill request takes
        effect later on some platforms (a deleted pod runs until the kubelet stops
        it), and calls made in between may still succeed.
        """
        assert self.kill is not None, f"{self.kind} has no box to kill"
        return self.kill(key)


def wait_dead(dead: Callable[[], bool], what: str, wait_s: float = DEATH_WAIT_S) -> float:
    """Poll `dead()` until it holds; the monotonic time it first did."""
    deadline = time.monotonic() + wait_s
    while not dead():
        assert time.monotonic() < deadline, f"{what} still runs {wait_s:.0f} s after its kill"
        time.sleep(0.05)
    return time.monotonic()


def forbidden_for(data_root: Path) -> list[str]:
    """The host data root, in both spellings, must never come back."""
    return sorted({str(data_root), os.path.realpath(data_root)})


# -- local ---------------------------------------------------------------------------


def local_target() -> Target:
    from sandkit.local import LocalProvider

    def build(settings: Settings, options: dict[str, Any]) -> SandboxProvider:
        assert not options, f"the local provider takes no options: {options}"
        return LocalProvider(settings)

    def boxes(provider: SandboxProvider) -> list[str]:
        assert isinstance(provider, LocalProvider)
        with provider._lock:
            return [key.sandbox_id for key in provider._active]

    return Target("local", build, boxes, kill=None, isolates_execute=False)


# -- docker --------------------------------------------------------------------------


def docker_target(kind: str = "docker", variant: dict[str, Any] | None = None) -> Target:
    from sandkit_docker.provider import DockerProvider

    from tests.docker_support import default_base_image, require_docker, require_image

    client = require_docker()
    image = os.environ.get("SANDKIT_TEST_IMAGE") or default_base_image()
    require_image(image)

    def build(settings: Settings, options: dict[str, Any]) -> SandboxProvider:
        merged = {
            "image": image,
            "pull": "never",
            "owner": OWNER,
            "labels": {SESSION_LABEL: SESSION},
            "reap_interval_s": 0,
            **(variant or {}),
            **options,
        }
        return DockerProvider(settings.model_copy(update={"providers": {"docker": merged}}))

    def boxes(provider: SandboxProvider) -> list[str]:
        owner = getattr(getattr(provider, "options", None), "owner", OWNER)
        found = client.containers.list(all=True, filters={"label": f"sandkit.owner={owner}"})
        return [c.name for c in found]

    def kill(key: SandboxKey) -> float:
        """SIGKILL the container; dead once the engine says it no longer runs."""
        import docker.errors

        found = client.containers.list(filters={"label": f"sandkit.sandbox-id={key.sandbox_id}"})
        for container in found:
            container.kill()

        def dead() -> bool:
            for container in found:
                try:
                    container.reload()
                except docker.errors.NotFound:
                    continue
                if container.attrs["State"]["Running"]:
                    return False
            return True

        return wait_dead(dead, f"container of {key.sandbox_id}")

    def cleanup() -> None:
        for container in client.containers.list(
            all=True, filters={"label": f"{SESSION_LABEL}={SESSION}"}
        ):
            with contextlib.suppress(Exception):
                container.remove(force=True, v=True)
        with contextlib.suppress(Exception):
            client.volumes.prune(filters={"label": f"{SESSION_LABEL}={SESSION}"})
        with contextlib.suppress(Exception):
            client.networks.prune(filters={"label": f"{SESSION_LABEL}={SESSION}"})

    return Target(kind, build, boxes, kill=kill, cleanup=cleanup)


def docker_gvisor_target() -> Target:
    """Docker with every box in gVisor; its own owner, so its boxes are told apart."""
    from tests.docker_support import require_docker
    from tests.gvisor_support import require_docker_runsc

    runtime = require_docker_runsc(require_docker())
    variant = {"runtime": runtime, "pids_limit": GVISOR_DOCKER_PIDS, "owner": f"{OWNER}-gv"}
    return docker_target("docker-gvisor", variant)


# -- kubernetes ----------------------------------------------------------------------


# Fifty boxes must fit on one two-core dev node; a case that keeps several gVisor boxes
# (Guaranteed, 500m each) at once beside other workers' asks for these too.
K8S_SMALL_RESOURCES = {
    "requests": {"cpu": "10m", "memory": "32Mi"},
    "limits": {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "1Gi"},
}


def kubernetes_target(
    kind: str = "kubernetes", variant: dict[str, Any] | None = None, max_processes: int = 0
) -> Target:
    from k8s_support import require_cluster, require_image, sandbox_image
    from kubernetes import client as k8s
    from sandkit_kubernetes.provider import KubernetesProvider

    kubeconfig, core = require_cluster()
    image = sandbox_image()
    require_image(core, image)
    try:
        core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NAMESPACE)))
    except k8s.ApiException as exc:
        if exc.status != 409:  # 409: a provider process of this session made it already
            raise

    def build(settings: Settings, options: dict[str, Any]) -> SandboxProvider:
        merged = {
            "image": image,
            "image_pull_policy": "Never",
            "kubeconfig": kubeconfig,
            "namespace": NAMESPACE,
            "owner": OWNER,
            "labels": {SESSION_LABEL: SESSION},
            "reap_interval_s": 0,
            "resources": K8S_SMALL_RESOURCES,
            **(variant or {}),
            **options,
        }
        update: dict[str, Any] = {"providers": {"kubernetes": merged}}
        if max_processes and settings.limits.exec_max_processes > max_processes:
            limits = settings.limits.model_copy(update={"exec_max_processes": max_processes})
            update["limits"] = limits
        return KubernetesProvider(settings.model_copy(update=update))

    def boxes(provider: SandboxProvider) -> list[str]:
        owner = getattr(getattr(provider, "options", None), "owner", OWNER)
        pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"sandkit.owner={owner}")
        return [p.metadata.name for p in pods.items]

    def kill(key: SandboxKey) -> float:
        """Delete the pod at once (an eviction); dead once none of its processes is left.

        With grace 0 the API object goes at once, but the containers run until the
        kubelet stops them, a second or more later. Their processes are seen in this
        host's /proc when the node is this machine (the dev cluster); on another node
        the delete is the best time known.
        """
        pods = core.list_namespaced_pod(
            NAMESPACE, label_selector=f"sandkit.sandbox-id={key.sandbox_id}"
        ).items
        here = [pod.metadata.uid for pod in pods if pod_processes(pod.metadata.uid)]
        for pod in pods:
            core.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)
        return wait_dead(lambda: not any(pod_processes(uid) for uid in here), f"pod {here}")

    def cleanup() -> None:
        with contextlib.suppress(Exception):
            core.delete_collection_namespaced_pod(
                NAMESPACE, label_selector=f"{SESSION_LABEL}={SESSION}", grace_period_seconds=0
            )
        with contextlib.suppress(Exception):
            core.delete_namespace(NAMESPACE)

    return Target(kind, build, boxes, kill=kill, cleanup=cleanup)


def kubernetes_gvisor_target() -> Target:
    """Kubernetes with every pod in the gVisor RuntimeClass; its own owner."""
    from k8s_support import require_cluster

    from tests.gvisor_support import require_runtime_class

    _, core = require_cluster()
    runtime_class = require_runtime_class(core.api_client)
    # Guaranteed QoS: gVisor gives its Sentry the app container's oom_score_adj, which for a
    # burstable pod is up to 999, so over its memory limit the host would kill the Sentry
    # (the whole pod) instead of the command (docs/security.md).
    guaranteed = {"cpu": "500m", "memory": "512Mi"}
    variant = {
        "runtime_class_name": runtime_class,
        "owner": f"{OWNER}-gv",
        "resources": {"requests": guaranteed, "limits": {**guaranteed, "ephemeral-storage": "1Gi"}},
    }
    return kubernetes_target("kubernetes-gvisor", variant, max_processes=GVISOR_K8S_PROCESSES)


def pod_processes(uid: str) -> int:
    """Processes on this host in the cgroup of pod `uid` (cgroupfs or systemd naming)."""
    names = (f"pod{uid}", f"pod{uid.replace('-', '_')}")
    count = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cgroups = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            continue
        count += any(name in cgroups for name in names)
    return count


# -- e2b (stand-in) ------------------------------------------------------------------


def e2b_target() -> Target:
    from e2b_standin import LABEL_ID, META_PREFIX, Cloud
    from sandkit_e2b.provider import E2BProvider

    from tests.docker_support import default_base_image, require_docker, require_image

    client = require_docker()
    image = os.environ.get("SANDKIT_TEST_IMAGE") or default_base_image()
    require_image(image)
    cloud = Cloud(client, {"base": image}, SESSION)

    def build(settings: Settings, options: dict[str, Any]) -> SandboxProvider:
        merged = {
            "api_key": API_KEY,
            "owner": OWNER,
            "maintenance_interval_s": 0,
            "shutdown": "kill",
            **options,
        }
        return E2BProvider(
            settings.model_copy(update={"providers": {"e2b": merged}}),
            sandbox_class=cloud.sandbox_class(),
        )

    def boxes(provider: SandboxProvider) -> list[str]:
        """What the service lists for our owner, running or paused."""
        from e2b import SandboxQuery

        query = SandboxQuery(metadata={"sandkit.owner": OWNER})
        pages = cloud.sandbox_class().list(query=query, api_key=API_KEY)
        found: list[str] = []
        while pages.has_next:
            found.extend(info.sandbox_id for info in pages.next_items())
        return found

    def kill(key: SandboxKey) -> float:
        """The service kills the sandbox (a crash, an expiry); its container is gone then."""
        for container in cloud.containers(all_states=False):
            if container.labels.get(META_PREFIX + "sandkit.sandbox-id") == key.sandbox_id:
                cloud.do_kill(container.labels[LABEL_ID])
        return time.monotonic()

    return Target("e2b", build, boxes, kill=kill, cleanup=cloud.remove_all)


BUILDERS: dict[str, Callable[[], Target]] = {
    "local": local_target,
    "docker": docker_target,
    "kubernetes": kubernetes_target,
    "e2b": e2b_target,
    "docker-gvisor": docker_gvisor_target,
    "kubernetes-gvisor": kubernetes_gvisor_target,
}
