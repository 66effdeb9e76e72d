"""The stdio carrier's worker pools (agent/workers.py): bounded, in order, and a shutdown
that lets running calls finish and drops queued ones."""

from __future__ import annotations

import threading
import time

import pytest

from sandkit.agent.workers import WorkerPool

WAIT_S = 60.0  # only a failure waits this long


def test_every_submitted_call_runs() -> None:
    pool = WorkerPool(4, "all")
    seen: list[int] = []
    for i in range(50):
        pool.submit(seen.append, i)
    deadline = time.monotonic() + WAIT_S
    while len(seen) < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    pool.shutdown()
    assert sorted(seen) == list(range(50))


def test_no_more_threads_than_the_bound_and_all_of_them_when_calls_block() -> None:
    pool = WorkerPool(3, "bound")
    release = threading.Event()
    running = threading.Semaphore(0)
    names: set[str] = set()

    def hold() -> None:
        names.add(threading.current_thread().name)
        running.release()
        release.wait(WAIT_S)

    for _ in range(5):
        pool.submit(hold)
    for _ in range(3):
        assert running.acquire(timeout=WAIT_S)  # three run at once
    assert not running.acquire(timeout=0.2)  # the other two wait for a thread
    assert len(names) == 3 and all(n.startswith("bound_") for n in names)
    release.set()
    for _ in range(2):
        assert running.acquire(timeout=WAIT_S)
    pool.shutdown()
    assert len(names) == 3


def test_an_idle_thread_is_reused_before_a_new_one_starts() -> None:
    pool = WorkerPool(8, "reuse")
    names: list[str] = []
    for _ in range(20):
        ran = threading.Event()
        pool.submit(lambda ev=ran: (names.append(threading.current_thread().name), ev.set()))
        assert ran.wait(WAIT_S)
        idle_by = time.monotonic() + WAIT_S  # the thread says it is idle once the call returned
        while not pool._idle._value and time.monotonic() < idle_by:  # type: ignore[attr-defined]
            time.sleep(0.001)
    pool.shutdown()
    assert len(set(names)) == 1


def test_a_call_that_raises_does_not_end_its_thread() -> None:
    pool = WorkerPool(1, "raise")

    def boom() -> None:
        raise RuntimeError("the call's own error")

    pool.submit(boom)
    ran = threading.Event()
    pool.submit(ran.set)
    assert ran.wait(WAIT_S)
    pool.shutdown()


def test_shutdown_finishes_running_calls_and_drops_queued_ones() -> None:
    pool = WorkerPool(1, "stop")
    started, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def first() -> None:
        started.set()
        release.wait(WAIT_S)
        finished.append("first")

    pool.submit(first)
    pool.submit(finished.append, "queued")
    assert started.wait(WAIT_S)
    stopper = threading.Thread(target=pool.shutdown)
    stopper.start()
    time.sleep(0.1)
    assert stopper.is_alive(), "shutdown waits for the running call"
    release.set()
    stopper.join(WAIT_S)
    assert not stopper.is_alive()
    assert finished == ["first"]
    with pytest.raises(RuntimeError):
        pool.submit(finished.append, "late")


def test_a_pool_that_cannot_start_a_thread_still_runs_each_call_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a box at its process limit no thread starts: the first call runs in the
    submitting thread, later ones queue for the threads there are."""
    real_start = threading.Thread.start
    allowed = [False]

    def start(thread: threading.Thread) -> None:
        if not allowed[0]:
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    pool = WorkerPool(4, "t")
    ran: list[int] = []
    pool.submit(ran.append, 1)
    assert ran == [1]  # inline: nobody else could
    allowed[0] = True
    done = threading.Event()

    def second() -> None:
        ran.append(2)
        done.set()

    pool.submit(second)
    allowed[0] = False
    pool.submit(ran.append, 3)  # queued for the thread that exists
    assert done.wait(10)
    deadline = time.monotonic() + 10
    while len(ran) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(ran) == [1, 2, 3]
    allowed[0] = True
    pool.shutdown()
