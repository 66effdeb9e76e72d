"""Carrier 1: newline-delimited JSON-RPC on the agent's stdin/stdout.

One connection per process. Control methods (initialize, ping, info) are
answered by the reading thread itself, in order; operations run on a
bounded pool and answer as they finish (responses may come out of order;
the ids say which is which). Commands run by `execute` get their own pool,
so long commands cannot starve file operations. An idle agent may be put to
sleep by its client (`sleep`, see agent/dormant.py).
"""

from __future__ import annotations

import contextlib
import os
import threading

from . import protocol as p
from .server import AgentCore, BadRequest, Request, log

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, BinaryIO, Dict, List, Optional

    from .workers import WorkerPool

# How long `sleep` waits for answered requests to be counted done.
SETTLE_S = 0.5


def detach_stdio() -> tuple[BinaryIO, BinaryIO]:
    """Take the protocol pipes off fds 0/1 so nothing else can touch them.

    Children (commands run by `execute`) inherit fds 0-2: after this, fd 0 is
    /dev/null and fd 1 is stderr, so a command can neither read requests
    meant for the agent nor write bytes into the response stream.
    """
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return proto_in, proto_out


class StdioServer:
    def __init__(
        self, core: AgentCore, stream_in: BinaryIO, stream_out: BinaryIO, workers: int = 8
    ) -> None:
        self.core = core
        self._in = stream_in
        self._out = stream_out
        self._write_lock = threading.Lock()
        self._broken = False
        self._busy = 0  # requests accepted and not answered yet
        self._busy_lock = threading.Condition()
        self._reader: Optional[p.FrameReader] = None
        self._workers = workers
        # Made at the first operation (agent/workers.py).
        self._ops: Optional[WorkerPool] = None
        self._exec: Optional[WorkerPool] = None

    def serve(self) -> None:
        """Serve until stdin ends; operations already running are finished."""
        reader = self._reader = p.FrameReader(self._read, self.core.max_frame_bytes)
        try:
            while True:
                reader.max_frame = self.core.max_frame_bytes
                item = reader.next()
                if item is None:
                    break
                if isinstance(item, p.Oversized):
                    self._send(p.dumps(self.core.oversized(item)))
                    continue
                if not item.strip():
                    continue
                self._accept(item)
        finally:
            # Running operations finish (they are bounded by their own
            # timeouts, and commands must not be orphaned mid-run); queued
            # ones are dropped since nobody is left to read their answers.
            for pool in (self._ops, self._exec):
                if pool is not None:
                    pool.shutdown()
            self.core.close()

    def _read(self, size: int) -> bytes:
        try:
            return self._in.read(size) or b""
        except OSError:
            return b""

    def _accept(self, data: bytes) -> None:
        try:
            request = self.core.parse_frame(data)
        except BadRequest as bad:
            self._send(p.dumps(bad.response))
            return
        if request.notify and request.method == p.CANCEL:
            self.core.cancel(request)
            return
        if request.method == p.SLEEP and not request.notify:
            self._sleep(request)
            return
        with self._busy_lock:
            self._busy += 1
        if self.core.is_control(request):
            self._run(request)
            return
        if self.core.is_stream(request):
            self._pool(slow=True).submit(self._run_stream, request)
            return
        self._pool(slow=request.method in p.SLOW_METHODS).submit(self._run, request)

    def _pool(self, slow: bool) -> WorkerPool:
        """The pool for operations (slow: commands, long polls), made on first use (by the
        reading thread, the only one that submits)."""
        pool = self._exec if slow else self._ops
        if pool is None:
            from .workers import WorkerPool

            pool = WorkerPool(self._workers, "exec" if slow else "op")
            if slow:
                self._exec = pool
            else:
                self._ops = pool
        return pool

    def _run_stream(self, request: Request) -> None:
        try:
            response = self.core.run_stream(request, self._send_or_raise)
            if response is not None:
                self._send(self.core.encode(request, response))
        except BaseException as exc:
            self._send(self.core.encode(request, self.core.internal_error(request, exc)))
        finally:
            self._done()

    def _run(self, request: Request) -> None:
        try:
            response: Optional[Dict[str, Any]] = self.core.handle(request)
            if response is not None:
                self._send(self.core.encode(request, response))
        except BaseException as exc:
            self._send(self.core.encode(request, self.core.internal_error(request, exc)))
        finally:
            self._done()

    def _done(self) -> None:
        with self._busy_lock:
            self._busy -= 1
            self._busy_lock.notify_all()

    def _sleep(self, request: Request) -> None:
        """Answer `sleep` and, when nothing is running or half-read, become dormant: this
        process execs the small waiting program (agent/dormant.py) on the protocol pipes,
        which execs a fresh agent at the next frame. The memory of this one goes back to
        the host; a process started by `execute` is never running here then (a command
        in flight is a busy request), background ones live in the supervisor."""
        reader = self._reader
        with self._busy_lock:
            # A worker counts its request done just after writing the answer, which the
            # client may have read already: give those a moment.
            self._busy_lock.wait_for(lambda: self._busy == 0, SETTLE_S)
            idle = self._busy == 0 and reader is not None and reader.pending == 0
        if not idle or self._broken or self.core.context is None:
            self._send(p.dumps(p.result_response(request.id, {"sleeping": False})))
            return
        from .dormant import become_dormant  # loaded first: the exec follows the answer

        # No idle shell becomes a zombie of the exec, and no warm-up step is cut off.
        self.core.close()
        self._send(p.dumps(p.result_response(request.id, {"sleeping": True})))
        if self._broken:
            return  # the client is gone: the read loop ends at EOF
        become_dormant(self._in.fileno(), self._out.fileno())  # does not return

    def _send(self, data: bytes) -> None:
        with contextlib.suppress(OSError):
            self._send_or_raise(data)

    def _send_or_raise(self, data: bytes) -> None:
        """Write one frame; OSError when the client is gone (a stream then ends)."""
        with self._write_lock:
            if self._broken:
                raise BrokenPipeError("the client is gone")
            try:
                _write_all(self._out, data + b"\n")
            except (OSError, ValueError) as exc:
                # The client is gone; keep draining so running work can finish.
                self._broken = True
                log("stdout closed: %s" % exc)
                raise BrokenPipeError(str(exc)) from None


def _write_all(out: BinaryIO, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = out.write(view)
        if written is None:  # non-blocking stream not ready; cannot happen on a pipe
            continue
        view = view[written:]


def serve_stdio(workers: int = 8, supervisor: Optional[List[str]] = None) -> int:
    proto_in, proto_out = detach_stdio()
    StdioServer(AgentCore(supervisor=supervisor), proto_in, proto_out, workers).serve()
    return 0
