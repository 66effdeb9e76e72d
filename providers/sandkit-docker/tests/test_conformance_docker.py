"""The Docker provider runs the shared conformance suite, unchanged.

One provider and one box serve the whole class (the suite gives every test
its own directory, so sharing is allowed and keeps the run fast); the
lifecycle tests make their own keys and therefore their own containers.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sandkit_docker.provider import DockerProvider
from tests.conformance import SandboxConformance
from tests.conformance.suite import SeedUpload

from sandkit import SandboxKey, Settings
from sandkit.config import LimitsSettings
from sandkit.paths import UPLOADS
from sandkit.runtime.limits import Limits
from sandkit.sandbox import Sandbox

pytestmark = pytest.mark.docker

SECRET = "sk-test-4d9e1b7a2c6f-never-print"
# Small enough that a runaway pattern costs the suite seconds, not half a minute.
LIMITS = LimitsSettings(search_timeout_s=3.0)


@pytest.fixture(scope="module")
def conformance_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("docker-conformance") / "data"


@pytest.fixture(scope="module")
def shared_provider(
    conformance_root: Path, options_for: Callable[..., dict[str, Any]]
) -> Iterator[DockerProvider]:
    settings = Settings(
        data_root=conformance_root,
        secrets=[SECRET],
        limits=LIMITS,
        providers={"docker": options_for()},
    )
    provider = DockerProvider(settings)
    yield provider
    provider.shutdown()


@pytest.fixture(scope="module")
def shared_key() -> SandboxKey:
    return SandboxKey("conformance", f"thread-{uuid.uuid4().hex[:12]}")


class TestDockerConformance(SandboxConformance):
    @pytest.fixture
    def provider(self, shared_provider: DockerProvider) -> DockerProvider:
        return shared_provider

    @pytest.fixture
    def key(self, shared_key: SandboxKey) -> SandboxKey:
        return shared_key

    @pytest.fixture
    def sandbox(self, provider: DockerProvider, key: SandboxKey) -> Sandbox:
        # Not released after each test: the next test reuses the running box.
        return provider.acquire(key)

    @pytest.fixture
    def forbidden_strings(self, conformance_root: Path) -> list[str]:
        return sorted({str(conformance_root), os.path.realpath(conformance_root)})

    @pytest.fixture
    def secret_values(self) -> list[str]:
        return [SECRET]

    @pytest.fixture
    def limits(self) -> Limits:
        return LIMITS.to_limits()

    @pytest.fixture
    def seed_upload(self, conformance_root: Path, key: SandboxKey) -> SeedUpload:
        """Uploads arrive from the platform: straight into the host directory."""
        uploads = (
            conformance_root
            / "users"
            / key.user_id
            / "threads"
            / key.thread_id
            / "user-data"
            / "uploads"
        )

        def seed(rel: str, data: bytes) -> str:
            host = uploads / rel
            host.parent.mkdir(parents=True, exist_ok=True)
            host.write_bytes(data)
            return f"{UPLOADS}/{rel}"

        return seed
