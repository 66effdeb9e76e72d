"""Timing helpers shared by the benchmark scripts (run as `python3 bench/NAME.py`)."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any


def timed(fn: Callable[[], Any], n: int, warmup: int = 3, pause_s: float = 0.0) -> list[float]:
    """Seconds per call for `n` calls after `warmup` untimed ones (`pause_s` untimed
    before each)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        if pause_s:
            time.sleep(pause_s)
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50, p95 and p99 (inclusive quantiles) in the samples' unit, max and n."""
    ordered = sorted(samples)
    if len(ordered) < 2:
        one = ordered[0] if ordered else float("nan")
        return {"p50": one, "p95": one, "p99": one, "max": one, "n": len(ordered)}
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "p50": statistics.median(ordered),
        "p95": cuts[94],
        "p99": cuts[98],
        "max": ordered[-1],
        "n": len(ordered),
    }


def ms(value: float) -> str:
    return f"{value * 1000:.2f} ms"


def loadavg() -> list[float]:
    """The host's 1/5/15-minute load average: the machine is shared, say how busy it was."""
    return [round(x, 2) for x in os.getloadavg()]
