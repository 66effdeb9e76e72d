"""Warm pools: boxes started before their key is known, each claimed by one new thread.

A conversation's first tool call acquires a box, so starting one is latency a user
waits for. A pool keeps `warm_pool.size` boxes running, each with fresh, empty
storage of its own and its agent answering over an open channel. `acquire` of a
key that has no box and no thread data yet claims one: the provider makes the
box's storage the key's thread data without copying and the box the key's box
through an atomic step of the platform (see the provider docs), so two replicas
never claim the same box and a box never serves two keys. A key with data takes
the cold path. The pool is refilled in the background; one that cannot be
refilled (capacity, a missing image) logs why once and leaves new keys to the
cold path, never failing a call. A box start waits for claims to pause
(CLAIM_QUIET_S): a burst of new threads has the host to itself. Pool boxes are
found again after a restart (they are listed from the platform), count against
`max_running` (the oldest is given up when a cold start needs its place) and are
removed at `shutdown`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ..errors import SandboxError
from ..provider import SandboxKey
from .sandbox import BoxSandbox

log = logging.getLogger("sandkit.boxkit")

MAX_POOL_SIZE = 500
# Starting a box takes a core for a few hundred ms (engine, runtime, the agent's start),
# so the refill waits for claims to pause this long: a burst of new threads does not share
# the host with the boxes that replace theirs. Never longer than REFILL_DEFER_MAX_S in all,
# so a steady stream of claims still gets the pool refilled.
CLAIM_QUIET_S = 0.5
REFILL_DEFER_MAX_S = 5.0
POOL_USER = "sandkit-pool"  # the pseudo user of a pool box's record (never a table key)


class WarmPoolOptions(BaseModel):
    """`warm_pool` in a provider's options."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size: int = Field(
        0,
        ge=0,
        le=MAX_POOL_SIZE,
        description="Boxes kept started for new threads (0: no pool, the default).",
    )
    refill_interval_s: float = Field(
        1.0, gt=0, le=60, description="How often the pool is checked and topped up."
    )


class Claim(enum.Enum):
    CLAIMED = "claimed"  # the box and its storage are the key's now
    GONE = "gone"  # another replica claimed or removed it first: try the next one
    TAKEN = "taken"  # the key has data or a box after all: the cold path it is


def pool_key(slot: str) -> SandboxKey:
    return SandboxKey(POOL_USER, slot)


R = TypeVar("R")


@dataclasses.dataclass
class _Entry(Generic[R]):
    slot: str
    record: R
    sandbox: BoxSandbox


