"""The E2B provider runs the shared conformance suite, unchanged, over the stand-in SDK.

One provider and one sandbox serve the whole class (the suite gives every
test its own directory); the lifecycle tests make their own keys and so
their own sandboxes. Uploads arrive the way they do in E2B: through the
control plane (`provider.upload`: the host copy and `files.write` as root),
since the uploads directory belongs to root in the sandbox.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2b_standin import Cloud
from e2b_suite import E2BConformance
from sandkit_e2b.provider import E2BProvider

from sandkit import SandboxKey, Settings
from sandkit.testing.conformance.shared_box import SUITE_LIMITS, check_live_upload

pytestmark = pytest.mark.docker

SECRET = "sk-test-7c1e5a9b3d2f-never-print"


@pytest.fixture(scope="module")
def e2b_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2b-conformance") / "data"


@pytest.fixture(scope="module")
def e2b_provider(
    e2b_root: Path, cloud: Cloud, options_for: Callable[..., dict[str, Any]]
) -> Iterator[E2BProvider]:
    settings = Settings(
        data_root=e2b_root,
        secrets=[SECRET],
        limits=SUITE_LIMITS,
        providers={"e2b": options_for()},
    )
    provider = E2BProvider(settings, sandbox_class=cloud.sandbox_class())
    yield provider
    provider.shutdown()


@pytest.fixture(scope="module")
def shared_key() -> SandboxKey:
    return SandboxKey("conformance", f"thread-{uuid.uuid4().hex[:12]}")


class TestE2BConformance(E2BConformance):
    configured_secret = SECRET


def test_an_upload_reaches_the_running_sandbox_and_its_commands_cannot_change_it(
    e2b_provider: E2BProvider, shared_key: SandboxKey
) -> None:
    check_live_upload(e2b_provider, shared_key)
