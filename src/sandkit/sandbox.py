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
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from .models import (
    EditResult,
    ExecuteResult,
    GlobResult,
    GrepMode,
    GrepResult,
    ListDirResult,
    ReadFileResult,
    WriteResult,
)
from .runtime.limits import Limits
from .runtime.pathmap import WORKSPACE

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

    @property
    def limits(self) -> Limits:
        """The caps this sandbox runs with; tools and integrations read them from here."""
        return Limits()

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
