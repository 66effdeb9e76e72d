"""A streaming operation of the in-process runtime, as a `StreamCall`."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..runtime.cancel import Cancel, Cancelled
from ..transports.base import StreamCall

Run = Callable[[Callable[[dict[str, Any]], None], Cancel], Any]


class ThreadStream(StreamCall):
    """Runs `run(emit, cancel)` in a thread; its events and result are the items."""

    def __init__(self, run: Run, name: str) -> None:
        self._items: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._cancel = Cancel()
        self._thread = threading.Thread(target=self._work, args=(run,), name=name, daemon=True)
        self._thread.start()

    def _work(self, run: Run) -> None:
        try:
            result = run(lambda event: self._items.put(("event", event)), self._cancel)
        except Cancelled:
            self._items.put(("cancelled", None))
        except BaseException as exc:
            self._items.put(("error", exc))
        else:
            self._items.put(("result", result))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            while True:
                kind, value = self._items.get()
                if kind == "event":
                    yield {"event": value}
                elif kind == "result":
                    yield {"result": value}
                    return
                elif kind == "error":
                    raise value
                else:
                    return
        finally:
            self.cancel()

    def cancel(self) -> None:
        """End the command (if it still runs) and wait for it: nothing is left behind."""
        self._cancel.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        self._cancel.close()
