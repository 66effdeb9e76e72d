"""The stdio carrier over the E2B SDK: a `ByteStream` made of a background command.

The agent runs as `commands.run(..., background=True, stdin=True)`. Its
stdout arrives through the command's event stream (a reader thread runs
`handle.wait(on_stdout=...)` and queues the chunks); its stdin is fed with
`commands.send_stdin`, one unary envd request per call. Those requests are
a round trip each, so a sender thread coalesces whatever frames are queued
into one call: many concurrent operations cost one round trip, not one each.
A frame handed to `write` is therefore sent a little later; if sending
fails, the stream ends and the transport reports the requests in flight
(writes as "may or may not have taken effect", as for any dropped channel).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

from sandkit.boxkit import ByteStream

from .errors import is_gone

STDERR_KEEP_CHARS = 16 * 1024
# After killing the agent, how long to wait for its output stream to end.
STOP_LINGER_S = 2.0
# One send_stdin request carries at most this much (envd and its proxy bound
# message sizes; 1 MiB stays far below their limits).
MAX_SEND_BYTES = 1024 * 1024
# Writers block while this much is queued and not yet sent.
MAX_PENDING_BYTES = 32 * 1024 * 1024

_EOF = b""


class CommandOutput:
    """Follows a background command: its stdout chunks, stderr tail and how it ended."""

    def __init__(
        self,
        handle: Any,
        on_stdout: Callable[[str], None],
        on_gone: Callable[[BaseException], None] | None = None,
        name: str = "sandkit-e2b-output",
    ) -> None:
        self.handle = handle
        self.pid: int = handle.pid
        self._on_stdout = on_stdout
        self._on_gone = on_gone
        self._stderr: list[str] = []
        self._stderr_chars = 0
        self.exit_code: int | None = None
        self.error: str | None = None
        self.finished = threading.Event()
        self._thread = threading.Thread(target=self._follow, name=name, daemon=True)
        self._thread.start()

    def _on_stderr(self, text: str) -> None:
        self._stderr.append(text)
        self._stderr_chars += len(text)
        while self._stderr_chars > STDERR_KEEP_CHARS and len(self._stderr) > 1:
            self._stderr_chars -= len(self._stderr.pop(0))

    def _follow(self) -> None:
        try:
            result = self.handle.wait(on_stdout=self._on_stdout, on_stderr=self._on_stderr)
            self.exit_code = getattr(result, "exit_code", 0)
        except Exception as exc:
            code = getattr(exc, "exit_code", None)
            if isinstance(code, int):  # CommandExitException: the process ended non-zero
                self.exit_code = code
            else:
                self.error = f"{type(exc).__name__}: {exc}"[:500]
                if self._on_gone is not None and is_gone(exc):
                    self._on_gone(exc)
        finally:
            self.finished.set()

    def stderr_tail(self) -> str:
        return "".join(self._stderr)

    def detail(self) -> str:
        """Why the command is gone: exit status or stream error, and its last stderr line."""
        lines = [line.strip() for line in self.stderr_tail().splitlines() if line.strip()]
        last = lines[-1][:500] if lines else ""
        if self.error is not None:
            text = f"agent stream failed: {self.error}"
        elif self.exit_code is not None:
            text = f"agent exit code {self.exit_code}"
        elif not last:
            return ""
        else:
            text = "agent exit code unknown"
        return text + (f"; {last}" if last else "")

    def stop(self, commands: Any, timeout: float, linger_s: float = STOP_LINGER_S) -> None:
        """Kill the command; give its stream a moment to end, then stop following it.

        The stream can outlive the process: a command the agent started in the
        background still holds its stderr. Once the kill is acknowledged the
        agent is gone, which is all a pause needs.
        """
        if not self.finished.is_set():
            with contextlib.suppress(Exception):  # already gone, or the sandbox is
                commands.kill(self.pid, request_timeout=timeout)
        if not self.finished.wait(linger_s):
            with contextlib.suppress(Exception):  # a generator busy in another thread
                self.handle.disconnect()


class CommandStream(ByteStream):
    """The agent's stdin and stdout through one E2B background command."""

    def __init__(
        self,
        commands: Any,
        handle: Any,
        *,
        on_gone: Callable[[BaseException], None] | None = None,
        request_timeout: float = 60.0,
        name: str = "sandkit-e2b-agent",
    ) -> None:
        self._commands = commands
        self.request_timeout = request_timeout
        self._chunks: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._leftover = b""
        self._read_lock = threading.Lock()
        self._eof = False
        self._cond = threading.Condition()
        self._pending = bytearray()
        self._failed: str | None = None
        self._closed = False
        self.output = CommandOutput(handle, self._on_stdout, on_gone, name=name + "-out")
        self.pid = self.output.pid
        self._ended = threading.Thread(target=self._watch_end, name=name + "-end", daemon=True)
        self._ended.start()
        self._sender = threading.Thread(target=self._send_loop, name=name + "-in", daemon=True)
        self._sender.start()

    # -- output ---------------------------------------------------------------

    def _on_stdout(self, text: str) -> None:
        # The agent writes ASCII JSON; the SDK hands it over decoded as UTF-8.
        if text:
            self._chunks.put(text.encode("utf-8"))

    def _watch_end(self) -> None:
        self.output.finished.wait()
        self._chunks.put(_EOF)

    def read(self, max_bytes: int = 65536) -> bytes:
        with self._read_lock:
            if not self._leftover:
                if self._eof:
                    return b""
                chunk = self._chunks.get()
                if not chunk:
                    self._eof = True
                    return b""
                self._leftover = chunk
            data, self._leftover = self._leftover[:max_bytes], self._leftover[max_bytes:]
            return data

    # -- input ----------------------------------------------------------------

    def write(self, data: bytes) -> None:
        with self._cond:
            while True:
                if self._failed is not None:
                    raise EOFError(self._failed)
                if self._closed:
                    raise EOFError("stream is closed")
                if len(self._pending) < MAX_PENDING_BYTES:
                    break
                self._cond.wait()
            self._pending += data
            self._cond.notify_all()

    def _send_loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                chunk = bytes(self._pending[:MAX_SEND_BYTES])
                del self._pending[:MAX_SEND_BYTES]
                self._cond.notify_all()
            try:
                self._commands.send_stdin(self.pid, chunk, request_timeout=self.request_timeout)
            except Exception as exc:
                with self._cond:
                    self._failed = f"sending to the agent failed: {type(exc).__name__}: {exc}"
                    self._pending.clear()
                    self._cond.notify_all()
                # Without stdin the channel is useless: end it for the reader too.
                self._chunks.put(_EOF)
                return

    # -- lifetime -------------------------------------------------------------

    @property
    def at_eof(self) -> bool:
        return self._eof or self._closed or self.output.finished.is_set()

    def close(self) -> None:
        """Stop sending and kill the agent in the background (never blocks the caller)."""
        if self._mark_closed():
            threading.Thread(
                target=self.output.stop,
                args=(self._commands, self.request_timeout),
                name="sandkit-e2b-close",
                daemon=True,
            ).start()

    def shutdown(self, timeout: float) -> None:
        """Close and wait until the agent process is gone (before a pause)."""
        self._mark_closed()
        self.output.stop(self._commands, timeout)

    def _mark_closed(self) -> bool:
        with self._cond:
            if self._closed:
                return False
            self._closed = True
            self._pending.clear()
            self._cond.notify_all()
        self._chunks.put(_EOF)
        return True

    def exit_detail(self) -> str:
        if self._failed is not None:
            return self._failed
        return self.output.detail()
