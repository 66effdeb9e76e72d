"""Worker processes that run the Python scanner under a hard deadline.

Python's `re` cannot be interrupted from another thread, and operations
run in worker threads, so a pattern that can backtrack catastrophically is
scanned in a child interpreter instead. The child arms a SIGALRM for the
request's time budget (the signal does interrupt `re`, in a main thread),
answers TIMEOUT and stays reusable; if it does not answer within a grace
period the parent kills it. The next call simply gets another worker.

The child is `python -I -S -c BOOT`: isolated from the environment, no
site-packages, and no import of the sandkit package (whose `__init__` may
pull in heavy host-side dependencies). The scanner's own stdlib-only
sources are sent over stdin and executed in a private package namespace.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from types import ModuleType

from . import fdwait, globbing, ignore, pyscan
from .errors import ErrorCode, SandboxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

MAX_WORKERS = 8
MAX_IDLE = 2
# How long past its own deadline a worker may take to answer before it is killed.
GRACE_S = 2.0

BOOT = """
import json, sys, types
def _boot():
    pkg = "_sandkit_scan"
    root = types.ModuleType(pkg)
    root.__path__ = []
    sys.modules[pkg] = root
    size = int(sys.stdin.buffer.readline())
    for name, source in json.loads(sys.stdin.buffer.read(size).decode("utf-8")):
        module = types.ModuleType(pkg + "." + name)
        module.__package__ = pkg
        sys.modules[module.__name__] = module
        exec(compile(source, "<sandkit-scan %s>" % name, "exec"), module.__dict__)
    sys.modules[pkg + ".pyscan"].serve(sys.stdin.buffer, sys.stdout.buffer)
_boot()
"""

_SOURCES: Optional[bytes] = None


def _sources() -> bytes:
    global _SOURCES
    if _SOURCES is None:
        modules: List[Tuple[str, ModuleType]] = [
            ("ignore", ignore),
            ("globbing", globbing),
            ("pyscan", pyscan),
        ]
        import inspect  # only here: ~6 ms (ast, dis) of every agent's first search

        blob = json.dumps([(name, inspect.getsource(mod)) for name, mod in modules])
        _SOURCES = blob.encode("utf-8")
    return _SOURCES


class _Worker:
    def __init__(self) -> None:
        if not sys.executable:
            raise OSError("no python interpreter to run the search worker")
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", BOOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            env={},
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin = self.proc.stdin
        self.fd = self.proc.stdout.fileno()
        self.buffer = b""
        blob = _sources()
        self.stdin.write(b"%d\n" % len(blob) + blob)
        self.stdin.flush()

    def call(self, request: Dict[str, Any], wait_s: float) -> Dict[str, Any]:
        self.stdin.write(json.dumps(request).encode("ascii") + b"\n")
        self.stdin.flush()
        end = time.monotonic() + wait_s
        while b"\n" not in self.buffer:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError()
            if not fdwait.readable([self.fd], left):
                continue
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                raise EOFError()
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        reply: Dict[str, Any] = json.loads(line)
        return reply

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


class _Pool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: List[_Worker] = []
        self._slots = threading.BoundedSemaphore(MAX_WORKERS)

    def run(self, request: Dict[str, Any], timeout_s: float) -> Dict[str, Any]:
        started = time.monotonic()
        if not self._slots.acquire(timeout=max(timeout_s, 0.0)):
            raise SandboxError(ErrorCode.TIMEOUT, "no search worker became free in time")
        try:
            left = timeout_s - (time.monotonic() - started)
            if left <= 0:
                raise SandboxError(ErrorCode.TIMEOUT, "grep took longer than its time limit")
            request = dict(request, timeout=left)
            worker = self._take()
            try:
                reply = worker.call(request, left + GRACE_S)
            except TimeoutError:
                worker.kill()
                raise SandboxError(
                    ErrorCode.TIMEOUT, "grep took longer than its time limit"
                ) from None
            except (OSError, EOFError, ValueError) as exc:
                worker.kill()
                raise SandboxError(
                    ErrorCode.INTERNAL, "search worker failed: %s" % type(exc).__name__
                ) from None
            except BaseException:
                worker.kill()
                raise
            self._give_back(worker)
            return reply
        finally:
            self._slots.release()

    def _take(self) -> _Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.proc.poll() is None:
                    return worker
                worker.kill()
        try:
            return _Worker()
        except OSError as exc:
            raise SandboxError(
                ErrorCode.INTERNAL, "cannot start the search worker: %s" % exc.strerror
            ) from None

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(worker)
                return
        worker.kill()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()


POOL = _Pool()
atexit.register(POOL.close)


def run(request: Dict[str, Any], timeout_s: float) -> Any:
    """Run pyscan.handle(request) in a worker: a search page, or a line check ("op": "verify")."""
    reply = POOL.run(request, timeout_s)
    if "error" in reply:
        code, message = reply["error"]
        try:
            error_code = ErrorCode(code)
        except ValueError:
            error_code = ErrorCode.INTERNAL
        raise SandboxError(error_code, message)
    return reply["ok"]
