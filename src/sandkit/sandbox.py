"""The `Sandbox` contract: the operations an agent runs on virtual paths.

Every provider returns the same models and raises the same `SandboxError`
codes for the same input. Async twins default to running the sync method in
a worker thread; remote sandboxes override them natively.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Mapping

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


class Sandbox(abc.ABC):
    """One user's thread: files under the virtual layout plus a place to run commands."""

    sandbox_id: str

    # -- sync operations ------------------------------------------------------

    @abc.abstractmethod
    def read_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> ReadFileResult: ...

    @abc.abstractmethod
    def write_file(self, path: str, content: str, append: bool = False) -> WriteResult: ...

    @abc.abstractmethod
    def edit_file(self, path: str, old: str, new: str, replace_all: bool = False) -> EditResult: ...

    @abc.abstractmethod
    def read_bytes(self, path: str) -> bytes: ...

    @abc.abstractmethod
    def write_bytes(self, path: str, data: bytes) -> WriteResult: ...

    @abc.abstractmethod
    def list_dir(self, path: str = WORKSPACE, max_depth: int = 2) -> ListDirResult: ...

    @abc.abstractmethod
    def glob(
        self,
        pattern: str,
        path: str = WORKSPACE,
        include_dirs: bool = False,
        max_results: int | None = None,
    ) -> GlobResult: ...

    @abc.abstractmethod
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
    ) -> GrepResult: ...

    @abc.abstractmethod
    def execute(
        self,
        command: str,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecuteResult: ...

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Drop client-side resources (channels); the box itself is the provider's."""

    # -- async twins ------------------------------------------------------------

    async def aread_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> ReadFileResult:
        return await asyncio.to_thread(self.read_file, path, start_line, end_line)

    async def awrite_file(self, path: str, content: str, append: bool = False) -> WriteResult:
        return await asyncio.to_thread(self.write_file, path, content, append)

    async def aedit_file(
        self, path: str, old: str, new: str, replace_all: bool = False
    ) -> EditResult:
        return await asyncio.to_thread(self.edit_file, path, old, new, replace_all)

    async def aread_bytes(self, path: str) -> bytes:
        return await asyncio.to_thread(self.read_bytes, path)

    async def awrite_bytes(self, path: str, data: bytes) -> WriteResult:
        return await asyncio.to_thread(self.write_bytes, path, data)

    async def alist_dir(self, path: str = WORKSPACE, max_depth: int = 2) -> ListDirResult:
        return await asyncio.to_thread(self.list_dir, path, max_depth)

    async def aglob(
        self,
        pattern: str,
        path: str = WORKSPACE,
        include_dirs: bool = False,
        max_results: int | None = None,
    ) -> GlobResult:
        return await asyncio.to_thread(self.glob, pattern, path, include_dirs, max_results)

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
        return await asyncio.to_thread(
            self.grep,
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
        )

    async def aexecute(
        self,
        command: str,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecuteResult:
        return await asyncio.to_thread(self.execute, command, timeout, env, cwd)
