"""Streamed execute and background processes: events, offsets, stdin, signals, caps, codes.

Nothing here trusts a clock to decide an outcome: a command that must still be
running waits for a marker file the test writes, and a process that must be
gone is polled for until a generous bound (which only a real failure reaches).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import pytest

from sandkit import ErrorCode, ExecuteResult
from sandkit.models import OutputChunk, ProcessInfo
from sandkit.runtime.limits import Limits
from sandkit.sandbox import Sandbox

from .suite import ConformanceBase, q, raises_code

# Far above what any check needs on a loaded machine; reached only by a real failure.
BOUND_S = 30.0


def _wait_for_marker(path: str) -> str:
    """Shell that blocks until `path` exists (at most BOUND_S)."""
    tries = int(BOUND_S * 20)
    return f"n=0; while [ ! -e {q(path)} ] && [ $n -lt {tries} ]; do sleep 0.05; n=$((n+1)); done"


def _split(items: list[OutputChunk | ExecuteResult]) -> tuple[list[OutputChunk], ExecuteResult]:
    *chunks, last = items
    assert isinstance(last, ExecuteResult), f"a stream ends with the ExecuteResult, not {last!r}"
    assert all(isinstance(c, OutputChunk) for c in chunks)
    return chunks, last  # type: ignore[return-value]


def _text(chunks: list[OutputChunk], stream: str) -> str:
    return "".join(c.text for c in chunks if c.stream == stream)


class StreamTests(ConformanceBase):
    def test_events_then_the_result_execute_gives(self, sb: Sandbox) -> None:
        command = "echo one; echo two >&2; echo three; exit 4"
        chunks, result = _split(list(sb.execute_stream(command)))
        assert _text(chunks, "stdout") == "one\nthree\n"
        assert _text(chunks, "stderr") == "two\n"
        plain = sb.execute(command)
        assert (result.exit_code, result.stdout, result.stderr) == (4, "one\nthree\n", "two\n")
        assert (plain.exit_code, plain.stdout, plain.stderr) == (4, "one\nthree\n", "two\n")
        assert result.timed_out is False and result.truncated is False

    def test_each_stream_keeps_its_order(self, sb: Sandbox) -> None:
        command = "for i in $(seq 1 200); do echo out$i; echo err$i >&2; done"
        chunks, result = _split(list(sb.execute_stream(command)))
        expected_out = "".join(f"out{i}\n" for i in range(1, 201))
        expected_err = "".join(f"err{i}\n" for i in range(1, 201))
        assert _text(chunks, "stdout") == expected_out == result.stdout
        assert _text(chunks, "stderr") == expected_err == result.stderr

    def test_output_arrives_while_the_command_runs(self, sb: Sandbox, ws: str) -> None:
        marker = f"{ws}/go"
        sb.write_file(f"{ws}/.keep", "")
        command = f"echo first; {_wait_for_marker(marker)}; echo second"
        seen: list[OutputChunk | ExecuteResult] = []
        for item in sb.execute_stream(command, timeout=BOUND_S + 10):
            seen.append(item)
            if isinstance(item, OutputChunk) and "first" in item.text:
                # Only a live event lets the test get here before the command ends.
                sb.write_file(marker, "")
        _, result = _split(seen)
        assert result.exit_code == 0 and result.stdout == "first\nsecond\n"
        assert not result.timed_out, "the first line only came with the end"

    def test_a_secret_split_across_chunks_never_shows(
        self, sb: Sandbox, secret_values: list[str], ws: str
    ) -> None:
        if not secret_values:
            pytest.skip("this sandbox was configured without secrets to redact")
        secret = secret_values[0]
        half = len(secret) // 2
        marker = f"{ws}/go"
        sb.write_file(f"{ws}/.keep", "")
        command = (
            f"printf 'start\\n'; printf %s {q(secret[:half])}; {_wait_for_marker(marker)}; "
            f"printf '%s end\\n' {q(secret[half:])}"
        )
        seen = []
        for item in sb.execute_stream(command, timeout=BOUND_S + 10):
            seen.append(item)
            if isinstance(item, OutputChunk) and "start" in item.text:
                sb.write_file(marker, "")  # the first half is out by now
        chunks, result = _split(seen)
        joined = _text(chunks, "stdout")
        assert "[REDACTED]" in joined and "[REDACTED]" in result.stdout
        for piece in [secret, secret[:half], secret[half:]]:
            assert all(piece not in c.text for c in chunks), "a piece of the secret was streamed"
            assert piece not in joined

    def test_a_stream_says_when_it_starts_eliding(self, sb: Sandbox, limits: Limits) -> None:
        size = max(limits.exec_stream_bytes, limits.exec_output_bytes) * 2
        command = f"head -c {size} /dev/zero | tr '\\0' x; echo; echo tail-end"
        chunks, result = _split(list(sb.execute_stream(command)))
        elided = [c for c in chunks if c.elided]
        assert [c.stream for c in elided] == ["stdout"]
        streamed = len(_text(chunks, "stdout"))
        assert streamed <= limits.exec_stream_bytes, "the stream went past its cap"
        assert result.truncated and result.stdout.endswith("tail-end\n")
        assert result == sb.execute(command).model_copy(update={"duration_ms": result.duration_ms})

    def test_the_timeout_ends_a_stream(self, sb: Sandbox) -> None:
        chunks, result = _split(list(sb.execute_stream("echo begun; sleep 60", timeout=1)))
        assert result.timed_out and result.exit_code is None
        assert _text(chunks, "stdout") == "begun\n"

    def test_leaving_the_stream_ends_the_command(self, sb: Sandbox) -> None:
        stream = sb.execute_stream("echo pid:$$; sleep 300", timeout=BOUND_S * 10)
        first = next(iter(stream))
        assert isinstance(first, OutputChunk) and first.text.startswith("pid:")
        pid = int(first.text.split(":")[1])
        stream.close()  # type: ignore[attr-defined]
        _gone(sb, pid)

    def test_async_stream_and_its_cancel(self, sb: Sandbox) -> None:
        async def run() -> tuple[list[OutputChunk | ExecuteResult], int]:
            items = [item async for item in sb.aexecute_stream("echo a; echo b >&2")]
            async for item in sb.aexecute_stream("echo pid:$$; sleep 300"):
                assert isinstance(item, OutputChunk)
                return items, int(item.text.split(":")[1])
            raise AssertionError("no output")

        started = time.monotonic()
        items, pid = asyncio.run(run())  # returns once the stream's reader thread is done
        spent = time.monotonic() - started
        assert spent < BOUND_S, f"leaving an async stream took {spent:.0f} s (a reader hung)"
        chunks, result = _split(items)
        assert _text(chunks, "stdout") == "a\n" and _text(chunks, "stderr") == "b\n"
        assert result.exit_code == 0
        _gone(sb, pid)

    def test_bad_input_is_the_execute_error(self, sb: Sandbox) -> None:
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            list(sb.execute_stream(""))
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            list(sb.execute_stream("true", timeout=-1))
        with raises_code(ErrorCode.NOT_FOUND):
            list(sb.execute_stream("true", cwd="/mnt/user-data/workspace/no-such-dir"))


def _gone(sb: Sandbox, pid: int) -> None:
    """The process `pid` of the box ends within BOUND_S (polled; usually at once)."""
    deadline = time.monotonic() + BOUND_S
    while True:
        alive = sb.execute(f"kill -0 {pid} 2>/dev/null && echo alive || echo gone").stdout
        if alive.strip() == "gone":
            return
        assert time.monotonic() < deadline, f"process {pid} still runs {BOUND_S} s after"
        time.sleep(0.1)


class ProcessTests(ConformanceBase):
    @pytest.fixture
    def spawned(self, sb: Sandbox) -> Iterator[list[ProcessInfo]]:
        """Processes a test started; whatever still runs is killed afterwards."""
        started: list[ProcessInfo] = []
        yield started
        for info in started:
            with contextlib.suppress(Exception):  # already gone with its box
                sb.signal_process(info.handle, "KILL")
        for info in started:
            with contextlib.suppress(Exception):
                sb.wait_process(info.handle, timeout=BOUND_S)

    def _spawn(self, sb: Sandbox, spawned: list[ProcessInfo], command: str) -> ProcessInfo:
        info = sb.spawn(command)
        spawned.append(info)
        return info

    def test_output_by_offset(self, sb: Sandbox, spawned: list[ProcessInfo], ws: str) -> None:
        marker = f"{ws}/go"
        sb.write_file(f"{ws}/.keep", "")
        info = self._spawn(
            sb, spawned, f"echo first; echo oops >&2; {_wait_for_marker(marker)}; echo second"
        )
        assert info.handle and info.pid > 0 and info.running
        assert info.command.startswith("echo first")
        first = sb.process_output(info.handle, wait_s=BOUND_S)
        while "oops" not in first.stderr:  # both lines may come in two reads
            more = sb.process_output(info.handle, since=first.offset, wait_s=BOUND_S)
            first = first.model_copy(
                update={"chunks": first.chunks + more.chunks, "offset": more.offset}
            )
        assert first.stdout == "first\n" and first.running
        sb.write_file(marker, "")
        done = sb.wait_process(info.handle, timeout=BOUND_S)
        assert not done.running and done.exit_code == 0 and done.ended_at is not None
        rest = sb.process_output(info.handle, since=first.offset)
        assert rest.stdout == "second\n" and rest.stderr == ""
        assert not rest.running and rest.exit_code == 0
        again = sb.process_output(info.handle, since=rest.offset)
        assert again.chunks == [] and again.offset == rest.offset
        everything = sb.process_output(info.handle)
        assert everything.stdout == "first\nsecond\n" and everything.stderr == "oops\n"

    def test_a_long_poll_returns_when_output_comes(
        self, sb: Sandbox, spawned: list[ProcessInfo], ws: str
    ) -> None:
        marker = f"{ws}/go"
        sb.write_file(f"{ws}/.keep", "")
        info = self._spawn(sb, spawned, f"{_wait_for_marker(marker)}; echo late")
        empty = sb.process_output(info.handle)
        assert empty.chunks == [] and empty.running
        sb.write_file(marker, "")
        late = sb.process_output(info.handle, wait_s=BOUND_S)
        assert late.stdout == "late\n"

    def test_stdin(self, sb: Sandbox, spawned: list[ProcessInfo]) -> None:
        info = self._spawn(sb, spawned, "read line; echo got:$line; cat")
        sb.write_stdin(info.handle, "hello\n")
        sb.write_stdin(info.handle, "rest of it\n", eof=True)
        done = sb.wait_process(info.handle, timeout=BOUND_S)
        assert done.exit_code == 0
        assert sb.process_output(info.handle).stdout == "got:hello\nrest of it\n"
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.write_stdin(info.handle, "more")  # stdin is closed

    @pytest.mark.parametrize(("signal", "code"), [("TERM", 143), ("KILL", 137), ("INT", 130)])
    def test_signals_end_the_group(
        self, sb: Sandbox, spawned: list[ProcessInfo], signal: str, code: int
    ) -> None:
        info = self._spawn(sb, spawned, "sleep 300 & echo child:$!; wait")
        out = sb.process_output(info.handle, wait_s=BOUND_S)
        child = int(out.stdout.split(":")[1])
        sb.signal_process(info.handle, signal)
        done = sb.wait_process(info.handle, timeout=BOUND_S)
        assert not done.running and done.exit_code == code
        _gone(sb, child)  # the whole group, not just the shell

    def test_listing(self, sb: Sandbox, spawned: list[ProcessInfo]) -> None:
        info = self._spawn(sb, spawned, "sleep 300")
        listed = {p.handle: p for p in sb.list_processes().processes}
        assert info.handle in listed and listed[info.handle].running
        sb.signal_process(info.handle, "KILL")
        sb.wait_process(info.handle, timeout=BOUND_S)
        listed = {p.handle: p for p in sb.list_processes().processes}
        assert listed[info.handle].running is False and listed[info.handle].exit_code == 137

    def test_unknown_handles_and_bad_arguments(self, sb: Sandbox) -> None:
        for call in (
            lambda: sb.process_output("p-000000000000"),
            lambda: sb.write_stdin("p-000000000000", "x"),
            lambda: sb.signal_process("p-000000000000"),
            lambda: sb.wait_process("p-000000000000", timeout=0),
        ):
            with raises_code(ErrorCode.NOT_FOUND):
                call()
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.spawn("")
        with raises_code(ErrorCode.NOT_FOUND):
            sb.spawn("true", cwd="/mnt/user-data/workspace/no-such-dir")

    def test_bad_signal_and_offset(self, sb: Sandbox, spawned: list[ProcessInfo]) -> None:
        info = self._spawn(sb, spawned, "sleep 300")
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.signal_process(info.handle, "SEGV-PLEASE")
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.process_output(info.handle, since=-1)

    def test_the_live_cap_is_capacity(
        self, sb: Sandbox, spawned: list[ProcessInfo], limits: Limits
    ) -> None:
        running = sum(1 for p in sb.list_processes().processes if p.running)
        for _ in range(limits.process_max_live - running):
            self._spawn(sb, spawned, "sleep 300")
        with raises_code(ErrorCode.CAPACITY):
            sb.spawn("sleep 300")
        sb.signal_process(spawned[0].handle, "KILL")
        sb.wait_process(spawned[0].handle, timeout=BOUND_S)
        self._spawn(sb, spawned, "true")  # room again

    def test_the_buffer_keeps_head_and_tail_with_valid_offsets(
        self, sb: Sandbox, spawned: list[ProcessInfo], limits: Limits
    ) -> None:
        size = limits.process_output_bytes * 2
        info = self._spawn(
            sb,
            spawned,
            f"echo head-start; head -c {size} /dev/zero | tr '\\0' y; echo; echo tail-end",
        )
        assert sb.wait_process(info.handle, timeout=BOUND_S).exit_code == 0
        offset, text, elided = 0, "", 0
        while True:
            page = sb.process_output(info.handle, since=offset)
            assert len(page.stdout.encode()) <= limits.exec_output_bytes
            text += page.stdout
            elided += page.elided_bytes
            if page.offset == offset:
                break
            offset = page.offset
        assert text.startswith("head-start\n") and text.endswith("\ntail-end\n")
        assert elided > 0
        assert len(text) + elided == len("head-start\n") + size + len("\ntail-end\n")
        assert len(text) <= limits.process_output_bytes
