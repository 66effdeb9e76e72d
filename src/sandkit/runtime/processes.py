"""Background processes: spawn, read output by offset, stdin, signals, wait (stdlib only).

`ProcessTable` owns a sandbox's background processes. The local provider
holds one in its own process; in a box it lives in the process supervisor
(`procd`), which outlives agents and channels, and the agent reaches it
through `procd.ProcdClient`. Either way the operations below are the same
code, so the same call gives the same result on every provider.

Each process runs in its own session (a process group), like `execute`:
when its shell exits, the rest of the group is ended. Its output — both
streams, in arrival order, cleaned like `execute`'s (secrets redacted,
real paths masked) chunk by chunk — is kept in an `OutputLog`: the first
and the last bytes of at most `process_output_bytes`, with offsets that
count every byte ever produced, so an offset a client holds stays valid and
a gap says how much was elided.
"""

from __future__ import annotations

import collections
import contextlib
import os
import secrets
import signal
import subprocess
import threading
import time

from . import fdwait, process
from .context import Context
from .errors import ErrorCode, SandboxError
from .streaming import StreamCleaner
from .validate import invalid, require_bool, require_int, require_number, require_str

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Deque, Dict, List, Optional, Tuple

    from .context import ProcessHost

# Ended processes kept for list_processes/process_output after their exit.
KEEP_ENDED = 64
# Signals a caller may send (by name or number).
SIGNALS = ("TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT")
_HANDLE_PREFIX = "p-"
# write_stdin gives up (TIMEOUT) when the process has read nothing for this long.
STDIN_STALL_S = 5.0
_STDIN_CHUNK = 1 << 16

if TYPE_CHECKING:
    Chunk = Tuple[int, str, bytes]  # (offset of its first byte, stream, cleaned UTF-8 bytes)


class OutputLog:
    """Both streams of one process in arrival order, bounded to the first `head` and the
    last `tail` bytes; `total` counts every byte (what offsets refer to)."""

    def __init__(self, head: int, tail: int) -> None:
        self.head = head
        self.tail = tail
        self._head: List[Chunk] = []
        self._head_bytes = 0
        self._tail: Deque[Chunk] = collections.deque()
        self._tail_bytes = 0
        self.total = 0

    def append(self, stream: str, data: bytes) -> None:
        if not data:
            return
        room = self.head - self._head_bytes
        if room > 0:
            first = _utf8_prefix(data, room) if len(data) > room else data
            self._head.append((self.total, stream, first))
            self._head_bytes += len(first)
            self.total += len(first)
            data = data[len(first) :]
            if not data:
                return
        self._tail.append((self.total, stream, data))
        self._tail_bytes += len(data)
        self.total += len(data)
        while self._tail_bytes > self.tail and self._tail:
            offset, name, oldest = self._tail[0]
            excess = self._tail_bytes - self.tail
            if excess >= len(oldest):
                self._tail.popleft()
                self._tail_bytes -= len(oldest)
                continue
            cut = _utf8_start(oldest, excess)
            self._tail[0] = (offset + cut, name, oldest[cut:])
            self._tail_bytes -= cut
            break

    def read(self, since: int, limit: int) -> Tuple[List[Tuple[str, str]], int, int]:
        """Chunks after offset `since` (at most `limit` bytes), the offset to read from
        next, and how many bytes between `since` and the first chunk were elided."""
        since = min(max(since, 0), self.total)
        out: List[Tuple[str, str]] = []
        elided = 0
        position = since
        taken = 0
        for offset, stream, data in list(self._head) + list(self._tail):
            end = offset + len(data)
            if end <= position:
                continue
            if offset > position:  # a gap: the middle that was not kept
                if taken:  # report a gap at the start of a read only
                    break
                elided += offset - position
                position = offset
            piece = data[position - offset :]
            if taken + len(piece) > limit:
                piece = _utf8_prefix(piece, limit - taken)
                if not piece:
                    break
            out.append((stream, piece.decode("utf-8", "replace")))
            taken += len(piece)
            position += len(piece)
            if taken >= limit:
                break
        return _merge(out), position, elided


def _merge(chunks: List[Tuple[str, str]]) -> List[Tuple[str, str]]:
    merged: List[Tuple[str, str]] = []
    for stream, text in chunks:
        if merged and merged[-1][0] == stream:
            merged[-1] = (stream, merged[-1][1] + text)
        else:
            merged.append((stream, text))
    return merged


