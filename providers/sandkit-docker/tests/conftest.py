"""Fixtures for the Docker provider tests: a real engine, a local image, no mocks.

Every container a test creates carries the label `sandkit.test-session=<id>`
(through the provider's `labels` option); a session fixture removes whatever
is left with that label, so `docker ps -a --filter label=sandkit.owner` is
empty after the run even when a test fails half-way.
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

if importlib.util.find_spec("sandkit_docker") is None:  # not installed: run from the tree
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from sandkit_docker.provider import DockerProvider
from tests.docker_support import default_base_image, require_docker, require_image

from sandkit import Settings
from sandkit.testing import no_ambient_configuration  # noqa: F401 - an autouse fixture

# Read before the ambient SANDKIT_* variables are cleared below.
IMAGE_TAG = os.environ.get("SANDKIT_TEST_IMAGE") or default_base_image()
SESSION = uuid.uuid4().hex[:10]
SESSION_LABEL = "sandkit.test-session"
TEST_OWNER = f"sandkit-test-{SESSION}"

ProviderFactory = Callable[..., DockerProvider]


def session_containers(client: Any) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": f"{SESSION_LABEL}={SESSION}"}))


@pytest.fixture(scope="session", autouse=True)
def _remove_leftover_containers() -> Iterator[None]:
    yield
    with contextlib.suppress(Exception):
        import docker

        client = docker.from_env()
        for container in session_containers(client):
            with contextlib.suppress(Exception):
                container.remove(force=True, v=True)
        with contextlib.suppress(Exception):
            client.volumes.prune(filters={"label": f"{SESSION_LABEL}={SESSION}"})
        with contextlib.suppress(Exception):  # internal networks of carrier http
            client.networks.prune(filters={"label": f"{SESSION_LABEL}={SESSION}"})


@pytest.fixture(scope="session")
def docker_client() -> Any:
    return require_docker()


@pytest.fixture(scope="session")
def image(docker_client: Any) -> str:
    tag = IMAGE_TAG
    require_image(tag)
    return tag


def docker_options(image: str, **overrides: Any) -> dict[str, Any]:
    """Provider options for tests: the local image, never pull, the session label."""
    options: dict[str, Any] = {
        "image": image,
        "pull": "never",
        "owner": TEST_OWNER,
        "labels": {SESSION_LABEL: SESSION},
        "reap_interval_s": 0,
    }
    options.update(overrides)
    return options


@pytest.fixture(scope="session")
def options_for(image: str) -> Callable[..., dict[str, Any]]:
    """`docker_options` bound to the test image, for fixtures with a wider scope."""
    return lambda **overrides: docker_options(image, **overrides)


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    return root


@pytest.fixture
def make_provider(image: str, data_root: Path) -> Iterator[ProviderFactory]:
    """Build providers (default: the test owner on `data_root`); all shut down afterwards."""
    made: list[DockerProvider] = []

    def make(settings: dict[str, Any] | None = None, **options: Any) -> DockerProvider:
        fields: dict[str, Any] = {"data_root": data_root, **(settings or {})}
        fields["providers"] = {"docker": docker_options(options.pop("image", image), **options)}
        provider = DockerProvider(Settings(**fields))
        made.append(provider)
        return provider

    yield make
    for provider in reversed(made):
        with contextlib.suppress(Exception):
            provider.shutdown()


@pytest.fixture
def owner() -> str:
    """The owner name (and label value) of every provider made by `make_provider`."""
    return TEST_OWNER


@pytest.fixture
def owned(docker_client: Any, owner: str) -> Callable[[], list[Any]]:
    """All containers (running or not) carrying this session's owner label."""

    def containers() -> list[Any]:
        return list(
            docker_client.containers.list(all=True, filters={"label": f"sandkit.owner={owner}"})
        )

    return containers


@pytest.fixture
def provider(make_provider: ProviderFactory) -> DockerProvider:
    return make_provider()
