"""A `ByteStream` to an agent running as a local child process.

Used by the tests and benchmarks, and the building block of a future
"subprocess" provider: `agent_opener()` gives a `StreamOpener` that starts
`python3 -I agent.pyz --stdio` for every new channel.
"""

from __future__ import annotations

import collections
import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from .streams import ByteStream, StreamOpener

STDERR_TAIL_BYTES = 64 * 1024


class SubprocessStream(ByteStream):
    """stdin/stdout of a child process; its stderr is kept (tail) for diagnostics."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        close_grace_s: float = 2.0,
    ) -> None:
        self.close_grace_s = close_grace_s
        # Own session: a Ctrl-C in the terminal does not reach the agent
        # directly; the agent ends when its stdin closes.
        self.process = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
        assert self.process.stdin and self.process.stdout and self.process.stderr
        self._stdin = self.process.stdin
        self._stdout_fd = self.process.stdout.fileno()
        self._lock = threading.Lock()
        self._reading = False
        self._closed = False
        self._stderr: collections.deque[bytes] = collections.deque()
        self._stderr_size = 0
        self._stderr_thread = threading.Thread(
            target=self._drain_stderr, name="agent-stderr", daemon=True
        )
        self._stderr_thread.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = self._stdin.write(view)
            if written is None:
                raise BlockingIOError("agent stdin is not writable")
            view = view[written:]

    def read(self, max_bytes: int = 65536) -> bytes:
        with self._lock:
            if self._closed:
                return b""
            self._reading = True
        try:
            data = os.read(self._stdout_fd, max_bytes)
        finally:
            with self._lock:
                self._reading = False
                close_now = self._closed or not data
        if close_now:
            self._close_stdout()
        return data

    @property
    def at_eof(self) -> bool:
        """The agent process has ended (its channel with it)."""
        return self.process.poll() is not None

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            reading = self._reading
        with contextlib.suppress(OSError):
            self._stdin.close()
        try:
            self.process.wait(self.close_grace_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if not reading:
            # A reader blocked in os.read gets EOF now and closes it itself;
            # closing under its feet could hand its fd number to someone else.
            self._close_stdout()

    def _close_stdout(self) -> None:
        stdout = self.process.stdout
        if stdout is not None and not stdout.closed:
            with contextlib.suppress(OSError):
                stdout.close()

    def _drain_stderr(self) -> None:
        stderr = self.process.stderr
        assert stderr is not None
        try:
            while True:
                chunk = stderr.read(8192)
                if not chunk:
                    break
                self._stderr.append(chunk)
                self._stderr_size += len(chunk)
                while self._stderr_size > STDERR_TAIL_BYTES and len(self._stderr) > 1:
                    self._stderr_size -= len(self._stderr.popleft())
        except (OSError, ValueError):
            pass
        finally:
            stderr.close()

    def stderr_tail(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")

    def exit_detail(self) -> str:
        """Why the agent is gone, for UNAVAILABLE messages (empty while it runs)."""
        try:
            code = self.process.wait(0.5)
        except subprocess.TimeoutExpired:
            return ""
        self._stderr_thread.join(0.5)
        lines = [line for line in self.stderr_tail().splitlines() if line.strip()]
        last = lines[-1].strip()[:500] if lines else ""
        return f"agent exit code {code}" + (f"; {last}" if last else "")


def agent_command(
    pyz: Path | str | None = None, python: str | None = None, *args: str
) -> list[str]:
    """argv that runs the agent zipapp isolated: no PYTHON* env, no site-packages.

    `-S` skips `site` (the agent needs only the standard library), which
    saves tens of milliseconds per start where site-packages hold .pth hooks.
    """
    if pyz is None:
        from ..agent.build import agent_zipapp

        pyz = agent_zipapp()
    return [python or sys.executable, "-I", "-S", str(pyz), *(args or ("--stdio",))]


def agent_opener(
    pyz: Path | str | None = None,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> StreamOpener:
    """A `StreamOpener` starting a fresh local `agent.pyz --stdio` per channel."""
    argv = agent_command(pyz, python)

    def open_stream() -> ByteStream:
        return SubprocessStream(argv, env=env, cwd=cwd)

    return open_stream
