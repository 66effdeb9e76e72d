"""A `Sandbox` built on one primitive: `call(method, params)`.

Local (in-process runtime) and remote (JSON-RPC agent) sandboxes differ
only in how a call travels; argument marshalling and result validation live
here once, so both return the same models by construction.
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
from .runtime.pathmap import WORKSPACE
from .sandbox import Sandbox

M = TypeVar("M", bound=BaseModel)


class CallingSandbox(Sandbox):
    """Implements every operation (sync and async) as one `call` plus validation."""

    @abc.abstractmethod
    def call(self, method: str, params: dict[str, Any]) -> Any:
        """Run one runtime operation and return its JSON-able result."""

    async def acall(self, method: str, params: dict[str, Any]) -> Any:
        """Async `call`; override for a native implementation."""
        return await asyncio.to_thread(self.call, method, params)

    def _sync(self, model: type[M], method: str, **params: Any) -> M:
        return model.model_validate(self.call(method, params))

    async def _async(self, model: type[M], method: str, **params: Any) -> M:
        return model.model_validate(await self.acall(method, params))

    # -- sync ---------------------------------------------------------------

    def read_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> ReadFileResult:
        return self._sync(
            ReadFileResult, "read_file", path=path, start_line=start_line, end_line=end_line
        )

    def write_file(self, path: str, content: str, append: bool = False) -> WriteResult:
        return self._sync(WriteResult, "write_file", path=path, content=content, append=append)

    def edit_file(self, path: str, old: str, new: str, replace_all: bool = False) -> EditResult:
        return self._sync(
            EditResult, "edit_file", path=path, old=old, new=new, replace_all=replace_all
        )

    def read_bytes(self, path: str) -> bytes:
        return _as_bytes(self.call("read_bytes", {"path": path}))

    def write_bytes(self, path: str, data: bytes) -> WriteResult:
        return self._sync(WriteResult, "write_bytes", path=path, data=data)

    def list_dir(self, path: str = WORKSPACE, max_depth: int = 2) -> ListDirResult:
        return self._sync(ListDirResult, "list_dir", path=path, max_depth=max_depth)

    def glob(
        self,
        pattern: str,
        path: str = WORKSPACE,
        include_dirs: bool = False,
        max_results: int | None = None,
    ) -> GlobResult:
        return self._sync(
            GlobResult,
            "glob",
            pattern=pattern,
            path=path,
            include_dirs=include_dirs,
            max_results=max_results,
        )

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
        return self._sync(
            GrepResult,
            "grep",
            **_grep_params(
                pattern,
                path,
                glob,
                literal,
                case_sensitive,
                output_mode,
                before,
                after,
                multiline,
                max_results,
                offset,
            ),
        )

    def execute(
        self,
        command: str,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecuteResult:
        return self._sync(ExecuteResult, "execute", **_execute_params(command, timeout, env, cwd))

    # -- async ----------------------------------------------------------------

    async def aread_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> ReadFileResult:
        return await self._async(
            ReadFileResult, "read_file", path=path, start_line=start_line, end_line=end_line
        )

    async def awrite_file(self, path: str, content: str, append: bool = False) -> WriteResult:
        return await self._async(
            WriteResult, "write_file", path=path, content=content, append=append
        )

    async def aedit_file(
        self, path: str, old: str, new: str, replace_all: bool = False
    ) -> EditResult:
        return await self._async(
            EditResult, "edit_file", path=path, old=old, new=new, replace_all=replace_all
        )

    async def aread_bytes(self, path: str) -> bytes:
        return _as_bytes(await self.acall("read_bytes", {"path": path}))

    async def awrite_bytes(self, path: str, data: bytes) -> WriteResult:
        return await self._async(WriteResult, "write_bytes", path=path, data=data)

    async def alist_dir(self, path: str = WORKSPACE, max_depth: int = 2) -> ListDirResult:
        return await self._async(ListDirResult, "list_dir", path=path, max_depth=max_depth)

    async def aglob(
        self,
        pattern: str,
        path: str = WORKSPACE,
        include_dirs: bool = False,
        max_results: int | None = None,
    ) -> GlobResult:
        return await self._async(
            GlobResult,
            "glob",
            pattern=pattern,
            path=path,
            include_dirs=include_dirs,
            max_results=max_results,
        )

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
        return await self._async(
            GrepResult,
            "grep",
            **_grep_params(
                pattern,
                path,
                glob,
                literal,
                case_sensitive,
                output_mode,
                before,
                after,
                multiline,
                max_results,
                offset,
            ),
        )

    async def aexecute(
        self,
        command: str,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecuteResult:
        return await self._async(
            ExecuteResult, "execute", **_execute_params(command, timeout, env, cwd)
        )


def _grep_params(
    pattern: str,
    path: str,
    glob: str | None,
    literal: bool,
    case_sensitive: bool,
    output_mode: GrepMode,
    before: int,
    after: int,
    multiline: bool,
    max_results: int | None,
    offset: int,
) -> dict[str, Any]:
    return {
        "pattern": pattern,
        "path": path,
        "glob": glob,
        "literal": literal,
        "case_sensitive": case_sensitive,
        "output_mode": output_mode,
        "before": before,
        "after": after,
        "multiline": multiline,
        "max_results": max_results,
        "offset": offset,
    }


def _execute_params(
    command: str, timeout: float | None, env: Mapping[str, str] | None, cwd: str | None
) -> dict[str, Any]:
    return {
        "command": command,
        "timeout": timeout,
        # Anything but a mapping goes through as-is: the runtime answers INVALID_ARGUMENT.
        "env": dict(env) if isinstance(env, Mapping) else env,
        "cwd": cwd,
    }


def _as_bytes(value: Any) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError(f"read_bytes returned {type(value).__name__}, not bytes")
    return value
