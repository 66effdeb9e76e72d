"""Exposed ports of pods: the core's unix socket per port (`sandkit.net.ports`), each
connection carried by a `pods/portforward` stream through the API server, which connects
to the port on the pod's own loopback. So a server bound to 127.0.0.1 in the box is
reached (as on Docker), nothing else of the pod is, the pod's NetworkPolicy stays closed,
and it works the same in and out of the cluster. The cost: one API-server WebSocket per
connection (the preview gateway opens one per request it forwards).

A pod whose runtime serves its own network stack (a RuntimeClass such as gVisor or Kata)
is not reached by `pods/portforward` (it connects in the pod's network namespace, where
nothing listens: gVisor issue 3811). For those, each connection is an exec of
`agent.pyz --net connect` in the box instead (`ExecForward`, sandkit/net/connect.py):
the same socket on this side, one process in the box per connection.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from sandkit.boxkit import ByteStream
from sandkit.net.connect import frames
from sandkit.net.ports import CHUNK, close_socket


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
        close_socket(self._ours)
        with contextlib.suppress(Exception):
            self._stream.close()

    def _outbound(self) -> None:
        """From the client to the box's stdin."""
        try:
            while data := self._ours.recv(CHUNK):
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
