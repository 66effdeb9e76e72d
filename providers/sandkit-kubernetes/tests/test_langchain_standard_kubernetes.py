"""LangChain's standard sandbox suite on the Kubernetes provider: SandkitBackend and the reference.

See tests/deepagents_standard.py: the same box serves deepagents' own `BaseSandbox`
(the reference) and `SandkitBackend`, each on its own thread.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sandkit_kubernetes.provider import KubernetesProvider
from tests.deepagents_standard import ReferenceStandard, SandkitStandard, StandardBox

from sandkit import SandboxKey, Settings

pytestmark = pytest.mark.kubernetes


@pytest.fixture(scope="module")
def standard_provider(
    tmp_path_factory: pytest.TempPathFactory, options_for: Callable[..., dict[str, Any]]
) -> Iterator[KubernetesProvider]:
    root: Path = tmp_path_factory.mktemp("k8s-standard") / "data"
    provider = KubernetesProvider(
        Settings(
            data_root=root,
            providers={"kubernetes": options_for(carrier="stdio", storage="hostPath")},
        )
    )
    yield provider
    provider.shutdown()


def _box(provider: KubernetesProvider, name: str) -> StandardBox:
    key = SandboxKey("standard", f"{name}-{uuid.uuid4().hex[:8]}")
    sandbox = provider.acquire(key)
    alias = sandbox.execute("command -v python").exit_code == 0
    return StandardBox(sandbox, has_python_alias=alias)


class TestSandkitStandardKubernetes(SandkitStandard):
    @pytest.fixture(scope="class")
    def standard_box(self, standard_provider: KubernetesProvider) -> StandardBox:
        return _box(standard_provider, "sandkit")


class TestReferenceStandardKubernetes(ReferenceStandard):
    @pytest.fixture(scope="class")
    def standard_box(self, standard_provider: KubernetesProvider) -> StandardBox:
        return _box(standard_provider, "reference")
