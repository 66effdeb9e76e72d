"""The bwrap provider runs the shared conformance suite from `sandkit.testing`, unchanged.

One provider and one box serve the operation tests (see
`sandkit/testing/conformance/shared_box.py`); the lifecycle tests make their
own keys and therefore their own boxes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from bwrap_support import bwrap_options
from sandkit_bwrap import BwrapProvider

from sandkit import SandboxKey, Settings
from sandkit.testing import (
    SUITE_LIMITS,
    SeedUpload,
    SharedBoxConformance,
    host_forbidden,
    host_seeder,
)

SECRET = "sk-test-9c1f7e2b4a6d-never-print"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bwrap-conformance") / "data"


@pytest.fixture(scope="module")
def shared_provider(bwrap_ready: None, root: Path) -> Iterator[BwrapProvider]:
    settings = Settings(
        data_root=root,
        secrets=[SECRET],
        limits=SUITE_LIMITS,
        providers={"bwrap": bwrap_options()},
    )
    provider = BwrapProvider(settings)
    yield provider
    provider.shutdown()


@pytest.fixture(scope="module")
def shared_key() -> SandboxKey:
    return SandboxKey("conformance", f"thread-{uuid.uuid4().hex[:12]}")


class TestBwrapConformance(SharedBoxConformance):
    configured_secret = SECRET

    @pytest.fixture
    def provider(self, shared_provider: BwrapProvider) -> BwrapProvider:
        return shared_provider

    @pytest.fixture
    def forbidden_strings(self, root: Path, shared_provider: BwrapProvider) -> list[str]:
        # The data root and the state dir (bind sources the kernel shows in mountinfo).
        return host_forbidden(root) + host_forbidden(shared_provider.state_root)

    @pytest.fixture
    def seed_upload(self, root: Path, key: SandboxKey) -> SeedUpload:
        return host_seeder(root, key)
