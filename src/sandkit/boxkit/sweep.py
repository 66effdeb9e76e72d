"""Work on many boxes that must finish past a failure on one (shutdown, destroy, reaping).

A platform under load refuses now and then ("did not receive an exit event",
a 409 while another request removes the same box, a timeout): each failure
is retried after a pause, the others go on meanwhile, and what still fails
is reported at the end instead of silently left running.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ..errors import ErrorCode, SandboxError

log = logging.getLogger("sandkit.boxkit")

T = TypeVar("T")

ATTEMPTS = 3
BACKOFF_S = 0.5
WORKERS = 8


def with_retries(act: Callable[[], None], what: str, attempts: int = ATTEMPTS) -> None:
    """Run `act`, again after a pause when it fails; the last failure propagates."""
    for attempt in range(1, attempts + 1):
        try:
            act()
            return
        except Exception as exc:
            if attempt == attempts:
                raise
            log.info("%s failed (attempt %d of %d), retrying: %s", what, attempt, attempts, exc)
            time.sleep(BACKOFF_S * attempt)


def sweep(
    items: Iterable[T],
    act: Callable[[T], None],
    describe: Callable[[T], str],
    workers: int = WORKERS,
) -> list[str]:
    """`act` on every item, `workers` at a time, each retried; what still failed, described."""

    def one(item: T) -> str | None:
        what = describe(item)
        try:
            with_retries(lambda: act(item), what)
        except Exception as exc:
            log.warning("%s failed: %s", what, exc)
            return f"{what}: {exc}"[:500]
        return None

    with ThreadPoolExecutor(max(1, workers), thread_name_prefix="sandkit-sweep") as pool:
        return [failure for failure in pool.map(one, list(items)) if failure is not None]


def failed(doing: str, failures: list[str]) -> SandboxError:
    """One error that names everything that could not be done (the first few in full)."""
    shown = "; ".join(failures[:5]) + ("; ..." if len(failures) > 5 else "")
    return SandboxError(ErrorCode.UNAVAILABLE, f"{doing}: {len(failures)} failed: {shown}")
