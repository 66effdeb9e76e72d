"""`RemoteSandbox`: a `Sandbox` whose operations run in an agent elsewhere.

Providers (Docker, Kubernetes, E2B) start a box with the agent in it and
hand a `Transport` here; everything an agent sees — results, error codes,
bounds — comes from the same runtime code as the local provider.

    transport = StdioTransport(opener, agent_config(layout.identity_mapping(), limits, ...))
    sandbox = RemoteSandbox(transport, key.sandbox_id, limits=limits)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from .agent import protocol as p
from .agent.protocol import agent_config
from .errors import ErrorCode, SandboxError
from .runtime.limits import Limits
from .sandbox import Sandbox
from .transports.base import StreamCall, Transport
from .transports.http import HttpTransport
from .transports.stdio import StdioTransport

__all__ = ["HttpTransport", "RemoteSandbox", "StdioTransport", "Transport", "agent_config"]


class RemoteSandbox(Sandbox):
    """Sends each operation through `transport`; sync and native async.

    Every call has a client-side deadline — the command's own timeout plus
    `margin_s` for `execute`, `op_timeout_s` for anything else — so a hung
    agent is a TIMEOUT, never a hang. `limits` should be the limits the
    agent runs with (for the default command timeout).
    """

    def __init__(
        self,
        transport: Transport,
        sandbox_id: str,
        *,
        limits: Limits | None = None,
        op_timeout_s: float = 120.0,
        margin_s: float = 30.0,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.transport = transport
        self.sandbox_id = sandbox_id
        self._limits = limits or Limits()
        self.op_timeout_s = op_timeout_s
        self.margin_s = margin_s
        self.last_used = time.monotonic()
        self._on_close = on_close
        self._closed = False

    @property
    def limits(self) -> Limits:
        return self._limits

    def deadline(self, method: str, params: dict[str, Any]) -> float:
        """Seconds the client waits for `method` before giving up with TIMEOUT."""
        limits = self.limits
        if method in ("process_output", "wait_process"):  # long polls, capped by the agent
            given = params.get("wait_s" if method == "process_output" else "timeout")
            waited = limits.process_wait_max_s if given is None else _positive_number(given)
            return min(waited or 0.0, limits.process_wait_max_s) + self.op_timeout_s
        if method not in ("execute", "execute_stream"):
            return self.op_timeout_s
        given = params.get("timeout")
        timeout = limits.exec_default_timeout_s
        # A timeout the agent will refuse (NaN, negative, a string) still needs
        # a sane deadline for the round trip that brings the refusal back.
        number = _positive_number(given)
        if number is not None:
            timeout = number
        return min(timeout, self.limits.exec_max_timeout_s) + self.margin_s

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError(
                ErrorCode.UNAVAILABLE, f"sandbox {self.sandbox_id} was released; acquire it again"
            )
        self.last_used = time.monotonic()

    def call(self, method: str, params: dict[str, Any]) -> Any:
        self._check_open()
        wire = p.encode_params(method, params)
        result = self.transport.call(method, wire, self.deadline(method, params))
        return p.decode_result(method, result)

    async def acall(self, method: str, params: dict[str, Any]) -> Any:
        self._check_open()
        wire = p.encode_params(method, params)
        result = await self.transport.acall(method, wire, self.deadline(method, params))
        return p.decode_result(method, result)

    def open_stream(self, method: str, params: dict[str, Any]) -> StreamCall:
        self._check_open()
        wire = p.encode_params(method, params)
        return self.transport.open_stream(method, wire, self.deadline(method, params))

    def ping(self, timeout: float = 10.0) -> float:
        """Round trip to the agent in seconds (UNAVAILABLE/TIMEOUT when it is gone)."""
        self._check_open()
        start = time.perf_counter()
        self.transport.call("ping", {}, timeout)
        return time.perf_counter() - start

    def info(self, timeout: float = 10.0) -> dict[str, Any]:
        """Agent version, Python version, whether ripgrep is available."""
        self._check_open()
        result = self.transport.call("info", {}, timeout)
        return dict(result) if isinstance(result, dict) else {}

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the channel; later calls fail with UNAVAILABLE. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.transport.close()
        finally:
            if self._on_close is not None:
                self._on_close()


def _positive_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if not math.isnan(value) and value > 0 else None
