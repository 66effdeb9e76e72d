"""`BoxSandbox`: a `RemoteSandbox` that knows its key, whether a call is running (what
idle reaping needs) and tells its provider when the agent could not be reached."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import ErrorCode, SandboxError
from ..provider import SandboxKey
from ..remote import RemoteSandbox
from ..transports.base import Transport


class BoxSandbox(RemoteSandbox):
    """A sandbox in a box; `on_unavailable` runs when a call could not reach the agent
    (its provider then checks the box on the next `acquire` instead of trusting it)."""

    def __init__(
        self,
        key: SandboxKey,
        transport: Transport,
        *,
        on_unavailable: Callable[[], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(transport, key.sandbox_id, **kwargs)
        self.key = key
        self._on_unavailable = on_unavailable
        self._inflight = 0
        self._inflight_lock = threading.Lock()

    @property
    def busy(self) -> bool:
        return self._inflight > 0

    @contextlib.contextmanager
    def _running(self) -> Iterator[None]:
        with self._inflight_lock:
            self._inflight += 1
        try:
            yield
        except SandboxError as exc:
            if exc.code is ErrorCode.UNAVAILABLE and self._on_unavailable is not None:
                self._on_unavailable()
            raise
        finally:
            with self._inflight_lock:
                self._inflight -= 1
            self.last_used = time.monotonic()

    def call(self, method: str, params: dict[str, Any]) -> Any:
        with self._running():
            return super().call(method, params)

    async def acall(self, method: str, params: dict[str, Any]) -> Any:
        with self._running():
            return await super().acall(method, params)

    def idle_since(self, cutoff: float) -> bool:
        """Open, no call running, and last used before `cutoff` (a monotonic time)."""
        return not self.closed and not self.busy and self.last_used < cutoff
