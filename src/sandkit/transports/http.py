"""JSON-RPC over HTTP/1.1 to an agent started with `--http`, bearer-token auth.

Stdlib only: `http.client` with a small keep-alive pool for sync calls, a
minimal HTTP/1.1 client on asyncio streams for async ones (the agent is
the only server it has to understand: Content-Length bodies, keep-alive).
Retry rules match the stdio transport: a request that was not sent whole
is sent again once; one that was sent is repeated only if it is read-only.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import itertools
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from ..agent import protocol as p
from ..errors import ErrorCode, SandboxError
from ..runtime.limits import Limits
from .base import StreamCall, Transport, TransportClosed, retryable, timed_out, unavailable

# Pooled connections idle longer than this are dropped before the agent
# drops them (its idle timeout is 300 s), so a reused one is not stale.
MAX_IDLE_S = 60.0


class _NotSent(Exception):
    """The request did not reach the agent whole."""


class _Lost(Exception):
    """The request was sent but no answer came back."""


_Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter, float]


class HttpTransport(Transport):
    """Calls `POST {base_url}/rpc` with `Authorization: Bearer {token}`."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        pool_size: int = 8,
        connect_timeout: float = 10.0,
        max_frame_bytes: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT, f"agent URL must be http(s)://host:port: {base_url!r}"
            )
        if not token:
            raise SandboxError(ErrorCode.INVALID_ARGUMENT, "an agent bearer token is required")
        self.base_url = base_url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._path = parts.path.rstrip("/") + "/rpc"
        self._ssl = ssl_context or (ssl.create_default_context() if self._https else None)
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
        }
        self.pool_size = pool_size
        self.connect_timeout = connect_timeout
        self._send_limit = max_frame_bytes or p.max_frame_bytes(Limits())
        self._receive_limit = self._send_limit + p.FRAME_SLACK_BYTES
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._idle: list[tuple[http.client.HTTPConnection, float]] = []
        # Keep-alive streams per event loop (a stream belongs to its loop).
        self._aidle: dict[asyncio.AbstractEventLoop, list[_Stream]] = {}
        self._closed = False

    # -- shared ---------------------------------------------------------------

    def _body(self, method: str, params: dict[str, Any]) -> bytes:
        try:
            body = p.dumps(p.request(next(self._ids), method, params))
        except (TypeError, ValueError) as exc:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT, f"arguments of {method} are not JSON: {exc}"
            ) from None
        if len(body) > self._send_limit:
            raise SandboxError(
                ErrorCode.TOO_LARGE,
                f"the {method} request is {len(body)} bytes, over the frame limit of "
                f"{self._send_limit}",
            )
        return body

    def _interpret(self, status: int, data: bytes) -> Any:
        if status == 401:
            raise SandboxError(
                ErrorCode.ACCESS_DENIED,
                f"the agent at {self.base_url} rejected the bearer token (HTTP 401)",
            )
        try:
            message = json.loads(data) if data else None
        except ValueError:
            message = None
        if isinstance(message, dict) and ("result" in message or "error" in message):
            if "error" in message:
                raise p.error_from_wire(message["error"])
            return message.get("result")
        if status >= 500:
            raise unavailable(f"the agent at {self.base_url} answered HTTP {status}")
        raise SandboxError(
            ErrorCode.INTERNAL, f"the agent at {self.base_url} answered HTTP {status} without JSON"
        )

    def _failure(self, method: str, exc: BaseException, sent: bool) -> SandboxError:
        if isinstance(exc, ConnectionRefusedError):
            return unavailable(f"the agent at {self.base_url} refused the connection")
        if not sent or retryable(method):
            return unavailable(f"the agent at {self.base_url} is unreachable: {exc}")
        return unavailable(
            f"the connection to the agent dropped while {method} was running ({exc}); "
            "it may or may not have taken effect, so it was not repeated"
        )

    # -- sync -----------------------------------------------------------------

    def _checkout(self) -> http.client.HTTPConnection:
        now = time.monotonic()
        with self._lock:
            if self._closed:
                raise TransportClosed()
            while self._idle:
                conn, since = self._idle.pop()
                if now - since < MAX_IDLE_S:
                    return conn
                conn.close()
        if self._https:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=self.connect_timeout, context=self._ssl
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=self.connect_timeout)

    def _checkin(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.pool_size:
                self._idle.append((conn, time.monotonic()))
                return
        conn.close()

    def call(self, method: str, params: dict[str, Any], timeout: float) -> Any:
        body = self._body(method, params)
        deadline = time.monotonic() + timeout
        for attempt in (1, 2):
            conn = self._checkout()
            sent = False
            try:
                if conn.sock is None:
                    conn.timeout = max(min(self.connect_timeout, deadline - time.monotonic()), 1e-3)
                    conn.connect()
                    if isinstance(conn.sock, socket.socket):
                        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError as exc:  # refused, unreachable, or no answer to connect
                conn.close()
                if attempt == 1 and time.monotonic() < deadline:
                    continue
                raise self._failure(method, exc, sent=False) from None
            try:
                conn.sock.settimeout(max(deadline - time.monotonic(), 1e-3))
                conn.request("POST", self._path, body, self._headers)
                sent = True
                response = conn.getresponse()
                length = int(response.getheader("Content-Length") or 0)
                if length > self._receive_limit:
                    conn.close()
                    raise SandboxError(
                        ErrorCode.TOO_LARGE, f"the agent's answer is larger than {length} bytes"
                    )
                data = response.read()
            except TimeoutError:
                conn.close()
                raise timed_out(method, timeout) from None
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                if attempt == 1 and (not sent or retryable(method)):
                    continue
                raise self._failure(method, exc, sent) from None
            if response.will_close:
                conn.close()
            else:
                self._checkin(conn)
            return self._interpret(response.status, data)
        raise AssertionError("unreachable")

    # -- streaming -------------------------------------------------------------

    def open_stream(self, method: str, params: dict[str, Any], timeout: float) -> StreamCall:
        """A connection of its own, whose chunked answer is the NDJSON of events, then the
        response; closing it is how the agent learns the consumer went away."""
        body = self._body(method, params)
        request_id = json.loads(body)["id"]
        conn = self._checkout()
        if conn.sock is not None:
            conn.close()  # a fresh connection: this one is not returned to the pool
        conn.timeout = self.connect_timeout
        try:
            conn.connect()
            if isinstance(conn.sock, socket.socket):
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.sock.settimeout(timeout)
            conn.request("POST", self._path, body, self._headers)
            response = conn.getresponse()
        except TimeoutError:
            conn.close()
            raise timed_out(method, timeout) from None
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise self._failure(method, exc, sent=True) from None
        return _HttpStream(self, conn, response, request_id, method, timeout)

    def _cancel(self, request_id: Any) -> None:
        """Tell the agent (best effort) that nobody waits for `request_id` any more."""
        notice = p.dumps({"jsonrpc": "2.0", "method": p.CANCEL, "params": {"id": request_id}})
        conn = http.client.HTTPConnection(self._host, self._port, timeout=2.0)
        if self._https:
            conn = http.client.HTTPSConnection(
                self._host, self._port, timeout=2.0, context=self._ssl
            )
        with contextlib.suppress(OSError, http.client.HTTPException):
            conn.request("POST", self._path, notice, self._headers)
            conn.getresponse().read()
        conn.close()

    # -- async ----------------------------------------------------------------

    async def _aconnect(self, timeout: float) -> _Stream:
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        with self._lock:
            if self._closed:
                raise TransportClosed()
            idle = self._loop_pool(loop)
            while idle:
                reader, writer, since = idle.pop()
                if now - since < MAX_IDLE_S and not writer.is_closing():
                    return reader, writer, since
                writer.close()
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self._host, self._port, ssl=self._ssl),
            min(self.connect_timeout, timeout),
        )
        return reader, writer, now

    def _acheckin(self, stream: _Stream) -> None:
        reader, writer, _ = stream
        with self._lock:
            idle = self._loop_pool(asyncio.get_running_loop())
            if not self._closed and len(idle) < self.pool_size:
                idle.append((reader, writer, time.monotonic()))
                return
        writer.close()

    def _loop_pool(self, loop: asyncio.AbstractEventLoop) -> list[_Stream]:
        """The idle streams of `loop`; pools of closed loops are dropped (caller holds the lock).

        Their transports cannot be closed any more (that needs the loop); the
        sockets go with the objects.
        """
        for other in [other for other in self._aidle if other.is_closed()]:
            del self._aidle[other]
        return self._aidle.setdefault(loop, [])

    async def _aexchange(self, stream: _Stream, body: bytes) -> tuple[int, bytes, bool]:
        reader, writer, _ = stream
        head = [f"POST {self._path} HTTP/1.1", f"Host: {self._host}:{self._port}"]
        head += [f"{name}: {value}" for name, value in self._headers.items()]
        head.append(f"Content-Length: {len(body)}")
        try:
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
            await writer.drain()
        except (OSError, RuntimeError) as exc:
            raise _NotSent(str(exc) or type(exc).__name__) from None
        try:
            status_line = await reader.readline()
            if not status_line:
                raise _Lost("the agent closed the connection")
            status = int(status_line.split()[1])
            headers: dict[str, str] = {}
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b"\n", b""):
                    break
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            if length > self._receive_limit:
                raise SandboxError(
                    ErrorCode.TOO_LARGE, f"the agent's answer is larger than {length} bytes"
                )
            data = await reader.readexactly(length) if length else b""
        except (OSError, ValueError, IndexError, asyncio.IncompleteReadError) as exc:
            raise _Lost(str(exc) or type(exc).__name__) from None
        return status, data, headers.get("connection", "").lower() == "close"

    async def acall(self, method: str, params: dict[str, Any], timeout: float) -> Any:
        body = self._body(method, params)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for attempt in (1, 2):
            try:
                stream = await self._aconnect(max(deadline - loop.time(), 1e-3))
            except (OSError, TimeoutError) as exc:  # refused, unreachable, no answer
                if attempt == 1 and loop.time() < deadline:
                    continue
                raise self._failure(method, exc, sent=False) from None
            try:
                status, data, will_close = await asyncio.wait_for(
                    self._aexchange(stream, body), deadline - loop.time()
                )
            except TimeoutError:
                stream[1].close()
                raise timed_out(method, timeout) from None
            except _NotSent as exc:
                stream[1].close()
                if attempt == 1:
                    continue
                raise self._failure(method, exc, sent=False) from None
            except _Lost as exc:
                stream[1].close()
                if attempt == 1 and retryable(method):
                    continue
                raise self._failure(method, exc, sent=True) from None
            except BaseException:
                stream[1].close()
                raise
            if will_close:
                stream[1].close()
            else:
                self._acheckin(stream)
            return self._interpret(status, data)
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            streams = [s for pool in self._aidle.values() for s in pool]
            self._aidle.clear()
        for conn, _ in idle:
            conn.close()
        for _, writer, _ in streams:
            with contextlib.suppress(RuntimeError):  # its loop is already closed
                writer.close()


