"""A deepagents `SandboxBackendProtocol` over any sandkit `Sandbox`.

    from deepagents import create_deep_agent
    from sandkit.integrations.deepagents import SandkitBackend

    agent = create_deep_agent(model=..., backend=SandkitBackend(sandbox))

Paths are the sandbox's virtual paths (`/mnt/user-data/workspace/...`);
tell the agent where its workspace is. Semantics follow the protocol's
documentation (deepagents 0.7): `read` pages with a 0-based `offset` and
`limit`, `grep` is a literal, case-sensitive substring search, `glob`
patterns without `/` match file names at any depth, a leading `/` anchors
at the search root, and dot-names match only when the pattern names them.
Results never raise: failures are the `error` field, as `code: message`
with sandkit's error code in lower case (`not_found: ... does not exist`).

Where sandkit differs from a plain shell backend: the jail (paths outside
the sandbox's mounts are `access_denied`), the shared ignore set
(`node_modules`, `.venv`, ... are not searched), execute output is stdout
followed by stderr (not interleaved), and `delete` is not offered.

Needs the `deepagents` extra: `pip install 'sandkit[deepagents]'`.
"""

from __future__ import annotations

import base64
import posixpath
import re
import shlex
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from deepagents.backends.protocol import (
    BackendProtocol,
    DeleteResult,
    EditResult,
    ExecuteResponse,
    FileData,
    FileDownloadResponse,
    FileInfo,
    FileUploadResponse,
    GlobResult,
    GrepMatch,
    GrepResult,
    LsResult,
    ReadResult,
    SandboxBackendProtocol,
    WriteResult,
)
from deepagents.backends.utils import EMPTY_CONTENT_WARNING
from langchain_core.runnables.config import ensure_config

from ..errors import ErrorCode, SandboxError
from ..models import ExecuteResult, ListDirResult, OutputChunk, ReadFileResult
from ..models import GlobResult as SkGlobResult
from ..models import GrepResult as SkGrepResult
from ..provider import SandboxKey, SandboxProvider
from ..runtime.pathmap import SKILLS, UPLOADS, WORKSPACE
from ..sandbox import Sandbox
from ..tools.render import RUNTIME_CUT
from .langchain import key_from_config

__all__ = [
    "SandkitBackend",
    "SandkitFilesBackend",
    "SandkitThreadBackend",
    "sandkit_backend",
    "sandkit_thread_backend",
]

# Our codes in deepagents' upload/download vocabulary (anything else: "code: message").
_FILE_ERRORS = {
    ErrorCode.NOT_FOUND: "file_not_found",
    ErrorCode.ACCESS_DENIED: "permission_denied",
    ErrorCode.READ_ONLY: "permission_denied",
    ErrorCode.IS_A_DIRECTORY: "is_directory",
    ErrorCode.NOT_A_DIRECTORY: "invalid_path",
}
# A pattern names dot entries explicitly when a segment or an alternative starts with ".".
_EXPLICIT_DOT = re.compile(r"(?:^|[/{,])\.")


def _error(exc: SandboxError) -> str:
    return f"{exc.code.value.lower()}: {exc.message}"


def _file_error(exc: SandboxError) -> str:
    return _FILE_ERRORS.get(exc.code) or _error(exc)


