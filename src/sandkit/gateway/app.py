"""The preview gateway: an ASGI app that proxies HTTP and WebSocket to exposed box ports.

    app = PreviewGateway(provider, secrets=["..."], public_url="https://preview.example.com")
    url = app.preview_url(key, 3000)          # hand this to the platform's user

Two ways to address a box (both need a token):

- path mode (default): `{public_url}/{sandbox_id}/{port}/{path}`; mounted under a prefix
  (Starlette `Mount("/preview", app)`) the prefix comes first;
- host mode (`base_domain`): `{port}-{sandbox_id}.{base_domain}/{path}` (a wildcard DNS
  name and certificate), which keeps the app's own absolute paths working.

The token (tokens.py) comes as `?sandkit_token=...` on the first visit, is then kept in
an HttpOnly cookie scoped to that box and port (the browser is redirected to the URL
without it), or as the `X-Sandkit-Preview-Token` header. None of the three reaches the
box. Missing: 401; wrong, expired or for another box or port: 403; not exposed or not
running: 404; nothing listening in the box: 502.

Upstream requests go to the provider's `Endpoint` (a unix socket on Docker, a URL
elsewhere) with `Host: localhost:<port>` and X-Forwarded-For/-Proto/-Host/-Prefix.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import httpx

from ..net.boxsocket import fd_path, pin_socket
from ..network import Endpoint
from ..provider import SandboxKey, SandboxProvider
from . import tokens

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

TOKEN_PARAM = "sandkit_token"
TOKEN_HEADER = "x-sandkit-preview-token"
COOKIE = "sandkit_preview"
ENDPOINT_CACHE_S = 2.0
_PATH_RE = re.compile(r"^/(sk-[0-9a-f]{20})/(\d{1,5})(/.*)?$")
REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS"})
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
WS_HANDSHAKE = frozenset(
    {
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
        "sec-websocket-accept",
    }
)


class _Refusal(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


_CLOSING: set[asyncio.Future[None]] = set()  # retired upstreams' closes, until done


class _Upstream:
    """One endpoint's connection pool. A unix socket is pinned: opened once without
    following its last component and checked to be a socket (the box can write the
    directory it is in: `net.boxsocket`), then every connection goes to that inode."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._fd: int | None = None
        self.uds: str | None = None
        if endpoint.unix_socket:
            try:
                self._fd = pin_socket(endpoint.unix_socket)
            except OSError:
                raise _Refusal(
                    502, f"sandkit gateway: nothing answers on port {endpoint.port} of the sandbox"
                ) from None
            self.uds = fd_path(self._fd)
        transport = httpx.AsyncHTTPTransport(uds=self.uds, retries=0)
        self.client = httpx.AsyncClient(
            transport=transport,
            timeout=httpx.Timeout(connect=10.0, read=None, write=60.0, pool=30.0),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            follow_redirects=False,
        )
        self.users = 0  # requests using it now
        self.retired = False  # replaced: closed when the last of them ends
        self._closed = False

    def retire(self) -> None:
        self.retired = True
        if not self.users:
            task = asyncio.ensure_future(self.aclose())
            _CLOSING.add(task)
            task.add_done_callback(_CLOSING.discard)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.client.aclose()
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


