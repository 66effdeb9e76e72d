"""What `RemoteSandbox` needs from a carrier: send one request, get its result."""

from __future__ import annotations

import abc
from collections.abc import Iterator
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

    def open_stream(self, method: str, params: dict[str, Any], timeout: float) -> StreamCall:
        """Start a streaming request (its events arrive on the same channel)."""
        raise unavailable("this transport cannot carry streamed operations")

    def sleep(self) -> bool:
        """Let an idle agent give its memory back until the next call (stdio only, see
        agent/dormant.py); True if it sleeps now."""
        return False

    def hang_up(self) -> bool:
        """Close an idle channel, so its agent ends; the next call opens a new one (stdio
        only); True if it was closed now."""
        return False


class StreamCall(abc.ABC):
    """A running streaming request: its items are `{"event": {...}}`, then one
    `{"result": ...}` (or a SandboxError). `cancel()` ends it early (the agent then
    ends the command); it is safe to call at any time, also after the end."""

    @abc.abstractmethod
    def __iter__(self) -> Iterator[dict[str, Any]]: ...

    @abc.abstractmethod
    def cancel(self) -> None: ...


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


class SwitchingTransport(Transport):
    """A sandbox's view of its box's current HTTP transport, which the provider swaps
    when the agent or the box restarts (new token, new IP).

    A subclass says which transport is current and what an unreachable agent
    marks as down; a down box stays `UNAVAILABLE` until the next `acquire`.
    """

    def __init__(self) -> None:
        self._closed = False

    @abc.abstractmethod
    def _live(self) -> Transport:
        """The current transport, or raise `UNAVAILABLE` when there is none."""

    @abc.abstractmethod
    def _mark_down(self, transport: Transport) -> None:
        """`transport` could not reach its agent."""

    def _current(self) -> Transport:
        if self._closed:
            raise TransportClosed()
        return self._live()

    def _check(self, transport: Transport, exc: SandboxError) -> None:
        if exc.code is ErrorCode.UNAVAILABLE:
            self._mark_down(transport)

    def call(self, method: str, params: dict[str, Any], timeout: float) -> Any:
        transport = self._current()
        try:
            return transport.call(method, params, timeout)
        except SandboxError as exc:
            self._check(transport, exc)
            raise

    async def acall(self, method: str, params: dict[str, Any], timeout: float) -> Any:
        transport = self._current()
        try:
            return await transport.acall(method, params, timeout)
        except SandboxError as exc:
            self._check(transport, exc)
            raise

    def open_stream(self, method: str, params: dict[str, Any], timeout: float) -> StreamCall:
        transport = self._current()
        try:
            return transport.open_stream(method, params, timeout)
        except SandboxError as exc:
            self._check(transport, exc)
            raise

    def close(self) -> None:
        self._closed = True  # the provider owns the underlying transport and closes it
