"""The shared conformance suite, unchanged, over the Docker provider with carrier http.

The same set-up as `test_conformance_docker.py` (one provider and one box for
the class; the lifecycle tests make their own keys), but every call goes over
HTTP to the agent at the container's IP on the owner's internal network
(`network_mode: none` + `carrier: http`).
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

SECRET = "sk-test-8c1f2e9a7b3d-never-print"
LIMITS = LimitsSettings(search_timeout_s=3.0)


@pytest.fixture(scope="module")
def conformance_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("docker-http-conformance") / "data"


@pytest.fixture(scope="module")
def shared_provider(
    conformance_root: Path, options_for: Callable[..., dict[str, Any]]
) -> Iterator[DockerProvider]:
    settings = Settings(
        data_root=conformance_root,
        secrets=[SECRET],
        limits=LIMITS,
        providers={"docker": options_for(carrier="http")},
    )
    provider = DockerProvider(settings)
    yield provider
    provider.shutdown()


@pytest.fixture(scope="module")
def shared_key() -> SandboxKey:
    return SandboxKey("conformance-http", f"thread-{uuid.uuid4().hex[:12]}")


def test_the_suite_below_really_runs_over_http(
    shared_provider: DockerProvider, shared_key: SandboxKey
) -> None:
    box = shared_provider.acquire(shared_key)
    pid = box.info()["pid"]
    argv = box.execute(f"tr '\\0' ' ' < /proc/{pid}/cmdline").stdout.split()
    assert argv[argv.index("--http") + 1] == "0.0.0.0:8765"


class TestDockerHttpConformance(SandboxConformance):
    @pytest.fixture
    def provider(self, shared_provider: DockerProvider) -> DockerProvider:
        return shared_provider

    @pytest.fixture
    def key(self, shared_key: SandboxKey) -> SandboxKey:
        return shared_key

    @pytest.fixture
    def sandbox(self, provider: DockerProvider, key: SandboxKey) -> Sandbox:
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
