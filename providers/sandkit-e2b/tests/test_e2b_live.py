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

from e2b_suite import E2BConformance  # noqa: E402
from sandkit_e2b.provider import E2BProvider  # noqa: E402

from sandkit import SandboxKey, Settings  # noqa: E402
from sandkit.config import LimitsSettings  # noqa: E402

SECRET = "sk-live-5e0c2b8d4f1a-never-print"
LIMITS = LimitsSettings(search_timeout_s=5.0)
OWNER = f"sandkit-live-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def e2b_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2b-live") / "data"


@pytest.fixture(scope="module")
def e2b_provider(e2b_root: Path) -> Iterator[E2BProvider]:
    options = {
        "api_key": API_KEY,
        "template": TEMPLATE,
        "owner": OWNER,
        "shutdown": "kill",
        "timeout_s": 900,
    }
    settings = Settings(
        data_root=e2b_root, secrets=[SECRET], limits=LIMITS, providers={"e2b": options}
    )
    provider = E2BProvider(settings)  # the real e2b.Sandbox
    yield provider
    provider.shutdown()


@pytest.fixture(scope="module")
def shared_key() -> SandboxKey:
    return SandboxKey("live", f"thread-{uuid.uuid4().hex[:12]}")


class TestE2BLiveConformance(E2BConformance):
    configured_secret = SECRET
    suite_limits = LIMITS
