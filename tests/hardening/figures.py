"""The figures docs/security.md reports, collected while the hardening tests run.

Tests add counts per provider (`figures.add("docker", "paths_tried", 212)`);
at the end of the session the table is printed and, when
`SANDKIT_HARDENING_FIGURES` names a file, written there as JSON.
"""

from __future__ import annotations

import collections
import json
import os
import threading
from pathlib import Path

# Row order of the table, with the label shown for each metric.
METRICS: dict[str, str] = {
    "paths_tried": "hostile path cases tried",
    "escapes": "escapes (read or write outside the mappings)",
    "leaks": "leaks (host path or secret in output)",
    "inputs_tried": "hostile patterns/commands tried",
    "unbounded": "unbounded (hang, no limit, box unusable after)",
    "faults_survived": "faults survived",
    "files_lost": "files lost or torn",
    "load_ops": "load operations (runs of 50 threads x 200)",
    "load_errors": "load errors",
    "load_p50_ms": "load p50 latency (ms)",
    "load_p95_ms": "load p95 latency (ms)",
    "pool_claims": "load acquires that claimed a warm-pool box",
    "pool_load_p50_ms": "load with a warm pool: p50 latency (ms)",
    "pool_load_p95_ms": "load with a warm pool: p95 latency (ms)",
    "parallel_acquires": "parallel acquires of one key",
    "boxes_created": "boxes those acquires created",
    "boxes_after_shutdown": "boxes left after shutdown",
    "secret_leaks": "secret or credential leaks",
    "net_tried": "network attacks tried (egress, other boxes, control plane)",
    "net_through": "network attacks that got through",
    "host_tried": "box-written paths against host-side code (gateway, chown, ingress, files)",
    "host_through": "host-side code that followed, failed on or leaked a box-written path",
}


class Figures:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[str, float]] = collections.defaultdict(dict)
        self._measured: set[str] = set()  # metrics recorded with set(): merged, not added

    def add(self, provider: str, metric: str, value: float = 1) -> None:
        """Add to a counter (cases tried, escapes, files lost ...)."""
        assert metric in METRICS, f"unknown metric {metric}"
        with self._lock:
            row = self._values[provider]
            row[metric] = row.get(metric, 0) + value

    def set(self, provider: str, metric: str, value: float) -> None:
        """Record a measurement that does not add up (latencies)."""
        assert metric in METRICS, f"unknown metric {metric}"
        with self._lock:
            self._values[provider][metric] = value
            self._measured.add(metric)

    def export(self) -> dict[str, object]:
        """What a pytest-xdist worker hands the controller (JSON-able)."""
        with self._lock:
            return {"values": dict(self._values), "measured": sorted(self._measured)}

    def merge(self, exported: dict[str, object]) -> None:
        """Fold in a worker's figures: counters add up, measurements are taken as they are."""
        measured = set(exported.get("measured") or [])  # type: ignore[call-overload]
        values: dict[str, dict[str, float]] = exported.get("values") or {}  # type: ignore[assignment]
        with self._lock:
            self._measured |= measured
            for provider, row in values.items():
                mine = self._values[provider]
                for metric, value in row.items():
                    add = metric not in measured
                    mine[metric] = mine.get(metric, 0) + value if add else value

    def table(self) -> str:
        providers = sorted(self._values, key=_order)
        if not providers:
            return ""
        lines = ["| figure | " + " | ".join(providers) + " |"]
        lines.append("|---|" + "---|" * len(providers))
        for metric, label in METRICS.items():
            cells = [_fmt(self._values[p].get(metric)) for p in providers]
            if any(cell != "-" for cell in cells):
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def dump(self) -> None:
        target = os.environ.get("SANDKIT_HARDENING_FIGURES")
        if target:
            Path(target).write_text(json.dumps(self._values, indent=2, sort_keys=True) + "\n")


ORDER = ["local", "docker", "kubernetes", "e2b"]


def _order(provider: str) -> tuple[int, str]:
    return (ORDER.index(provider) if provider in ORDER else len(ORDER), provider)


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


FIGURES = Figures()