def _utf8_prefix(data: bytes, limit: int) -> bytes:
    end = max(limit, 0)
    while 0 < end < len(data) and (data[end] & 0xC0) == 0x80:
        end -= 1
    return data[:end]


def _utf8_start(data: bytes, at_least: int) -> int:
    cut = at_least
    while cut < len(data) and (data[cut] & 0xC0) == 0x80:
        cut += 1
    return cut


class _Stream:
    """One pipe of a background process: cleaned as it arrives, into the shared log."""

    def __init__(self, name: str, owner: "_Process", cleaner: StreamCleaner) -> None:
        self.name = name
        self._owner = owner
        self._cleaner = cleaner

    def feed(self, data: bytes) -> None:
        self._owner.add(self.name, self._cleaner.feed(data))

    def finish(self) -> None:
        self._owner.add(self.name, self._cleaner.flush())


class _Process:
    def __init__(self, handle: str, command: str, cwd: str, log: OutputLog) -> None:
        self.handle = handle
        self.command = command
        self.cwd = cwd
        self.log = log
        self.started_at = time.time()
        self.ended_at: Optional[float] = None
        self.exit_code: Optional[int] = None
        self.proc: "Optional[subprocess.Popen[bytes]]" = None
        self.changed = threading.Condition()
        self.stdin_lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self.ended_at is None

    def add(self, stream: str, text: str) -> None:
        if text:
            with self.changed:
                self.log.append(stream, text.encode("utf-8", "replace"))
                self.changed.notify_all()

    def info(self) -> Dict[str, Any]:
        pid = self.proc.pid if self.proc is not None else 0
        return {
            "handle": self.handle,
            "pid": pid,
            "command": self.command,
            "cwd": self.cwd,
            "started_at": self.started_at,
            "running": self.running,
            "exit_code": self.exit_code,
            "ended_at": self.ended_at,
        }