class _HttpStream(StreamCall):
    def __init__(
        self,
        transport: HttpTransport,
        conn: http.client.HTTPConnection,
        response: http.client.HTTPResponse,
        request_id: Any,
        method: str,
        timeout: float,
    ) -> None:
        self._transport = transport
        self._conn = conn
        self._response = response
        self._id = request_id
        self._method = method
        self._timeout = timeout
        self._done = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            response = self._response
            if "ndjson" not in (response.getheader("Content-Type") or ""):
                self._done = True
                yield {"result": self._transport._interpret(response.status, response.read())}
                return
            limit = self._transport._receive_limit
            while True:
                try:
                    line = response.readline(limit + 1)
                except TimeoutError:
                    raise timed_out(self._method, self._timeout) from None
                except (OSError, http.client.HTTPException) as exc:
                    raise self._transport._failure(self._method, exc, sent=True) from None
                if not line:
                    raise unavailable(f"the agent ended {self._method} without an answer")
                message = json.loads(line)
                if message.get("method") == p.EVENT and "id" not in message:
                    params = message.get("params") or {}
                    yield {"event": {k: v for k, v in params.items() if k != "id"}}
                    continue
                self._done = True
                yield {"result": self._transport._interpret(200, line)}
                return
        finally:
            self.cancel()

    def cancel(self) -> None:
        if self._done:
            self._conn.close()
            return
        self._done = True
        self._hang_up()  # the agent's next write fails, which ends the command
        self._transport._cancel(self._id)  # and at once, even if it prints nothing

    def _hang_up(self) -> None:
        """Close the connection, also under a reader blocked on it in another thread: only
        shutdown wakes that read (close alone leaves the socket open while the response
        holds it, so neither side would see the end until the read timeout)."""
        sock = self._conn.sock
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._conn.close()
