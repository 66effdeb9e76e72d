"""LangChain's standard sandbox suite on the E2B provider (over the Docker-backed stand-in).

See tests/deepagents_standard.py: the same sandbox kind serves deepagents' own
`BaseSandbox` (the reference) and `SandkitBackend`, each on its own thread.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2b_standin import Cloud
from sandkit_e2b.provider import E2BProvider
from tests.deepagents_standard import ReferenceStandard, SandkitStandard, StandardBox

from sandkit import SandboxKey, Settings

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def standard_provider(
    tmp_path_factory: pytest.TempPathFactory,
    cloud: Cloud,
    options_for: Callable[..., dict[str, Any]],
) -> Iterator[E2BProvider]:
    root: Path = tmp_path_factory.mktemp("e2b-standard") / "data"
    settings = Settings(data_root=root, providers={"e2b": options_for()})
    provider = E2BProvider(settings, sandbox_class=cloud.sandbox_class())
    yield provider
    provider.shutdown()


def _box(provider: E2BProvider, name: str) -> StandardBox:
    key = SandboxKey("standard", f"{name}-{uuid.uuid4().hex[:8]}")
    sandbox = provider.acquire(key)
    alias = sandbox.execute("command -v python").exit_code == 0
    return StandardBox(sandbox, has_python_alias=alias)


class TestSandkitStandardE2B(SandkitStandard):
    @pytest.fixture(scope="class")
    def standard_box(self, standard_provider: E2BProvider) -> StandardBox:
        return _box(standard_provider, "sandkit")


class TestReferenceStandardE2B(ReferenceStandard):
    @pytest.fixture(scope="class")
    def standard_box(self, standard_provider: E2BProvider) -> StandardBox:
        return _box(standard_provider, "reference")
