"""The E2B provider runs the shared conformance suite, unchanged, over the stand-in SDK.

One provider and one sandbox serve the whole class (the suite gives every
test its own directory); the lifecycle tests make their own keys and so
their own sandboxes. Uploads arrive the way they do in E2B: through the
control plane (`add_upload`), since the uploads directory belongs to root
in the sandbox.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2b_standin import Cloud
from sandkit_e2b.provider import E2BProvider
from tests.conformance import SandboxConformance
from tests.conformance.suite import SeedUpload

from sandkit import SandboxKey, Settings
from sandkit.config import LimitsSettings
from sandkit.runtime.limits import Limits
from sandkit.sandbox import Sandbox

pytestmark = pytest.mark.docker

SECRET = "sk-test-7c1e5a9b3d2f-never-print"
# Small enough that a runaway pattern costs the suite seconds, not half a minute.
LIMITS = LimitsSettings(search_timeout_s=3.0)
# E2B's own home directory must never come back from the API either.
E2B_HOME = "/home/user"


@pytest.fixture(scope="module")
def conformance_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2b-conformance") / "data"


@pytest.fixture(scope="module")
def shared_provider(
    conformance_root: Path, cloud: Cloud, options_for: Callable[..., dict[str, Any]]
) -> Iterator[E2BProvider]:
    settings = Settings(
        data_root=conformance_root,
        secrets=[SECRET],
        limits=LIMITS,
        providers={"e2b": options_for()},
    )
    provider = E2BProvider(settings, sandbox_class=cloud.sandbox_class())
    yield provider
    provider.shutdown()


@pytest.fixture(scope="module")
def shared_key() -> SandboxKey:
    return SandboxKey("conformance", f"thread-{uuid.uuid4().hex[:12]}")


class TestE2BConformance(SandboxConformance):
    @pytest.fixture
    def provider(self, shared_provider: E2BProvider) -> E2BProvider:
        return shared_provider

    @pytest.fixture
    def key(self, shared_key: SandboxKey) -> SandboxKey:
        return shared_key

    @pytest.fixture
    def sandbox(self, provider: E2BProvider, key: SandboxKey) -> Sandbox:
        # Not released after each test: the next test reuses the running sandbox.
        return provider.acquire(key)

    @pytest.fixture
    def forbidden_strings(self, conformance_root: Path) -> list[str]:
        return sorted({str(conformance_root), os.path.realpath(conformance_root), E2B_HOME})

    @pytest.fixture
    def secret_values(self) -> list[str]:
        return [SECRET]

    @pytest.fixture
    def limits(self) -> Limits:
        return LIMITS.to_limits()

    @pytest.fixture
    def seed_upload(self, provider: E2BProvider, key: SandboxKey) -> SeedUpload:
        def seed(rel: str, data: bytes) -> str:
            return provider.add_upload(key, rel, data)

        return seed
