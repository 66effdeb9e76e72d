"""Exposed ports of real pods: the shared expose suite (a loopback server in the pod reached
through the provider's unix socket, an API-server port-forward per connection; the preview
gateway over it), plus what is the Kubernetes provider's own. The only traffic is to servers
the tests start in their boxes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest
from sandkit_kubernetes.provider import KubernetesProvider

from sandkit import ErrorCode, SandboxError, SandboxKey
from sandkit.net.proxy import short_unix_path
from sandkit.network import Endpoint
from sandkit.testing.conformance import ExposeConformance
from sandkit.testing.conformance.exposing import BOUND_S, http_get, serve, wait_for

pytestmark = pytest.mark.kubernetes


EXPOSE = {"enabled": True, "max_ports": 2}


class TestKubernetesExposeConformance(ExposeConformance):
    @pytest.fixture
    def expose_provider(
        self, make_provider: Callable[..., KubernetesProvider]
    ) -> KubernetesProvider:
        return make_provider(execute_enabled=True, expose=EXPOSE)


@pytest.fixture
def expose_provider(make_provider: Callable[..., KubernetesProvider]) -> KubernetesProvider:
    return make_provider(execute_enabled=True, expose=EXPOSE)


def test_concurrent_connections_each_get_a_forward(expose_provider: KubernetesProvider) -> None:
    k = SandboxKey("expose", "concurrent")
    serve(expose_provider.acquire(k), 8000, "many at once\n")
    endpoint = expose_provider.expose(k, 8000)
    wait_for(endpoint, "/index.html", b"many at once")
    assert asyncio.run(_concurrent_gets(endpoint, 8)) == [200] * 8


async def _concurrent_gets(endpoint: Endpoint, n: int) -> list[int]:
    assert endpoint.unix_socket is not None
    short, done = short_unix_path(endpoint.unix_socket)
    try:
        transport = httpx.AsyncHTTPTransport(uds=short)
        async with httpx.AsyncClient(transport=transport, timeout=BOUND_S) as client:
            answers = await asyncio.gather(
                *(client.get("http://localhost/index.html") for _ in range(n))
            )
        return [a.status_code for a in answers]
    finally:
        done()


def test_expose_is_refused_unless_enabled(make_provider: Callable[..., KubernetesProvider]) -> None:
    provider = make_provider()
    with pytest.raises(SandboxError) as info:
        provider.expose(SandboxKey("expose", "off"), 8000)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert "expose.enabled" in info.value.message


def test_shutdown_closes_every_exposed_socket(expose_provider: KubernetesProvider) -> None:
    k = SandboxKey("expose", "shutdown")
    expose_provider.acquire(k)
    endpoint = expose_provider.expose(k, 8002)
    assert endpoint.url == "http://localhost:8002" and endpoint.unix_socket is not None
    expose_provider.shutdown()
    assert expose_provider.endpoint(k, 8002) is None
    with pytest.raises(OSError):
        http_get(endpoint)
