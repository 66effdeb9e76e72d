"""The `Sandbox` contract: the operations an agent runs on virtual paths.

Every operation is one `call(method, params)` plus validation of its result
into the model the operation table names, so a local sandbox (in-process
runtime) and a remote one (JSON-RPC agent) differ only in how a call
travels and return the same models by construction. The signatures below
are held to the runtime's by a test (`tests/test_operation_table.py`):
same parameters, same order, same defaults, sync and async alike.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from .errors import ErrorCode, SandboxError
from .models import (
    EditResult,
    ExecuteResult,
    GlobResult,
    GrepMode,
    GrepResult,
    ListDirResult,
    OutputChunk,
    ProcessInfo,
    ProcessList,
    ProcessOutput,
    ReadFileResult,
    WriteResult,
)
from .runtime.limits import Limits
from .runtime.pathmap import WORKSPACE
from .transports.base import StreamCall

M = TypeVar("M", bound=BaseModel)


class Sandbox(abc.ABC):
    """One user's thread: files under the virtual layout plus a place to run commands."""

    sandbox_id: str

    # -- the primitive ------------------------------------------------------------

    @abc.abstractmethod
    def call(self, method: str, params: dict[str, Any]) -> Any:
        """Run one operation of the table and return its JSON-able result."""

    async def acall(self, method: str, params: dict[str, Any]) -> Any:
        """Async `call`; the default runs `call` in a worker thread."""
        return await asyncio.to_thread(self.call, method, params)

    def open_stream(self, method: str, params: dict[str, Any]) -> StreamCall:
        """Start a streaming operation; its items are events, then its result."""
        raise SandboxError(ErrorCode.UNAVAILABLE, f"{type(self).__name__} cannot stream")

    @property
    def limits(self) -> Limits:
        """The caps this sandbox runs with; tools and integrations read them from here."""
        return Limits()

    @property
    def execute_enabled(self) -> bool:
        """Whether commands may run here (execute, spawn); tool sets offer bash only then."""
        return True

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Drop client-side resources (channels); the box itself is the provider's."""

    def _run(self, result: type[M], method: str, args: dict[str, Any]) -> M:
        return result.model_validate(self.call(method, _params(args)))

    async def _arun(self, result: type[M], method: str, args: dict[str, Any]) -> M:
        return result.model_validate(await self.acall(method, _params(args)))

    # -- sync operations ----------------------------------------------------------

    def read_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> ReadFileResult:
        return self._run(ReadFileResult, "read_file", locals())

    def write_file(self, path: str, content: str, append: bool = False) -> WriteResult:
        return self._run(WriteResult, "write_file", locals())

    def edit_file(self, path: str, old: str, new: str, replace_all: bool = False) -> EditResult:
        return self._run(EditResult, "edit_file", locals())

    def read_bytes(self, path: str) -> bytes:
        return _as_bytes(self.call("read_bytes", _params(locals())))

    def write_bytes(self, path: str, data: bytes) -> WriteResult:
        return self._run(WriteResult, "write_bytes", locals())

    def list_dir(self, path: str = WORKSPACE, max_depth: int = 2) -> ListDirResult:
        return self._run(ListDirResult, "list_dir", locals())

    def glob(
        self,
        pattern: str,
        path: str = WORKSPACE,
        include_dirs: bool = False,
        max_results: int | None = None,
        offset: int = 0,
    ) -> GlobResult:
        return self._run(GlobResult, "glob", locals())

    def grep(
        self,
        pattern: str,
        path: str = WORKSPACE,
        glob: str | None = None,
        literal: bool = False,
        case_sensitive: bool = False,
        output_mode: GrepMode = "content",
        before: int = 0,
        after: int = 0,
        multiline: bool = False,
        max_results: int | None = None,
        offset: int = 0,
    ) -> GrepResult:
        return self._run(GrepResult, "grep", locals())

    def execute(
        self,
        command: str,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecuteResult:
        return self._run(ExecuteResult, "execute", locals())

    def execute_stream(
        self,
        command: str,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> Iterator[OutputChunk | ExecuteResult]:
        """`execute`, with its output as it happens: OutputChunks in order, then the
        ExecuteResult `execute` would return. Stopping the iteration ends the command."""
        stream = self.open_stream("execute_stream", _params(locals()))
        try:
            for item in stream:
                if "event" in item:
                    yield OutputChunk.model_validate(item["event"])
                else:
                    yield ExecuteResult.model_validate(item["result"])
        finally:
            stream.cancel()

    def spawn(
        self, command: str, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> ProcessInfo:
        return self._run(ProcessInfo, "spawn", locals())

    def process_output(self, handle: str, since: int = 0, wait_s: float = 0.0) -> ProcessOutput:
        return self._run(ProcessOutput, "process_output", locals())

    def write_stdin(self, handle: str, data: str = "", eof: bool = False) -> ProcessInfo:
        return self._run(ProcessInfo, "write_stdin", locals())

    def signal_process(self, handle: str, signal: str | int = "TERM") -> ProcessInfo:
        return self._run(ProcessInfo, "signal_process", locals())

    def wait_process(self, handle: str, timeout: float | None = None) -> ProcessInfo:
        return self._run(ProcessInfo, "wait_process", locals())

    def list_processes(self) -> ProcessList:
        return self._run(ProcessList, "list_processes", locals())

    def end_processes(self) -> ProcessList:
        """End every running background process; the ones that were running."""
        return self._run(ProcessList, "end_processes", locals())

    # -- async twins ----------------------------------------------------------------

    async def aread_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> ReadFileResult:
        return await self._arun(ReadFileResult, "read_file", locals())

    async def awrite_file(self, path: str, content: str, append: bool = False) -> WriteResult:
        return await self._arun(WriteResult, "write_file", locals())

    async def aedit_file(
        self, path: str, old: str, new: str, replace_all: bool = False
    ) -> EditResult:
        return await self._arun(EditResult, "edit_file", locals())

    async def aread_bytes(self, path: str) -> bytes:
        return _as_bytes(await self.acall("read_bytes", _params(locals())))

    async def awrite_bytes(self, path: str, data: bytes) -> WriteResult:
        return await self._arun(WriteResult, "write_bytes", locals())

    async def alist_dir(self, path: str = WORKSPACE, max_depth: int = 2) -> ListDirResult:
        return await self._arun(ListDirResult, "list_dir", locals())

    async def aglob(
        self,
        pattern: str,
        path: str = WORKSPACE,
        include_dirs: bool = False,
        max_results: int | None = None,
        offset: int = 0,
    ) -> GlobResult:
        return await self._arun(GlobResult, "glob", locals())

    async def agrep(
        self,
        pattern: str,
        path: str = WORKSPACE,
        glob: str | None = None,
        literal: bool = False,
        case_sensitive: bool = False,
        output_mode: GrepMode = "content",
        before: int = 0,
        after: int = 0,
        multiline: bool = False,
        max_results: int | None = None,
        offset: int = 0,
    ) -> GrepResult:
        return await self._arun(GrepResult, "grep", locals())

    async def aexecute(
        self,
        command: str,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecuteResult:
        return await self._arun(ExecuteResult, "execute", locals())

    async def aexecute_stream(
        self,
        command: str,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> AsyncIterator[OutputChunk | ExecuteResult]:
        """Async `execute_stream`: cancelling the consumer (or leaving the loop) ends the
        command."""
        stream = await asyncio.to_thread(self.open_stream, "execute_stream", _params(locals()))
        try:
            async for item in _bridge(stream):
                if "event" in item:
                    yield OutputChunk.model_validate(item["event"])
                else:
                    yield ExecuteResult.model_validate(item["result"])
        finally:
            stream.cancel()

    async def aspawn(
        self, command: str, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> ProcessInfo:
        return await self._arun(ProcessInfo, "spawn", locals())

    async def aprocess_output(
        self, handle: str, since: int = 0, wait_s: float = 0.0
    ) -> ProcessOutput:
        return await self._arun(ProcessOutput, "process_output", locals())

    async def awrite_stdin(self, handle: str, data: str = "", eof: bool = False) -> ProcessInfo:
        return await self._arun(ProcessInfo, "write_stdin", locals())

    async def asignal_process(self, handle: str, signal: str | int = "TERM") -> ProcessInfo:
        return await self._arun(ProcessInfo, "signal_process", locals())

    async def await_process(self, handle: str, timeout: float | None = None) -> ProcessInfo:
        return await self._arun(ProcessInfo, "wait_process", locals())

    async def alist_processes(self) -> ProcessList:
        return await self._arun(ProcessList, "list_processes", locals())

    async def aend_processes(self) -> ProcessList:
        return await self._arun(ProcessList, "end_processes", locals())


async def _bridge(stream: StreamCall) -> AsyncIterator[dict[str, Any]]:
    """A blocking stream's items on the event loop, read by one worker thread."""
    loop = asyncio.get_running_loop()
    items: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def put(kind: str, value: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
            loop.call_soon_threadsafe(items.put_nowait, (kind, value))

    def pump() -> None:
        try:
            for item in stream:
                put("item", item)
            put("end", None)
        except BaseException as exc:
            put("error", exc)

    reader = asyncio.ensure_future(asyncio.to_thread(pump))
    try:
        while True:
            kind, value = await items.get()
            if kind == "item":
                yield value
            elif kind == "error":
                raise value
            else:
                return
    finally:
        stream.cancel()  # wakes the reader thread
        with contextlib.suppress(BaseException):
            await asyncio.shield(reader)


def _params(args: dict[str, Any]) -> dict[str, Any]:
    """A method's `locals()` as the operation's params (a mapping becomes a plain dict;
    anything else goes through as-is, so the runtime answers INVALID_ARGUMENT)."""
    return {
        name: dict(value) if isinstance(value, Mapping) and not isinstance(value, dict) else value
        for name, value in args.items()
        if name != "self"
    }


def _as_bytes(value: Any) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError(f"read_bytes returned {type(value).__name__}, not bytes")
    return value
