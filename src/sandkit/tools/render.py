"""Plain-text renderings of the result models: what a model (or a pipe) reads.

One place decides the wording of summaries, hints and errors, so the LLM
tools, the MCP server and the CLI say the same thing. No rich, no colour:
the CLI adds its styling on top of these strings.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..errors import SandboxError
from ..models import (
    EditResult,
    ExecuteResult,
    GlobResult,
    GrepMatch,
    GrepResult,
    ListDirResult,
    ProcessInfo,
    ProcessOutput,
    ReadFileResult,
    WriteResult,
)

T = TypeVar("T")

# Lines longer than this are cut in tool output: one minified line must not
# eat a model's context. The CLI prints lines whole.
TOOL_LINE_CHARS = 2000

NextStep = Callable[[int], str]


def tool_read_step(line: int) -> str:
    return f"call again with start_line={line} to continue"


def tool_page_step(offset: int) -> str:
    return f"call again with offset={offset}"


def counted(count: int, singular: str, plural: str) -> str:
    return f"{count} {singular if count == 1 else plural}"


# The runtime words its messages in the API's names; each surface says them in its own.
_SINGULAR = (re.compile(r"\((1) lines\)"), r"(\1 line)")
# timeout=-1 and timeout=0 fail the same way, so they read the same way.
_TIMEOUT = (re.compile(r"^timeout must be >= 0(?:\.0)?$"), "timeout must be > 0 seconds")
TOOL_WORDING: tuple[tuple[re.Pattern[str], str], ...] = (
    _SINGULAR,
    _TIMEOUT,
    (re.compile(r"; use read_bytes to download it"), "; read_file reads text files only"),
)
CLI_WORDING: tuple[tuple[re.Pattern[str], str], ...] = (
    _SINGULAR,
    _TIMEOUT,
    (re.compile(r"\buse read_bytes to download it"), "use sandkit read --raw to download it"),
    (re.compile(r"\bset replace_all\b"), "pass --all"),
    (re.compile(r"\bmax_depth\b"), "--depth"),
    (re.compile(r"\bstart_line\b"), "--start"),
    (re.compile(r"\bend_line\b"), "--end"),
    (re.compile(r"\bmax_results\b"), "--max"),
    (re.compile(r"^timeout must be\b"), "--timeout must be"),
)


def worded(message: str, wording: tuple[tuple[re.Pattern[str], str], ...]) -> str:
    for pattern, replacement in wording:
        message = pattern.sub(replacement, message)
    return message


def error_line(exc: SandboxError) -> str:
    """`Error [CODE]: message`: the code first, so a model can branch and correct itself."""
    return f"Error [{exc.code.value}]: {worded(exc.message, TOOL_WORDING)}"


# -- read_file ----------------------------------------------------------------


# The runtime's note on a line cut at the byte cap (runtime/fileops.py CUT_MARKER).
RUNTIME_CUT = re.compile(
    r"\[\.\.\. line (\d+) cut: (\d+) of (\d+) bytes shown; "
    r"read_bytes returns the whole file \.\.\.\]"
)


@dataclass(frozen=True)
class LineCut:
    """A line shown in part: its number, what is shown and how long it really is."""

    line: int
    shown: int  # characters shown
    total: int  # its length in `unit`
    unit: str  # "characters" or "bytes"

    @property
    def counts(self) -> str:
        if self.unit == "characters":
            return f"{self.shown} of {self.total} characters shown"
        return f"first {self.shown} characters shown of {self.total} bytes"


CutNote = Callable[[LineCut], str]


def tool_cut_note(shell: bool) -> CutNote:
    """The one marker a model reads on a cut line, with a way on through the tools it has."""

    def note(cut: LineCut) -> str:
        way = "grep finds text in it (matches are shown with the text around them)"
        if shell:
            way += f"; bash prints any part of it (e.g. cut -c {cut.shown + 1}-{cut.shown + 2000})"
        return f"… [line cut: {cut.counts}; {way}]"

    return note


def cli_cut_note(cut: LineCut) -> str:
    return f"… [line cut: {cut.counts}; sandkit read --raw prints the whole file]"


def cut_line(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [line cut: {limit} of {len(text)} characters shown]"


def numbered_lines(
    result: ReadFileResult, line_chars: int | None = None, cut_note: CutNote = cli_cut_note
) -> list[str]:
    """`cat -n` style lines (`"     7\\ttext"`) for the served range.

    A line cut short (at `line_chars`, or by the runtime's byte cap) ends in one
    marker, `cut_note`'s, with the true numbers; numbers always match the file.
    """
    if result.end_line == 0 or not result.content:
        return []
    lines = result.content.split("\n")
    if result.content.endswith("\n"):
        lines.pop()
    served = result.end_line - result.start_line + 1
    runtime_cuts: dict[int, int] = {}  # line -> its length in bytes
    leftover = []
    for extra in lines[served:]:
        found = RUNTIME_CUT.search(extra)
        if found:
            runtime_cuts[int(found.group(1))] = int(found.group(3))
        elif extra:
            leftover.append(extra)
    numbered = []
    for number, line in enumerate(lines[:served], start=result.start_line):
        text = line.removesuffix("\r")  # a CRLF file's \r would move a terminal's cursor
        cut: LineCut | None = None
        if line_chars is not None and len(text) > line_chars:
            cut = LineCut(number, line_chars, len(text), "characters")
            text = text[:line_chars]
        if number in runtime_cuts:
            cut = LineCut(number, len(text), runtime_cuts[number], "bytes")
        numbered.append(f"{number:>6}\t{text}{cut_note(cut) if cut else ''}")
    return numbered + [f"{'':>6}\t{line}" for line in leftover]


def read_hint(result: ReadFileResult, next_step: NextStep = tool_read_step) -> str | None:
    """Why the output stops where it does: an empty file, or where to continue."""
    if result.total_lines == 0:
        return f"{result.path} is empty (0 lines)"
    if result.truncated and result.next_start_line is not None:
        return (
            f"showing lines {result.start_line}-{result.end_line} of {result.total_lines}; "
            f"{next_step(result.next_start_line)}"
        )
    return None


def render_read(result: ReadFileResult, shell: bool = True) -> str:
    lines = numbered_lines(result, TOOL_LINE_CHARS, tool_cut_note(shell))
    hint = read_hint(result)
    if hint is not None:
        lines.append(f"({hint})" if lines else hint)
    return "\n".join(lines)


# -- write_file / edit_file ------------------------------------------------------


def render_write(result: WriteResult, append: bool = False) -> str:
    verb = "Appended" if append else ("Created" if result.created else "Replaced")
    return f"{verb} {result.path} ({counted(result.bytes_written, 'byte', 'bytes')})"


def render_edit(result: EditResult) -> str:
    return f"Edited {result.path}: {counted(result.replacements, 'replacement', 'replacements')}"


# -- ls -----------------------------------------------------------------------------


def render_ls(result: ListDirResult) -> str:
    """An indented tree: directories end in `/`, symlinks in `@`, files show bytes."""
    if not result.entries:
        return f"{result.path} is empty"
    lines = [f"{result.path}/"]
    for entry in result.entries:
        name = entry.name + {"dir": "/", "symlink": "@"}.get(entry.kind, "")
        size = f" ({counted(entry.size, 'byte', 'bytes')})" if entry.size is not None else ""
        lines.append(f"{'  ' * entry.depth}{name}{size}")
    if result.truncated:
        lines.append(
            f"(showing first {len(result.entries)} entries; "
            "list a subdirectory or lower max_depth to see the rest)"
        )
    return "\n".join(lines)


# -- glob / grep paging -------------------------------------------------------------


def page_note(count: int, offset: int, truncated: bool, next_page: NextStep) -> str:
    """What follows `Found N ...` on a paged answer (glob and grep page alike)."""
    note = f" (from offset {offset})" if offset else ""
    if truncated:
        note += (
            f" (showing first {count}; more exist: {next_page(offset + count)},"
            " or narrow the path or pattern)"
        )
    return note


# -- glob ---------------------------------------------------------------------------


def glob_summary(result: GlobResult, next_page: NextStep = tool_page_step) -> str:
    if not result.paths:
        where = f" past offset {result.offset}" if result.offset else ""
        return f"No files matched under {result.path}{where}"
    count = len(result.paths)
    found = f"Found {counted(count, 'path', 'paths')} under {result.path}"
    return found + page_note(count, result.offset, result.truncated, next_page)


def render_glob(result: GlobResult) -> str:
    return "\n".join([glob_summary(result), *result.paths])


# -- grep ---------------------------------------------------------------------------


def grep_count(result: GrepResult) -> int:
    return {
        "content": len(result.matches),
        "files_with_matches": len(result.files),
        "count": len(result.counts),
    }[result.output_mode]


def grep_summary(result: GrepResult, next_page: NextStep = tool_page_step) -> str:
    count = grep_count(result)
    noun = ("match", "matches") if result.output_mode == "content" else ("file", "files")
    if count == 0:
        where = f" past offset {result.offset}" if result.offset else ""
        return f"No matches found under {result.path}{where}"
    found = f"Found {counted(count, *noun)} under {result.path}"
    return found + page_note(count, result.offset, result.truncated, next_page)


def grep_rows(
    matches: Sequence[GrepMatch],
    match_lines: Callable[[GrepMatch], list[T]],
    context_line: Callable[[str], T],
) -> list[tuple[str, int, str, T] | None]:
    """Matched and context lines in grep's order; `None` marks a `--` break.

    Context of neighbouring matches overlaps; like grep, each line shows once
    and a matched line wins over the same line shown as context. The two
    callables turn text into the caller's line type (plain or styled).
    """
    lines: dict[tuple[str, int], tuple[str, T]] = {}
    for match in matches:
        number = match.line_number - len(match.before)
        for line in match.before:
            lines.setdefault((match.path, number), ("-", context_line(line)))
            number += 1
        for part in match_lines(match):
            lines[(match.path, number)] = (":", part)
            number += 1
        for line in match.after:
            lines.setdefault((match.path, number), ("-", context_line(line)))
            number += 1
    with_context = any(m.before or m.after for m in matches)
    rows: list[tuple[str, int, str, T] | None] = []
    previous: tuple[str, int] | None = None
    for (path, number), (sep, text) in lines.items():
        if with_context and previous is not None and previous != (path, number - 1):
            rows.append(None)
        rows.append((path, number, sep, text))
        previous = (path, number)
    return rows


def grep_lines(result: GrepResult) -> list[str]:
    """`path:N: text` (content), `path` (files_with_matches) or `path:count` (count)."""
    if result.output_mode == "files_with_matches":
        return list(result.files)
    if result.output_mode == "count":
        return [f"{item.path}:{item.count}" for item in result.counts]
    rows = grep_rows(result.matches, lambda m: m.text.split("\n"), lambda line: line)
    return ["--" if row is None else f"{row[0]}{row[2]}{row[1]}{row[2]} {row[3]}" for row in rows]


def render_grep(result: GrepResult) -> str:
    return "\n".join([grep_summary(result), *grep_lines(result)])


# -- bash ---------------------------------------------------------------------------


def render_execute(result: ExecuteResult) -> str:
    """stdout, then stderr under a marker, then the status line a model should check."""
    parts = []
    if result.stdout:
        parts.append(result.stdout.removesuffix("\n"))
    if result.stderr:
        parts.append("[stderr]\n" + result.stderr.removesuffix("\n"))
    if not parts:
        parts.append("(no output)")
    if result.timed_out:
        seconds = result.duration_ms / 1000
        parts.append(f"[timed out after {seconds:.1f} s and killed; output so far is shown]")
    else:
        parts.append(f"[exit code {result.exit_code}]")
    if result.truncated:
        parts.append("[output truncated: the head and tail of each stream are kept]")
    return "\n".join(parts)


# -- background processes -----------------------------------------------------------------


def render_started(info: ProcessInfo) -> str:
    return (
        f"Started in the background: handle {info.handle} (pid {info.pid}). Read its output "
        f"with bash_output(handle={info.handle!r}); stop it with bash_kill."
    )


def render_process_output(out: ProcessOutput) -> str:
    parts: list[str] = []
    if out.elided_bytes:
        parts.append(f"[{counted(out.elided_bytes, 'byte', 'bytes')} elided]")
    for chunk in out.chunks:
        text = chunk.text.removesuffix("\n")
        parts.append(text if chunk.stream == "stdout" else "[stderr]\n" + text)
    if not out.chunks and not out.elided_bytes:
        parts.append("(no new output)")
    if out.running:
        parts.append(f"[still running; call again with since={out.offset} for new output]")
    else:
        parts.append(f"[exited with code {out.exit_code}; output ends at offset {out.offset}]")
    return "\n".join(parts)


def render_input(info: ProcessInfo, chars: int, eof: bool) -> str:
    closed = "; stdin closed" if eof else ""
    state = "" if info.running else f" (it has exited with code {info.exit_code})"
    return f"Sent {counted(chars, 'character', 'characters')} to {info.handle}{closed}{state}"


def render_signal(info: ProcessInfo, signal: str) -> str:
    state = "running" if info.running else f"exited with code {info.exit_code}"
    return f"Sent {signal} to {info.handle} (pid {info.pid}); it is {state}"
