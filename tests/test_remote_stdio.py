"""RemoteSandbox over the stdio carrier: real `agent.pyz --stdio` child processes.

Each remote result is compared with the in-process Runtime on an identical
tree, so "same inputs, same outputs, same errors" is checked directly.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandkit import ErrorCode, SandboxError
from sandkit.boxkit import ByteStream
from sandkit.local import LocalSandbox
from sandkit.remote import RemoteSandbox
from sandkit.runtime.limits import MIB, Limits
from sandkit.transports.local_process import SubprocessStream, agent_command
from sandkit.transports.stdio import StdioTransport

from .remote_support import (
    SECRET,
    CountingOpener,
    comparable,
    config_of,
    local_sandbox,
    make_context,
    make_mapping,
    stdio_sandbox,
)

W = "/mnt/user-data/workspace"


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[LocalSandbox, RemoteSandbox, CountingOpener]]:
    """An in-process sandbox and a remote one on two identical, separate trees."""
    local = local_sandbox(make_context(make_mapping(tmp_path / "local")))
    remote, opener = stdio_sandbox(make_context(make_mapping(tmp_path / "remote")))
    try:
        yield local, remote, opener
    finally:
        remote.close()
        opener.kill_all()


@pytest.fixture
def remote(
    pair: tuple[LocalSandbox, RemoteSandbox, CountingOpener],
) -> RemoteSandbox:
    return pair[1]


def both(pair: tuple[LocalSandbox, RemoteSandbox, Any], call: Callable[[Any], Any]) -> Any:
    """Run `call` on both sandboxes; assert equal results or equal errors."""
    local, remote, _ = pair
    outcomes = []
    for sandbox in (local, remote):
        try:
            outcomes.append(("ok", comparable(call(sandbox))))
        except SandboxError as exc:
            outcomes.append(("error", (exc.code, exc.message)))
    assert outcomes[0] == outcomes[1]
    return outcomes[1][1]


TEXT = "héllo wörld\nline two\r\nthird \u2028 line\n" + "".join(f"row {i}\n" for i in range(50))


def test_every_operation_matches_the_in_process_runtime(pair: Any) -> None:
    both(pair, lambda s: s.write_file("dir/a.txt", TEXT))
    both(pair, lambda s: s.write_file("dir/a.txt", "appended\n", append=True))
    both(pair, lambda s: s.write_file(f"{W}/dir/sub/b.py", "def f():\n    return 42\n"))
    both(pair, lambda s: s.read_file("dir/a.txt"))
    both(pair, lambda s: s.read_file("dir/a.txt", start_line=3, end_line=9))
    both(pair, lambda s: s.edit_file("dir/a.txt", "line two", "LINE 2"))
    both(pair, lambda s: s.edit_file("dir/a.txt", "row", "ROW", replace_all=True))
    both(pair, lambda s: s.read_file(f"{W}/dir/a.txt", start_line=1, end_line=4))
    blob = bytes(range(256)) * 16
    both(pair, lambda s: s.write_bytes("bin/blob", blob))
    assert both(pair, lambda s: s.read_bytes("bin/blob")) == blob
    both(pair, lambda s: s.list_dir(W, max_depth=3))
    both(pair, lambda s: s.list_dir("dir", max_depth=1))
    result = both(pair, lambda s: s.execute(f"echo out; echo err >&2; pwd; echo {SECRET}"))
    assert result["stdout"] == f"out\n{W}\n[REDACTED]\n"
    both(pair, lambda s: s.execute("exit 3"))
    both(pair, lambda s: s.execute("ls -1", cwd=f"{W}/dir"))
    both(pair, lambda s: s.execute('echo "$FOO"', env={"FOO": "bar"}))


def test_search_operations_match_the_in_process_runtime(pair: Any) -> None:
    for sandbox in pair[:2]:
        sandbox.write_file("src/a.py", "import os\nprint('Hello')\n")
        sandbox.write_file("src/pkg/b.py", "hello = 1\nHELLO = 2\n")
        sandbox.write_file("docs/readme.md", "hello docs\n")
    both(pair, lambda s: s.glob("**/*.py"))
    both(pair, lambda s: s.glob("src/*", include_dirs=True))
    both(pair, lambda s: s.glob("*.md", path=f"{W}/docs", max_results=1))
    both(pair, lambda s: s.grep("hello"))
    both(pair, lambda s: s.grep("hello", case_sensitive=True, glob="*.py"))
    both(pair, lambda s: s.grep("hel+o", output_mode="files_with_matches"))
    both(pair, lambda s: s.grep("o", output_mode="count", path=f"{W}/src"))
    both(pair, lambda s: s.grep("print", before=1, after=1))
    both(pair, lambda s: s.grep("(", literal=True))
    both(pair, lambda s: s.grep("(unclosed"))


@pytest.mark.parametrize(
    "call, code",
    [
        (lambda s: s.read_file("missing.txt"), ErrorCode.NOT_FOUND),
        (lambda s: s.read_file(W), ErrorCode.IS_A_DIRECTORY),
        (lambda s: s.read_file("/etc/passwd"), ErrorCode.ACCESS_DENIED),
        (lambda s: s.read_file("../../../etc/passwd"), ErrorCode.ACCESS_DENIED),
        (lambda s: s.write_file("/mnt/user-data/uploads/x", "x"), ErrorCode.READ_ONLY),
        (lambda s: s.read_file("a.txt", start_line=0), ErrorCode.INVALID_ARGUMENT),
        (lambda s: s.read_file(123), ErrorCode.INVALID_ARGUMENT),
        (lambda s: s.call("read_file", {"path": "a", "bogus": 1}), ErrorCode.INVALID_ARGUMENT),
        (lambda s: s.call("no_such_op", {}), ErrorCode.INVALID_ARGUMENT),
        (lambda s: s.write_bytes("x.bin", "not bytes"), ErrorCode.INVALID_ARGUMENT),
        (lambda s: s.list_dir("nowhere"), ErrorCode.NOT_FOUND),
        (lambda s: s.edit_file("nofile", "a", "b"), ErrorCode.NOT_FOUND),
        (lambda s: s.execute("true", timeout=-1), ErrorCode.INVALID_ARGUMENT),
        (lambda s: s.execute("true", cwd="/etc"), ErrorCode.ACCESS_DENIED),
        (lambda s: s.grep("a", output_mode="lines"), ErrorCode.INVALID_ARGUMENT),
    ],
)
def test_errors_carry_the_same_code_and_message(
    pair: Any, call: Callable[[Any], Any], code: ErrorCode
) -> None:
    outcome = both(pair, call)
    assert outcome[0] is code, outcome


def test_an_edit_that_matches_twice_fails_the_same_way(pair: Any) -> None:
    for sandbox in pair[:2]:
        sandbox.write_file("e.txt", "x x\n")
    both(pair, lambda s: s.edit_file("e.txt", "x", "y"))
    both(pair, lambda s: s.edit_file("e.txt", "zzz", "y"))


def test_execute_disabled_is_the_same_error(tmp_path: Path) -> None:
    context = make_context(make_mapping(tmp_path), execute_enabled=False)
    remote, _ = stdio_sandbox(context)
    try:
        with pytest.raises(SandboxError) as info:
            remote.execute("true")
        assert info.value.code is ErrorCode.EXECUTE_DISABLED
        assert remote.info()["execute_enabled"] is False
    finally:
        remote.close()


def test_async_operations_match_the_sync_ones(remote: RemoteSandbox) -> None:
    async def scenario() -> None:
        await remote.awrite_file("async.txt", "one\ntwo\n")
        read = await remote.aread_file("async.txt")
        assert read == remote.read_file("async.txt")
        assert (await remote.aedit_file("async.txt", "two", "2")).replacements == 1
        await remote.awrite_bytes("async.bin", b"\x00\x01")
        assert await remote.aread_bytes("async.bin") == b"\x00\x01"
        assert (await remote.alist_dir()).entries == remote.list_dir().entries
        assert (await remote.aexecute("echo hi")).stdout == "hi\n"
        with pytest.raises(SandboxError) as info:
            await remote.aread_file("missing")
        assert info.value.code is ErrorCode.NOT_FOUND

    asyncio.run(scenario())


# -- one channel, many callers -----------------------------------------------------


def test_fifty_threads_share_one_channel(pair: Any) -> None:
    _, remote, opener = pair
    for i in range(50):
        remote.write_file(f"t/{i}.txt", f"file {i}\n")
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            results[i] = remote.read_file(f"t/{i}.txt").content
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    assert results == {i: f"file {i}\n" for i in range(50)}
    assert opener.opens == 1


def test_fifty_coroutines_share_one_channel(pair: Any) -> None:
    _, remote, opener = pair

    async def scenario() -> list[Any]:
        writes = [remote.awrite_file(f"c/{i}.txt", f"coroutine {i}\n") for i in range(50)]
        await asyncio.gather(*writes)
        return await asyncio.gather(*(remote.aread_file(f"c/{i}.txt") for i in range(50)))

    results = asyncio.run(scenario())
    assert [r.content for r in results] == [f"coroutine {i}\n" for i in range(50)]
    assert opener.opens == 1


def test_answers_come_back_as_they_finish_not_in_order(pair: Any) -> None:
    _, remote, opener = pair
    remote.write_file("quick.txt", "quick\n")
    finished: dict[str, float] = {}

    def slow() -> None:
        remote.execute("sleep 1.5")
        finished["slow"] = time.monotonic()

    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(0.2)
    for _ in range(20):
        assert remote.read_file("quick.txt").content == "quick\n"
    finished["reads"] = time.monotonic()
    thread.join(30)
    assert finished["reads"] < finished["slow"]
    assert opener.opens == 1


# -- big payloads ------------------------------------------------------------------


def test_eight_mib_each_way(pair: Any, tmp_path: Path) -> None:
    _, remote, _ = pair
    data = os.urandom(8 * MIB)
    assert remote.write_bytes("big.bin", data).bytes_written == len(data)
    assert (tmp_path / "remote" / "workspace" / "big.bin").read_bytes() == data
    assert remote.read_bytes("big.bin") == data

    async def scenario() -> bytes:
        await remote.awrite_bytes("big2.bin", data[::-1])
        return await remote.aread_bytes("big2.bin")

    assert asyncio.run(scenario()) == data[::-1]


def test_a_request_over_the_frame_limit_is_too_large_and_the_channel_lives(
    tmp_path: Path,
) -> None:
    limits = Limits(transfer_max_bytes=1 * MIB, write_max_bytes=64 * 1024)
    remote, opener = stdio_sandbox(make_context(make_mapping(tmp_path), limits))
    try:
        with pytest.raises(SandboxError) as info:
            remote.write_bytes("x.bin", b"\0" * (1 * MIB + 1))  # the runtime's cap
        assert info.value.code is ErrorCode.TOO_LARGE
        with pytest.raises(SandboxError) as info:
            remote.write_bytes("x.bin", b"\0" * (3 * MIB))  # over the frame limit
        assert info.value.code is ErrorCode.TOO_LARGE
        assert remote.write_bytes("x.bin", b"ok").bytes_written == 2
        assert opener.opens == 1
    finally:
        remote.close()


# -- channel failures ------------------------------------------------------------------


def test_a_killed_agent_is_replaced_on_the_next_call(pair: Any) -> None:
    _, remote, opener = pair
    remote.write_file("k.txt", "still here\n")
    first_pid = remote.info()["pid"]
    opener.current.process.kill()
    opener.current.process.wait()
    assert remote.read_file("k.txt").content == "still here\n"
    assert remote.info()["pid"] != first_pid
    assert opener.opens == 2
    # Writes work on the new channel too.
    assert remote.write_file("k2.txt", "new\n").created


def test_an_opener_that_fails_means_unavailable(tmp_path: Path) -> None:
    def broken() -> ByteStream:
        raise OSError("exec socket refused")

    transport = StdioTransport(broken, config_of(make_context(make_mapping(tmp_path))))
    remote = RemoteSandbox(transport, "sk-broken")
    with pytest.raises(SandboxError) as info:
        remote.read_file("a")
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert "exec socket refused" in info.value.message


def test_an_agent_that_exits_at_once_means_unavailable(tmp_path: Path) -> None:
    opener = CountingOpener(argv=[agent_command()[0], "-c", "import sys; sys.exit(5)"])
    remote, _ = stdio_sandbox(make_context(make_mapping(tmp_path)), opener)
    with pytest.raises(SandboxError) as info:
        remote.read_file("a")
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert "exit code 5" in info.value.message


def test_a_python_without_json_is_named_in_the_error(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "json.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'json'\", name='json')\n"
    )
    python, _, _, pyz, flag = agent_command()
    # Not isolated (-I) here, so PYTHONPATH can hide the json module.
    argv = ["env", f"PYTHONPATH={shadow}", python, pyz, flag]
    remote, _ = stdio_sandbox(make_context(make_mapping(tmp_path / "t")), CountingOpener(argv))
    with pytest.raises(SandboxError) as info:
        remote.read_file("a")
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert "'json'" in info.value.message
    assert "python3-minimal" in info.value.message


def test_a_bad_config_is_unavailable_with_the_reason(tmp_path: Path) -> None:
    config = config_of(make_context(make_mapping(tmp_path)))
    config["mapping"]["mounts"][0]["virtual"] = "/"
    remote = RemoteSandbox(StdioTransport(CountingOpener(), config), "sk-bad")
    with pytest.raises(SandboxError) as info:
        remote.read_file("a")
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert "INVALID_ARGUMENT" in info.value.message


class DropAfterWrite(ByteStream):
    """A real agent stream whose agent dies once a matching request is sent.

    With `until` the request reaches the agent and the agent is killed once
    that file exists (the operation has started); without, the request is
    lost with the agent. Either way the client sees a channel that dropped
    with the request in flight.
    """

    def __init__(self, inner: SubprocessStream, trigger: bytes, until: Path | None) -> None:
        self.inner = inner
        self.trigger = trigger
        self.until = until

    def write(self, data: bytes) -> None:
        if self.trigger not in data:
            self.inner.write(data)
            return
        if self.until is not None:
            self.inner.write(data)
            deadline = time.monotonic() + 10
            while not self.until.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        self.inner.process.kill()

    def read(self, max_bytes: int = 65536) -> bytes:
        return self.inner.read(max_bytes)

    def close(self) -> None:
        self.inner.close()


def dropping_opener(
    trigger: bytes, until: Path | None = None
) -> tuple[Callable[[], ByteStream], list[ByteStream]]:
    opened: list[ByteStream] = []

    def opener() -> ByteStream:
        stream = SubprocessStream(agent_command())
        opened.append(stream)
        # Only the first channel drops; the re-opened one is healthy.
        return DropAfterWrite(stream, trigger, until) if len(opened) == 1 else stream

    return opener, opened


def test_a_read_in_flight_when_the_channel_drops_is_sent_again(tmp_path: Path) -> None:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "r.txt").write_text("read me\n")
    opener, opened = dropping_opener(b'"method":"read_file"')
    transport = StdioTransport(opener, config_of(make_context(make_mapping(tmp_path))))
    remote = RemoteSandbox(transport, "sk-drop")
    try:
        assert remote.read_file("r.txt").content == "read me\n"
        assert len(opened) == 2
    finally:
        remote.close()


def test_a_command_in_flight_when_the_channel_drops_is_not_repeated(tmp_path: Path) -> None:
    log = tmp_path / "workspace" / "runs.log"
    opener, opened = dropping_opener(b'"method":"execute"', until=log)
    transport = StdioTransport(opener, config_of(make_context(make_mapping(tmp_path))))
    remote = RemoteSandbox(transport, "sk-drop")
    try:
        with pytest.raises(SandboxError) as info:
            remote.execute("echo ran >> runs.log; sleep 0.3")
        assert info.value.code is ErrorCode.UNAVAILABLE
        assert "not repeated" in info.value.message
        time.sleep(0.6)
        assert log.read_text() == "ran\n"  # ran once, on the dropped channel only
        # The next call opens a fresh channel and works.
        assert remote.execute("cat runs.log || true").exit_code == 0
        assert len(opened) == 2
    finally:
        remote.close()


def test_a_hung_agent_is_a_timeout_and_then_replaced(tmp_path: Path) -> None:
    remote, opener = stdio_sandbox(
        make_context(make_mapping(tmp_path)), op_timeout_s=1.0, probe_timeout=0.5
    )
    try:
        remote.write_file("h.txt", "hi\n")
        hung = opener.current.process
        os.kill(hung.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(SandboxError) as info:
            remote.read_file("h.txt")
        assert info.value.code is ErrorCode.TIMEOUT
        assert time.monotonic() - started < 5
        # The probe finds no answer and closes the channel (killing the agent).
        hung.wait(15)
        assert remote.read_file("h.txt").content == "hi\n"
        assert opener.opens == 2
    finally:
        remote.close()
        opener.kill_all()


def test_a_closed_sandbox_is_unavailable(pair: Any) -> None:
    _, remote, opener = pair
    remote.list_dir()
    remote.close()
    remote.close()  # idempotent
    with pytest.raises(SandboxError) as info:
        remote.list_dir()
    assert info.value.code is ErrorCode.UNAVAILABLE
    opener.current.process.wait(10)  # closing the channel ended the agent


def test_info_reports_versions_and_ripgrep(remote: RemoteSandbox) -> None:
    info = remote.info()
    assert info["protocol_version"] == 1
    assert info["initialized"] is True
    assert info["python"].count(".") == 2
    assert isinstance(info["rg_available"], bool)
    assert remote.ping() < 5
