"""The box killed mid-operation: a long command, a big write and a slow grep, each cut by
the box dying under it (a crashed container, an evicted pod, a sandbox the service
kills). Local has no box: there the process running the provider dies instead (the same
fault as the user sees it).

What a user can rely on: the call in flight fails with UNAVAILABLE within
ERROR_BOUND_S of the box's death, or (only a write can) it completed before the box
died, and then its file is there, complete. Either way the next `acquire` brings the box
back (restarted or recreated) with every file; nothing is torn or lost.

"Before the box died" is measured from its death, which `Target.kill_box` waits for,
not from the kill request: a pod deleted with grace 0 is gone from the API at once but
runs until the kubelet stops it, a second or more later on a loaded node, and a write
may well complete in between.

What "written before" means on E2B: a sandbox's files live in the sandbox, and the
host copy is refreshed only when the provider kills it (docs/providers/e2b.md). A
sandbox the *service* kills loses what was written since the last sync back, by
design; so the E2B test syncs (release with `release: kill`) before it starts killing,
checks everything written up to then, and a write completed before a kill may be lost.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandkit import ErrorCode, SandboxError
from sandkit.provider import SandboxProvider
from sandkit.sandbox import Sandbox

from .faults_support import (
    ERROR_BOUND_S,
    error_code,
    fresh_key,
    in_background,
    note,
    settle,
    survived,
)
from .figures import Figures
from .provider_process import (
    SLOW_GREP,
    SLOW_LINE,
    WORKSPACE,
    agents_in_box,
    blob,
    lost_files,
    provider_process,
    seed_files,
    stray_temp_files,
)
from .targets import LIMITS, Target

OPS = ("execute", "write", "grep")
BIG = f"{WORKSPACE}/big.bin"
WRITE_BYTES = 32 * 1024 * 1024  # the "big write" killed mid-way
# The command and the slow grep must still run when the box dies, however long its
# death takes: their own limits are far past the kill's and the error's bounds.
LONG_S = 600.0
SLOW_LIMITS = LIMITS.model_copy(update={"search_timeout_s": LONG_S / 2})
STARTED_WAIT_S = 60.0  # for a started command to show it runs


def start_op(box: Sandbox, op: str, marker: str) -> tuple[threading.Thread, dict[str, Any]]:
    """Start `op` in a thread; the command writes its pid to `marker` once it runs."""
    if op == "execute":
        command = f"echo $$ > {marker}; exec sleep {LONG_S:.0f}"
        return in_background(lambda: box.execute(command, timeout=LONG_S + 60))
    if op == "write":
        return in_background(lambda: box.write_bytes(BIG, blob("new", WRITE_BYTES)))
    return in_background(lambda: box.grep(SLOW_GREP, f"{WORKSPACE}/slow/line.txt"))


def wait_written(box: Sandbox, path: str, wait_s: float = STARTED_WAIT_S) -> str:
    """The content of `path` once it has some: a started command's sign that it runs."""
    deadline = time.monotonic() + wait_s
    while True:
        with contextlib.suppress(SandboxError):  # NOT_FOUND until the command made it
            text = box.read_file(path).content.strip()
            if text:
                return text
        assert time.monotonic() < deadline, f"no {path} {wait_s:.0f} s after the call started"
        time.sleep(0.05)


def check_after(box: Sandbox, expected: dict[str, bytes], big: set[bytes]) -> tuple[int, bytes]:
    """Files lost or torn (the big file must hold one of `big`), and the big file's bytes.

    Stray temp files fail.
    """
    lost = lost_files(box, expected)
    content = box.read_bytes(BIG)
    if content not in big:
        lost.append(BIG)
    assert stray_temp_files(box) == []
    return len(lost), content