class PreviewGateway:
    """The ASGI app (see the module doc). `provider` answers `endpoint(key, port)`."""

    def __init__(
        self,
        provider: SandboxProvider,
        secrets: Sequence[str],
        *,
        public_url: str = "http://127.0.0.1:8080",
        base_domain: str | None = None,
        token_ttl_s: float = 3600.0,
        cookie_secure: bool | None = None,
    ) -> None:
        if not secrets:
            raise ValueError("the preview gateway needs at least one secret")
        for secret in secrets:
            tokens._check_secret(secret)
        self.provider = provider
        self.secrets = list(secrets)
        self.public_url = public_url.rstrip("/")
        self.base_domain = base_domain.lower().strip(".") if base_domain else None
        self.token_ttl_s = token_ttl_s
        self.cookie_secure = (
            cookie_secure if cookie_secure is not None else self.public_url.startswith("https:")
        )
        self._endpoints: dict[tuple[str, int], tuple[float, Endpoint | None]] = {}
        self._upstreams: dict[str, _Upstream] = {}
        self._verified: dict[str, tokens.PreviewClaims] = {}

    # -- for the platform ---------------------------------------------------------------

    def sign(self, key: SandboxKey, port: int, ttl_s: float | None = None) -> str:
        return tokens.sign(self.secrets[0], key, port, ttl_s or self.token_ttl_s)

    def preview_url(self, key: SandboxKey, port: int, ttl_s: float | None = None) -> str:
        """The URL to hand a user: opens `port` of `key`'s box until the token expires."""
        token = self.sign(key, port, ttl_s)
        query = f"?{TOKEN_PARAM}={quote(token)}"
        if self.base_domain:
            scheme = self.public_url.split(":", 1)[0] if "://" in self.public_url else "https"
            return f"{scheme}://{port}-{key.sandbox_id}.{self.base_domain}/{query}"
        return f"{self.public_url}/{key.sandbox_id}/{port}/{query}"

    async def aclose(self) -> None:
        upstreams, self._upstreams = self._upstreams, {}
        for upstream in upstreams.values():
            await upstream.aclose()

    # -- ASGI ---------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        try:
            target = self._target(scope)
            claims, from_query, token = self._authorize(scope, target)
            endpoint = await self._endpoint(claims.key, target[1])
            upstream = self._upstream(endpoint)
        except _Refusal as refusal:
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 4000 + refusal.status})
            else:
                await _text(send, refusal.status, refusal.text)
            return
        upstream.users += 1
        try:
            if kind == "http":
                if from_query and scope.get("method") in ("GET", "HEAD"):
                    await self._set_cookie_and_redirect(scope, send, target, token)
                    return
                drop = token if from_query else None
                await self._http(scope, receive, send, target, upstream, drop)
            elif kind == "websocket":
                await self._websocket(scope, receive, send, target, upstream)
        finally:
            upstream.users -= 1
            if upstream.retired and not upstream.users:
                await upstream.aclose()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # -- routing and authorization ------------------------------------------------------

    def _target(self, scope: Scope) -> tuple[str, int, str, str]:
        """(sandbox id, port, path for the box, URL prefix of this box on the gateway)."""
        path: str = scope.get("path", "/")
        root: str = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :] or "/"
        if self.base_domain:
            host = _header(scope, b"host").lower().split(":", 1)[0]
            suffix = "." + self.base_domain
            label = host[: -len(suffix)] if host.endswith(suffix) else ""
            port_text, dash, sandbox_id = label.partition("-")
            if dash and port_text.isdigit() and re.fullmatch(r"sk-[0-9a-f]{20}", sandbox_id):
                return sandbox_id, _port(port_text), path, root
            raise _Refusal(404, "sandkit gateway: no sandbox is addressed by this host name")
        match = _PATH_RE.match(path)
        if not match:
            raise _Refusal(404, "sandkit gateway: use /<sandbox id>/<port>/...")
        sandbox_id, port_text, rest = match.groups()
        prefix = f"{root}/{sandbox_id}/{port_text}"
        return sandbox_id, _port(port_text), rest or "/", prefix

    def _authorize(
        self, scope: Scope, target: tuple[str, int, str, str]
    ) -> tuple[tokens.PreviewClaims, bool, str]:
        sandbox_id, port = target[0], target[1]
        query = _query(scope)
        token = query.get(TOKEN_PARAM)
        from_query = token is not None
        if token is None:
            token = _header(scope, TOKEN_HEADER.encode()) or None
        if token is None:
            token = _cookies(scope).get(COOKIE)
        if not token:
            raise _Refusal(401, "sandkit gateway: this preview needs a token")
        cached = self._verified.get(token)
        if (
            cached is not None
            and time.time() < cached.expires
            and cached.key.sandbox_id == sandbox_id
            and cached.port == port
        ):
            return cached, from_query, token
        try:
            claims = tokens.verify(self.secrets, token, sandbox_id, port)
        except tokens.TokenError as exc:
            raise _Refusal(403, f"sandkit gateway: {exc}") from None
        if len(self._verified) > 10_000:
            self._verified.clear()
        self._verified[token] = claims
        return claims, from_query, token

    async def _endpoint(self, key: SandboxKey, port: int) -> Endpoint:
        now = time.monotonic()
        cache_key = (key.sandbox_id, port)
        cached = self._endpoints.get(cache_key)
        if cached is not None and now - cached[0] < ENDPOINT_CACHE_S:
            endpoint = cached[1]
        else:
            endpoint = await asyncio.to_thread(self.provider.endpoint, key, port)
            self._endpoints[cache_key] = (now, endpoint)
        if (
            endpoint is None
            or endpoint.user_id != key.user_id
            or endpoint.thread_id != key.thread_id
        ):
            raise _Refusal(
                404, f"sandkit gateway: port {port} of this sandbox is not exposed (or it stopped)"
            )
        return endpoint

    def _forget(self, endpoint: Endpoint) -> None:
        """After a failed connection: look the endpoint up again and pin its socket anew
        (a relay that started again made a new socket under the same name)."""
        sandbox_id = SandboxKey(endpoint.user_id, endpoint.thread_id).sandbox_id
        self._endpoints.pop((sandbox_id, endpoint.port), None)
        upstream = self._upstreams.pop(endpoint.unix_socket or endpoint.url, None)
        if upstream is not None:
            upstream.retire()

    def _upstream(self, endpoint: Endpoint) -> _Upstream:
        name = endpoint.unix_socket or endpoint.url
        upstream = self._upstreams.get(name)
        if upstream is None or upstream.endpoint != endpoint:
            if upstream is not None:
                upstream.retire()
            upstream = self._upstreams[name] = _Upstream(endpoint)
        return upstream

    async def _set_cookie_and_redirect(
        self, scope: Scope, send: Send, target: tuple[str, int, str, str], token: str
    ) -> None:
        query = [(k, v) for k, v in parse_qsl(_raw_query(scope), keep_blank_values=True)]
        rest = urlencode([(k, v) for k, v in query if k != TOKEN_PARAM])
        prefix = target[3] if not self.base_domain else ""
        location = prefix + target[2] + (f"?{rest}" if rest else "")
        cookie = f"{COOKIE}={token}; Path={prefix or '/'}; HttpOnly; SameSite=Lax"
        cookie += f"; Max-Age={max(int(self._verified[token].expires - time.time()), 1)}"
        if self.cookie_secure:
            cookie += "; Secure"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", location.encode("latin-1")),
                    (b"set-cookie", cookie.encode("latin-1")),
                    (b"cache-control", b"no-store"),
                    (b"content-length", b"0"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})

    # -- HTTP ---------------------------------------------------------------------------

    def _forward_headers(
        self, scope: Scope, endpoint: Endpoint, target: tuple[str, int, str, str], ws: bool
    ) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        # The endpoint's own headers (a platform's access token, e.g. E2B's) are the
        # provider's to set: a visitor's copy is dropped, never sent alongside.
        own = {name.lower() for name in endpoint.headers}
        for raw_name, raw_value in scope.get("headers", []):
            name = raw_name.decode("latin-1").lower()
            if (
                name in HOP_BY_HOP
                or name == TOKEN_HEADER
                or name in own
                or (ws and name in WS_HANDSHAKE)
            ):
                continue
            value = raw_value.decode("latin-1")
            if name == "cookie":
                value = _without_cookie(value)
                if not value:
                    continue
            out.append((name, value))
        client = scope.get("client")
        forwarded_for = client[0] if client else ""
        previous = _header(scope, b"x-forwarded-for")
        if previous:
            forwarded_for = f"{previous}, {forwarded_for}" if forwarded_for else previous
        out = [(n, v) for n, v in out if not n.startswith("x-forwarded-")]
        out.append(("x-forwarded-for", forwarded_for))
        out.append(
            ("x-forwarded-proto", "https" if scope.get("scheme") in ("https", "wss") else "http")
        )
        out.append(("x-forwarded-host", _header(scope, b"host")))
        if not self.base_domain:
            out.append(("x-forwarded-prefix", target[3]))
        out.extend(endpoint.headers.items())
        return out

    async def _http(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        target: tuple[str, int, str, str],
        upstream: _Upstream,
        drop_token: str | None,
    ) -> None:
        endpoint = upstream.endpoint
        query = _raw_query(scope)
        if drop_token is not None or TOKEN_PARAM in query:
            query = urlencode(
                [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != TOKEN_PARAM]
            )
        url = endpoint.url.rstrip("/") + quote(target[2], safe="/%:@!$&'()*+,;=-._~")
        if query:
            url += "?" + query
        headers = self._forward_headers(scope, endpoint, target, ws=False)
        headers.append(("host", _authority(endpoint)))
        has_body = _header(scope, b"content-length") not in ("", "0") or bool(
            _header(scope, b"transfer-encoding")
        )
        content = _body(receive) if has_body else None
        request = upstream.client.build_request(
            scope["method"], url, headers=headers, content=content
        )
        try:
            try:
                response = await upstream.client.send(request, stream=True)
            except httpx.TransportError:
                # A kept connection the box's server closed just then, or a connect that
                # failed once under load: a request without a body that changes nothing is
                # sent once more, on a new connection (as reverse proxies do).
                if content is not None or scope["method"] not in REPLAYABLE:
                    raise
                request = upstream.client.build_request(
                    scope["method"], url, headers=headers, content=None
                )
                response = await upstream.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            self._forget(endpoint)
            await _text(
                send,
                502,
                f"sandkit gateway: nothing answers on port {endpoint.port} of the sandbox "
                f"({type(exc).__name__})",
            )
            return
        try:
            out_headers = [
                (k.encode("latin-1"), v.encode("latin-1"))
                for k, v in response.headers.multi_items()
                if k.lower() not in HOP_BY_HOP or k.lower() == "content-length"
            ]
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": out_headers,
                }
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except (httpx.HTTPError, OSError):
            with contextlib.suppress(Exception):
                await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    # -- WebSocket ------------------------------------------------------------------------

    async def _websocket(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        target: tuple[str, int, str, str],
        upstream: _Upstream,
    ) -> None:
        endpoint = upstream.endpoint
        from websockets.asyncio.client import connect, unix_connect
        from websockets.exceptions import ConnectionClosed, WebSocketException

        message = await receive()
        if message["type"] != "websocket.connect":
            return
        query = urlencode(
            [
                (k, v)
                for k, v in parse_qsl(_raw_query(scope), keep_blank_values=True)
                if k != TOKEN_PARAM
            ]
        )
        base = (
            endpoint.url.rstrip("/").replace("http://", "ws://", 1).replace("https://", "wss://", 1)
        )
        uri = base + quote(target[2], safe="/%:@!$&'()*+,;=-._~") + (f"?{query}" if query else "")
        headers = self._forward_headers(scope, endpoint, target, ws=True)
        protocols = scope.get("subprotocols") or None
        options: dict[str, Any] = {
            "additional_headers": headers,
            "subprotocols": protocols,
            "max_size": 16 * 1024 * 1024,
            "open_timeout": 10,
            "ping_interval": None,
            "user_agent_header": None,
        }
        try:
            if endpoint.unix_socket:
                upstream_ws = await unix_connect(upstream.uds, uri, **options)
            else:
                upstream_ws = await connect(uri, **options)
        except (TimeoutError, OSError, WebSocketException):
            self._forget(endpoint)
            await send({"type": "websocket.close", "code": 1011})
            return
        await send({"type": "websocket.accept", "subprotocol": upstream_ws.subprotocol})

        async def client_to_box() -> None:
            while True:
                event = await receive()
                if event["type"] == "websocket.receive":
                    data = event.get("bytes")
                    await upstream_ws.send(data if data is not None else event.get("text") or "")
                elif event["type"] == "websocket.disconnect":
                    await upstream_ws.close(code=event.get("code", 1000) or 1000)
                    return

        async def box_to_client() -> None:
            try:
                async for data in upstream_ws:
                    if isinstance(data, bytes):
                        await send({"type": "websocket.send", "bytes": data})
                    else:
                        await send({"type": "websocket.send", "text": data})
            except ConnectionClosed:
                pass
            code = upstream_ws.close_code or 1000
            with contextlib.suppress(Exception):
                await send({"type": "websocket.close", "code": code if code != 1006 else 1011})

        tasks = [asyncio.ensure_future(client_to_box()), asyncio.ensure_future(box_to_client())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
            with contextlib.suppress(Exception):
                await upstream_ws.close()


# -- helpers ---------------------------------------------------------------------------


def _port(text: str) -> int:
    port = int(text)
    if not 1 <= port <= 65535:
        raise _Refusal(404, "sandkit gateway: no such port")
    return port


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return ""


def _raw_query(scope: Scope) -> str:
    raw = scope.get("query_string", b"")
    return raw.decode("latin-1") if isinstance(raw, bytes) else str(raw)


def _query(scope: Scope) -> dict[str, str]:
    raw = _raw_query(scope)
    if TOKEN_PARAM not in raw:
        return {}
    return dict(parse_qsl(raw, keep_blank_values=True))


def _cookies(scope: Scope) -> dict[str, str]:
    raw = _header(scope, b"cookie")
    if COOKIE not in raw:
        return {}
    jar: SimpleCookie = SimpleCookie()
    with contextlib.suppress(Exception):
        jar.load(raw)
    return {k: m.value for k, m in jar.items()}


def _without_cookie(value: str) -> str:
    parts = [p.strip() for p in value.split(";")]
    return "; ".join(p for p in parts if p and not p.startswith(COOKIE + "="))


def _authority(endpoint: Endpoint) -> str:
    rest = endpoint.url.split("://", 1)[-1]
    return rest.split("/", 1)[0]


async def _text(send: Send, status: int, text: str) -> None:
    body = (text + "\n").encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _body(receive: Receive) -> Any:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body"):
            return
