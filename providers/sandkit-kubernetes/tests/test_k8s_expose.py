"""Exposed ports of real pods: a server bound to the box's loopback is reached through the
provider's unix socket (an API-server port-forward per connection) and through the preview
gateway; ports end with the box. The only traffic is to the server the test starts in the box."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable

import httpx
import pytest
from sandkit_kubernetes.provider import KubernetesProvider

from sandkit import ErrorCode, SandboxError, SandboxKey
from sandkit.gateway.app import PreviewGateway
from sandkit.net.proxy import short_unix_path
from sandkit.network import Endpoint

pytestmark = pytest.mark.kubernetes

BOUND_S = 60.0  # the box's server starts, a port-forward opens: generous under load
SECRET = "a-gateway-secret-of-enough-length-for-tests"


def http_get(endpoint: Endpoint, path: str = "/") -> bytes:
    """One HTTP/1.0 GET over the endpoint's socket; b"" when nothing answers in the box."""
    assert endpoint.unix_socket is not None
    short, done = short_unix_path(endpoint.unix_socket)
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(BOUND_S)
            client.connect(short)
            client.sendall(f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
            data = b""
            while chunk := client.recv(65536):
                data += chunk
            return data
    finally:
        done()


def wait_for(endpoint: Endpoint, path: str, text: bytes) -> bytes:
    deadline = time.monotonic() + BOUND_S
    while True:
        answer = http_get(endpoint, path)
        if text in answer:
            return answer
        assert time.monotonic() < deadline, f"the server in the box did not answer: {answer!r}"
        time.sleep(0.3)


@pytest.fixture
def expose_provider(make_provider: Callable[..., KubernetesProvider]) -> KubernetesProvider:
    return make_provider(execute_enabled=True, expose={"enabled": True, "max_ports": 2})


def test_expose_reaches_a_loopback_server_and_unexpose_closes_it(
    expose_provider: KubernetesProvider,
) -> None:
    provider = expose_provider
    k = SandboxKey("expose", "one")
    box = provider.acquire(k)
    box.write_file("site/index.html", "served from the pod\n")
    box.spawn("cd site && exec python3 -m http.server 8000 --bind 127.0.0.1")
    endpoint = provider.expose(k, 8000)
    assert endpoint.port == 8000 and endpoint.url == "http://localhost:8000"
    assert endpoint.unix_socket is not None
    assert wait_for(endpoint, "/index.html", b"served from the pod").startswith(b"HTTP/1.0 200")
    # Concurrent connections each get their own forward.
    answers = asyncio.run(_concurrent_gets(endpoint, 8))
    assert answers == [200] * 8

    assert [e.port for e in provider.exposed(k)] == [8000]
    assert provider.endpoint(k, 8000) == endpoint
    assert provider.endpoint(SandboxKey("expose", "other"), 8000) is None
    assert provider.expose(k, 8000) == endpoint  # idempotent

    # A port with nothing behind it: the connection ends at once, nothing hangs.
    quiet = provider.expose(k, 8009)
    assert http_get(quiet) == b""
    with pytest.raises(SandboxError) as info:
        provider.expose(k, 8010)  # max_ports 2
    assert info.value.code is ErrorCode.CAPACITY
    provider.unexpose(k, 8009)

    provider.unexpose(k, 8000)
    assert provider.exposed(k) == [] and provider.endpoint(k, 8000) is None
    with pytest.raises(OSError):
        http_get(endpoint)
    provider.unexpose(k, 8000)  # nothing to do
    with pytest.raises(SandboxError) as info:
        provider.expose(k, 0)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(SandboxError) as info:
        provider.expose(SandboxKey("expose", "not-running"), 8000)
    assert info.value.code is ErrorCode.UNAVAILABLE


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


def test_the_preview_gateway_reaches_a_pod_and_ports_end_with_the_box(
    expose_provider: KubernetesProvider,
) -> None:
    provider = expose_provider
    k = SandboxKey("expose", "gateway")
    box = provider.acquire(k)
    box.write_file("index.html", "through the gateway\n")
    box.spawn("exec python3 -m http.server 8001 --bind 127.0.0.1")
    endpoint = provider.expose(k, 8001)
    wait_for(endpoint, "/index.html", b"through the gateway")
    app = PreviewGateway(provider, [SECRET], public_url="http://gateway.test")

    async def through_gateway(token: str, sandbox_id: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, timeout=BOUND_S) as client:
            return await client.get(
                f"http://gateway.test/{sandbox_id}/8001/index.html",
                headers={"X-Sandkit-Preview-Token": token},
            )

    seen = asyncio.run(through_gateway(app.sign(k, 8001), k.sandbox_id))
    assert seen.status_code == 200 and seen.text == "through the gateway\n"
    other = SandboxKey("expose", "someone-else")
    refused = asyncio.run(through_gateway(app.sign(other, 8001), k.sandbox_id))
    assert refused.status_code == 403

    provider.release(k)
    assert provider.endpoint(k, 8001) is None and provider.exposed(k) == []
    gone = asyncio.run(through_gateway(app.sign(k, 8001), k.sandbox_id))
    assert gone.status_code in (404, 502)
    provider.acquire(k)
    assert provider.endpoint(k, 8001) is None


def test_expose_is_refused_unless_enabled(make_provider: Callable[..., KubernetesProvider]) -> None:
    provider = make_provider()
    with pytest.raises(SandboxError) as info:
        provider.expose(SandboxKey("expose", "off"), 8000)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert "expose.enabled" in info.value.message


def test_shutdown_closes_every_exposed_socket(expose_provider: KubernetesProvider) -> None:
    provider = expose_provider
    k = SandboxKey("expose", "shutdown")
    provider.acquire(k)
    endpoint = provider.expose(k, 8002)
    assert endpoint.unix_socket is not None
    provider.shutdown()
    assert provider.endpoint(k, 8002) is None
    with pytest.raises(OSError):
        http_get(endpoint)