def test_box_killed_mid_operation(
    target: Target, make_provider: Callable[..., SandboxProvider], data_root: Path, figures: Figures
) -> None:
    """A long command, a big write and a slow grep, each cut by the box dying under it."""
    if not target.can_kill_box:
        _local_provider_killed_mid_operation(target, make_provider, data_root, figures)
        return
    # E2B: release syncs the sandbox's files to the host copy (see the module doc).
    provider = make_provider(
        limits=SLOW_LIMITS, options={"release": "kill"} if target.kind == "e2b" else None
    )
    key = fresh_key("killed")
    box = provider.acquire(key)
    expected = seed_files(box, "before")
    box.write_file(f"{WORKSPACE}/slow/line.txt", SLOW_LINE)
    old, new = blob("old", WRITE_BYTES), blob("new", WRITE_BYTES)
    started = time.monotonic()
    box.write_bytes(BIG, old)
    write_s = time.monotonic() - started
    if target.kind == "e2b":
        provider.release(key)
        box = provider.acquire(key)
    big = {old}  # what the big file may hold: narrowed to what it holds after each round
    lost_total = 0
    for op in OPS:
        thread, outcome = start_op(box, op, f"{WORKSPACE}/command.pid")
        if op == "execute":
            wait_written(box, f"{WORKSPACE}/command.pid")  # the command runs in the box
        else:  # a write lands anywhere in its course; the grep runs until the box dies
            time.sleep(write_s / 2 if op == "write" else 0.5)
        assert thread.is_alive() or op == "write", f"{op} ended before the kill: {outcome}"
        requested = time.monotonic()
        died = target.kill_box(key)
        thread.join(ERROR_BOUND_S)
        assert not thread.is_alive(), f"{op}: still hanging {ERROR_BOUND_S}s after the box died"
        code = error_code(outcome)
        if code is None:
            # Only a write can complete before the box dies, and then it happened.
            assert op == "write", f"{op} returned although its box died: {outcome}"
            assert outcome["result"].bytes_written == WRITE_BYTES, outcome
            big = {new} if target.kind != "e2b" else {old, new}  # E2B: lost by design
        else:
            assert code is ErrorCode.UNAVAILABLE, outcome
            if op == "write":  # the box may have died between the rename and the answer
                big = {old, new}
        # The held handle until acquire: UNAVAILABLE or working, never another answer.
        try:
            box.read_bytes(f"{WORKSPACE}/before/notes.txt")
        except SandboxError as exc:
            assert exc.code is ErrorCode.UNAVAILABLE, exc
        started = time.monotonic()
        box = provider.acquire(key)
        acquire_s = time.monotonic() - started
        assert box.execute("echo back").stdout == "back\n"
        lost, content = check_after(box, expected, big)
        big = {content}
        assert agents_in_box(box) == 1
        lost_total += lost
        survived(figures, target.kind, lost)
        note(
            target.kind,
            f"box killed during {op}",
            code=code,
            death_after_kill_s=died - requested,
            answer_after_death_s=outcome["ended"] - died,
            reacquire_s=acquire_s,
            files_lost=lost,
        )
    assert lost_total == 0
    assert settle(target, provider, 1) == 1, "one box for the key after three kills"


def _local_provider_killed_mid_operation(
    target: Target, make_provider: Callable[..., SandboxProvider], data_root: Path, figures: Figures
) -> None:
    """The provider process dies during each operation; a new one finds every file."""
    provider = make_provider()
    key = fresh_key("killed")
    box = provider.acquire(key)
    expected = seed_files(box, "before")
    box.write_file(f"{WORKSPACE}/slow/line.txt", SLOW_LINE)
    old = blob("old", WRITE_BYTES)
    box.write_bytes(BIG, old)
    pid_file = f"{WORKSPACE}/command.pid"
    paths = {"execute": pid_file, "write": BIG, "grep": f"{WORKSPACE}/slow/line.txt"}
    lost_total = 0
    for op in OPS:
        spec = {
            "kind": target.kind,
            "data_root": str(data_root),
            "mode": "busy",
            "op": op,
            "path": paths[op],
            "key": [key.user_id, key.thread_id],
            "limits": {"search_timeout_s": SLOW_LIMITS.search_timeout_s},
        }
        with provider_process(spec) as child:
            child.wait_for("STARTED")
            if op == "execute":
                wait_written(box, pid_file)  # the command runs: kill its provider now
            else:
                time.sleep(0.5 if op != "write" else random.uniform(0.0, 0.3))
            child.kill()
        if op != "write":
            assert child.last("DONE") is None, f"{op} ended before the kill"
        orphan = _stop_orphan(box, pid_file) if op == "execute" else None
        started = time.monotonic()
        box = provider.acquire(key)
        assert box.execute("echo back").stdout == "back\n"
        lost, _ = check_after(box, expected, {old, blob("busy-new", 48 * 1024 * 1024)})
        lost_total += lost
        survived(figures, target.kind, lost)
        note(
            target.kind,
            f"provider process killed during {op}",
            reacquire_s=time.monotonic() - started,
            files_lost=lost,
            **({"command_outlived_provider": orphan} if orphan is not None else {}),
        )
    assert lost_total == 0


def _stop_orphan(box: Sandbox, pid_file: str) -> bool:
    """The command a killed local provider started keeps running: report and end it."""
    pid = int(box.read_file(pid_file).content.strip())
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    if b"sleep" not in cmdline:  # pid reused: not ours
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return True