class ProcessTable:
    """A sandbox's background processes, in this process."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._lock = threading.Lock()
        self._processes: "collections.OrderedDict[str, _Process]" = collections.OrderedDict()
        self.last_activity = time.monotonic()

    # -- the operations -------------------------------------------------------------

    def spawn(self, command: Any, env: Any, cwd: Any) -> Dict[str, Any]:
        launch = process.prepare(self.ctx, command, env, cwd)
        limits = self.ctx.limits
        with self._lock:
            self._touch()
            live = sum(1 for p in self._processes.values() if p.running)
            if live >= limits.process_max_live:
                raise SandboxError(
                    ErrorCode.CAPACITY,
                    "%d background processes are running, the limit (process_max_live) is %d"
                    % (live, limits.process_max_live),
                )
            handle = _HANDLE_PREFIX + secrets.token_hex(6)
            budget = max(limits.process_output_bytes, 2)
            log = OutputLog(budget // 2, budget - budget // 2)
            clean = process.cleaner(self.ctx)
            virtual_cwd = self.ctx.mapping.to_virtual(launch.cwd)
            entry = _Process(handle, clean(str(command)), virtual_cwd, log)
            # The follower first: a thread may not start once the process has filled the
            # box (a fork bomb), and a process nobody follows would stay "running" for good.
            launched = threading.Event()
            follower = threading.Thread(
                target=self._follow, args=(entry, launched), name="sandkit-proc-" + handle
            )
            follower.daemon = True
            try:
                follower.start()
            except RuntimeError:  # "can't start new thread"
                raise SandboxError(
                    ErrorCode.CAPACITY,
                    "the sandbox has no room for another process (its process limit is reached)",
                ) from None
            try:
                entry.proc = subprocess.Popen(
                    launch.argv,
                    cwd=launch.cwd,
                    env=launch.env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    close_fds=True,
                    preexec_fn=launch.preexec,
                )
            except (subprocess.SubprocessError, OSError, ValueError) as exc:
                raise process.start_failure(self.ctx, exc) from None
            finally:
                launched.set()  # without a process the follower just ends
            self._processes[handle] = entry
            self._evict()
        return entry.info()

    def output(self, handle: Any, since: Any, wait_s: Any) -> Dict[str, Any]:
        entry = self._get(handle)
        offset = require_int("since", since, minimum=0)
        total = entry.log.total
        if offset > total:  # offsets only ever come from earlier reads: a client's bug
            raise invalid("since %d is past the end of the output (%d bytes)" % (offset, total))
        wait = self._wait_time("wait_s", 0.0 if wait_s is None else wait_s)
        deadline = time.monotonic() + wait
        limit = max(self.ctx.limits.exec_output_bytes, 1)
        with entry.changed:
            while entry.running and entry.log.total <= offset:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                entry.changed.wait(left)
            chunks, position, elided = entry.log.read(offset, limit)
            running, code = entry.running, entry.exit_code
        self._touch()
        return {
            "handle": entry.handle,
            "chunks": [{"stream": s, "text": t} for s, t in chunks],
            "offset": position,
            "elided_bytes": elided,
            "running": running,
            "exit_code": code,
        }

    def write_stdin(self, handle: Any, data: Any, eof: Any) -> Dict[str, Any]:
        entry = self._get(handle)
        text = require_str("data", data)
        close = require_bool("eof", eof)
        with entry.stdin_lock:  # one writer at a time: two writes never interleave
            pipe = entry.proc.stdin if entry.proc is not None else None
            if pipe is None or pipe.closed:
                if text or not close:
                    raise invalid("the stdin of %s is closed" % entry.handle)
            else:
                try:
                    if text:
                        _write_bounded(entry, pipe, text.encode("utf-8", "surrogateescape"))
                    if close:
                        pipe.close()
                except (BrokenPipeError, ValueError):
                    raise invalid("%s no longer reads its stdin" % entry.handle) from None
        self._touch()
        return entry.info()

    def signal(self, handle: Any, sig: Any) -> Dict[str, Any]:
        entry = self._get(handle)
        number = _signal_number(sig)
        if entry.running and entry.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(entry.proc.pid, number)
        self._touch()
        return entry.info()

    def wait(self, handle: Any, timeout: Any) -> Dict[str, Any]:
        entry = self._get(handle)
        wait = self._wait_time("timeout", timeout)
        deadline = time.monotonic() + wait
        with entry.changed:
            while entry.running:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                entry.changed.wait(left)
        self._touch()
        return entry.info()

    def list(self) -> Dict[str, Any]:
        with self._lock:
            entries = list(self._processes.values())
        return {"processes": [e.info() for e in entries]}

    def end_all(self) -> Dict[str, Any]:
        """End every live process's group (release, shutdown); they are then listed as
        ended. Returns the ones that were running."""
        with self._lock:
            live = [e for e in self._processes.values() if e.running]
        for entry in live:
            if entry.proc is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(entry.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + process.TERM_GRACE_S
        for entry in live:
            with entry.changed:
                while entry.running and time.monotonic() < deadline:
                    entry.changed.wait(max(deadline - time.monotonic(), 0.001))
        for entry in live:
            if entry.running and entry.proc is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(entry.proc.pid, signal.SIGKILL)
        for entry in live:
            with entry.changed:
                while entry.running:
                    entry.changed.wait(1.0)
        return {"processes": [entry.info() for entry in live]}

    # -- state ----------------------------------------------------------------------------

    @property
    def live_count(self) -> int:
        with self._lock:
            return sum(1 for p in self._processes.values() if p.running)

    def _touch(self) -> None:
        self.last_activity = time.monotonic()

    def _get(self, handle: Any) -> _Process:
        name = require_str("handle", handle)
        with self._lock:
            entry = self._processes.get(name)
        if entry is None:
            raise SandboxError(ErrorCode.NOT_FOUND, "no background process %r" % name[:80])
        return entry

    def _wait_time(self, name: str, value: Any) -> float:
        """Seconds to wait, at most process_wait_max_s (None: that maximum)."""
        cap = self.ctx.limits.process_wait_max_s
        return cap if value is None else min(require_number(name, value), cap)

    def _evict(self) -> None:
        ended = [h for h, p in self._processes.items() if not p.running]
        for handle in ended[: max(len(ended) - KEEP_ENDED, 0)]:
            del self._processes[handle]

    def _follow(self, entry: _Process, launched: threading.Event) -> None:
        """Read the process's pipes until it and its group have ended; record the exit."""
        launched.wait()
        proc = entry.proc
        if proc is None:  # it could not be started
            return
        out = _Stream("stdout", entry, process.stream_cleaner(self.ctx))
        err = _Stream("stderr", entry, process.stream_cleaner(self.ctx))
        pipes: Optional[process.Pipes] = None
        code: Optional[int] = None
        try:
            pipes = process.Pipes(proc, out, err)  # may fail (no descriptor left): then end it
            pipes.pump(float("inf"), lambda: process.exited(proc))
            pipes.wait(float("inf"), lambda: process.exited(proc))
            process.end_group(proc, pipes)
            pipes.pump(time.monotonic() + process.DRAIN_AFTER_EXIT_S, lambda: False)
            code = process.exit_code(proc.wait())
        finally:
            if pipes is not None:
                pipes.close()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError, ValueError):
                        stream.close()
            with entry.stdin_lock:  # not under a write (its fd number could be reused)
                if proc.stdin is not None:
                    with contextlib.suppress(OSError, ValueError):
                        proc.stdin.close()
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                code = process.exit_code(proc.wait())
            out.finish()
            err.finish()
            with entry.changed:
                entry.exit_code = code
                entry.ended_at = time.time()
                entry.changed.notify_all()


