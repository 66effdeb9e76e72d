"""Carrier 2: JSON-RPC over HTTP/1.1 with a per-sandbox bearer token.

`POST /rpc` carries one request per HTTP request (keep-alive, one thread
per connection); `GET /healthz` answers "ok" without auth and says nothing
else. No token, no service: the agent refuses to start without one.
"""

from __future__ import annotations

import hmac
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ..runtime.errors import ErrorCode, SandboxError
from . import protocol as p
from .server import AgentCore, BadRequest, Request, log

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional, Tuple

# Idle keep-alive connections are closed after this many seconds; clients
# drop pooled connections well before (see sandkit.transports.http).
IDLE_TIMEOUT_S = 300.0
MIN_TOKEN_CHARS = 16


class AgentHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog of 5 drops SYNs when many clients connect
    # at once, and each drop costs a 1 s+ retransmit.
    request_queue_size = 128

    def __init__(
        self, address: Tuple[str, int], core: AgentCore, token: str, workers: int = 8
    ) -> None:
        if len(token) < MIN_TOKEN_CHARS:
            raise ValueError("the bearer token must have at least %d characters" % MIN_TOKEN_CHARS)
        self.core = core
        self.expected = ("Bearer " + token).encode("utf-8")
        self.ops_slots = threading.BoundedSemaphore(workers)
        self.exec_slots = threading.BoundedSemaphore(workers)
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: AgentHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "sandkit-agent"
    sys_version = ""
    timeout = IDLE_TIMEOUT_S

    def setup(self) -> None:
        super().setup()
        # Headers and body are separate writes; without this, Nagle plus the
        # client's delayed ACK adds ~40 ms to every answer.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._reply(200, b"ok\n", "text/plain; charset=utf-8")
        else:
            self._reply(404, b"not found\n", "text/plain; charset=utf-8")

    def do_POST(self) -> None:
        if self.path != "/rpc":
            self.close_connection = True
            self._reply(404, b"not found\n", "text/plain; charset=utf-8")
            return
        if not self._authorized():
            # The body of an unauthenticated request is never read.
            self.close_connection = True
            self._reply_json(
                401,
                p.error_response(
                    None,
                    p.UNAUTHORIZED,
                    SandboxError(ErrorCode.ACCESS_DENIED, "missing or wrong bearer token"),
                ),
                extra={"WWW-Authenticate": 'Bearer realm="sandkit-agent"'},
            )
            return
        body = self._body()
        if body is None:
            return
        core = self.server.core
        if len(body) > core.max_frame_bytes:
            self._reply_json(200, core.oversized(p.Oversized(body[:512], core.max_frame_bytes)))
            return
        try:
            request = core.parse_frame(body)
        except BadRequest as bad:
            self._reply_json(200, bad.response)
            return
        if request.notify and request.method == p.CANCEL:
            core.cancel(request)
            self._reply(204, b"", "application/json")
            return
        if core.is_stream(request):
            self._stream(request)
            return
        data = self._run(request)
        if data is None:  # a notification: nothing runs, nothing to say
            self._reply(204, b"", "application/json")
        else:
            self._reply_bytes(200, data)

    def _authorized(self) -> bool:
        header = self.headers.get("Authorization", "")
        try:
            given = header.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return hmac.compare_digest(given, self.server.expected)

    def _body(self) -> Optional[bytes]:
        length_text = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding") or length_text is None:
            self.close_connection = True
            self._reply(411, b"Content-Length required\n", "text/plain; charset=utf-8")
            return None
        try:
            length = int(length_text)
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True
            self._reply(400, b"bad Content-Length\n", "text/plain; charset=utf-8")
            return None
        limit = self.server.core.max_frame_bytes
        if length > limit:
            # Refused before reading, so a huge body cannot exhaust memory.
            self.close_connection = True
            self._reply_json(
                413,
                p.error_response(
                    None,
                    p.INVALID_REQUEST,
                    SandboxError(
                        ErrorCode.TOO_LARGE,
                        "request is larger than the agent's frame limit of %d bytes" % limit,
                    ),
                ),
            )
            return None
        return self.rfile.read(length)

    def _run(self, request: Request) -> Optional[bytes]:
        core = self.server.core
        if request.notify:
            return None
        if core.is_control(request):
            response = core.handle(request)
        else:
            slots = (
                self.server.exec_slots
                if request.method in p.SLOW_METHODS
                else self.server.ops_slots
            )
            with slots:
                response = core.handle(request)
        if response is None:
            return None
        return core.encode(request, response)

    def _stream(self, request: Request) -> None:
        """One streaming request: its events and then its response as NDJSON lines in a
        chunked body. A client that closes the response ends the command."""
        core = self.server.core
        with self.server.exec_slots:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            response = core.run_stream(request, self._chunk)
            try:
                if response is not None:
                    self._chunk(core.encode(request, response))
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                response = None
        if response is None:
            self.close_connection = True

    def _chunk(self, frame: bytes) -> None:
        line = frame + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))

    def _reply_json(
        self, status: int, message: Dict[str, Any], extra: Optional[Dict[str, str]] = None
    ) -> None:
        self._reply_bytes(status, p.dumps(message), extra)

    def _reply_bytes(
        self, status: int, data: bytes, extra: Optional[Dict[str, str]] = None
    ) -> None:
        self._reply(status, data, "application/json", extra)

    def _reply(
        self,
        status: int,
        data: bytes,
        content_type: str,
        extra: Optional[Dict[str, str]] = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def serve_http(core: AgentCore, host: str, port: int, token: str, workers: int = 8) -> int:
    server = AgentHTTPServer((host, port), core, token, workers)
    bound_host, bound_port = str(server.server_address[0]), int(server.server_address[1])
    # The one line an HTTP agent prints on stdout: where it listens (useful
    # with port 0). Everything else goes to stderr.
    print(json.dumps({"listening": {"host": bound_host, "port": bound_port}}), flush=True)
    log("listening on http://%s:%d" % (bound_host, bound_port))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        core.close()
    return 0
