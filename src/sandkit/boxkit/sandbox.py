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
from ..transports.base import StreamCall, Transport


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

    def rekey(self, key: SandboxKey) -> None:
        """A warm pool box claimed by `key` is the key's sandbox from now on."""
        self.key = key
        self.sandbox_id = key.sandbox_id

    @property
    def busy(self) -> bool:
        return self._inflight > 0

    @contextlib.contextmanager
    def _running(self) -> Iterator[None]:
        self._enter()
        try:
            yield
        except BaseException as exc:
            self._leave(exc)
            raise
        self._leave(None)

    def _enter(self) -> None:
        with self._inflight_lock:
            self._inflight += 1

    def _leave(self, exc: BaseException | None) -> None:
        with self._inflight_lock:
            self._inflight -= 1
        self.last_used = time.monotonic()
        if (
            isinstance(exc, SandboxError)
            and exc.code is ErrorCode.UNAVAILABLE
            and self._on_unavailable is not None
        ):
            self._on_unavailable()

    def call(self, method: str, params: dict[str, Any]) -> Any:
        with self._running():
            return super().call(method, params)

    async def acall(self, method: str, params: dict[str, Any]) -> Any:
        with self._running():
            return await super().acall(method, params)

    def open_stream(self, method: str, params: dict[str, Any]) -> StreamCall:
        """Busy (never reaped) from the start of the stream to its end or cancel."""
        self._enter()
        try:
            stream = super().open_stream(method, params)
        except BaseException as exc:
            self._leave(exc)
            raise
        return _Tracked(stream, self._leave)

    def sleep(self) -> bool:
        """Let an idle agent give its memory back until the next call (carrier stdio:
        agent/dormant.py); False when it stays awake (a call running, HTTP)."""
        if self.closed or self.busy:
            return False
        return self.transport.sleep()

    def hang_up(self) -> bool:
        """End an idle agent altogether (its channel closes); the next call starts one."""
        if self.closed or self.busy:
            return False
        return self.transport.hang_up()

    def idle_since(self, cutoff: float) -> bool:
        """Open, no call running, and last used before `cutoff` (a monotonic time)."""
        return not self.closed and not self.busy and self.last_used < cutoff


class _Tracked(StreamCall):
    """A stream that tells its sandbox, once, when it is over (and how)."""

    def __init__(self, inner: StreamCall, done: Callable[[BaseException | None], None]) -> None:
        self._inner = inner
        self._done = done
        self._over = False
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            yield from self._inner
        except BaseException as exc:
            self._finish(exc)
            raise
        self._finish(None)

    def cancel(self) -> None:
        self._inner.cancel()
        self._finish(None)

    def _finish(self, exc: BaseException | None) -> None:
        with self._lock:
            if self._over:
                return
            self._over = True
        self._done(exc)