class WarmPool(Generic[R]):
    """The ready pool boxes of one provider instance (records of type R).

    `host` is the BoxProvider: its `_pool_slots`, `_pool_open`, `_pool_claim`,
    `_pool_remove` and `_pool_room` do the platform's part.
    """

    def __init__(self, host: Any, options: WarmPoolOptions, name: str) -> None:
        self._host = host
        self.options = options
        self.name = name
        self._lock = threading.Lock()
        self._ready: dict[str, _Entry[R]] = {}
        # Taken out of `_ready` by a claim that has not moved their storage yet: a refill
        # that lists the platform meanwhile must not adopt them back.
        self._claiming: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._trouble: str | None = None  # the last reason the pool could not be filled
        self._last_claim = -CLAIM_QUIET_S  # time.monotonic() of the last claim

    @property
    def size(self) -> int:
        return self.options.size

    def start(self) -> None:
        if self.size <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop refilling (waiting for a box being started, so the shutdown that follows
        sees it) and close every channel; the boxes go with the provider's shutdown."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._lock:
            entries, self._ready = list(self._ready.values()), {}
        for entry in entries:
            entry.sandbox.close()

    def ready_count(self) -> int:
        with self._lock:
            return len(self._ready)

    def claim(self, key: SandboxKey) -> tuple[R, BoxSandbox] | None:
        """A pool box made the key's, or None: the cold path then."""
        while True:
            with self._lock:
                if not self._ready:
                    return None
                slot, entry = next(iter(self._ready.items()))
                del self._ready[slot]
                self._claiming.add(slot)
                self._last_claim = time.monotonic()
            try:
                outcome = self._host._pool_claim(slot, entry.record, key)
            except SandboxError as exc:
                log.warning(
                    "%s: claiming pool box %s failed (%s); trying another", self.name, slot, exc
                )
                outcome = None
            with self._lock:
                self._claiming.discard(slot)
                if outcome is Claim.TAKEN:
                    self._ready[slot] = entry  # still a good pool box
            if outcome is Claim.CLAIMED:
                entry.sandbox.rekey(key)
                return entry.record, entry.sandbox
            if outcome is Claim.TAKEN:
                return None
            entry.sandbox.close()  # GONE (another replica's now) or failed: try another

    def give_up_one(self) -> bool:
        """Remove one pool box to make room for a cold start (True if there was one)."""
        with self._lock:
            if not self._ready:
                return False
            slot, entry = next(iter(self._ready.items()))
            del self._ready[slot]
        entry.sandbox.close()
        try:
            self._host._pool_remove(slot)
        except SandboxError as exc:
            log.warning("%s: removing pool box %s: %s", self.name, slot, exc)
        return True

    def refill(self) -> None:
        """One round: adopt pool boxes the platform has that we do not hold (a restart,
        another replica's), drop those gone, then start new ones up to the size."""
        try:
            present = set(self._host._pool_slots())
        except SandboxError as exc:
            self._note("cannot list pool boxes", exc)
            return
        with self._lock:
            gone = [s for s in self._ready if s not in present]
            stale = [self._ready.pop(s) for s in gone]
            held = set(self._ready) | self._claiming
        for entry in stale:
            entry.sandbox.close()
        for slot in sorted(present - held):
            if self._stop.is_set() or self.ready_count() >= self.size:
                break
            self._open(slot, start=False)
        while not self._stop.is_set() and self.ready_count() < self.size:
            self._wait_for_a_pause_in_claims()
            if self._stop.is_set():
                return
            if not self._host._pool_room():
                self._note("max_running is reached; new threads take the cold path")
                return
            if not self._open(secrets.token_hex(6), start=True):
                return
        self._note(None)

    def _wait_for_a_pause_in_claims(self) -> None:
        give_up = time.monotonic() + REFILL_DEFER_MAX_S
        while not self._stop.is_set():
            now = time.monotonic()
            quiet = self._last_claim + CLAIM_QUIET_S
            if now >= quiet or now >= give_up:
                return
            self._stop.wait(min(quiet, give_up) - now)

    def _open(self, slot: str, start: bool) -> bool:
        try:
            opened = self._host._pool_open(slot, start)
        except SandboxError as exc:
            self._note(f"cannot {'start' if start else 'adopt'} a pool box", exc)
            if start:
                with contextlib.suppress(SandboxError):
                    self._host._pool_remove(slot)
            return False
        if opened is None:  # listed a moment ago, claimed or removed since: nothing to adopt
            log.debug("%s: pool box %s is no longer in the pool", self.name, slot)
            return False
        record, sandbox = opened
        with self._lock:
            if self._stop.is_set():
                sandbox.close()
                return False
            self._ready[slot] = _Entry(slot, record, sandbox)
        return True

    def _note(self, trouble: str | None, cause: Exception | None = None) -> None:
        """Say once when the pool stops being refilled (per kind of trouble: the cause's
        text names a box, which changes every round), and once when it recovers."""
        if trouble == self._trouble:
            return
        if trouble is None:
            log.info("%s: the warm pool is being refilled again", self.name)
        else:
            detail = f": {cause}" if cause is not None else ""
            log.warning("%s: the warm pool is not refilled: %s%s", self.name, trouble, detail)
        self._trouble = trouble

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.refill()
            except Exception:  # keep the pool alive; the cold path works meanwhile
                log.exception("%s: refilling the warm pool failed", self.name)
            self._stop.wait(self.options.refill_interval_s)

    def wait_ready(
        self, count: int, timeout: float, clock: Callable[[], float] = time.monotonic
    ) -> bool:
        """Until `count` boxes are ready (for tests and benchmarks); False at the timeout."""
        deadline = clock() + timeout
        while clock() < deadline:
            if self.ready_count() >= count:
                return True
            self._stop.wait(0.05)
        return self.ready_count() >= count
