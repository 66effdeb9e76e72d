"""A `ByteStream` over a Docker exec socket: the stdio carrier to the agent.

One `docker exec` (tty off) whose hijacked connection carries the agent's
stdin one way and multiplexed stdout/stderr frames (8-byte headers) the other.
Closing half-closes the connection: the engine then closes the agent's stdin
and the agent exits.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from typing import Any

import docker
import docker.errors

from sandkit.boxkit import ByteStream

_HEADER = struct.Struct(">BxxxL")
_STDOUT, _STDERR = 1, 2
_RECV_BYTES = 256 * 1024
STDERR_KEEP_BYTES = 64 * 1024
HEAD_KEEP_BYTES = 2048


class DockerExecStream(ByteStream):
    """Demultiplexes an exec's stdout for the reader; keeps the tail of its stderr."""

    def __init__(
        self,
        sock: socket.socket,
        reader: Any = None,
        exec_id: str = "",
        client: docker.DockerClient | None = None,
        keep: Any = None,
    ) -> None:
        """Wrap an already-hijacked connection; `open()` is the usual way in.

        `reader` is a buffered reader over `sock` that may already hold bytes
        (read together with the HTTP 101 headers); `keep` is closed with us.
        """
        self.exec_id = exec_id
        self._client = client
        self._keep = keep
        self._sock = sock
        self._sock.settimeout(None)
        self._reader = reader
        self._frame_type = 0
        self._frame_left = 0
        self._pending = bytearray()
        self._out = bytearray()
        self._stderr = bytearray()
        # The first stdout bytes: when the exec itself fails, the engine writes
        # its reason there ("executable file not found"), not a JSON line.
        self._head = bytearray()
        self._eof = False
        self._closed = False
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()

    @classmethod
    def open(
        cls,
        client: docker.DockerClient,
        container_id: str,
        cmd: list[str],
        user: str | None = None,
        environment: dict[str, str] | None = None,
        workdir: str | None = None,
    ) -> DockerExecStream:
        created = client.api.exec_create(
            container_id,
            cmd,
            stdin=True,
            stdout=True,
            stderr=True,
            tty=False,
            user=user or "",
            environment=environment,
            workdir=workdir,
        )
        exec_id = created["Id"]
        # exec_start(socket=True) gives the raw socket object with the HTTP
        # response attached; reading through the response's buffered reader
        # keeps any bytes that arrived together with the 101 headers.
        raw = client.api.exec_start(exec_id, socket=True)
        return cls(_underlying_socket(raw), _buffered_reader(raw), exec_id, client, raw)

    # -- ByteStream -------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._closed:
            raise EOFError("stream is closed")
        with self._write_lock:
            self._sock.sendall(data)

    def read(self, max_bytes: int = 65536) -> bytes:
        with self._read_lock:
            while not self._out:
                if self._eof or self._closed:
                    return b""
                chunk = self._recv()
                if not chunk:
                    self._eof = True
                    return b""
                self._demux(chunk)
            n = min(max_bytes, len(self._out))
            data = bytes(self._out[:n])
            del self._out[:n]
            return data

    def end_unless_ended(self, grace_s: float) -> None:
        """The engine says the exec's process is gone: if its output has not ended within
        `grace_s` (what was in flight is read first), end the stream, which also wakes a
        writer blocked on it."""

        def end() -> None:
            if not self.at_eof:
                with contextlib.suppress(OSError):
                    self._sock.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(grace_s, end)
        timer.daemon = True
        timer.start()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # SHUT_WR first: the engine closes the agent's stdin, the agent exits.
        for how in (socket.SHUT_WR, socket.SHUT_RDWR):
            with contextlib.suppress(OSError):
                self._sock.shutdown(how)
        with contextlib.suppress(OSError):
            self._sock.close()
        if self._keep is not None:
            with contextlib.suppress(Exception):
                self._keep.close()
        response = getattr(self._keep, "_response", None)
        if response is not None:
            with contextlib.suppress(Exception):
                response.close()

    # -- diagnostics ---------------------------------------------------------------

    @property
    def at_eof(self) -> bool:
        """True once the agent's output ended or the stream was closed."""
        return self._eof or self._closed

    def stderr_tail(self) -> str:
        """The last bytes the agent wrote to stderr (why it failed to start, say)."""
        return self._stderr.decode("utf-8", "replace")

    def exit_code(self) -> int | None:
        """The agent's exit code once it has ended, else None."""
        if self._client is None:
            return None
        try:
            info: dict[str, Any] = self._client.api.exec_inspect(self.exec_id)
        except Exception:  # engine gone too: no code to report
            return None
        if info.get("Running"):
            return None
        code = info.get("ExitCode")
        return code if isinstance(code, int) else None

    def exit_detail(self) -> str:
        """Why the agent is gone, for the transport's UNAVAILABLE message."""
        code = self.exit_code()
        lines = [line.strip() for line in self.stderr_tail().splitlines() if line.strip()]
        head = self._head.decode("utf-8", "replace").strip()
        if head and not head.startswith("{"):
            lines.append(head.splitlines()[0].strip())
        last = lines[-1][:500] if lines else ""
        if code is None and not last:
            return ""
        text = "agent exit code %s" % ("unknown" if code is None else code)
        return text + (f"; {last}" if last else "")

    # -- internals -----------------------------------------------------------------

    def _recv(self) -> bytes:
        try:
            if self._reader is not None:
                return bytes(self._reader.read1(_RECV_BYTES))
            return self._sock.recv(_RECV_BYTES)
        except (OSError, ValueError):
            # ValueError: the reader was closed under us by close().
            return b""

    def _demux(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        pos = 0
        end = len(view)
        while pos < end:
            if self._frame_left == 0:
                need = _HEADER.size - len(self._pending)
                self._pending += view[pos : pos + need]
                pos += min(need, end - pos)
                if len(self._pending) < _HEADER.size:
                    return
                self._frame_type, self._frame_left = _HEADER.unpack(self._pending)
                self._pending.clear()
                continue
            take = min(self._frame_left, end - pos)
            part = view[pos : pos + take]
            pos += take
            self._frame_left -= take
            if self._frame_type == _STDOUT:
                self._out += part
                if len(self._head) < HEAD_KEEP_BYTES:
                    self._head += part[: HEAD_KEEP_BYTES - len(self._head)]
            elif self._frame_type == _STDERR:
                self._stderr += part
                if len(self._stderr) > STDERR_KEEP_BYTES:
                    del self._stderr[: len(self._stderr) - STDERR_KEEP_BYTES]


def _underlying_socket(raw: Any) -> socket.socket:
    if isinstance(raw, socket.socket):
        return raw
    inner = getattr(raw, "_sock", None)
    if isinstance(inner, socket.socket):
        return inner
    raise TypeError(f"unsupported Docker exec socket type {type(raw).__name__}")


def _buffered_reader(raw: Any) -> Any:
    response = getattr(raw, "_response", None)
    try:
        reader = response.raw._fp.fp  # type: ignore[union-attr]
    except AttributeError:
        return None
    return reader if hasattr(reader, "read1") else None
