"""The background-process table on its own: the hostile calls that must answer, not hang.

The same `ProcessTable` runs in the local provider and in every box's supervisor, so
what these check holds everywhere; tests/hardening/test_processes_hostile.py attacks the
same calls through every provider.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandkit.runtime import processes
from sandkit.runtime.context import Context
from sandkit.runtime.errors import ErrorCode, SandboxError
from sandkit.runtime.limits import MIB, Limits
from sandkit.runtime.pathmap import WORKSPACE, Mount, PathMapping

STALL_S = 0.5  # the stall bound in these tests (the default is seconds)
ANSWER_S = 30.0  # only a hang reaches it


@pytest.fixture()
def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[processes.ProcessTable]:
    monkeypatch.setattr(processes, "STDIN_STALL_S", STALL_S, raising=False)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    ctx = Context(
        mapping=PathMapping([Mount(WORKSPACE, str(workspace))]),
        limits=Limits(process_output_bytes=2 * MIB, exec_output_bytes=2 * MIB),
        execute_enabled=True,
    )
    made = processes.ProcessTable(ctx)
    yield made
    made.end_all()


def in_thread(call: Any) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except SandboxError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_stdin_of_a_process_that_never_reads_times_out(table: processes.ProcessTable) -> None:
    deaf = table.spawn("exec sleep 600", None, None)
    thread, outcome = in_thread(lambda: table.write_stdin(deaf["handle"], "x" * MIB, False))
    thread.join(ANSWER_S)
    hung = thread.is_alive()
    table.signal(deaf["handle"], "KILL")  # lets a hung write end, so the test can report
    thread.join(ANSWER_S)
    assert not hung, "write_stdin to a process that never reads hangs"
    error = outcome["error"]
    assert error.code is ErrorCode.TIMEOUT, error
    assert f"of {MIB} bytes were written" in error.message, error.message
    assert table.list()["processes"]  # the table's other calls were not held meanwhile


def test_a_big_write_to_a_reader_arrives_whole_and_writers_do_not_interleave(
    table: processes.ProcessTable,
) -> None:
    reader = table.spawn("cat", None, None)
    size = 300 * 1024  # several pipe buffers each
    writers = [
        in_thread(lambda c=c: table.write_stdin(reader["handle"], c * size, False)) for c in "ab"
    ]
    for thread, outcome in writers:
        thread.join(ANSWER_S)
        assert "result" in outcome, outcome
    table.write_stdin(reader["handle"], "", True)
    assert table.wait(reader["handle"], ANSWER_S)["exit_code"] == 0
    text, offset = "", 0
    while True:
        page = table.output(reader["handle"], offset, 0)
        if page["offset"] == offset:
            break
        text += "".join(chunk["text"] for chunk in page["chunks"])
        offset = page["offset"]
    assert text in ("a" * size + "b" * size, "b" * size + "a" * size), len(text)


def test_an_offset_past_the_end_is_invalid(table: processes.ProcessTable) -> None:
    info = table.spawn("echo 0123456789", None, None)
    assert table.wait(info["handle"], ANSWER_S)["exit_code"] == 0
    assert table.output(info["handle"], 11, 0)["chunks"] == []  # the end itself is valid
    with pytest.raises(SandboxError) as caught:
        table.output(info["handle"], 12, 0)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT and "since" in caught.value.message


def test_no_thread_left_for_a_follower_is_capacity_and_starts_nothing(
    table: processes.ProcessTable, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A box full of processes (a fork bomb) may leave no room for the thread that follows
    a new one: the spawn then fails cleanly, before anything starts, and end_all answers
    (a process started without its follower would stay "running" and hold end_all)."""
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if thread.name.startswith("sandkit-proc-"):
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    marker = tmp_path / "workspace" / "ran"
    with pytest.raises(SandboxError) as info:
        table.spawn(f"touch {marker}", None, None)
    assert info.value.code == ErrorCode.CAPACITY
    assert table.list() == {"processes": []}
    monkeypatch.setattr(threading.Thread, "start", real_start)
    thread, outcome = in_thread(table.end_all)
    thread.join(ANSWER_S)
    assert outcome == {"result": {"processes": []}}
    assert not marker.exists()