class SandkitBackend(SandboxBackendProtocol):
    """deepagents' file and shell tools on a sandkit sandbox (local, Docker, Kubernetes, E2B)."""

    grep_max_matches = 5000
    """Hard cap on one `grep` when the caller sets no `max_count` (result marked truncated)."""

    binary_preview_max_bytes = 500 * 1024
    """Largest binary file `read` returns (base64), as deepagents' own sandboxes do."""

    execute_output_bytes = 1024 * 1024
    """Default bound on the output one `execute` returns (stdout and stderr together, in
    the order produced; past it the head and tail are kept and `truncated` is set).
    Never more than the sandbox's `exec_stream_bytes`, what a stream delivers whole."""

    def __init__(self, sandbox: Sandbox, *, execute_output_bytes: int | None = None) -> None:
        self._sandbox = sandbox
        if execute_output_bytes is not None:
            self.execute_output_bytes = max(int(execute_output_bytes), 1024)

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox this call works on."""
        return self._sandbox

    @property
    def id(self) -> str:
        return self.sandbox.sandbox_id

    # -- ls ----------------------------------------------------------------------------

    def ls(self, path: str) -> LsResult:
        try:
            return _ls_result(self.sandbox.list_dir(path, max_depth=1))
        except SandboxError as exc:
            return LsResult(error=_error(exc))

    async def als(self, path: str) -> LsResult:
        try:
            return _ls_result(await self.sandbox.alist_dir(path, max_depth=1))
        except SandboxError as exc:
            return LsResult(error=_error(exc))

    # -- read ----------------------------------------------------------------------------

    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        offset, limit = max(int(offset), 0), max(int(limit), 0)
        try:
            window = self.sandbox.read_file(file_path, offset + 1, offset + max(limit, 1))
        except SandboxError as exc:
            if exc.code is not ErrorCode.INVALID_ARGUMENT:
                return ReadResult(error=_error(exc))
            # Binary, or offset past the end: a one-line probe tells which.
            try:
                probe = self.sandbox.read_file(file_path, 1, 1)
            except SandboxError as probe_exc:
                if probe_exc.code is not ErrorCode.INVALID_ARGUMENT:
                    return ReadResult(error=_error(probe_exc))
                return self._binary(file_path, lambda: self.sandbox.read_bytes(file_path))
            return _past_end(probe, offset, limit)
        return _read_result(window, limit)

    async def aread(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        offset, limit = max(int(offset), 0), max(int(limit), 0)
        try:
            window = await self.sandbox.aread_file(file_path, offset + 1, offset + max(limit, 1))
        except SandboxError as exc:
            if exc.code is not ErrorCode.INVALID_ARGUMENT:
                return ReadResult(error=_error(exc))
            try:
                probe = await self.sandbox.aread_file(file_path, 1, 1)
            except SandboxError as probe_exc:
                if probe_exc.code is not ErrorCode.INVALID_ARGUMENT:
                    return ReadResult(error=_error(probe_exc))
                try:
                    data = await self.sandbox.aread_bytes(file_path)
                except SandboxError as bytes_exc:
                    return self._binary(file_path, _raiser(bytes_exc))
                return self._binary(file_path, lambda: data)
            return _past_end(probe, offset, limit)
        return _read_result(window, limit)

    def _binary(self, file_path: str, fetch: Callable[[], bytes]) -> ReadResult:
        try:
            data = fetch()
        except SandboxError as exc:
            if exc.code is ErrorCode.TOO_LARGE:
                return ReadResult(error=self._preview_error(file_path))
            return ReadResult(error=_error(exc))
        if len(data) > self.binary_preview_max_bytes:
            return ReadResult(error=self._preview_error(file_path))
        content = base64.b64encode(data).decode("ascii")
        return ReadResult(file_data=FileData(content=content, encoding="base64"))

    def _preview_error(self, file_path: str) -> str:
        # deepagents' own wording (BaseSandbox, the standard suite), so callers match it.
        return (
            f"File '{file_path}': Binary file exceeds maximum preview size of "
            f"{self.binary_preview_max_bytes} bytes"
        )

    # -- write / edit --------------------------------------------------------------------

    # deepagents' write is a file transfer (BaseSandbox.write uploads the text), so it is
    # sandkit's write_bytes: atomic, parents created, bounded by `transfer_max_bytes`.

    def write(self, file_path: str, content: str) -> WriteResult:
        try:
            data = _utf8(content)
            return WriteResult(path=self.sandbox.write_bytes(file_path, data).path)
        except SandboxError as exc:
            return WriteResult(error=_error(exc))

    async def awrite(self, file_path: str, content: str) -> WriteResult:
        try:
            data = _utf8(content)
            return WriteResult(path=(await self.sandbox.awrite_bytes(file_path, data)).path)
        except SandboxError as exc:
            return WriteResult(error=_error(exc))

    def edit(
        self,
        file_path: str,
        old_string: str,
        new_string: str,
        replace_all: bool = False,
    ) -> EditResult:
        try:
            result = self.sandbox.edit_file(file_path, old_string, new_string, replace_all)
        except SandboxError as exc:
            return EditResult(error=_error(exc))
        return EditResult(path=result.path, occurrences=result.replacements)

    async def aedit(
        self,
        file_path: str,
        old_string: str,
        new_string: str,
        replace_all: bool = False,
    ) -> EditResult:
        try:
            result = await self.sandbox.aedit_file(file_path, old_string, new_string, replace_all)
        except SandboxError as exc:
            return EditResult(error=_error(exc))
        return EditResult(path=result.path, occurrences=result.replacements)

    # -- grep ----------------------------------------------------------------------------

    def _grep_pages(self, max_count: int | None, path: str | None, glob: str | None) -> _GrepPages:
        page = self.sandbox.limits.grep_max_results
        return _GrepPages(max_count, self.grep_max_matches, page, path, glob)

    def grep(
        self,
        pattern: str,
        path: str | None = None,
        glob: str | None = None,
        *,
        max_count: int | None = None,
    ) -> GrepResult:
        collected = self._grep_pages(max_count, path, glob)
        try:
            while collected.wants_more():
                collected.add(self.sandbox.grep(pattern, **collected.request()))
        except SandboxError as exc:
            return GrepResult(error=_error(exc))
        return collected.result()

    async def agrep(
        self,
        pattern: str,
        path: str | None = None,
        glob: str | None = None,
        *,
        max_count: int | None = None,
    ) -> GrepResult:
        collected = self._grep_pages(max_count, path, glob)
        try:
            while collected.wants_more():
                collected.add(await self.sandbox.agrep(pattern, **collected.request()))
        except SandboxError as exc:
            return GrepResult(error=_error(exc))
        return collected.result()

    # -- glob ----------------------------------------------------------------------------

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        query = _GlobQuery(pattern, path)
        try:
            found = self.sandbox.glob(
                query.pattern, query.root, max_results=self.sandbox.limits.glob_max_results
            )
        except SandboxError as exc:
            return GlobResult(error=_error(exc))
        return query.result(found)

    async def aglob(self, pattern: str, path: str | None = None) -> GlobResult:
        query = _GlobQuery(pattern, path)
        try:
            found = await self.sandbox.aglob(
                query.pattern, query.root, max_results=self.sandbox.limits.glob_max_results
            )
        except SandboxError as exc:
            return GlobResult(error=_error(exc))
        return query.result(found)

    # -- execute -------------------------------------------------------------------------

    def _output_limit(self) -> int:
        return min(self.execute_output_bytes, self.sandbox.limits.exec_stream_bytes)

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        output = _Output(self._output_limit())
        try:
            for item in self.sandbox.execute_stream(command, timeout=_timeout(timeout)):
                output.add(item)
        except SandboxError as exc:
            return ExecuteResponse(output=_error(exc))
        return output.response()

    async def aexecute(
        self,
        command: str,
        *,
        timeout: int | None = None,
    ) -> ExecuteResponse:
        output = _Output(self._output_limit())
        try:
            stream: AsyncIterator[OutputChunk | ExecuteResult] = self.sandbox.aexecute_stream(
                command, timeout=_timeout(timeout)
            )
            async for item in stream:
                output.add(item)
        except SandboxError as exc:
            return ExecuteResponse(output=_error(exc))
        return output.response()

    # -- delete ----------------------------------------------------------------------------

    def delete(self, file_path: str) -> DeleteResult:
        """Remove a file or a directory tree (through the sandbox's shell, in its jail)."""
        try:
            name, where = _delete_target(file_path, self.sandbox.list_dir)
            result = self.sandbox.execute(f"rm -rf -- {shlex.quote(name)}", cwd=where)
        except SandboxError as exc:
            return DeleteResult(error=_error(exc))
        return _deleted(file_path, result)

    async def adelete(self, file_path: str) -> DeleteResult:
        try:
            listing = await self.sandbox.alist_dir(posixpath.dirname(_clean(file_path)), 1)
            name, where = _delete_target(file_path, lambda *_: listing)
            result = await self.sandbox.aexecute(f"rm -rf -- {shlex.quote(name)}", cwd=where)
        except SandboxError as exc:
            return DeleteResult(error=_error(exc))
        return _deleted(file_path, result)

    # -- upload / download ---------------------------------------------------------------

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        responses = []
        for path, data in files:
            if not path.startswith("/"):
                responses.append(FileUploadResponse(path=path, error="invalid_path"))
                continue
            try:
                self.sandbox.write_bytes(path, data)
                responses.append(FileUploadResponse(path=path))
            except SandboxError as exc:
                responses.append(FileUploadResponse(path=path, error=_file_error(exc)))
        return responses

    async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        responses = []
        for path, data in files:
            if not path.startswith("/"):
                responses.append(FileUploadResponse(path=path, error="invalid_path"))
                continue
            try:
                await self.sandbox.awrite_bytes(path, data)
                responses.append(FileUploadResponse(path=path))
            except SandboxError as exc:
                responses.append(FileUploadResponse(path=path, error=_file_error(exc)))
        return responses

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        responses = []
        for path in paths:
            if not path.startswith("/"):
                responses.append(FileDownloadResponse(path=path, error="invalid_path"))
                continue
            try:
                data = self.sandbox.read_bytes(path)
            except SandboxError as exc:
                responses.append(FileDownloadResponse(path=path, error=_file_error(exc)))
                continue
            responses.append(FileDownloadResponse(path=path, content=data))
        return responses

    async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        responses = []
        for path in paths:
            if not path.startswith("/"):
                responses.append(FileDownloadResponse(path=path, error="invalid_path"))
                continue
            try:
                data = await self.sandbox.aread_bytes(path)
            except SandboxError as exc:
                responses.append(FileDownloadResponse(path=path, error=_file_error(exc)))
                continue
            responses.append(FileDownloadResponse(path=path, content=data))
        return responses


class SandkitThreadBackend(SandkitBackend):
    """One backend for many threads: each call's sandbox comes from the LangGraph run.

    Like the LangChain tools, it reads `configurable.thread_id` and
    `configurable.user_id` of the run it is called in (falling back to the ids
    given here), so one compiled deepagents graph serves every thread. Called
    outside a run without fallbacks, every operation fails with
    `invalid_argument: no thread_id ...`.
    """

    def __init__(
        self,
        provider: SandboxProvider,
        *,
        user_id: str | None = "default",
        thread_id: str | None = None,
    ) -> None:
        self.provider = provider
        self.user_id = user_id
        self.thread_id = thread_id

    @property
    def sandbox(self) -> Sandbox:
        # The first call of a thread may start its box (in the calling thread).
        return self.provider.acquire(self._key())

    @property
    def id(self) -> str:
        try:
            return self._key().sandbox_id
        except SandboxError:
            return f"sandkit-{self.provider.name}"

    def _key(self) -> SandboxKey:
        return key_from_config(
            ensure_config(), self.user_id, self.thread_id, fallback="SandkitThreadBackend"
        )


class SandkitFilesBackend(BackendProtocol):
    """deepagents' file tools on a sandkit backend, without `execute` (and `delete`).

    For a sandbox whose commands cannot run (the local provider with execute off):
    deepagents offers its `execute` tool only to a `SandboxBackendProtocol`, so the
    model is not promised a shell it does not have. `sandkit_backend` picks it.
    """

    def __init__(self, backend: SandkitBackend) -> None:
        self.backend = backend

    @property
    def id(self) -> str:
        return self.backend.id

    def ls(self, path: str) -> LsResult:
        return self.backend.ls(path)

    async def als(self, path: str) -> LsResult:
        return await self.backend.als(path)

    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        return self.backend.read(file_path, offset, limit)

    async def aread(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        return await self.backend.aread(file_path, offset, limit)

    def write(self, file_path: str, content: str) -> WriteResult:
        return self.backend.write(file_path, content)

    async def awrite(self, file_path: str, content: str) -> WriteResult:
        return await self.backend.awrite(file_path, content)

    def edit(
        self, file_path: str, old_string: str, new_string: str, replace_all: bool = False
    ) -> EditResult:
        return self.backend.edit(file_path, old_string, new_string, replace_all)

    async def aedit(
        self, file_path: str, old_string: str, new_string: str, replace_all: bool = False
    ) -> EditResult:
        return await self.backend.aedit(file_path, old_string, new_string, replace_all)

    def grep(
        self,
        pattern: str,
        path: str | None = None,
        glob: str | None = None,
        *,
        max_count: int | None = None,
    ) -> GrepResult:
        return self.backend.grep(pattern, path, glob, max_count=max_count)

    async def agrep(
        self,
        pattern: str,
        path: str | None = None,
        glob: str | None = None,
        *,
        max_count: int | None = None,
    ) -> GrepResult:
        return await self.backend.agrep(pattern, path, glob, max_count=max_count)

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        return self.backend.glob(pattern, path)

    async def aglob(self, pattern: str, path: str | None = None) -> GlobResult:
        return await self.backend.aglob(pattern, path)

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        return self.backend.upload_files(files)

    async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        return await self.backend.aupload_files(files)

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        return self.backend.download_files(paths)

    async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        return await self.backend.adownload_files(paths)


def sandkit_backend(
    sandbox: Sandbox, *, execute_output_bytes: int | None = None
) -> SandkitBackend | SandkitFilesBackend:
    """The backend for `sandbox` whose tools follow what it allows: `SandkitBackend`
    where commands may run, `SandkitFilesBackend` (no execute tool) where not."""
    backend = SandkitBackend(sandbox, execute_output_bytes=execute_output_bytes)
    return backend if sandbox.execute_enabled else SandkitFilesBackend(backend)


def sandkit_thread_backend(
    provider: SandboxProvider, *, user_id: str | None = "default", thread_id: str | None = None
) -> SandkitThreadBackend | SandkitFilesBackend:
    """`SandkitThreadBackend`, or its file tools only where `provider` runs no commands."""
    backend = SandkitThreadBackend(provider, user_id=user_id, thread_id=thread_id)
    return backend if provider.execute_enabled else SandkitFilesBackend(backend)


# -- result conversion (pure) ----------------------------------------------------------


def _ls_result(listing: ListDirResult) -> LsResult:
    entries: list[FileInfo] = []
    for entry in listing.entries:
        info: FileInfo = {"path": entry.path, "is_dir": entry.kind == "dir"}
        if entry.size is not None:
            info["size"] = entry.size
        entries.append(info)
    return LsResult(entries=entries)


def _read_result(window: ReadFileResult, limit: int) -> ReadResult:
    if window.total_lines == 0:  # deepagents' own reminder, as its sandboxes answer
        return ReadResult(file_data=FileData(content=EMPTY_CONTENT_WARNING, encoding="utf-8"))
    if limit == 0:
        return ReadResult(file_data=FileData(content="", encoding="utf-8"), no_lines_requested=True)
    lines = window.content.split("\n")
    if window.content.endswith("\n"):
        lines.pop()
    served = window.end_line - window.start_line + 1
    body = [line.removesuffix("\r") for line in lines[:served]]
    for extra in lines[served:]:  # the runtime's note on a line cut at its byte cap
        found = RUNTIME_CUT.search(extra)
        if found:
            shown = len(body[-1])
            body[-1] += (
                f" … [line cut: first {shown} characters shown of "
                f"{found.group(3)} bytes; execute can print the rest, e.g. "
                f"cut -c {shown + 1}-{shown + 2000} FILE]"
            )
        elif extra:
            body[-1] += " " + extra
    return ReadResult(
        file_data=FileData(content="\n".join(body), encoding="utf-8"),
        total_lines=window.total_lines,
        start_line=window.start_line,
        end_line=window.end_line,
        next_offset=window.end_line if window.next_start_line is not None else None,
    )


def _past_end(probe: ReadFileResult, offset: int, limit: int) -> ReadResult:
    if probe.total_lines == 0:
        return ReadResult(file_data=FileData(content=EMPTY_CONTENT_WARNING, encoding="utf-8"))
    if limit == 0:  # nothing asked for: no lines, wherever the offset points
        return ReadResult(file_data=FileData(content="", encoding="utf-8"), no_lines_requested=True)
    return ReadResult(
        error=f"invalid_argument: line offset {offset} exceeds file length "
        f"({probe.total_lines} lines)"
    )


class _GrepPages:
    """Pages of a literal search, collected up to `max_count` (or the hard cap).

    The file filter follows deepagents: a `glob` without `/` matches the file name at
    any depth; with `/` (a leading `/` anchors at the search root) it matches the
    path relative to the search root, and names starting with `.` only when the
    pattern names them.
    """

    def __init__(
        self,
        max_count: int | None,
        hard_cap: int,
        page_size: int,
        path: str | None,
        glob: str | None,
    ) -> None:
        self.cap = hard_cap if max_count is None else max(int(max_count), 0)
        # One match past the cap tells whether anything was left out (deepagents marks a
        # result truncated exactly when more matches existed than it returns, also at 0).
        self.wanted = self.cap + 1
        self.page_size = page_size
        self.matches: list[GrepMatch] = []
        self.seen = 0  # results of sandkit's search consumed (the next page's offset)
        self.more = True
        self.root = path or WORKSPACE
        self.glob = glob or None
        self.by_path = self.glob is not None and "/" in self.glob
        self.top_level = False
        self.explicit_dots = False
        if self.glob is not None and self.by_path:
            pattern = self.glob.lstrip("/")
            self.top_level = "/" not in pattern  # "/*.txt": the search root's own files
            self.explicit_dots = bool(_EXPLICIT_DOT.search(pattern))
            self.glob = pattern

    def wants_more(self) -> bool:
        return self.more and len(self.matches) < self.wanted

    def request(self) -> dict[str, Any]:
        return {
            "path": self.root,
            "glob": self.glob,
            "literal": True,
            "case_sensitive": True,
            "max_results": min(self.wanted - len(self.matches), self.page_size),
            "offset": self.seen,
        }

    def _keeps(self, path: str) -> bool:
        if not self.by_path or not path.startswith(self.root.rstrip("/") + "/"):
            return True
        relative = path[len(self.root.rstrip("/")) + 1 :]
        if self.top_level and "/" in relative:
            return False
        return self.explicit_dots or not any(p.startswith(".") for p in relative.split("/"))

    def add(self, page: SkGrepResult) -> None:
        self.seen += len(page.matches)
        self.matches += [
            GrepMatch(path=m.path, line=m.line_number, text=m.text)
            for m in page.matches
            if self._keeps(m.path)
        ]
        self.more = page.truncated and bool(page.matches)

    def result(self) -> GrepResult:
        return GrepResult(matches=self.matches[: self.cap], truncated=len(self.matches) > self.cap)


class _GlobQuery:
    """deepagents' glob rules translated to sandkit's glob plus a dot-name filter."""

    def __init__(self, pattern: str, path: str | None) -> None:
        self.root = path or WORKSPACE
        self.explicit_dots = bool(_EXPLICIT_DOT.search(pattern))
        if pattern.startswith("/"):  # anchored at the search root
            self.pattern = pattern.lstrip("/")
            self.by_name = False
        elif "/" not in pattern:  # a file name at any depth
            self.pattern = "**/" + pattern
            self.by_name = True
        else:
            self.pattern = pattern
            self.by_name = False

    def visible(self, path: str) -> bool:
        if self.explicit_dots:
            return True
        relative = posixpath.relpath(path, self.root)
        if self.by_name:
            return not posixpath.basename(relative).startswith(".")
        return not any(part.startswith(".") for part in relative.split("/"))

    def result(self, found: SkGlobResult) -> GlobResult:
        matches: list[FileInfo] = [
            {"path": p, "is_dir": False} for p in found.paths if self.visible(p)
        ]
        return GlobResult(
            matches=matches,
            truncated=found.truncated,
            truncation_reason="budget" if found.truncated else None,
        )


def _timeout(timeout: int | None) -> float | None:
    # 0 asks for "no timeout" where a backend supports it; sandkit always bounds a
    # command, so 0 (like None) means the configured default.
    return float(timeout) if timeout else None


def _utf8(content: str) -> bytes:
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SandboxError(
            ErrorCode.INVALID_ARGUMENT, f"content is not valid text ({exc.reason})"
        ) from None


def _raiser(exc: SandboxError) -> Callable[[], bytes]:
    def fetch() -> bytes:
        raise exc

    return fetch


_ELIDED = re.compile(r"\n\.\.\. \[\d+ bytes elided\] \.\.\.\n")


def _byte_head(text: str, size: int) -> str:
    return text.encode("utf-8")[:size].decode("utf-8", "ignore")


def _byte_tail(text: str, size: int) -> str:
    data = text.encode("utf-8")
    return data[max(len(data) - size, 0) :].decode("utf-8", "ignore")


class _Output:
    """A command's output as deepagents wants it: both streams in the order produced,
    bounded by `limit` bytes (head and tail kept, the middle marked)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head: list[str] = []
        self.head_bytes = 0
        self.tail: deque[str] = deque()
        self.tail_bytes = 0
        self.dropped = 0
        self.elided: set[str] = set()
        self.result: ExecuteResult | None = None

    def add(self, item: OutputChunk | ExecuteResult) -> None:
        if isinstance(item, ExecuteResult):
            self.result = item
            for stream in sorted(self.elided):  # the stream's tail comes with the result
                text = item.stdout if stream == "stdout" else item.stderr
                self._text(_ELIDED.split(text)[-1])
            return
        if item.elided:
            self.elided.add(item.stream)
        self._text(item.text)

    def _text(self, text: str) -> None:
        size = len(text.encode("utf-8"))
        if not self.tail and self.head_bytes + size <= self.limit:
            self.head.append(text)
            self.head_bytes += size
            return
        self.tail.append(text)
        self.tail_bytes += size
        while len(self.tail) > 1 and self.tail_bytes - _size(self.tail[0]) >= self.limit // 2:
            dropped = _size(self.tail.popleft())
            self.tail_bytes -= dropped
            self.dropped += dropped

    def response(self) -> ExecuteResponse:
        result = self.result
        if result is None:
            raise SandboxError(ErrorCode.INTERNAL, "the command ended without a result")
        output = "".join(self.head)
        truncated = bool(self.elided)
        if self.tail:
            half = self.limit // 2
            total = self.head_bytes + self.dropped + self.tail_bytes
            head, tail = _byte_head(output, half), _byte_tail("".join(self.tail), half)
            cut = total - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
            output = f"{head}\n... [{cut} bytes of output cut] ...\n{tail}"
            truncated = True
        if result.timed_out:
            output += "\n" if output and not output.endswith("\n") else ""
            output += f"[timed out after {result.duration_ms / 1000:.1f} s; the command was killed]"
        exit_code = None if result.timed_out else result.exit_code
        return ExecuteResponse(output=output, exit_code=exit_code, truncated=truncated)


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _clean(file_path: str) -> str:
    if not file_path.startswith("/"):
        raise SandboxError(ErrorCode.INVALID_ARGUMENT, f"path must be absolute: {file_path!r}")
    return posixpath.normpath(file_path)


def _delete_target(
    file_path: str, list_dir: Callable[[str, int], ListDirResult]
) -> tuple[str, str]:
    """(name, directory) of an existing entry that may be deleted; else a SandboxError."""
    path = _clean(file_path)
    for read_only in (UPLOADS, SKILLS):
        if path == read_only or path.startswith(read_only + "/"):
            raise SandboxError(ErrorCode.READ_ONLY, f"{path} is read-only")
    where, name = posixpath.split(path)
    listing = list_dir(where, 1)
    if name not in _names(listing.entries) and not listing.truncated:
        raise SandboxError(ErrorCode.NOT_FOUND, f"{path} does not exist")
    return name, where


def _names(entries: Iterable[Any]) -> set[str]:
    return {entry.name for entry in entries if entry.depth == 1}


def _deleted(file_path: str, result: ExecuteResult) -> DeleteResult:
    if result.exit_code != 0:
        detail = (result.stderr or result.stdout).strip() or f"rm exited with {result.exit_code}"
        return DeleteResult(error=f"access_denied: cannot delete {file_path}: {detail}")
    return DeleteResult(path=file_path)
