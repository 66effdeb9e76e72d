"""The shared conformance suite, unchanged, on Kubernetes + gVisor, over both carriers.

The same classes as `test_conformance_kubernetes.py` with every pod in the RuntimeClass
`gvisor` (created by `SANDKIT_GVISOR=1 deploy/dev-cluster/up.sh`: containerd's runsc
handler). The node's podPidsLimit (256 host tasks) also counts the Sentry's own tasks,
so the box's process bound is the in-kernel one (`exec_max_processes`, see
`sandkit/runtime/appkernel.py`), set to what fits. Under CI=true a missing RuntimeClass
is a failure, not a skip.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import test_conformance_kubernetes as runc
from sandkit_kubernetes.provider import KubernetesProvider
from tests.conformance_areas import carrier_areas_only
from tests.gvisor_support import assert_in_gvisor, require_runtime_class

from sandkit import SandboxKey, Settings
from sandkit.testing.conformance import ExposeConformance
from sandkit.testing.conformance.shared_box import SUITE_LIMITS

pytestmark = pytest.mark.kubernetes

# What fits in the dev cluster's podPidsLimit (256) under gVisor (tests/hardening/targets.py).
GVISOR_LIMITS = SUITE_LIMITS.model_copy(update={"exec_max_processes": 96})
CLAIM = "sandkit-data-gvisor"


@pytest.fixture(scope="module")
def runtime_class(core: Any) -> str:
    return require_runtime_class(core.api_client)


@pytest.fixture(scope="module")
def claim_root(
    tmp_path_factory: pytest.TempPathFactory, core: Any, namespace: str
) -> Iterator[Path]:
    """As in the runc module, under names of its own (the two modules share a session)."""
    import os

    from k8s_support import SESSION
    from kubernetes import client

    root = tmp_path_factory.mktemp("k8s-gvisor-claim") / "data"
    root.mkdir()
    os.chown(root, 1000, 1000)
    pv_name = f"sandkit-test-{SESSION}-gvisor"
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
    runc._wait_bound(core, namespace, CLAIM)
    yield root
    try:
        core.delete_namespaced_persistent_volume_claim(CLAIM, namespace)
    finally:
        core.delete_persistent_volume(pv_name)


@pytest.fixture(scope="module")
def shared_key() -> SandboxKey:
    return SandboxKey("conformance", f"thread-{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="module")
def stdio_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("k8s-gvisor-stdio") / "data"


@pytest.fixture(scope="module")
def stdio_provider(
    stdio_root: Path, options_for: Callable[..., dict[str, Any]], runtime_class: str
) -> Iterator[KubernetesProvider]:
    options = options_for(carrier="stdio", storage="hostPath", runtime_class_name=runtime_class)
    settings = Settings(
        data_root=stdio_root,
        secrets=[runc.SECRET],
        limits=GVISOR_LIMITS,
        providers={"kubernetes": options},
    )
    provider = KubernetesProvider(settings)
    yield provider
    provider.shutdown()


@pytest.fixture(scope="module")
def http_provider(
    claim_root: Path, options_for: Callable[..., dict[str, Any]], runtime_class: str
) -> Iterator[KubernetesProvider]:
    options = options_for(
        carrier="http",
        storage="pvc",
        pvc_claim_name=CLAIM,
        pvc_mount_path=str(claim_root),  # where this backend sees the claim (uploads)
        runtime_class_name=runtime_class,
    )
    settings = Settings(
        data_root=claim_root,
        secrets=[runc.SECRET],
        limits=GVISOR_LIMITS,
        providers={"kubernetes": options},
    )
    provider = KubernetesProvider(settings)
    yield provider
    provider.shutdown()


class TestKubernetesGvisorStdioConformance(runc.TestKubernetesStdioConformance):
    pass


@carrier_areas_only
class TestKubernetesGvisorHttpConformance(runc.TestKubernetesHttpConformance):
    """Carrier http in gVisor: what the carrier carries and its lifecycle."""


class TestKubernetesGvisorExposeConformance(ExposeConformance):
    """Exposed ports of gVisor pods: `pods/portforward` cannot reach gVisor's own network
    stack (gVisor issue 3811), so each connection is an exec of `agent.pyz --net connect`
    in the box (forward.py); the shared expose semantics hold all the same."""

    @pytest.fixture
    def expose_provider(
        self, make_provider: Callable[..., KubernetesProvider], runtime_class: str
    ) -> KubernetesProvider:
        provider = make_provider(
            execute_enabled=True,
            expose={"enabled": True, "max_ports": 2},
            runtime_class_name=runtime_class,
        )
        return provider


@pytest.mark.parametrize("carrier", ["stdio", "http"])
def test_the_gvisor_suite_really_runs_in_gvisor(
    stdio_provider: KubernetesProvider,
    http_provider: KubernetesProvider,
    shared_key: SandboxKey,
    core: Any,
    namespace: str,
    runtime_class: str,
    carrier: str,
) -> None:
    provider = stdio_provider if carrier == "stdio" else http_provider
    box = provider.acquire(shared_key)
    assert_in_gvisor(box)
    pods = core.list_namespaced_pod(
        namespace, label_selector=f"sandkit.sandbox-id={shared_key.sandbox_id}"
    ).items
    assert pods and all(p.spec.runtime_class_name == runtime_class for p in pods)
