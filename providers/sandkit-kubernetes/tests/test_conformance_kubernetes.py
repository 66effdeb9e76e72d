"""The Kubernetes provider runs the shared conformance suite, unchanged, over both carriers.

- stdio: the agent over a pods/exec stream, thread data on hostPath (single-node storage);
- http: the agent on the pod IP with a bearer token, thread data on a PersistentVolumeClaim
  (subPaths; a hostPath PersistentVolume stands in for real storage on the dev cluster).

One provider and one pod serve each class (the suite gives every test its own directory); the
lifecycle tests make their own keys and therefore their own pods.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_support import SESSION
from sandkit_kubernetes.provider import KubernetesProvider

from sandkit import SandboxKey, Settings
from sandkit.testing.conformance.shared_box import (
    SUITE_LIMITS,
    SharedBoxConformance,
    check_live_upload,
    host_forbidden,
)

pytestmark = pytest.mark.kubernetes

SECRET = "sk-test-8c1d2e3f4a5b-never-print"
CLAIM = "sandkit-data"


@pytest.fixture(scope="module")
def claim_root(
    tmp_path_factory: pytest.TempPathFactory, core: Any, namespace: str
) -> Iterator[Path]:
    """A PersistentVolumeClaim bound to a hostPath PersistentVolume at the returned directory."""
    from kubernetes import client

    root = tmp_path_factory.mktemp("k8s-claim") / "data"
    root.mkdir()
    os.chown(root, 1000, 1000)  # what a storage class with fsGroup support would do
    pv_name = f"sandkit-test-{SESSION}"
    core.create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=pv_name, labels={"sandkit.test-session": SESSION}),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "1Gi"},
                access_modes=["ReadWriteMany"],
                persistent_volume_reclaim_policy="Retain",
                storage_class_name="",
                host_path=client.V1HostPathVolumeSource(path=str(root), type="Directory"),
                claim_ref=client.V1ObjectReference(namespace=namespace, name=CLAIM),
            ),
        )
    )
    core.create_namespaced_persistent_volume_claim(
        namespace,
        client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name=CLAIM),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteMany"],
                storage_class_name="",
                volume_name=pv_name,
                resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
            ),
        ),
    )
    _wait_bound(core, namespace, CLAIM)
    yield root
    try:
        core.delete_namespaced_persistent_volume_claim(CLAIM, namespace)
    finally:
        core.delete_persistent_volume(pv_name)


def _wait_bound(core: Any, namespace: str, claim: str, timeout_s: float = 90.0) -> None:
    """The PV controller binds on its own schedule (up to its resync period, 15 s);
    a pod created before that is unschedulable, so tests start after the bind.

    Polled, not watched: a watch opened right after the create can be refused
    with 504 "Too large resource version" while the watch cache catches up.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if core.read_namespaced_persistent_volume_claim(claim, namespace).status.phase == "Bound":
            return
        time.sleep(0.2)
    raise AssertionError(f"PersistentVolumeClaim {claim} not bound after {timeout_s:.0f} s")


class KubernetesConformance(SharedBoxConformance):
    """Shared fixtures; subclasses say which carrier and storage."""

    configured_secret = SECRET


@pytest.fixture(scope="module")
def shared_key() -> SandboxKey:
    return SandboxKey("conformance", f"thread-{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="module")
def stdio_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("k8s-stdio") / "data"


@pytest.fixture(scope="module")
def stdio_provider(
    stdio_root: Path, options_for: Callable[..., dict[str, Any]]
) -> Iterator[KubernetesProvider]:
    settings = Settings(
        data_root=stdio_root,
        secrets=[SECRET],
        limits=SUITE_LIMITS,
        providers={"kubernetes": options_for(carrier="stdio", storage="hostPath")},
    )
    provider = KubernetesProvider(settings)
    yield provider
    provider.shutdown()


@pytest.fixture(scope="module")
def http_provider(
    claim_root: Path, options_for: Callable[..., dict[str, Any]]
) -> Iterator[KubernetesProvider]:
    settings = Settings(
        data_root=claim_root,
        secrets=[SECRET],
        limits=SUITE_LIMITS,
        providers={
            "kubernetes": options_for(
                carrier="http",
                storage="pvc",
                pvc_claim_name=CLAIM,
                pvc_mount_path=str(claim_root),
            )
        },
    )
    provider = KubernetesProvider(settings)
    yield provider
    provider.shutdown()


class TestKubernetesStdioConformance(KubernetesConformance):
    @pytest.fixture
    def provider(self, stdio_provider: KubernetesProvider) -> KubernetesProvider:
        return stdio_provider

    @pytest.fixture
    def forbidden_strings(self, stdio_root: Path) -> list[str]:
        return host_forbidden(stdio_root)


class TestKubernetesHttpConformance(KubernetesConformance):
    @pytest.fixture
    def provider(self, http_provider: KubernetesProvider) -> KubernetesProvider:
        return http_provider

    @pytest.fixture
    def forbidden_strings(self, claim_root: Path) -> list[str]:
        return host_forbidden(claim_root)


def test_an_upload_reaches_the_running_pods_and_their_commands_cannot_change_it(
    stdio_provider: KubernetesProvider, http_provider: KubernetesProvider, shared_key: SandboxKey
) -> None:
    """hostPath (stdio) and the claim as the backend mounts it (http, pvc_mount_path)."""
    check_live_upload(stdio_provider, shared_key)
    check_live_upload(http_provider, shared_key)
