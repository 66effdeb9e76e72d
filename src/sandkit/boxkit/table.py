"""`BoxTable`: a box provider's per-key records, each with its own lock.

One lock per key lets acquires of different keys (container or pod starts
that take seconds) run in parallel while two acquires of the same key never
start two boxes. A record is dropped once it has no sandbox, so a released
key does not keep memory; a caller that waited on a dropped record's lock
must start over with the new one, which `locked` does.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar

from ..provider import SandboxKey
from .sandbox import BoxSandbox

log = logging.getLogger("sandkit.boxkit")


class Box(Protocol):
    """What the table needs of a provider's record."""

    @property
    def key(self) -> SandboxKey: ...

    @property
    def lock(self) -> threading.Lock: ...

    @property
    def sandbox(self) -> BoxSandbox | None: ...


B = TypeVar("B", bound=Box)


class BoxTable(Generic[B]):
    def __init__(self, new: Callable[[SandboxKey], B]) -> None:
        self._new = new
        self._lock = threading.Lock()
        self._boxes: dict[SandboxKey, B] = {}

    def box(self, key: SandboxKey) -> B:
        """The key's record, created when there is none."""
        with self._lock:
            box = self._boxes.get(key)
            if box is None:
                box = self._boxes[key] = self._new(key)
            return box

    @contextlib.contextmanager
    def locked(self, key: SandboxKey) -> Iterator[B]:
        """The key's current record with its lock held (not one forgotten while waiting)."""
        while True:
            box = self.box(key)
            with box.lock:
                if self._boxes.get(key) is box:
                    yield box
                    return

    def replace(self, box: B, new: B) -> None:
        """Make `new` the key's record instead of `box` (a claimed pool box's record);
        whoever waits on `box`'s lock then starts over with `new`."""
        with self._lock:
            if self._boxes.get(box.key) is box:
                self._boxes[new.key] = new

    def forget(self, box: B) -> None:
        """Drop the record if it is still the key's and has no sandbox."""
        with self._lock:
            if self._boxes.get(box.key) is box and box.sandbox is None:
                del self._boxes[box.key]

    def current(self) -> list[B]:
        """Every record, left in the table (for passes that visit them all)."""
        with self._lock:
            return list(self._boxes.values())

    def take_all(self) -> list[B]:
        """Every record, removed from the table (for shutdown)."""
        with self._lock:
            boxes = list(self._boxes.values())
            self._boxes.clear()
        return boxes

    def reap_idle(
        self,
        max_idle_s: float,
        stop: Callable[[B], None],
        keep: Callable[[B], bool] | None = None,
    ) -> list[SandboxKey]:
        """`stop` (under the record's lock) every box idle for `max_idle_s` unless
        `keep(box)` says it is still in use; their keys."""
        cutoff = time.monotonic() - max_idle_s
        with self._lock:
            boxes = list(self._boxes.values())
        reaped = []
        for box in boxes:
            if not _idle(box, cutoff):  # cheap look first: never wait on a busy box's lock
                continue
            if keep is not None and keep(box):
                continue
            with box.lock:
                if not _idle(box, cutoff):
                    continue
                try:
                    stop(box)
                except Exception as exc:  # go on with the others; shutdown sweeps the rest
                    log.warning("releasing idle sandbox %s failed: %s", box.key.sandbox_id, exc)
                    continue
            self.forget(box)
            reaped.append(box.key)
        return reaped


def _idle(box: Box, cutoff: float) -> bool:
    sandbox = box.sandbox
    return sandbox is not None and sandbox.idle_since(cutoff)
