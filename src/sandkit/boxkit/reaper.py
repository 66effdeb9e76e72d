"""`IdleReaper`: the background thread of a box provider (idle reaping, upkeep)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..provider import SandboxKey

log = logging.getLogger("sandkit.boxkit")


class IdleReaper:
    """Calls `reap(idle_timeout_s)` every `interval_s` seconds in a daemon thread."""

    def __init__(self, name: str, reap: Callable[[float], list[SandboxKey]]) -> None:
        self.name = name
        self._reap = reap
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self, interval_s: float, idle_timeout_s: float) -> None:
        """Start once (no-op when running or when `interval_s` is 0)."""
        if not interval_s or (self._thread is not None and self._thread.is_alive()):
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._loop,
                args=(self._stop, interval_s, idle_timeout_s),
                name=self.name,
                daemon=True,
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self, stop: threading.Event, interval_s: float, idle_timeout_s: float) -> None:
        while not stop.wait(interval_s):
            try:
                reaped = self._reap(idle_timeout_s)
            except Exception:  # keep reaping; the platform may be back next time
                log.exception("%s: idle reaping failed", self.name)
                continue
            if reaped:
                log.info("%s: released %d idle sandbox(es)", self.name, len(reaped))
