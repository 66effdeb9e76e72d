"""What the fault modules share: keys, background calls, the figures and box counts.

After each fault a user sees one clear `SandboxError` (UNAVAILABLE for a lost box or
engine, TOO_LARGE for a full disk), the next call or the next `acquire` works, and every
file written before the fault is byte-for-byte intact: each test writes a known set of
files first (`provider_process.seed_files`) and checks all of them at the end. Figures:
one `faults_survived` per fault injected, `files_lost` (0 recorded too).

Bounds here are measured from the moment a fault has really happened (a box seen dead,
`Target.kill_box`), never from when it was requested.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from sandkit import ErrorCode, SandboxError, SandboxKey
from sandkit.provider import SandboxProvider

from .figures import Figures
from .targets import Target

ERROR_BOUND_S = 30.0  # a lost box must be an error within this, never a hang
GONE_WAIT_S = 60.0  # a Terminating pod may take this long to disappear after shutdown


def restart_bound_s() -> float:
    """How long a request that met a killed agent before it was sent may take: it starts
    a new agent instead, and that start may stall on a loaded Kubernetes node (an exec that
    never says hello: seen in CI) until the provider's agent handshake times out."""
    from sandkit_kubernetes.provider import HANDSHAKE_TIMEOUT_S

    return HANDSHAKE_TIMEOUT_S + ERROR_BOUND_S


def fresh_key(name: str) -> SandboxKey:
    return SandboxKey("faults", f"{name}-{uuid.uuid4().hex[:8]}")


def note(kind: str, fault: str, **values: Any) -> None:
    """Timings and outcomes for the report (visible with -s)."""
    shown = " ".join(
        f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items()
    )
    print(f"\n[faults] {kind} {fault}: {shown}")


def survived(figures: Figures, kind: str, lost: int, faults: int = 1) -> None:
    figures.add(kind, "files_lost", lost)
    if not lost:
        figures.add(kind, "faults_survived", faults)


def in_background(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run `call` in a thread; the dict gets `result` or `error` and `ended` (monotonic)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as exc:  # handed to the test
            outcome["error"] = exc
        outcome["ended"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def error_code(outcome: dict[str, Any]) -> ErrorCode | None:
    """The code of the SandboxError the call raised; None if it returned."""
    error = outcome.get("error")
    if error is None:
        return None
    assert isinstance(error, SandboxError), f"not a SandboxError: {error!r}"
    return error.code


def wait_no_boxes(target: Target, provider: SandboxProvider) -> list[str]:
    """Our boxes still there after shutdown, waiting out Terminating pods (bounded)."""
    deadline = time.monotonic() + GONE_WAIT_S
    while (left := target.boxes(provider)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def settle(target: Target, provider: SandboxProvider, want: int) -> int:
    """How many boxes there are once killed ones are gone (Terminating pods), bounded."""
    deadline = time.monotonic() + GONE_WAIT_S
    while (count := len(target.boxes(provider))) != want and time.monotonic() < deadline:
        time.sleep(0.5)
    return count
