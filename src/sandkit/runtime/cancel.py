"""Ending a running command from another thread: a consumer that went away, or a release.

A `Cancel` wakes the command's reader at once (a pipe it selects on). `Calls` holds the
cancels of one sandbox's commands in flight, so that `end_processes` (which a provider
calls before a release that keeps the box, e.g. a paused VM) ends them as well as the
background processes: a command must not survive the release of its box.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

from .readyshell import ReadyShells

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterator, Set


class Cancelled(Exception):
    """The consumer of a stream went away; the command's group was ended."""


class Cancel:
    """Set from any thread; wakes a running command's reader at once (a pipe)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._read, self._write = os.pipe()
        self._closed = False
        # Set by `Calls.end_all`: the sandbox is being released, not the consumer gone.
        self.ended = False

    def set(self) -> None:
        with self._lock:
            if self._event.is_set() or self._closed:
                return
            self._event.set()
            with contextlib.suppress(OSError):
                os.write(self._write, b"x")

    def is_set(self) -> bool:
        return self._event.is_set()

    def fileno(self) -> int:
        return self._read

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for fd in (self._read, self._write):
                with contextlib.suppress(OSError):
                    os.close(fd)


class Calls:
    """The commands in flight in one sandbox (execute and streams alike), and the shell
    started ahead for the next one."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running: Set[Cancel] = set()
        self.ready = ReadyShells()

    @contextlib.contextmanager
    def running(self, cancel: Cancel) -> Iterator[None]:
        with self._changed:
            self._running.add(cancel)
        try:
            yield
        finally:
            with self._changed:
                self._running.discard(cancel)
                self._changed.notify_all()

    def end_all(self, wait_s: float) -> int:
        """End every command in flight and wait up to `wait_s` for their groups to be
        gone (each call ends its own: TERM, KILL after the grace); how many there were.
        The ready shell ends too."""
        self.ready.discard()
        with self._changed:
            ending = list(self._running)
            for cancel in ending:
                cancel.ended = True
                cancel.set()
            deadline = time.monotonic() + wait_s
            while any(c in self._running for c in ending):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
        return len(ending)
