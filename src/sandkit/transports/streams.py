"""A byte pipe to one agent process, whatever carries it.

Providers supply streams (a Docker exec socket, a Kubernetes exec stream,
a local subprocess); `RemoteSandbox` speaks JSON-RPC over them.
"""

from __future__ import annotations

import abc
from collections.abc import Callable


class ByteStream(abc.ABC):
    """Bidirectional, ordered bytes to the agent's stdin and from its stdout."""

    @abc.abstractmethod
    def write(self, data: bytes) -> None:
        """Send all of `data`; raise OSError/EOFError when the peer is gone."""

    @abc.abstractmethod
    def read(self, max_bytes: int = 65536) -> bytes:
        """Block for the next chunk of the agent's stdout; b"" at end of stream."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the stream; the agent process exits when its stdin closes."""

    @property
    def at_eof(self) -> bool:
        """True once the agent's output has ended (the provider then looks at the box)."""
        return False

    def exit_detail(self) -> str:
        """Why the agent went away (exit status, stderr tail), for error messages."""
        return ""


# Opens a fresh stream (starting a fresh `agent.pyz --stdio` process).
StreamOpener = Callable[[], ByteStream]
