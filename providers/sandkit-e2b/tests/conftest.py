"""Fixtures for the E2B provider tests: the provider over a Docker-backed stand-in SDK.

`e2b_standin.Cloud` plays the E2B service; its `Sandbox` class is injected
into `E2BProvider(sandbox_class=...)`. Every stand-in container carries the
label `sandkit.e2b-standin=<session>`; a session fixture removes them all,
so nothing is left after the run even when a test fails half-way.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("sandkit_e2b") is None:  # not installed: run from the tree
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from e2b_standin import LABEL_SESSION, Cloud
from sandkit_e2b.provider import E2BProvider
from tests.docker_support import default_base_image, require_docker, require_image

from sandkit import Settings
from sandkit.testing import no_ambient_configuration  # noqa: F401 - an autouse fixture

# Read before the ambient SANDKIT_* variables are cleared below.
IMAGE_TAG = os.environ.get("SANDKIT_TEST_IMAGE") or default_base_image()
SESSION = uuid.uuid4().hex[:10]
TEST_OWNER = f"sandkit-test-{SESSION}"
TEST_API_KEY = "e2b_standin_test_key"

ProviderFactory = Callable[..., E2BProvider]


@pytest.fixture(scope="session")
def docker_client() -> Any:
    return require_docker()


@pytest.fixture(scope="session")
def image(docker_client: Any) -> str:
    require_image(IMAGE_TAG)
    return IMAGE_TAG


@pytest.fixture(scope="session")
def cloud(docker_client: Any, image: str) -> Iterator[Cloud]:
    """The stand-in E2B service for the whole session; removes every container at the end."""
    service = Cloud(docker_client, {"base": image}, SESSION)
    yield service
    service.remove_all()
    with contextlib.suppress(Exception):
        left = docker_client.containers.list(
            all=True, filters={"label": f"{LABEL_SESSION}={SESSION}"}
        )
        for container in left:
            container.remove(force=True, v=True)


def e2b_options(**overrides: Any) -> dict[str, Any]:
    """Provider options for tests: the stand-in key, this session's owner, no maintainer."""
    options: dict[str, Any] = {
        "api_key": TEST_API_KEY,
        "owner": TEST_OWNER,
        "maintenance_interval_s": 0,
        "shutdown": "kill",
    }
    options.update(overrides)
    return options


@pytest.fixture(scope="session")
def api_key() -> str:
    """The key the tests' providers use (the stand-in accepts any unless told otherwise)."""
    return TEST_API_KEY


@pytest.fixture(scope="session")
def options_for() -> Callable[..., dict[str, Any]]:
    return e2b_options


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    return root


@pytest.fixture
def make_provider(cloud: Cloud, data_root: Path) -> Iterator[ProviderFactory]:
    """Build providers over the stand-in (default: the test owner on `data_root`)."""
    made: list[E2BProvider] = []

    def make(settings: dict[str, Any] | None = None, **options: Any) -> E2BProvider:
        fields: dict[str, Any] = {"data_root": data_root, **(settings or {})}
        fields["providers"] = {"e2b": e2b_options(**options)}
        provider = E2BProvider(Settings(**fields), sandbox_class=cloud.sandbox_class())
        made.append(provider)
        return provider

    yield make
    for provider in reversed(made):
        with contextlib.suppress(Exception):
            provider.shutdown()


@pytest.fixture
def provider(make_provider: ProviderFactory) -> E2BProvider:
    return make_provider()


@pytest.fixture
def owned(cloud: Cloud) -> Callable[..., list[Any]]:
    """This session owner's stand-in sandboxes (running or paused) as the service lists them."""

    def sandboxes(**metadata: str) -> list[Any]:
        from e2b import SandboxQuery

        query = SandboxQuery(metadata={"sandkit.owner": TEST_OWNER, **metadata})
        pages = cloud.sandbox_class().list(query=query, api_key=TEST_API_KEY)
        found: list[Any] = []
        while pages.has_next:
            found.extend(pages.next_items())
        return found

    return sandboxes
