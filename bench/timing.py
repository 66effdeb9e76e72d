"""Timing helpers shared by the benchmark scripts (run as `python3 bench/NAME.py`)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def timed(fn: Callable[[], Any], n: int, warmup: int = 3) -> list[float]:
    """Seconds per call for `n` calls after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50 and p95 (inclusive quantiles) in the samples' unit, and n."""
    ordered = sorted(samples)
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {"p50": statistics.median(ordered), "p95": cuts[94], "n": len(ordered)}


def ms(value: float) -> str:
    return f"{value * 1000:.2f} ms"
