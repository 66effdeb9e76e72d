"""Exposed ports on the provider's side: one unix socket per (box, port).

Each connection to such a socket is carried to the port in the box by a `forward(target,
port)` the provider supplies: a Kubernetes `pods/portforward` stream or an exec in the
pod, a TCP connection to this host's loopback for the local provider. The sockets
(mode 0600, in a 0700 directory) are what `Endpoint.unix_socket` names and what the
preview gateway connects to; closing one (unexpose, release, shutdown) ends its
connections too. They live only as long as the process that serves them.
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

from .proxy import short_unix_path

log = logging.getLogger("sandkit.net")

CHUNK = 256 * 1024
UNANSWERED_LINGER_S = 1.0
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
            target=self._accept_loop, name=f"sandkit-expose-{port}", daemon=True
        ).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._open = list(self._open), set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self._sock.close()
        for conn in conns:
            close_socket(conn)
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
                    close_socket(conn)
                    return
                self._open.add(conn)
            threading.Thread(
                target=self._carry, args=(conn,), name="sandkit-expose-carry", daemon=True
            ).start()

    def _carry(self, conn: socket.socket) -> None:
        forward = None
        try:
            try:
                forward = self._forward(self.pod, self.port)
                remote = forward.socket(self.port)
            except Exception as exc:  # nothing to reach (no pod, no server): the client sees EOF
                log.info("carrying a connection to %s:%d failed: %s", self.pod, self.port, exc)
                _end_unanswered(conn)
                return
            remote.setblocking(True)
            _pump(conn, remote)
        finally:
            with self._lock:
                self._open.discard(conn)
            close_socket(conn)
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
                    data = source.recv(CHUNK)
                    if not data:
                        return
                    peer[key.fd].sendall(data)
                except OSError:
                    return


def _end_unanswered(conn: socket.socket) -> None:
    """End a connection there is nothing to carry to with a FIN, not a reset: what the
    client sent is read (for a moment) so that closing with unread data does not reset it,
    and the client sees an empty answer."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(UNANSWERED_LINGER_S)
        while conn.recv(CHUNK):
            pass


def close_socket(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


class PortSockets:
    """The exposed ports of one provider: (sandbox id, port) -> a listening socket."""

    def __init__(self, root: Path, forward: Callable[[str, int], Any]) -> None:
        """`forward(target, port)` carries one connection: an object whose `socket(port)`
        is this side's end and whose `close()` ends it (a `kubernetes.stream.ws_client.
        PortForward` is one); sockets go below `root`."""
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
