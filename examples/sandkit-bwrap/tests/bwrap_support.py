"""Whether this host can run bwrap boxes, and what of theirs is running.

Without bwrap (or root, or a cgroup of their own) the tests skip with the
reason; under CI=true the same situation fails, so a broken CI set-up cannot
pass by skipping everything.
"""

from __future__ import annotations

import functools
import os
import uuid
from pathlib import Path
from typing import Any, NoReturn

import pytest
from sandkit_bwrap import probe

# Every box of this test session has this owner (it names their state dirs and cgroups).
TEST_OWNER = f"sandkit-test-{uuid.uuid4().hex[:10]}"


def bwrap_options(**overrides: Any) -> dict[str, Any]:
    """Provider options for tests: this session's owner, no background reaper."""
    return {"owner": TEST_OWNER, "reap_interval_s": 0, **overrides}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def unavailable(reason: str) -> NoReturn:
    """Skip the test, or fail it under CI=true where nothing may skip."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: bwrap tests must run, not skip)", pytrace=False)
    pytest.skip(reason)


@functools.cache
def _reason() -> str | None:
    return probe()


def require_bwrap() -> None:
    """Boxes can run here (bwrap, nsenter, setpriv, root, cgroups), or skip/fail saying why."""
    reason = _reason()
    if reason is not None:
        unavailable(f"bwrap boxes cannot run here: {reason} (Debian: apt-get install bubblewrap)")


def live_processes(owner: str) -> list[int]:
    """Live (not zombie) host processes in a cgroup of one of `owner`'s boxes."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cgroups = Path(f"/proc/{entry}/cgroup").read_text()
            state = Path(f"/proc/{entry}/stat").read_bytes().rpartition(b")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if f"/bwrap-{owner}-sk-" in cgroups and state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")
