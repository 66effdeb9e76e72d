"""The Docker provider runs the shared conformance suite, unchanged, on both carriers.

- stdio (default): the agent over a long-lived exec socket;
- http: every call over HTTP to the agent at the container's IP on the
  owner's internal network (`network_mode: none` + `carrier: http`).

One provider and one box serve each class (see
`sandkit/testing/conformance/shared_box.py`); the lifecycle tests make their own keys
and therefore their own containers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sandkit_docker.provider import DockerProvider

from sandkit import SandboxKey, Settings
from sandkit.testing.conformance.shared_box import (
    SUITE_LIMITS,
    SharedBoxConformance,
    check_live_upload,
    host_forbidden,
)

pytestmark = pytest.mark.docker

SECRET = "sk-test-4d9e1b7a2c6f-never-print"
CARRIERS = ("stdio", "http")


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {c: tmp_path_factory.mktemp(f"docker-{c}-conformance") / "data" for c in CARRIERS}


@pytest.fixture(scope="module")
def providers(
    roots: dict[str, Path], options_for: Callable[..., dict[str, Any]]
) -> Iterator[dict[str, DockerProvider]]:
    made = {
        carrier: DockerProvider(
            Settings(
                data_root=roots[carrier],
                secrets=[SECRET],
                limits=SUITE_LIMITS,
                providers={"docker": options_for(carrier=carrier)},
            )
        )
        for carrier in CARRIERS
    }
    yield made
    for provider in made.values():
        provider.shutdown()


@pytest.fixture(scope="module")
def shared_key() -> SandboxKey:
    return SandboxKey("conformance", f"thread-{uuid.uuid4().hex[:12]}")


class DockerConformance(SharedBoxConformance):
    configured_secret = SECRET
    carrier: str

    @pytest.fixture
    def provider(self, providers: dict[str, DockerProvider]) -> DockerProvider:
        return providers[self.carrier]

    @pytest.fixture
    def forbidden_strings(self, roots: dict[str, Path]) -> list[str]:
        return host_forbidden(roots[self.carrier])


class TestDockerConformance(DockerConformance):
    carrier = "stdio"


class TestDockerHttpConformance(DockerConformance):
    carrier = "http"


def test_the_http_suite_really_runs_over_http(
    providers: dict[str, DockerProvider], shared_key: SandboxKey
) -> None:
    box = providers["http"].acquire(shared_key)
    pid = box.info()["pid"]
    argv = box.execute(f"tr '\\0' ' ' < /proc/{pid}/cmdline").stdout.split()
    assert argv[argv.index("--http") + 1] == "0.0.0.0:8765"


@pytest.mark.parametrize("carrier", CARRIERS)
def test_an_upload_reaches_the_running_box_and_its_commands_cannot_change_it(
    providers: dict[str, DockerProvider], shared_key: SandboxKey, carrier: str
) -> None:
    check_live_upload(providers[carrier], shared_key)
