"""An exposed port carried over a command's stdin/stdout (stdlib, runs in a box).

Kubernetes' `pods/portforward` connects to the port in the pod's network namespace, which
a runtime with its own network stack (gVisor, Kata) does not serve: the server listens
inside the sandbox (gVisor issue 3811). There the provider execs `agent.pyz --net connect
--port N` in the box for each connection instead: stdin goes to 127.0.0.1:N, what the
server sends comes back on stdout in frames (4-byte big-endian length, then the bytes; a
frame of length 0 ends the connection), so the far end knows the connection ended even
when the platform keeps an exec stream open after its process exited (gVisor does).
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Iterator

CHUNK = 64 * 1024
END = struct.pack(">I", 0)


def frame(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def frames(read: Callable[[int], bytes]) -> Iterator[bytes]:
    """The payloads of the frames `read(max_bytes)` delivers, until the end frame or EOF."""
    buffer = bytearray()
    while True:
        while len(buffer) >= 4:
            (size,) = struct.unpack(">I", bytes(buffer[:4]))
            if size == 0:
                return
            if len(buffer) < 4 + size:
                break
            yield bytes(buffer[4 : 4 + size])
            del buffer[: 4 + size]
        data = read(CHUNK)
        if not data:
            return
        buffer += data


def run(port: int) -> int:
    """Carry one connection to 127.0.0.1:`port`; 0 when it ended, 1 when none was made."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    except OSError:
        os.write(1, END)
        return 1
    sock.settimeout(None)

    def inbound() -> None:
        try:
            while True:
                data = os.read(0, CHUNK)
                if not data:
                    break
                sock.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)

    threading.Thread(target=inbound, daemon=True).start()
    try:
        while True:
            data = sock.recv(CHUNK)
            if not data:
                break
            _write_all(frame(data))
    except OSError:
        pass
    _write_all(END)
    return 0


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]
