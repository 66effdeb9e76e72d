"""Readable rich renderings of the result models, for people at a terminal.

Machines use `--json`; these functions decide only how a result looks.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
import signal
import threading
from collections.abc import Iterator

from rich.console import Console
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ..models import GlobResult, GrepMatch, GrepResult, ListDirResult, ReadFileResult

MATCH_STYLE = "bold red"
HIGHLIGHT_BUDGET_S = 0.25


def human_size(size: int | None) -> str:
    if size is None:
        return ""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def counted(count: int, singular: str, plural: str) -> str:
    return f"{count} {singular if count == 1 else plural}"


# -- list_dir ---------------------------------------------------------------


def dir_tree(result: ListDirResult) -> Tree:
    """Entries as a tree under the listed directory (entries arrive sorted)."""
    root = Tree(Text(result.path, style="bold blue"))
    nodes: dict[str, Tree] = {result.path: root}
    for entry in result.entries:
        parent = nodes.get(posixpath.dirname(entry.path), root)
        label = Text(entry.name)
        if entry.kind == "dir":
            label.stylize("bold blue")
            label.append("/")
        elif entry.kind == "symlink":
            label.stylize("cyan")
            label.append("@")
        elif entry.kind == "file" and entry.size is not None:
            label.append(f"  {human_size(entry.size)}", style="dim")
        nodes[entry.path] = parent.add(label)
    return root


# -- read_file --------------------------------------------------------------


def numbered_lines(result: ReadFileResult) -> list[str]:
    """`cat -n` style lines (`"     7\\ttext"`) for the served range.

    Text past the served lines (the runtime's marker for a cut long line)
    is shown unnumbered, so numbers always match the file.
    """
    if result.end_line == 0 or not result.content:
        return []
    lines = result.content.split("\n")
    if result.content.endswith("\n"):
        lines.pop()
    served = result.end_line - result.start_line + 1
    numbered = []
    for number, line in enumerate(lines[:served], start=result.start_line):
        text = line.removesuffix("\r")  # a CRLF file's \r would move the cursor
        numbered.append(f"{number:>6}\t{text}")
    return numbered + [f"{'':>6}\t{line}" for line in lines[served:] if line]


def read_hint(result: ReadFileResult) -> str | None:
    if result.total_lines == 0:
        return f"{result.path} is empty"
    if result.truncated and result.next_start_line is not None:
        return (
            f"showing lines {result.start_line}-{result.end_line} of {result.total_lines}; "
            f"continue with --start {result.next_start_line}"
        )
    return None


# -- glob -------------------------------------------------------------------


def glob_summary(result: GlobResult) -> str:
    if not result.paths:
        return f"No files matched {result.pattern!r} under {result.path}"
    count = len(result.paths)
    summary = f"Found {counted(count, 'path', 'paths')} under {result.path}"
    if result.truncated:
        summary += f" (showing first {len(result.paths)}; narrow the path or pattern)"
    return summary


# -- grep -------------------------------------------------------------------


def grep_summary(result: GrepResult) -> str:
    count = {
        "content": len(result.matches),
        "files_with_matches": len(result.files),
        "count": len(result.counts),
    }[result.output_mode]
    noun = ("match", "matches") if result.output_mode == "content" else ("file", "files")
    if count == 0:
        where = f" past offset {result.offset}" if result.offset else ""
        return f"No matches found under {result.path}{where}"
    summary = f"Found {counted(count, *noun)} under {result.path}"
    if result.offset:
        summary += f" (from offset {result.offset})"
    if result.truncated:
        summary += (
            f"; more exist: next page with --offset {result.offset + count},"
            " or narrow the path or pattern"
        )
    return summary


def highlighter(
    pattern: str, literal: bool, case_sensitive: bool, multiline: bool
) -> re.Pattern[str] | None:
    """The pattern compiled for highlighting; None when it cannot be used."""
    flags = 0 if case_sensitive else re.IGNORECASE
    if multiline:
        flags |= re.MULTILINE
    try:
        return re.compile(re.escape(pattern) if literal else pattern, flags)
    except (re.error, RecursionError, OverflowError):
        return None


class _OutOfTime(Exception):
    pass


@contextlib.contextmanager
def _time_budget(seconds: float) -> Iterator[bool]:
    """Interrupt regex highlighting after `seconds` (SIGALRM; main thread only).

    The server already found these matches under its own timeout, but a
    backtracking pattern that the ripgrep engine ran in linear time can
    still take forever in Python `re`, so local highlighting is bounded.
    Yields False when no timer is available; callers then skip the regex.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "setitimer"
    ):
        yield False
        return

    def expire(signum: int, frame: object) -> None:
        raise _OutOfTime

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def grep_lines(result: GrepResult, regex: re.Pattern[str] | None) -> Iterator[Text]:
    """Rendered lines in grep's layout for the result's output mode."""
    if result.output_mode == "files_with_matches":
        for path in result.files:
            yield Text(path, style="magenta")
        return
    if result.output_mode == "count":
        for item in result.counts:
            yield Text.assemble((item.path, "magenta"), ":", (str(item.count), "green"))
        return
    with_context = any(m.before or m.after for m in result.matches)
    try:
        with _time_budget(HIGHLIGHT_BUDGET_S) as timed:
            lines = _content_lines(result.matches, regex if timed else None, with_context)
    except _OutOfTime:
        lines = _content_lines(result.matches, None, with_context)
    yield from lines


def _content_lines(
    matches: list[GrepMatch], regex: re.Pattern[str] | None, with_context: bool
) -> list[Text]:
    """`path:N: text` for matched lines, `path-N- text` for context, `--` between groups.

    Context of neighbouring matches overlaps; like grep, each line shows once
    and a matched line wins over the same line shown as context.
    """
    lines: dict[tuple[str, int], tuple[str, Text]] = {}
    for match in matches:
        number = match.line_number - len(match.before)
        for line in match.before:
            lines.setdefault((match.path, number), ("-", Text(line)))
            number += 1
        text = Text(match.text)
        if regex is not None:
            text.highlight_regex(regex, MATCH_STYLE)
        for part in text.split("\n") if "\n" in match.text else [text]:
            lines[(match.path, number)] = (":", part)
            number += 1
        for line in match.after:
            lines.setdefault((match.path, number), ("-", Text(line)))
            number += 1
    out: list[Text] = []
    previous: tuple[str, int] | None = None
    for (path, number), (sep, text) in lines.items():
        if with_context and previous is not None and previous != (path, number - 1):
            out.append(Text("--", style="cyan"))
        out.append(_line(path, number, sep, text))
        previous = (path, number)
    return out


def _line(path: str, number: int, sep: str, text: Text) -> Text:
    return Text.assemble((path, "magenta"), sep, (str(number), "green"), sep, " ", text)


# -- tables -----------------------------------------------------------------


def print_table(console: Console, title: str, columns: list[str], rows: list[list[Text]]) -> None:
    table = Table(title=title, title_justify="left", show_edge=False)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    console.print(table)
