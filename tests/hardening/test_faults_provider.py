"""The provider process killed (SIGKILL) while it holds three boxes and rewrites a file,
then a new provider with the same settings: it re-adopts every box, the files are intact,
and its shutdown leaves nothing running.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

from sandkit.provider import SandboxProvider

from .faults_support import fresh_key, note, survived, wait_no_boxes
from .figures import Figures
from .provider_process import (
    WORKSPACE,
    agents_in_box,
    expected_seed,
    lost_files,
    provider_process,
    stray_temp_files,
    version,
)
from .targets import Target


def test_provider_process_killed_and_restarted(
    target: Target, make_provider: Callable[..., SandboxProvider], data_root: Path, figures: Figures
) -> None:
    """SIGKILL a provider process holding three boxes while it rewrites a big file.

    A new provider with the same settings re-adopts every box (none created, none
    duplicated), the files are intact, the big file holds the last version written or
    the next, and its shutdown leaves no box.
    """
    probe = make_provider()
    assert wait_no_boxes(target, probe) == [], "boxes of an earlier test are still there"
    keys = [fresh_key(f"proc{i}") for i in range(3)]
    tags = [f"proc{i}" for i in range(3)]
    big = f"{WORKSPACE}/rewritten.txt"
    spec = {
        "kind": target.kind,
        "data_root": str(data_root),
        "mode": "rewrite",
        "seed": [[k.user_id, k.thread_id, t] for k, t in zip(keys, tags, strict=True)],
        "path": big,
        "tag": "proc",
    }
    with provider_process(spec) as child:
        child.wait_for("WROTE 1")
        time.sleep(random.uniform(0.0, 0.5))
        child.kill()
    last = child.last("WROTE")
    assert last is not None
    n = int(last.split()[1])
    left = len(target.boxes(probe))
    assert left == (0 if target.kind == "local" else len(keys)), "the killed process's boxes"

    provider = make_provider()
    started = time.monotonic()
    boxes = [provider.acquire(k) for k in keys]
    acquire_s = time.monotonic() - started
    after = len(target.boxes(provider))
    assert after == len(keys), f"{after} boxes for {len(keys)} keys after re-adoption"
    lost: list[str] = []
    agents: list[int] = []  # per box: the killed provider's agent must be gone
    for box, tag in zip(boxes, tags, strict=True):
        lost += lost_files(box, expected_seed(tag))
        assert box.execute("echo back").stdout == "back\n"
        assert stray_temp_files(box) == []
        if target.kind != "local":
            agents.append(agents_in_box(box))
    whole = boxes[0].read_bytes(big).decode()
    if whole not in (version("proc", n), version("proc", n + 1)):
        lost.append(big)
    survived(figures, target.kind, len(lost))
    note(
        target.kind,
        "provider process killed",
        versions_written=n,
        boxes_after_kill=left,
        reacquire_3_keys_s=acquire_s,
        files_lost=len(lost),
    )
    assert lost == []
    assert set(agents) <= {1}, f"agents per box after the restart: {agents}"
    provider.shutdown()
    assert wait_no_boxes(target, provider) == []
