"""Exposed ports of pods: one unix socket per port on the provider's machine.

Each connection to such a socket is carried to the port inside the pod by a
`pods/portforward` stream through the API server, which connects to the port on the
pod's own loopback. So a server bound to 127.0.0.1 in the box is reached (as on Docker),
nothing else of the pod is, the pod's NetworkPolicy stays closed, and it works the same
in and out of the cluster. The cost: one API-server WebSocket per connection (the preview
gateway opens one per request it forwards).

A pod whose runtime serves its own network stack (a RuntimeClass such as gVisor or Kata)
is not reached by `pods/portforward` (it connects in the pod's network namespace, where
nothing listens: gVisor issue 3811). For those, each connection is an exec of
`agent.pyz --net connect` in the box instead (`ExecForward`, sandkit/net/connect.py):
the same socket on this side, one process in the box per connection.

The sockets live only as long as this process serves them: a provider restart, a
release or a shutdown ends them (docs/network.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandkit.boxkit import ByteStream
from sandkit.net.connect import frames
from sandkit.net.proxy import short_unix_path

log = logging.getLogger("sandkit.kubernetes")

_CHUNK = 256 * 1024
_BACKLOG = 128


class _Listener:
    """One exposed port: the socket, its accept thread, the connections it carries."""

    def __init__(self, path: Path, pod: str, port: int, forward: Callable[[str, int], Any]):
        self.path = path
        self.pod = pod
        self.port = port
        self._forward = forward
        self._closed = False
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a socket file left by an earlier process
        short, done = short_unix_path(str(path))
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.bind(short)
            os.chmod(short, 0o600)
            self._sock.listen(_BACKLOG)
        except BaseException:
            self._sock.close()
            raise
        finally:
            done()
        threading.Thread(
            target=self._accept_loop, name=f"sandkit-k8s-expose-{port}", daemon=True
        ).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._open = list(self._open), set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self._sock.close()
        for conn in conns:
            _close(conn)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._closed:
                    _close(conn)
                    return
                self._open.add(conn)
            threading.Thread(
                target=self._carry, args=(conn,), name="sandkit-k8s-forward", daemon=True
            ).start()

    def _carry(self, conn: socket.socket) -> None:
        forward = None
        try:
            try:
                forward = self._forward(self.pod, self.port)
                remote = forward.socket(self.port)
            except Exception as exc:  # no pod, no RBAC, API server down: the client sees EOF
                log.info("port-forward to %s:%d failed: %s", self.pod, self.port, exc)
                return
            remote.setblocking(True)
            _pump(conn, remote)
        finally:
            with self._lock:
                self._open.discard(conn)
            _close(conn)
            if forward is not None:
                with contextlib.suppress(Exception):
                    forward.close()


def _pump(a: Any, b: Any) -> None:
    """Bytes both ways until either side ends (then both end: HTTP needs no half-close).
    `a` and `b` are sockets or socket-like (the port-forward's end of its socket pair)."""
    peer = {a.fileno(): b, b.fileno(): a}
    with selectors.DefaultSelector() as selector:
        selector.register(a, selectors.EVENT_READ)
        selector.register(b, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                source: Any = key.fileobj
                try:
                    data = source.recv(_CHUNK)
                    if not data:
                        return
                    peer[key.fd].sendall(data)
                except OSError:
                    return


class ExecForward:
    """One connection carried by an exec stream (`agent.pyz --net connect --port N`):
    what `forward(pod, port)` returns where port-forward cannot reach the box. Like a
    `PortForward`, `socket(port)` is this side's end of the connection."""

    def __init__(self, stream: ByteStream) -> None:
        self._stream = stream
        self._ours, self._theirs = socket.socketpair()
        threading.Thread(target=self._outbound, name="sandkit-k8s-exec-fwd", daemon=True).start()
        threading.Thread(target=self._inbound, name="sandkit-k8s-exec-fwd", daemon=True).start()

    def socket(self, port: int) -> socket.socket:
        return self._theirs

    def close(self) -> None:
        _close(self._ours)
        with contextlib.suppress(Exception):
            self._stream.close()

    def _outbound(self) -> None:
        """From the client to the box's stdin."""
        try:
            while data := self._ours.recv(_CHUNK):
                self._stream.write(data)
        except (OSError, EOFError):
            pass

    def _inbound(self) -> None:
        """Frames from the box's stdout to the client, until the end frame."""
        try:
            for data in frames(self._stream.read):
                self._ours.sendall(data)
        except (OSError, EOFError):
            pass
        finally:
            with contextlib.suppress(OSError):
                self._ours.shutdown(socket.SHUT_WR)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


class PortForwards:
    """The exposed ports of one provider: (sandbox id, port) -> a listening socket."""

    def __init__(self, root: Path, forward: Callable[[str, int], Any]) -> None:
        """`forward(pod, port)` opens a port-forward (a `kubernetes.stream.ws_client.
        PortForward`); sockets go below `root`."""
        self._root = root
        self._forward = forward
        self._lock = threading.Lock()
        self._listeners: dict[tuple[str, int], _Listener] = {}

    def open(self, sandbox_id: str, pod: str, port: int) -> Path:
        """The socket of the port (made once; a pod that changed gets a fresh one)."""
        with self._lock:
            listener = self._listeners.get((sandbox_id, port))
            if listener is not None and listener.pod == pod:
                return listener.path
            if listener is not None:
                listener.close()
            path = self._root / sandbox_id / f"{port}.sock"
            self._listeners[(sandbox_id, port)] = _Listener(path, pod, port, self._forward)
            return path

    def close(self, sandbox_id: str, port: int) -> None:
        with self._lock:
            listener = self._listeners.pop((sandbox_id, port), None)
        if listener is not None:
            listener.close()

    def close_box(self, sandbox_id: str) -> None:
        with self._lock:
            gone = [k for k in self._listeners if k[0] == sandbox_id]
            listeners = [self._listeners.pop(k) for k in gone]
        for listener in listeners:
            listener.close()
        with contextlib.suppress(OSError):
            (self._root / sandbox_id).rmdir()

    def close_all(self) -> None:
        with self._lock:
            listeners, self._listeners = list(self._listeners.values()), {}
        for listener in listeners:
            listener.close()

    def of_box(self, sandbox_id: str) -> dict[int, Path]:
        """The box's exposed ports and their sockets."""
        with self._lock:
            return {p: lst.path for (sid, p), lst in self._listeners.items() if sid == sandbox_id}

    def path(self, sandbox_id: str, port: int) -> Path | None:
        with self._lock:
            listener = self._listeners.get((sandbox_id, port))
            return listener.path if listener is not None else None
