"""The shared conformance suite, unchanged, on Docker + gVisor (`runtime: runsc`).

The same classes as `test_conformance_docker.py` with one option changed (all of it on
stdio; on http what the carrier carries, `carrier_areas_only`): every box is a
runsc sandbox (its own application kernel), registered in the engine by
`deploy/docker/dockerd.sh gvisor`. Under CI=true a missing runtime is a failure, not a skip.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import test_conformance_docker as runc
from sandkit_docker.provider import DockerProvider
from tests.conformance_areas import carrier_areas_only
from tests.gvisor_support import assert_in_gvisor, require_docker_runsc

from sandkit import SandboxKey, Settings
from sandkit.testing.conformance.shared_box import SUITE_LIMITS

pytestmark = pytest.mark.docker

CARRIERS = runc.CARRIERS


@pytest.fixture(scope="module")
def runtime(docker_client: Any) -> str:
    return require_docker_runsc(docker_client)


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {c: tmp_path_factory.mktemp(f"gvisor-{c}-conformance") / "data" for c in CARRIERS}


@pytest.fixture(scope="module")
def providers(
    roots: dict[str, Path], options_for: Callable[..., dict[str, Any]], runtime: str
) -> Iterator[dict[str, DockerProvider]]:
    made = {
        carrier: DockerProvider(
            Settings(
                data_root=roots[carrier],
                secrets=[runc.SECRET],
                limits=SUITE_LIMITS,
                providers={"docker": options_for(carrier=carrier, runtime=runtime)},
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


class TestDockerGvisorConformance(runc.DockerConformance):
    carrier = "stdio"


@carrier_areas_only
class TestDockerGvisorHttpConformance(runc.DockerConformance):
    """Carrier http in gVisor: what the carrier carries and its lifecycle."""

    carrier = "http"


@pytest.mark.parametrize("carrier", CARRIERS)
def test_the_gvisor_suite_really_runs_in_gvisor(
    providers: dict[str, DockerProvider],
    shared_key: SandboxKey,
    docker_client: Any,
    runtime: str,
    carrier: str,
) -> None:
    box = providers[carrier].acquire(shared_key)
    assert_in_gvisor(box)
    found = docker_client.containers.list(
        filters={"label": f"sandkit.sandbox-id={shared_key.sandbox_id}"}
    )
    ours = [c for c in found if c.labels.get("sandkit.owner") == providers[carrier].options.owner]
    assert ours and all(c.attrs["HostConfig"]["Runtime"] == runtime for c in ours)


def test_the_http_suite_really_runs_over_http(
    providers: dict[str, DockerProvider], shared_key: SandboxKey
) -> None:
    runc.test_the_http_suite_really_runs_over_http(providers, shared_key)
