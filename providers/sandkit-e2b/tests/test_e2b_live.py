"""The shared conformance suite against the real E2B service (needs E2B_API_KEY).

Without a key the whole module is one skip, with that reason — the only skip
allowed under CI=true. With a key it creates real sandboxes (template from
SANDKIT_E2B_TEMPLATE, default `base`, which must have python3 >= 3.9 and tar),
under a one-off owner, and kills them all at the end.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

API_KEY = os.environ.get("E2B_API_KEY")
TEMPLATE = os.environ.get("SANDKIT_E2B_TEMPLATE") or "base"

if not API_KEY:
    pytest.skip(
        "E2B_API_KEY is not set: the live E2B suite runs only against the real service "
        "(the one skip allowed in CI)",
        allow_module_level=True,
    )

from sandkit_e2b.provider import E2BProvider  # noqa: E402
from tests.conformance import SandboxConformance  # noqa: E402
from tests.conformance.suite import SeedUpload  # noqa: E402

from sandkit import SandboxKey, Settings  # noqa: E402
from sandkit.config import LimitsSettings  # noqa: E402
from sandkit.runtime.limits import Limits  # noqa: E402
from sandkit.sandbox import Sandbox  # noqa: E402

SECRET = "sk-live-5e0c2b8d4f1a-never-print"
LIMITS = LimitsSettings(search_timeout_s=5.0)
OWNER = f"sandkit-live-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def live_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2b-live") / "data"


@pytest.fixture(scope="module")
def live_provider(live_root: Path) -> Iterator[E2BProvider]:
    options = {
        "api_key": API_KEY,
        "template": TEMPLATE,
        "owner": OWNER,
        "shutdown": "kill",
        "timeout_s": 900,
    }
    settings = Settings(
        data_root=live_root, secrets=[SECRET], limits=LIMITS, providers={"e2b": options}
    )
    provider = E2BProvider(settings)  # the real e2b.Sandbox
    yield provider
    provider.shutdown()


@pytest.fixture(scope="module")
def live_key() -> SandboxKey:
    return SandboxKey("live", f"thread-{uuid.uuid4().hex[:12]}")


class TestE2BLiveConformance(SandboxConformance):
    @pytest.fixture
    def provider(self, live_provider: E2BProvider) -> E2BProvider:
        return live_provider

    @pytest.fixture
    def key(self, live_key: SandboxKey) -> SandboxKey:
        return live_key

    @pytest.fixture
    def sandbox(self, provider: E2BProvider, key: SandboxKey) -> Sandbox:
        return provider.acquire(key)

    @pytest.fixture
    def forbidden_strings(self, live_root: Path) -> list[str]:
        return sorted({str(live_root), os.path.realpath(live_root), "/home/user"})

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
