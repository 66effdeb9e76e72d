"""What `RemoteSandbox` needs from a carrier: send one request, get its result."""

from __future__ import annotations

import abc
from typing import Any

from ..agent.protocol import READ_ONLY_METHODS
from ..errors import ErrorCode, SandboxError


class Transport(abc.ABC):
    """Carries JSON-RPC requests to one agent; safe to use from many threads.

    `params` and results are already in wire form (bytes tagged as base64);
    a failure is always a `SandboxError`. `timeout` is the client-side
    deadline in seconds: past it the call fails with TIMEOUT, never hangs.
    """

    @abc.abstractmethod
    def call(self, method: str, params: dict[str, Any], timeout: float) -> Any:
        """Send one request and wait for its result."""

    @abc.abstractmethod
    async def acall(self, method: str, params: dict[str, Any], timeout: float) -> Any:
        """`call` for asyncio, without a worker thread per call."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the channel(s); later calls fail with UNAVAILABLE."""


def retryable(method: str) -> bool:
    """May `method` be sent again after the channel dropped while it was in flight?

    Only operations that change nothing: a write or command whose answer
    was lost may or may not have happened, so it is reported, not repeated.
    """
    return method in READ_ONLY_METHODS


def unavailable(message: str) -> SandboxError:
    return SandboxError(ErrorCode.UNAVAILABLE, message)


def timed_out(method: str, timeout: float) -> SandboxError:
    return SandboxError(
        ErrorCode.TIMEOUT, f"the agent did not answer {method} within {timeout:.1f}s"
    )


class TransportClosed(SandboxError):
    def __init__(self) -> None:
        super().__init__(ErrorCode.UNAVAILABLE, "the connection to the agent was closed")
