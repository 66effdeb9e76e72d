"""A `ByteStream` over a Kubernetes exec stream: the stdio carrier to the agent.

One `pods/exec` WebSocket (`kubernetes.stream.stream(..., _preload_content=False)`)
whose frames carry a channel byte: 0 stdin (ours), 1 stdout, 2 stderr, 3 the
exec's final status, 255 "close channel" (protocol v5). The reader works on
whole frames straight from the socket (no polling), so a round trip costs
one frame each way.

A process that dies with stdin data still on its way (a big request half
sent) never ends its exec stream: the kubelet keeps trying to deliver that
data and never reports the exit (`kubectl exec -i` hangs the same way). So
after a big write, a stream with a `watch` callback asks it, whenever the
agent has been silent for `WATCH_AFTER_S`, whether the agent still lives,
and ends the stream when it does not.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from websocket import ABNF, WebSocketException

from sandkit.boxkit import ByteStream

STDIN, STDOUT, STDERR, STATUS, CLOSE = 0, 1, 2, 3, 255
V5 = "v5.channel.k8s.io"
# Big writes (a payload, a large write_file) go out in frames of this size.
WRITE_CHUNK = 256 * 1024
STDERR_KEEP_BYTES = 64 * 1024
# A write this big can leave more unread stdin than the pipe holds when the agent dies.
WATCH_BYTES = 256 * 1024
# Silence after such a write before the watch is asked (then again every as long).
WATCH_AFTER_S = 5.0
EXEC_RETRY_PAUSE_S = 0.2  # before the one retry of an exec that failed without a status
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
    `call_api` while it connects, which would hijack concurrent calls. An exec
    that fails before any HTTP status (a connection or TLS error, seen from a
    loaded API server) started nothing in the pod, so it is tried once more.
    """
    from kubernetes.client.exceptions import ApiException
    from kubernetes.stream import stream

    retries = 1
    while True:
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
            if status is None and retries:
                retries -= 1
                time.sleep(EXEC_RETRY_PAUSE_S)
                continue
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

    def __init__(self, client: Any, watch: Callable[[], bool | None] | None = None) -> None:
        """`watch()` says whether the agent still lives (None: cannot tell)."""
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
        self.watch = watch
        self.agent_pid: int | None = None  # the provider's watch asks about it
        self._watch_lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._last_frame = time.monotonic()
        self._big_write_at: float | None = None  # end of a big write not answered since
        self._writing_big = False
        self._ended_because = ""

    # -- ByteStream -------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._closed:
            raise EOFError("stream is closed")
        view = memoryview(data)
        big = len(view) >= WATCH_BYTES and self.watch is not None
        with self._write_lock:
            if big:  # watched from the start: a dead agent can leave the send blocked
                self._writing_big = True
                self._big_write_at = time.monotonic()
                self._start_watcher()
            try:
                for start in range(0, len(view), WRITE_CHUNK):
                    self._ws.send(
                        b"\x00" + view[start : start + WRITE_CHUNK].tobytes(),
                        opcode=ABNF.OPCODE_BINARY,
                    )
            except (WebSocketException, AttributeError, OSError) as exc:
                # AttributeError: websocket-client's socket was closed under us.
                raise EOFError(f"the exec stream is closed ({exc})") from None
            finally:
                if big:
                    self._big_write_at = time.monotonic()
                    self._writing_big = False

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
        parts = [self._ended_because] if self._ended_because else []
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

    def exit_code(self) -> int | None:
        """The process's exit code from the final status frame, once it came."""
        status = self._status
        if status is None:
            return None
        if status.get("status") == "Success":
            return 0
        for cause in (status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                with contextlib.suppress(TypeError, ValueError):
                    return int(cause.get("message"))
        return None

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

    def _start_watcher(self) -> None:
        with self._watch_lock:
            if self._watcher is None:
                self._watcher = threading.Thread(
                    target=self._watch_loop, name="sandkit-k8s-exec-watch", daemon=True
                )
                self._watcher.start()

    def _watch_loop(self) -> None:
        """While a big write is unanswered, ask `watch` after each silence; end the stream
        when the agent is gone (see the module doc). Runs only while there is one."""
        while not self.at_eof:
            time.sleep(WATCH_AFTER_S / 5)
            since = self._big_write_at
            if since is None:
                with self._watch_lock:
                    if self._big_write_at is None:
                        self._watcher = None
                        return
                continue
            if time.monotonic() - max(since, self._last_frame) < WATCH_AFTER_S:
                continue
            watch = self.watch
            if watch is not None and watch() is False:
                self._end("the agent process ended while a request was still being sent to it")
                return
            self._last_frame = time.monotonic()  # alive (or unknown): wait another round

    def _end(self, reason: str) -> None:
        """Make the reader see the end of the stream now (it may be blocked in recv)."""
        self._ended_because = reason
        self._eof = True
        with contextlib.suppress(Exception):
            self._ws.sock.shutdown(socket.SHUT_RDWR)

    def _next_frame(self) -> None:
        try:
            opcode, frame = self._ws.recv_data_frame(True)
        except Exception:  # closed, reset, TLS error or handshake timeout: the stream is over
            self._eof = True
            return
        self._last_frame = time.monotonic()
        if (
            self._big_write_at is not None
            and not self._writing_big
            and self._last_frame > self._big_write_at
        ):
            self._big_write_at = None  # the agent answers after it: it read the write
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
