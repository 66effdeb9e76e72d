"""A `ByteStream` over a Kubernetes exec stream: the stdio carrier to the agent.

One `pods/exec` WebSocket (`kubernetes.stream.stream(..., _preload_content=False)`)
whose frames carry a channel byte: 0 stdin (ours), 1 stdout, 2 stderr, 3 the
exec's final status, 255 "close channel" (protocol v5). The reader works on
whole frames straight from the socket (no polling), so a round trip costs
one frame each way.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from typing import Any

from websocket import ABNF, WebSocketException

from sandkit.streams import ByteStream

STDIN, STDOUT, STDERR, STATUS, CLOSE = 0, 1, 2, 3, 255
V5 = "v5.channel.k8s.io"
# Big writes (a payload, a large write_file) go out in frames of this size.
WRITE_CHUNK = 256 * 1024
STDERR_KEEP_BYTES = 64 * 1024
_HANDSHAKE_RE = re.compile(r"Handshake status (\d{3})")


class ExecOpenError(Exception):
    """The exec could not be started; `status` is the HTTP status when known (404: no pod)."""

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.status = status


def open_exec(
    core: Any,
    namespace: str,
    pod: str,
    container: str,
    argv: list[str],
    timeout: float = 30.0,
) -> KubeExecStream:
    """Start `argv` in the pod with stdin/stdout/stderr attached (no tty).

    `core` must be a `CoreV1Api` of its own: `stream()` swaps the client's
    `call_api` while it connects, which would hijack concurrent calls.
    """
    from kubernetes.client.exceptions import ApiException
    from kubernetes.stream import stream

    try:
        ws = stream(
            core.connect_get_namespaced_pod_exec,
            pod,
            namespace,
            command=argv,
            container=container,
            stdin=True,
            stdout=True,
            stderr=True,
            tty=False,
            binary=True,
            _preload_content=False,
            _request_timeout=timeout,
        )
    except ApiException as exc:
        text = str(exc.reason or exc)
        found = _HANDSHAKE_RE.search(text)
        status = int(found.group(1)) if found else (exc.status or None)
        raise ExecOpenError(_status_message(text), status) from None
    return KubeExecStream(ws)


def _status_message(text: str) -> str:
    """The `message` of a Status object inside a failed handshake's text, else the text."""
    start = text.find('{"kind":"Status"')
    if start >= 0:
        with contextlib.suppress(ValueError):
            status, _ = json.JSONDecoder().raw_decode(text[start:])
            if isinstance(status, dict) and status.get("message"):
                return str(status["message"])
    return text[:1000]


class KubeExecStream(ByteStream):
    """Reads stdout frames for the reader, keeps the stderr tail and the exit status."""

    def __init__(self, client: Any) -> None:
        self._client = client  # kubernetes.stream.ws_client.WSClient
        self._ws = client.sock  # websocket.WebSocket
        self._v5 = client.subprotocol == V5
        self._ws.settimeout(None)
        self._out = bytearray()
        self._stderr = bytearray()
        self._status: dict[str, Any] | None = None
        self._eof = False
        self._closed = False
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()

    # -- ByteStream -------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._closed:
            raise EOFError("stream is closed")
        view = memoryview(data)
        with self._write_lock:
            try:
                for start in range(0, len(view), WRITE_CHUNK):
                    self._ws.send(
                        b"\x00" + view[start : start + WRITE_CHUNK].tobytes(),
                        opcode=ABNF.OPCODE_BINARY,
                    )
            except (WebSocketException, AttributeError) as exc:
                # AttributeError: websocket-client's socket was closed under us.
                raise EOFError(f"the exec stream is closed ({exc})") from None

    def read(self, max_bytes: int = 65536) -> bytes:
        with self._read_lock:
            while not self._out:
                if self._eof or self._closed:
                    return b""
                self._next_frame()
            n = min(max_bytes, len(self._out))
            data = bytes(self._out[:n])
            del self._out[:n]
            return data

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._v5:
            # Close stdin first: the agent sees EOF and exits by itself.
            with contextlib.suppress(Exception), self._write_lock:
                self._ws.send(bytes([CLOSE, STDIN]), opcode=ABNF.OPCODE_BINARY)
        with contextlib.suppress(Exception):
            self._ws.close(timeout=1)
        with contextlib.suppress(Exception):
            self._ws.shutdown()

    def exit_detail(self) -> str:
        """Why the process is gone (exit status, stderr tail), for error messages."""
        parts = []
        status = self._status
        if status is not None:
            if status.get("status") == "Success":
                parts.append("exit code 0")
            else:
                parts.append(str(status.get("message") or status.get("reason") or status)[:300])
        lines = [line.strip() for line in self.stderr_tail().splitlines() if line.strip()]
        if lines:
            parts.append(lines[-1][:500])
        return "; ".join(parts)

    # -- extras -------------------------------------------------------------------

    @property
    def at_eof(self) -> bool:
        return self._eof or self._closed

    def stderr_tail(self) -> str:
        return self._stderr.decode("utf-8", "replace")

    def settimeout(self, timeout: float | None) -> None:
        self._ws.settimeout(timeout)

    def unread(self, data: bytes) -> None:
        """Put bytes back in front of stdout (a handshake read past its line)."""
        with self._read_lock:
            self._out[:0] = data

    def readline(self, limit: int = 4096) -> bytes:
        """One line of stdout (with its newline), or what came before the end of stream."""
        line = bytearray()
        while b"\n" not in line and len(line) < limit:
            chunk = self.read(limit)
            if not chunk:
                return bytes(line)
            line += chunk
        end = line.find(b"\n") + 1 or len(line)
        if end < len(line):
            self.unread(bytes(line[end:]))
        return bytes(line[:end])

    # -- internals ----------------------------------------------------------------

    def _next_frame(self) -> None:
        try:
            opcode, frame = self._ws.recv_data_frame(True)
        except Exception:  # closed, reset, TLS error or handshake timeout: the stream is over
            self._eof = True
            return
        if opcode == ABNF.OPCODE_CLOSE:
            self._eof = True
            return
        if opcode not in (ABNF.OPCODE_BINARY, ABNF.OPCODE_TEXT):
            return
        data = frame.data
        if not data:
            return
        channel = data[0]
        body = memoryview(data)[1:]
        if channel == STDOUT:
            self._out += body
        elif channel == STDERR:
            self._stderr += body
            if len(self._stderr) > STDERR_KEEP_BYTES:
                del self._stderr[: len(self._stderr) - STDERR_KEEP_BYTES]
        elif channel == STATUS:
            with contextlib.suppress(ValueError):
                status = json.loads(bytes(body) or b"{}")
                if isinstance(status, dict):
                    self._status = status
        elif channel == CLOSE and len(body) and body[0] == STDOUT:
            self._eof = True
