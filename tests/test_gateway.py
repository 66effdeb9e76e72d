"""The preview gateway against servers this test starts on this machine (no box needed).

A fake provider hands out endpoints of two upstream servers: one on a unix socket
(like a Docker box's exposed port), one on 127.0.0.1 (like a pod or the local
provider). The gateway itself runs in uvicorn on a free loopback port.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("websockets")

import uvicorn
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

from sandkit import SandboxKey
from sandkit.gateway import TokenError, sign, verify
from sandkit.gateway.app import PreviewGateway
from sandkit.network import Endpoint

SECRET = "a-test-secret-of-32-characters!!"
ALICE = SandboxKey("alice", "t1")
BOB = SandboxKey("bob", "t1")
BOUND_S = 20.0


async def echo_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """HTTP: what arrived, as JSON. WebSocket: echoes, with the chosen subprotocol."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "http":
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        data = json.dumps(
            {
                "path": scope["path"],
                "query": scope["query_string"].decode(),
                "headers": {k.decode(): v.decode() for k, v in scope["headers"]},
                "header_list": [[k.decode(), v.decode()] for k, v in scope["headers"]],
                "body": body.decode("latin-1"),
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": data})
        return
    await receive()
    protocols = scope.get("subprotocols") or []
    await send({"type": "websocket.accept", "subprotocol": protocols[0] if protocols else None})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("text") is not None:
            await send({"type": "websocket.send", "text": "echo:" + message["text"]})
        else:
            await send({"type": "websocket.send", "bytes": message["bytes"]})


class Server:
    """A uvicorn server on a thread (TCP port or unix socket)."""

    def __init__(self, app: Any, uds: str | None = None) -> None:
        self.port = 0 if uds else _free_port()
        fd = None
        if uds is not None:  # bound here: the path may be longer than AF_UNIX allows
            from sandkit.net.proxy import short_unix_path

            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            short, done = short_unix_path(uds)
            self.listener.bind(short)
            done()
            self.listener.listen(128)
            fd = self.listener.fileno()
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            fd=fd,
            log_level="warning",
            lifespan="on",
            ws="websockets-sansio" if _has_sansio() else "websockets",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + BOUND_S
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def _has_sansio() -> bool:
    try:
        import uvicorn.protocols.websockets.websockets_sansio_impl  # noqa: F401
    except ImportError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class FakeProvider:
    """Only what the gateway asks: `endpoint(key, port)`."""

    def __init__(self) -> None:
        self.endpoints: dict[tuple[SandboxKey, int], Endpoint] = {}

    def endpoint(self, key: SandboxKey, port: int) -> Endpoint | None:
        return self.endpoints.get((key, port))


@pytest.fixture(scope="module")
def upstreams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    # A long directory name: AF_UNIX paths over 108 bytes must work too.
    base = tmp_path_factory.mktemp("u" * 60) / ("d" * 40)
    base.mkdir()
    sock = str(base / "3000.sock")
    with Server(echo_app, uds=sock), Server(echo_app) as tcp:
        yield sock, tcp.port


@pytest.fixture(scope="module")
def gateway(upstreams: tuple[str, int]) -> Iterator[tuple[str, FakeProvider, PreviewGateway]]:
    sock, port = upstreams
    provider = FakeProvider()
    provider.endpoints[(ALICE, 3000)] = Endpoint(
        user_id="alice", thread_id="t1", port=3000, url="http://localhost:3000", unix_socket=sock
    )
    provider.endpoints[(BOB, 8080)] = Endpoint(
        user_id="bob", thread_id="t1", port=8080, url=f"http://127.0.0.1:{port}"
    )
    app = PreviewGateway(provider, [SECRET], public_url="http://127.0.0.1")  # type: ignore[arg-type]
    with Server(app) as server:
        base = f"http://127.0.0.1:{server.port}"
        app.public_url = base
        yield base, provider, app


# -- tokens ---------------------------------------------------------------------------


def test_tokens_are_bound_to_user_thread_and_port() -> None:
    token = sign(SECRET, ALICE, 3000, 60)
    claims = verify([SECRET], token, ALICE.sandbox_id, 3000)
    assert claims.key == ALICE and claims.port == 3000
    with pytest.raises(TokenError, match="another sandbox"):
        verify([SECRET], token, BOB.sandbox_id, 3000)
    with pytest.raises(TokenError, match="another port"):
        verify([SECRET], token, ALICE.sandbox_id, 3001)
    with pytest.raises(TokenError, match="not signed"):
        verify(["another-secret-of-enough-length"], token)
    with pytest.raises(TokenError, match="expired"):
        verify([SECRET], sign(SECRET, ALICE, 3000, 60, now=time.time() - 120))
    tampered = token.split(".")[0][:-2] + "xx." + token.split(".")[1]
    for bad in (tampered, "", "abc", "a.b", token + "x", "x" * 5000):
        with pytest.raises(TokenError):
            verify([SECRET], bad)
    # Rotation: a token signed with the old secret verifies while it is still listed.
    assert verify(["a-new-secret-of-enough-length", SECRET], token).port == 3000
    with pytest.raises(ValueError):
        sign("short", ALICE, 3000, 60)


# -- HTTP -----------------------------------------------------------------------------


def test_first_visit_sets_a_cookie_and_drops_the_token(gateway: Any) -> None:
    base, _, app = gateway
    url = app.preview_url(ALICE, 3000)
    with httpx.Client(timeout=BOUND_S) as client:
        first = client.get(url)
        assert first.status_code == 303 and first.headers["location"].endswith("/3000/")
        cookie = first.headers["set-cookie"]
        assert "HttpOnly" in cookie and f"Path=/{ALICE.sandbox_id}/3000" in cookie
        seen = client.get(base + first.headers["location"] + "?x=1").json()
    assert seen["path"] == "/" and seen["query"] == "x=1"
    assert "sandkit" not in json.dumps(seen["headers"]).lower().replace("x-forwarded", "")
    assert seen["headers"]["host"] == "localhost:3000"
    assert seen["headers"]["x-forwarded-prefix"] == f"/{ALICE.sandbox_id}/3000"
    assert seen["headers"]["x-forwarded-for"] == "127.0.0.1"


def test_header_token_bodies_and_query(gateway: Any) -> None:
    base, _, app = gateway
    token = app.sign(BOB, 8080)
    with httpx.Client(timeout=BOUND_S, headers={"X-Sandkit-Preview-Token": token}) as client:
        seen = client.post(
            f"{base}/{BOB.sandbox_id}/8080/api/items?a=1&b=2", content=b"x" * 300_000
        ).json()
    assert seen["path"] == "/api/items" and seen["query"] == "a=1&b=2"
    assert seen["body"] == "x" * 300_000
    assert "x-sandkit-preview-token" not in seen["headers"]


def test_the_endpoints_own_headers_replace_a_visitors(
    gateway: Any, upstreams: tuple[str, int]
) -> None:
    # E2B's endpoints carry the sandbox's traffic token: the gateway sends it, once.
    base, provider, app = gateway
    dave = SandboxKey("dave", "t1")
    provider.endpoints[(dave, 8081)] = Endpoint(
        user_id="dave",
        thread_id="t1",
        port=8081,
        url=f"http://127.0.0.1:{upstreams[1]}",
        headers={"E2B-Traffic-Access-Token": "the-providers-token"},
    )
    try:
        with httpx.Client(timeout=BOUND_S) as client:
            seen = client.get(
                f"{base}/{dave.sandbox_id}/8081/",
                headers={
                    "X-Sandkit-Preview-Token": app.sign(dave, 8081),
                    "e2b-traffic-access-token": "forged",
                },
            ).json()
    finally:
        del provider.endpoints[(dave, 8081)]
    sent = [v for k, v in seen["header_list"] if k.lower() == "e2b-traffic-access-token"]
    assert sent == ["the-providers-token"]


def test_refusals(gateway: Any) -> None:
    base, provider, app = gateway
    alice = f"{base}/{ALICE.sandbox_id}/3000/"
    bob_token = app.sign(BOB, 8080)
    cases = [
        ({}, 401, "needs a token"),
        ({"X-Sandkit-Preview-Token": "nonsense"}, 403, "malformed"),
        ({"X-Sandkit-Preview-Token": bob_token}, 403, "another sandbox"),
        ({"X-Sandkit-Preview-Token": app.sign(ALICE, 3001)}, 403, "another port"),
        (
            {"X-Sandkit-Preview-Token": sign(SECRET, ALICE, 3000, 60, now=time.time() - 61)},
            403,
            "expired",
        ),
        (
            {"X-Sandkit-Preview-Token": sign("a-different-secret-of-length", ALICE, 3000, 60)},
            403,
            "not signed",
        ),
    ]
    with httpx.Client(timeout=BOUND_S) as client:
        for headers, status, words in cases:
            reply = client.get(alice, headers=headers)
            assert reply.status_code == status and words in reply.text, (headers, reply.text)
        # A cookie with another box's token, and a token in the query for another box.
        reply = client.get(alice, headers={"Cookie": f"sandkit_preview={bob_token}"})
        assert reply.status_code == 403
        reply = client.get(alice + "?sandkit_token=" + bob_token)
        assert reply.status_code == 403
        # Not exposed (or the box stopped): 404; nothing listening: 502.
        token = app.sign(ALICE, 4000)
        reply = client.get(
            f"{base}/{ALICE.sandbox_id}/4000/", headers={"X-Sandkit-Preview-Token": token}
        )
        assert reply.status_code == 404
        provider.endpoints[(ALICE, 4000)] = Endpoint(
            user_id="alice", thread_id="t1", port=4000, url=f"http://127.0.0.1:{_free_port()}"
        )
        app._endpoints.clear()
        reply = client.get(
            f"{base}/{ALICE.sandbox_id}/4000/", headers={"X-Sandkit-Preview-Token": token}
        )
        assert reply.status_code == 502 and "nothing answers on port 4000" in reply.text
        # An endpoint that is not the token's key is never used.
        provider.endpoints[(ALICE, 4001)] = provider.endpoints[(BOB, 8080)]
        token = app.sign(ALICE, 4001)
        reply = client.get(
            f"{base}/{ALICE.sandbox_id}/4001/", headers={"X-Sandkit-Preview-Token": token}
        )
        assert reply.status_code == 404
        assert client.get(f"{base}/not-a-box/1/").status_code == 404


def test_host_mode(upstreams: tuple[str, int]) -> None:
    provider = FakeProvider()
    provider.endpoints[(ALICE, 3000)] = Endpoint(
        user_id="alice",
        thread_id="t1",
        port=3000,
        url="http://localhost:3000",
        unix_socket=upstreams[0],
    )
    app = PreviewGateway(provider, [SECRET], base_domain="preview.test")  # type: ignore[arg-type]
    url = app.preview_url(ALICE, 3000)
    assert url.startswith(f"http://3000-{ALICE.sandbox_id}.preview.test/?sandkit_token=")
    with Server(app) as server:
        host = f"3000-{ALICE.sandbox_id}.preview.test"
        with httpx.Client(timeout=BOUND_S) as client:
            token = app.sign(ALICE, 3000)
            reply = client.get(
                f"http://127.0.0.1:{server.port}/app/x",
                headers={"Host": host, "X-Sandkit-Preview-Token": token},
            )
            assert reply.json()["path"] == "/app/x"
            reply = client.get(
                f"http://127.0.0.1:{server.port}/app/x",
                headers={
                    "Host": f"3000-{BOB.sandbox_id}.preview.test",
                    "X-Sandkit-Preview-Token": token,
                },
            )
            assert reply.status_code == 403


# -- WebSocket --------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "port"), [(ALICE, 3000), (BOB, 8080)])
def test_websocket_through_the_gateway(gateway: Any, key: SandboxKey, port: int) -> None:
    base, _, app = gateway
    url = f"{base.replace('http', 'ws')}/{key.sandbox_id}/{port}/ws"
    token = app.sign(key, port)
    with ws_connect(
        url,
        additional_headers={"X-Sandkit-Preview-Token": token},
        subprotocols=["chat"],
        open_timeout=BOUND_S,
    ) as ws:
        assert ws.subprotocol == "chat"
        for i in range(20):
            ws.send(f"m{i}")
            assert ws.recv(timeout=BOUND_S) == f"echo:m{i}"
        ws.send(b"\x00\x01" * 1000)
        assert ws.recv(timeout=BOUND_S) == b"\x00\x01" * 1000


def test_websocket_needs_the_right_token(gateway: Any) -> None:
    base, _, app = gateway
    url = f"{base.replace('http', 'ws')}/{ALICE.sandbox_id}/3000/ws"
    for headers in ({}, {"X-Sandkit-Preview-Token": app.sign(BOB, 8080)}):
        with (
            pytest.raises(InvalidStatus),
            ws_connect(url, additional_headers=headers, open_timeout=BOUND_S),
        ):
            pass


def test_many_concurrent_connections(gateway: Any) -> None:
    base, _, app = gateway
    tokens = {ALICE: app.sign(ALICE, 3000), BOB: app.sign(BOB, 8080)}

    async def run() -> int:
        import websockets

        async def one_ws(key: SandboxKey, port: int, i: int) -> None:
            url = f"{base.replace('http', 'ws')}/{key.sandbox_id}/{port}/ws"
            async with websockets.connect(
                url,
                additional_headers={"X-Sandkit-Preview-Token": tokens[key]},
                open_timeout=BOUND_S,
            ) as ws:
                await ws.send(str(i))
                assert await asyncio.wait_for(ws.recv(), BOUND_S) == f"echo:{i}"
                await asyncio.sleep(0.2)  # all open at once

        async with httpx.AsyncClient(timeout=BOUND_S) as client:

            async def one_http(key: SandboxKey, port: int, i: int) -> None:
                reply = await client.get(
                    f"{base}/{key.sandbox_id}/{port}/n/{i}",
                    headers={"X-Sandkit-Preview-Token": tokens[key]},
                )
                assert reply.status_code == 200, reply.text
                assert reply.json()["path"] == f"/n/{i}"

            jobs = []
            for i in range(50):
                key, port = (ALICE, 3000) if i % 2 else (BOB, 8080)
                jobs.append(one_ws(key, port, i))
                jobs.append(one_http(key, port, i))
            await asyncio.gather(*jobs)
        return len(jobs)

    assert asyncio.run(run()) == 100


def test_preview_url_and_settings(tmp_path: Path) -> None:
    from sandkit import Settings
    from sandkit.gateway import create_gateway

    class P(FakeProvider):
        settings = Settings(
            data_root=tmp_path, gateway={"secrets": [SECRET], "public_url": "https://p.test/x"}
        )

    gateway = create_gateway(P())  # type: ignore[arg-type]
    url = gateway.preview_url(ALICE, 3000, ttl_s=30)
    assert url.startswith(f"https://p.test/x/{ALICE.sandbox_id}/3000/?sandkit_token=")
    token = url.split("=", 1)[1]
    assert verify([SECRET], token).expires <= time.time() + 31
    with pytest.raises(Exception, match="16 bytes"):
        Settings(gateway={"secrets": ["short"]})


def test_a_get_is_sent_again_when_the_first_connection_dies_unanswered() -> None:
    """The box's server drops the first connection without a word (a kept connection it
    closed just then): a GET is replayed once on a new one; a POST is not (502)."""
    carol = SandboxKey("carol", "t1")
    seen: list[int] = []

    def serve(listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                seen.append(1)
                data = conn.recv(65536)
                if len(seen) % 2 == 1 or not data:
                    continue  # every other connection: closed unanswered
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    threading.Thread(target=serve, args=(listener,), daemon=True).start()
    provider = FakeProvider()
    provider.endpoints[(carol, 9000)] = Endpoint(
        user_id="carol", thread_id="t1", port=9000, url=f"http://127.0.0.1:{port}"
    )
    app = PreviewGateway(provider, [SECRET], public_url="http://gw.test")  # type: ignore[arg-type]

    async def call(method: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, timeout=BOUND_S) as client:
            return await client.request(
                method,
                f"http://gw.test/{carol.sandbox_id}/9000/",
                headers={"X-Sandkit-Preview-Token": app.sign(carol, 9000)},
                content=b"x" if method == "POST" else None,
            )

    try:
        got = asyncio.run(call("GET"))
        assert got.status_code == 200 and got.text == "ok" and len(seen) == 2
        assert asyncio.run(call("POST")).status_code == 502 and len(seen) == 3
    finally:
        listener.close()


# -- a box-written socket directory (issue 32, item 1) ---------------------------------


def _socket_server(path: str, reply: bytes) -> tuple[socket.socket, list[int]]:
    """A unix socket server that answers every connection with `reply` (counted)."""
    from sandkit.net.proxy import short_unix_path

    accepted: list[int] = []
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    short, done = short_unix_path(path)
    listener.bind(short)
    done()
    listener.listen(16)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                accepted.append(1)
                conn.recv(65536)
                conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    return listener, accepted


def _stop(listener: socket.socket) -> None:
    """Stop a `_socket_server` (shutdown wakes its accept; close alone would not)."""
    import contextlib

    with contextlib.suppress(OSError):
        listener.shutdown(socket.SHUT_RDWR)
    listener.close()


def _preview(app: PreviewGateway, key: SandboxKey, port: int) -> httpx.Response:
    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, timeout=BOUND_S) as client:
            return await client.get(
                f"http://gw.test/{key.sandbox_id}/{port}/version",
                headers={"X-Sandkit-Preview-Token": app.sign(key, port)},
            )

    return asyncio.run(call())


OK_REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nbox"
HOST_REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nengine"


@pytest.mark.parametrize("replacement", ["symlink", "relative-symlink", "fifo", "directory"])
def test_the_gateway_never_follows_what_a_box_put_in_its_socket_directory(
    tmp_path: Path, replacement: str
) -> None:
    """A box that can write its ingress directory replaces `<port>.sock` with a link to a
    host socket (the engine's, another box's), a FIFO or a directory: the gateway answers
    502 and the host socket is never connected to."""
    import os

    host_sock = str(tmp_path / "engine.sock")
    listener, accepted = _socket_server(host_sock, HOST_REPLY)
    ingress = tmp_path / "boxes" / "sk-a" / "ingress"
    ingress.mkdir(parents=True)
    name = ingress / "3000.sock"
    if replacement == "symlink":
        name.symlink_to(host_sock)
    elif replacement == "relative-symlink":
        name.symlink_to(os.path.relpath(host_sock, ingress))
    elif replacement == "fifo":
        os.mkfifo(name)
    else:
        name.mkdir()
    dave = SandboxKey("dave", "t1")
    provider = FakeProvider()
    provider.endpoints[(dave, 3000)] = Endpoint.over_socket("dave", "t1", 3000, str(name))
    app = PreviewGateway(provider, [SECRET], public_url="http://gw.test")  # type: ignore[arg-type]
    try:
        got = _preview(app, dave, 3000)
        assert got.status_code == 502, got.text
        assert "engine" not in got.text and accepted == []
    finally:
        listener.close()


def test_the_gateway_reaches_a_socket_made_again_under_the_same_name(tmp_path: Path) -> None:
    """The pinned socket is the inode that was checked: a relay that starts again (a new
    socket, same name) is reached after one failed request, and a link swapped in by the
    box afterwards is still never followed."""
    ingress = tmp_path / "ingress"
    ingress.mkdir()
    path = str(ingress / "3000.sock")
    first, _ = _socket_server(path, OK_REPLY)
    erin = SandboxKey("erin", "t1")
    provider = FakeProvider()
    provider.endpoints[(erin, 3000)] = Endpoint.over_socket("erin", "t1", 3000, path)
    app = PreviewGateway(provider, [SECRET], public_url="http://gw.test")  # type: ignore[arg-type]
    host_sock = str(tmp_path / "engine.sock")
    host, accepted = _socket_server(host_sock, HOST_REPLY)
    try:
        assert _preview(app, erin, 3000).text == "box"
        _stop(first)
        Path(path).unlink()
        second, _ = _socket_server(path, OK_REPLY)
        replies = [_preview(app, erin, 3000).status_code for _ in range(3)]
        assert replies[-1] == 200 and replies.count(502) <= 1, replies
        _stop(second)
        Path(path).unlink()
        Path(path).symlink_to(host_sock)
        for _ in range(2):
            assert _preview(app, erin, 3000).status_code == 502
        assert accepted == []
    finally:
        host.close()
