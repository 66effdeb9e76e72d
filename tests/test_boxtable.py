"""BoxTable: one record per key, never a forgotten one handed out, idle boxes reaped."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

from sandkit import SandboxKey
from sandkit.boxkit import BoxTable


@dataclasses.dataclass(eq=False)
class FakeSandbox:
    last_used: float
    busy: bool = False
    closed: bool = False

    def idle_since(self, cutoff: float) -> bool:
        return not self.closed and not self.busy and self.last_used < cutoff


@dataclasses.dataclass(eq=False)
class Record:
    key: SandboxKey
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    sandbox: Any = None


def key(thread: str) -> SandboxKey:
    return SandboxKey(user_id="u", thread_id=thread)


def test_locked_skips_a_record_forgotten_while_waiting() -> None:
    table: BoxTable[Record] = BoxTable(Record)
    k = key("t")
    first = table.box(k)
    got: list[Record] = []

    def waiter() -> None:
        with table.locked(k) as box:
            got.append(box)

    with first.lock:
        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.1)  # the waiter now waits on first's lock
        table.forget(first)  # released meanwhile: no sandbox, dropped
    thread.join(5)
    assert got and got[0] is not first
    assert table.box(k) is got[0]


def test_forget_keeps_a_record_with_a_sandbox() -> None:
    table: BoxTable[Record] = BoxTable(Record)
    record = table.box(key("t"))
    record.sandbox = FakeSandbox(time.monotonic())
    table.forget(record)
    assert table.box(key("t")) is record


def test_reap_idle_stops_only_idle_boxes_and_forgets_them() -> None:
    table: BoxTable[Record] = BoxTable(Record)
    old = time.monotonic() - 100
    idle, busy, recent = table.box(key("idle")), table.box(key("busy")), table.box(key("recent"))
    idle.sandbox = FakeSandbox(old)
    busy.sandbox = FakeSandbox(old, busy=True)
    recent.sandbox = FakeSandbox(time.monotonic())
    stopped: list[Record] = []

    def stop(record: Record) -> None:
        assert record.lock.locked()
        stopped.append(record)
        record.sandbox = None

    assert table.reap_idle(10, stop) == [key("idle")]
    assert stopped == [idle]
    assert set(table.take_all()) == {busy, recent}  # the idle one is forgotten
    assert table.take_all() == []
