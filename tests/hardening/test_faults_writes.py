"""Writes interrupted by a kill leave the old version or the new one, never a torn file
and never a temp file the agent can see; and how the atomic replace makes that so.
"""

from __future__ import annotations

import errno
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sandkit import ErrorCode
from sandkit.provider import SandboxProvider

from .faults_support import error_code, fresh_key, in_background, note, restart_bound_s, survived
from .figures import Figures
from .provider_process import (
    WORKSPACE,
    agents_in_box,
    blob,
    lost_files,
    provider_process,
    seed_files,
    stray_temp_files,
    version,
)
from .targets import Target

ROUNDS = 10  # interrupted writes per provider


def test_interrupted_write_leaves_old_or_new(
    target: Target, make_provider: Callable[..., SandboxProvider], data_root: Path, figures: Figures
) -> None:
    """Kill the writer mid-write, ten times: the file is the old version or the new one.

    Local: the provider process, rewriting an 8 MiB file in a loop, is SIGKILLed at a
    random moment. Remote kinds: the agent in the box is SIGKILLed (from a second
    provider's agent in the same box) at a random moment of a 16 MiB write_bytes.
    Never a torn file, never a temp file left where list_dir or glob show it.
    """
    if target.kind == "local":
        torn, outcomes = _interrupt_local_writer(target, data_root, make_provider)
    else:
        torn, outcomes = _interrupt_agent_writes(target, make_provider)
    survived(figures, target.kind, torn, faults=ROUNDS)
    note(target.kind, "interrupted writes", rounds=ROUNDS, torn=torn, **outcomes)
    assert torn == 0


def _interrupt_local_writer(
    target: Target, data_root: Path, make_provider: Callable[..., SandboxProvider]
) -> tuple[int, dict[str, Any]]:
    """SIGKILL a provider process rewriting a file, ROUNDS times; torn files and outcomes."""
    key = fresh_key("torn")
    path = f"{WORKSPACE}/big.txt"
    provider = make_provider()
    box = provider.acquire(key)
    expected = seed_files(box, "before")
    torn = 0
    strays = 0
    for i in range(ROUNDS):
        tag = f"round{i}"
        spec = {
            "kind": target.kind,
            "data_root": str(data_root),
            "mode": "rewrite",
            "key": [key.user_id, key.thread_id],
            "path": path,
            "tag": tag,
        }
        with provider_process(spec) as child:
            child.wait_for("WROTE 1")
            time.sleep(random.uniform(0.0, 0.4))
            child.kill()
        last = child.last("WROTE")
        assert last is not None
        n = int(last.split()[1])
        if box.read_bytes(path).decode() not in (version(tag, n), version(tag, n + 1)):
            torn += 1
        strays += len(stray_temp_files(box))
    torn += len(lost_files(box, expected))
    assert strays == 0, f"{strays} temp files visible after {ROUNDS} killed writers"
    return torn, {"strays": strays}


def _interrupt_agent_writes(
    target: Target, make_provider: Callable[..., SandboxProvider]
) -> tuple[int, dict[str, Any]]:
    """SIGKILL the agent serving a write_bytes, ROUNDS times; torn files and outcomes."""
    key = fresh_key("torn")
    path = f"{WORKSPACE}/big.bin"
    size = 16 * 1024 * 1024
    box = make_provider().acquire(key)
    killer = make_provider().acquire(key)  # the same box, its own agent
    expected = seed_files(box, "before")
    current = blob("v0", size)
    started = time.monotonic()
    box.write_bytes(path, current)
    write_s = time.monotonic() - started
    torn = strays = failed = kept_old = 0
    slowest_s = 0.0
    for i in range(1, ROUNDS + 1):
        pid = box.info()["pid"]
        new = blob(f"v{i}", size)
        if i == 1:
            # The worst case first: the agent is frozen, so the write piles up unread on
            # its way in, then killed with it there (Kubernetes' exec stream never ended
            # in that state; the write waited out its 120 s deadline). If the write has
            # not left this process within the second, it meets a dead agent instead:
            # the outcome rules below hold for both.
            assert killer.execute(f"kill -STOP {pid}").exit_code == 0
            writer, outcome = in_background(lambda new=new: box.write_bytes(path, new))
            time.sleep(1.0)
            shot = killer.execute(f"kill -9 {pid}")
        else:
            delay = random.uniform(0.0, write_s)
            writer, outcome = in_background(lambda new=new: box.write_bytes(path, new))
            shot = killer.execute(f"sleep {delay:.3f}; kill -9 {pid}", timeout=60)
        killed = time.monotonic()
        assert shot.exit_code in (0, 1), shot  # 1: the write and its agent ended first
        writer.join(restart_bound_s())
        assert not writer.is_alive(), f"round {i}: the write still hangs after the kill"
        slowest_s = max(slowest_s, outcome["ended"] - killed)
        code = error_code(outcome)
        assert code in (None, ErrorCode.UNAVAILABLE), outcome
        failed += code is not None
        content = box.read_bytes(path)  # a fresh agent answers
        if content not in (current, new):
            torn += 1
        kept_old += content == current
        current = content
        strays += len(stray_temp_files(box))
    torn += len(lost_files(box, expected))
    assert strays == 0, f"{strays} temp files visible after {ROUNDS} killed agents"
    assert agents_in_box(box) == 2, "the killed agents are gone; the two live ones remain"
    return torn, {
        "writes_failed": failed,
        "old_kept": kept_old,
        "strays": strays,
        "slowest_answer_after_kill_s": round(slowest_s, 2),
    }


# -- the atomic write itself ----------------------------------------------------------------


@pytest.mark.parametrize("unnamed", [True, False], ids=["o_tmpfile", "named_temp"])
def test_atomic_replace_names_nothing_until_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unnamed: bool
) -> None:
    """What a killed writer can leave: with O_TMPFILE the data is written under no name at
    all (nothing to leave behind); without it (macOS, some file systems) under the temp
    name, which a failure that Python sees still removes."""
    from sandkit.runtime import safefs

    if not unnamed:
        monkeypatch.delattr(os, "O_TMPFILE", raising=False)
    (tmp_path / "f.txt").write_bytes(b"old")
    seen: list[list[str]] = []
    real_write_all = safefs.write_all

    def watching(fd: int, data: bytes) -> None:
        seen.append(sorted(os.listdir(tmp_path)))
        real_write_all(fd, data)

    monkeypatch.setattr(safefs, "write_all", watching)
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        safefs.atomic_replace(dir_fd, "f.txt", b"new", None)
        assert (tmp_path / "f.txt").read_bytes() == b"new"
        monkeypatch.setattr(safefs, "write_all", _no_space)
        with pytest.raises(OSError):
            safefs.atomic_replace(dir_fd, "f.txt", b"newer", None)
    finally:
        os.close(dir_fd)
    assert os.listdir(tmp_path) == ["f.txt"]
    assert (tmp_path / "f.txt").read_bytes() == b"new"
    if unnamed and hasattr(os, "O_TMPFILE"):
        assert seen == [["f.txt"]], "the data was written under a visible name"
    else:
        assert len(seen) == 1 and len(seen[0]) == 2  # f.txt and the temp name


def _no_space(fd: int, data: bytes) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")
