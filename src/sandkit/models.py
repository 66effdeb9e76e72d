"""Pydantic models for every request and result that crosses the API.

The runtime (stdlib only) produces plain dicts with exactly these field
names; `Sandbox` implementations validate them into these models, so a
result looks the same whether it was computed in-process or in a pod.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ReadFileResult(_Model):
    path: str = Field(description="Virtual path that was read.")
    content: str = Field(description="Text of lines start_line..end_line, newlines kept.")
    start_line: int = Field(description="First line served (1-based); 0 for an empty file.")
    end_line: int = Field(description="Last line served (inclusive); 0 for an empty file.")
    total_lines: int
    truncated: bool = Field(description="True when the file goes on past end_line.")
    next_start_line: int | None = Field(
        default=None, description="Pass as start_line to continue reading; None at the end."
    )


class WriteResult(_Model):
    path: str
    bytes_written: int
    created: bool = Field(description="True when the file did not exist before.")


class EditResult(_Model):
    path: str
    replacements: int


EntryKind = Literal["file", "dir", "symlink", "other"]


class DirEntry(_Model):
    path: str = Field(description="Virtual absolute path.")
    name: str
    kind: EntryKind
    size: int | None = Field(default=None, description="Bytes, for files.")
    depth: int = Field(description="1 for direct children of the listed directory.")


class ListDirResult(_Model):
    path: str
    entries: list[DirEntry]
    truncated: bool


class GlobResult(_Model):
    path: str = Field(description="Directory the pattern was matched under.")
    pattern: str
    paths: list[str] = Field(description="Virtual absolute paths, sorted.")
    offset: int = Field(default=0, description="Matches skipped before these (paging).")
    truncated: bool = Field(description="True only when more matches existed past this page.")


GrepMode = Literal["content", "files_with_matches", "count"]


class GrepMatch(_Model):
    path: str
    line_number: int = Field(description="1-based line where the match starts.")
    text: str = Field(description="The matched line (multiline: the lines of the match), cut.")
    before: list[str] = Field(default_factory=list, description="Context lines before.")
    after: list[str] = Field(default_factory=list, description="Context lines after.")


class GrepCount(_Model):
    path: str
    count: int = Field(description="Number of matching lines in the file.")


class GrepResult(_Model):
    path: str
    pattern: str
    output_mode: GrepMode
    matches: list[GrepMatch] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)
    counts: list[GrepCount] = Field(default_factory=list)
    offset: int = 0
    truncated: bool = Field(description="True only when more results existed past this page.")


class ExecuteResult(_Model):
    exit_code: int | None = Field(description="None when the command was killed by the timeout.")
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool = Field(description="True when output was cut (head and tail kept).")
    duration_ms: float


Stream = Literal["stdout", "stderr"]


class OutputChunk(_Model):
    """A piece of a command's output, in the order it was produced."""

    stream: Stream
    text: str = Field(description="Cleaned like execute's output (secrets, real paths).")
    elided: bool = Field(
        default=False,
        description="execute_stream: from here this stream's middle is cut (text empty); "
        "its tail comes with the final ExecuteResult.",
    )


class ProcessInfo(_Model):
    handle: str = Field(description="Stable id of the background process (p-...).")
    pid: int = Field(description="Its pid (and process group) inside the sandbox.")
    command: str
    cwd: str = Field(description="Virtual working directory.")
    started_at: float = Field(description="Unix time of the start.")
    running: bool
    exit_code: int | None = Field(
        default=None, description="Once it has ended; a signal death reads 128 + the signal."
    )
    ended_at: float | None = None


class ProcessOutput(_Model):
    handle: str
    chunks: list[OutputChunk] = Field(description="Output after `since`, both streams in order.")
    offset: int = Field(description="Pass as `since` next time to get only what is new.")
    elided_bytes: int = Field(
        default=0, description="Bytes after `since` that were not kept (the buffer's middle)."
    )
    running: bool
    exit_code: int | None = None

    @property
    def stdout(self) -> str:
        return "".join(c.text for c in self.chunks if c.stream == "stdout")

    @property
    def stderr(self) -> str:
        return "".join(c.text for c in self.chunks if c.stream == "stderr")


class ProcessList(_Model):
    processes: list[ProcessInfo]


class SandboxInfo(_Model):
    sandbox_id: str
    user_id: str
    thread_id: str
    provider: str
    state: Literal["running", "stopped", "unknown"] = "running"
