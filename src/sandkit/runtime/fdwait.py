"""Waiting on descriptors with poll(), not select().

select() refuses any descriptor above 1023 (ValueError), and a host that runs the
runtime in-process (the local provider inside a server with many connections) hands such
descriptors to a command's pipes freely. poll() has no such bound; select() is left only
where there is no poll().
"""

from __future__ import annotations

import math
import select
from typing import Callable, List, Optional, Sequence

# Readable, or at its end, or broken: as select() reports them, the next read says which.
_READ = (
    getattr(select, "POLLIN", 0)
    | getattr(select, "POLLHUP", 0)
    | getattr(select, "POLLERR", 0)
    | getattr(select, "POLLNVAL", 0)
)
_WRITE = (
    getattr(select, "POLLOUT", 0) | getattr(select, "POLLERR", 0) | getattr(select, "POLLNVAL", 0)
)


def readable(fds: Sequence[int], timeout_s: Optional[float]) -> List[int]:
    """Those of `fds` a read would not block on, once one is or `timeout_s` passed (None:
    no bound)."""
    return _wait(fds, _READ, timeout_s, lambda: select.select(fds, [], [], timeout_s)[0])


def writable(fd: int, timeout_s: Optional[float]) -> bool:
    """Whether a write to `fd` would not block, waiting up to `timeout_s` for it."""
    return bool(_wait([fd], _WRITE, timeout_s, lambda: select.select([], [fd], [], timeout_s)[1]))


def _wait(
    fds: Sequence[int],
    events: int,
    timeout_s: Optional[float],
    fallback: Callable[[], Sequence[int]],
) -> List[int]:
    if not hasattr(select, "poll"):
        return list(fallback())
    poller = select.poll()
    for fd in fds:
        poller.register(fd, events)
    # Whole milliseconds, rounded up: a wait never ends before its time (no busy loop).
    ms = None if timeout_s is None else max(0, math.ceil(timeout_s * 1000))
    return [fd for fd, _ in poller.poll(ms)]
