"""The stdio carrier's worker pools: threads that run submitted calls, up to a bound.

Not `concurrent.futures.ThreadPoolExecutor`: importing it loads `logging`, `queue`
and the futures machinery (~3-5 ms of a fresh agent, paid by the first operation
of every new or woken box), and the carrier needs none of it: a call answers its
own request and reports its own errors, so nothing waits on a future.
"""

from __future__ import annotations

import contextlib
import threading
from _queue import SimpleQueue

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, List, Optional, Tuple

    Job = Optional[Tuple[Callable[..., Any], Tuple[Any, ...]]]


class WorkerPool:
    """Calls run in the order submitted, on up to `size` threads started as needed;
    an idle thread takes the next call before a new one is started."""

    def __init__(self, size: int, name: str) -> None:
        self._size = max(1, size)
        self._name = name
        self._jobs: SimpleQueue[Job] = SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._threads: List[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, call: Callable[..., Any], *args: Any) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker pool is shut down")
            self._jobs.put((call, args))
            if self._idle.acquire(blocking=False) or len(self._threads) >= self._size:
                return
            thread = threading.Thread(
                target=self._work, name="%s_%d" % (self._name, len(self._threads)), daemon=True
            )
            try:
                thread.start()
            except RuntimeError:  # no room for a thread (the box's process limit is reached)
                if self._threads:
                    return  # a running one takes the call when it is free
                self._jobs.get_nowait()  # nobody would: it is the only one queued
            else:
                self._threads.append(thread)
                return
        with contextlib.suppress(BaseException):  # a call answers its own errors
            call(*args)

    def shutdown(self) -> None:
        """Calls running now finish; calls still queued are dropped (nobody is left to
        read their answers)."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None or self._closed:
                return
            call, args = job
            with contextlib.suppress(BaseException):  # a call answers its own errors
                call(*args)
            self._idle.release()
