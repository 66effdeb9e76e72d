"""Exposed ports: `expose`/`unexpose`/`exposed`/`endpoint` and the preview gateway over them.

For providers that can expose ports. A subclass supplies `expose_provider`: a provider
with command execution on and `expose.enabled` with `max_ports: 2` (the capacity case
counts on it). The only traffic is to a server each test starts inside its own box.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from sandkit import ErrorCode, SandboxKey
from sandkit.network import Endpoint
from sandkit.provider import SandboxProvider
from sandkit.sandbox import Sandbox

from .suite import raises_code, unique

# The box's server starts and a first connection is carried: generous for a loaded machine.
BOUND_S = 60.0
MAX_PORTS = 2
SECRET = "conformance-gateway-secret-of-enough-length"


def _connect(endpoint: Endpoint) -> socket.socket:
    if endpoint.unix_socket is None:
        parts = urlsplit(endpoint.url)
        return socket.create_connection((parts.hostname or "", parts.port or 80), BOUND_S)
    from sandkit.net.boxsocket import connect_box_socket

    return connect_box_socket(endpoint.unix_socket, BOUND_S)


def http_get(endpoint: Endpoint, path: str = "/") -> bytes:
    """One HTTP/1.0 GET to the endpoint; b"" when nothing answers on the port in the box."""
    with _connect(endpoint) as client:
        try:
            client.sendall(f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
        except (BrokenPipeError, ConnectionResetError):
            return b""  # ended before the request went out: nothing behind the port
        data = b""
        while chunk := client.recv(65536):
            data += chunk
        return data


def wait_for(endpoint: Endpoint, path: str, text: bytes) -> bytes:
    deadline = time.monotonic() + BOUND_S
    while True:
        answer = http_get(endpoint, path)
        if text in answer:
            return answer
        assert time.monotonic() < deadline, f"the server in the box did not answer: {answer!r}"
        time.sleep(0.3)


def serve(box: Sandbox, port: int, text: str) -> None:
    """A static HTTP server on the box's loopback only, serving `text` at /index.html."""
    site = f"site-{port}"
    box.write_file(f"{site}/index.html", text)
    box.spawn(f"cd {site} && exec python3 -m http.server {port} --bind 127.0.0.1")


class ExposeTests:
    @pytest.fixture
    def expose_provider(self) -> SandboxProvider:  # pragma: no cover - supplied by a subclass
        raise NotImplementedError

    @pytest.fixture
    def key(self, expose_provider: SandboxProvider) -> Iterator[SandboxKey]:
        key = SandboxKey(unique("user"), unique("ports"))
        yield key
        expose_provider.destroy(key)

    def test_expose_reaches_a_server_on_the_boxs_loopback(
        self, expose_provider: SandboxProvider, key: SandboxKey
    ) -> None:
        serve(expose_provider.acquire(key), 8000, "served from the box\n")
        endpoint = expose_provider.expose(key, 8000)
        assert (endpoint.user_id, endpoint.thread_id, endpoint.port) == (
            key.user_id,
            key.thread_id,
            8000,
        )
        answer = wait_for(endpoint, "/index.html", b"served from the box")
        assert answer.startswith(b"HTTP/1.0 200")

    def test_endpoint_lookups_and_idempotence(
        self, expose_provider: SandboxProvider, key: SandboxKey
    ) -> None:
        expose_provider.acquire(key)
        endpoint = expose_provider.expose(key, 8000)
        assert expose_provider.expose(key, 8000) == endpoint
        assert expose_provider.exposed(key) == [endpoint]
        assert expose_provider.endpoint(key, 8000) == endpoint
        assert expose_provider.endpoint(key, 8001) is None
        other = SandboxKey(key.user_id, unique("other"))
        assert expose_provider.endpoint(other, 8000) is None
        assert expose_provider.exposed(other) == []

    def test_unexpose_closes_the_port(
        self, expose_provider: SandboxProvider, key: SandboxKey
    ) -> None:
        serve(expose_provider.acquire(key), 8002, "soon closed\n")
        endpoint = expose_provider.expose(key, 8002)
        wait_for(endpoint, "/index.html", b"soon closed")
        expose_provider.unexpose(key, 8002)
        assert expose_provider.exposed(key) == [] and expose_provider.endpoint(key, 8002) is None
        with pytest.raises(OSError):
            http_get(endpoint)
        expose_provider.unexpose(key, 8002)  # nothing to do
        expose_provider.unexpose(SandboxKey(key.user_id, unique("none")), 8002)

    def test_a_port_with_nothing_behind_it_ends_at_once(
        self, expose_provider: SandboxProvider, key: SandboxKey
    ) -> None:
        expose_provider.acquire(key)
        endpoint = expose_provider.expose(key, 8009)
        assert http_get(endpoint) == b""

    def test_refusals_and_capacity(self, expose_provider: SandboxProvider, key: SandboxKey) -> None:
        for bad in (0, -1, 65536, True, "8000", None):
            with raises_code(ErrorCode.INVALID_ARGUMENT):
                expose_provider.expose(key, bad)  # type: ignore[arg-type]
        with raises_code(ErrorCode.UNAVAILABLE):
            expose_provider.expose(key, 8000)  # not acquired: nothing to expose
        expose_provider.acquire(key)
        for port in range(8000, 8000 + MAX_PORTS):
            expose_provider.expose(key, port)
        with raises_code(ErrorCode.CAPACITY):
            expose_provider.expose(key, 8000 + MAX_PORTS)
        assert [e.port for e in expose_provider.exposed(key)] == list(range(8000, 8000 + MAX_PORTS))

    def test_ports_end_with_the_box(
        self, expose_provider: SandboxProvider, key: SandboxKey
    ) -> None:
        serve(expose_provider.acquire(key), 8003, "ends with the box\n")
        endpoint = expose_provider.expose(key, 8003)
        wait_for(endpoint, "/index.html", b"ends with the box")
        expose_provider.release(key)
        assert expose_provider.endpoint(key, 8003) is None and expose_provider.exposed(key) == []
        with pytest.raises(OSError):
            http_get(endpoint)
        expose_provider.acquire(key)
        assert expose_provider.endpoint(key, 8003) is None

    def test_the_preview_gateway_serves_only_its_tokens_box(
        self, expose_provider: SandboxProvider, key: SandboxKey
    ) -> None:
        httpx = pytest.importorskip("httpx", reason="the gateway extra is not installed")
        from sandkit.gateway.app import PreviewGateway

        serve(expose_provider.acquire(key), 8004, "through the gateway\n")
        wait_for(expose_provider.expose(key, 8004), "/index.html", b"through the gateway")
        app = PreviewGateway(expose_provider, [SECRET], public_url="http://gateway.test")

        async def get(token: str) -> int:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, timeout=BOUND_S) as client:
                answer = await client.get(
                    f"http://gateway.test/{key.sandbox_id}/8004/index.html",
                    headers={"X-Sandkit-Preview-Token": token},
                )
                if answer.status_code == 200:
                    assert answer.text == "through the gateway\n"
                return int(answer.status_code)

        assert asyncio.run(get(app.sign(key, 8004))) == 200
        someone_else = SandboxKey(unique("user"), key.thread_id)
        assert asyncio.run(get(app.sign(someone_else, 8004))) == 403
        assert asyncio.run(get(app.sign(key, 8005))) == 403  # a token for another port
        expose_provider.release(key)
        assert asyncio.run(get(app.sign(key, 8004))) in (404, 502)
