"""Fixtures for the Kubernetes provider tests: a real cluster, a node-local image, no mocks.

The session runs in a namespace of its own (`sandkit-test-<id>`); every pod a test creates
also carries the label `sandkit.test-session=<id>`. At the end a session fixture deletes any
pod left with that label (and the namespace), so nothing of ours outlives the run even when a
test fails half-way.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("sandkit_kubernetes") is None:  # not installed: run from the tree
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from k8s_support import (
    NAMESPACE,
    SESSION,
    SESSION_LABEL,
    TEST_OWNER,
    require_cluster,
    require_image,
    sandbox_image,
)
from sandkit_kubernetes.provider import KubernetesProvider

from sandkit import Settings
from sandkit.testing import no_ambient_configuration  # noqa: F401 - an autouse fixture

# Read before the ambient SANDKIT_* variables are cleared below.
IMAGE = sandbox_image()

ProviderFactory = Callable[..., KubernetesProvider]


@pytest.fixture(scope="session")
def cluster() -> tuple[str, Any]:
    """(kubeconfig path, CoreV1Api)."""
    return require_cluster()


@pytest.fixture(scope="session")
def core(cluster: tuple[str, Any]) -> Any:
    return cluster[1]


@pytest.fixture(scope="session")
def kubeconfig(cluster: tuple[str, Any]) -> str:
    return cluster[0]


@pytest.fixture(scope="session")
def image(core: Any) -> str:
    require_image(core, IMAGE)
    return IMAGE


@pytest.fixture(scope="session")
def namespace(core: Any) -> Iterator[str]:
    """This session's namespace; leftover pods (and the namespace) are removed at the end."""
    from kubernetes import client

    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    yield NAMESPACE
    with contextlib.suppress(Exception):
        core.delete_collection_namespaced_pod(
            NAMESPACE, label_selector=f"{SESSION_LABEL}={SESSION}", grace_period_seconds=0
        )
    with contextlib.suppress(Exception):
        core.delete_namespace(NAMESPACE)


def session_pods(core: Any) -> list[Any]:
    """Every pod of this test session, in any namespace."""
    return list(core.list_pod_for_all_namespaces(label_selector=f"{SESSION_LABEL}={SESSION}").items)


def k8s_options(image: str, kubeconfig: str, namespace: str, **overrides: Any) -> dict[str, Any]:
    """Provider options for tests: the node-local image, never pull, the session label."""
    options: dict[str, Any] = {
        "image": image,
        "image_pull_policy": "Never",
        "kubeconfig": kubeconfig,
        "namespace": namespace,
        "owner": TEST_OWNER,
        "labels": {SESSION_LABEL: SESSION},
        "reap_interval_s": 0,
    }
    options.update(overrides)
    return options


@pytest.fixture(scope="session")
def options_for(image: str, kubeconfig: str, namespace: str) -> Callable[..., dict[str, Any]]:
    """`k8s_options` bound to this session, for fixtures with a wider scope."""
    base = {"image": image, "kubeconfig": kubeconfig, "namespace": namespace}
    return lambda **overrides: k8s_options(**{**base, **overrides})


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    return root


@pytest.fixture
def make_provider(
    options_for: Callable[..., dict[str, Any]], data_root: Path
) -> Iterator[ProviderFactory]:
    """Build providers (default: the test owner on `data_root`); all shut down afterwards."""
    made: list[KubernetesProvider] = []

    def make(settings: dict[str, Any] | None = None, **options: Any) -> KubernetesProvider:
        fields: dict[str, Any] = {"data_root": data_root, **(settings or {})}
        fields["providers"] = {"kubernetes": options_for(**options)}
        provider = KubernetesProvider(Settings(**fields))
        made.append(provider)
        return provider

    yield make
    for provider in reversed(made):
        with contextlib.suppress(Exception):
            provider.shutdown()


@pytest.fixture
def provider(make_provider: ProviderFactory) -> KubernetesProvider:
    return make_provider()


@pytest.fixture
def owned(core: Any, namespace: str) -> Callable[[], list[Any]]:
    """Pods of the test owner that are not being deleted."""

    def pods() -> list[Any]:
        found = core.list_namespaced_pod(namespace, label_selector=f"sandkit.owner={TEST_OWNER}")
        return [p for p in found.items if p.metadata.deletion_timestamp is None]

    return pods