def _write_bounded(entry: _Process, pipe: Any, data: bytes) -> None:
    """Write all of `data` while the process reads; TIMEOUT once it has taken nothing for
    STDIN_STALL_S (a process that never reads would otherwise hold the call forever)."""
    fd = pipe.fileno()
    os.set_blocking(fd, False)
    view = memoryview(data)
    written = 0
    stalled_since = time.monotonic()
    while written < len(view):
        try:
            written += os.write(fd, view[written : written + _STDIN_CHUNK])
            stalled_since = time.monotonic()
            continue
        except BlockingIOError:
            pass
        left = stalled_since + STDIN_STALL_S - time.monotonic()
        if left <= 0:
            raise SandboxError(
                ErrorCode.TIMEOUT,
                "%s read nothing from its stdin for %g s: %d of %d bytes were written"
                % (entry.handle, STDIN_STALL_S, written, len(view)),
            )
        fdwait.writable(fd, left)


def _signal_number(value: Any) -> int:
    if isinstance(value, str):
        name = value.upper()
        name = name[3:] if name.startswith("SIG") else name
        if name in SIGNALS:
            return int(getattr(signal, "SIG" + name))
    elif isinstance(value, int) and not isinstance(value, bool):
        allowed = {int(getattr(signal, "SIG" + n)) for n in SIGNALS}
        if value in allowed:
            return value
    raise invalid("signal must be one of %s (or its number)" % ", ".join(SIGNALS))


# -- the operations of the table -----------------------------------------------------------


def _host(ctx: Context) -> ProcessHost:
    if not ctx.execute_enabled:
        raise SandboxError(
            ErrorCode.EXECUTE_DISABLED, "command execution is disabled for this sandbox"
        )
    host = ctx.processes
    if host is None:
        raise SandboxError(ErrorCode.UNAVAILABLE, "this sandbox runs no background processes")
    return host


def spawn(ctx: Context, command: Any, env: Any = None, cwd: Any = None) -> Dict[str, Any]:
    """Start `command` in the background; returns its ProcessInfo (handle, pid, ...)."""
    return _host(ctx).spawn(command, env, cwd)


def process_output(ctx: Context, handle: Any, since: Any = 0, wait_s: Any = 0.0) -> Dict[str, Any]:
    """Output after offset `since` (both streams, in order); waits up to `wait_s` for some."""
    return _host(ctx).output(handle, since, wait_s)


def write_stdin(ctx: Context, handle: Any, data: Any = "", eof: Any = False) -> Dict[str, Any]:
    return _host(ctx).write_stdin(handle, data, eof)


def signal_process(ctx: Context, handle: Any, signal: Any = "TERM") -> Dict[str, Any]:
    """Send a signal to the process's whole group."""
    return _host(ctx).signal(handle, signal)


def wait_process(ctx: Context, handle: Any, timeout: Any = None) -> Dict[str, Any]:
    """Until the process ends or `timeout` seconds (capped) pass; its ProcessInfo."""
    return _host(ctx).wait(handle, timeout)


def list_processes(ctx: Context) -> Dict[str, Any]:
    return _host(ctx).list()


def end_processes(ctx: Context) -> Dict[str, Any]:
    """End every running background process (TERM, KILL after a grace); the ones ended.

    Providers call it before a release that would otherwise keep them (a paused VM), so it
    ends the commands of calls in flight (execute, streams) as well: they fail UNAVAILABLE."""
    host = _host(ctx)
    ctx.calls.end_all(wait_s=process.TERM_GRACE_S + 5.0)
    return host.end_all()
