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
from ..tools import render as plain
from ..tools.render import counted, numbered_lines

__all__ = ["counted", "numbered_lines"]  # shared with the LLM tools

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


def read_hint(result: ReadFileResult) -> str | None:
    return plain.read_hint(result, lambda line: f"continue with --start {line}")


# -- glob / grep ------------------------------------------------------------


def glob_summary(result: GlobResult) -> str:
    return plain.glob_summary(result, lambda offset: f"next page with --offset {offset}")


def grep_summary(result: GrepResult) -> str:
    return plain.grep_summary(result, lambda offset: f"next page with --offset {offset}")


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
    try:
        with _time_budget(HIGHLIGHT_BUDGET_S) as timed:
            lines = _content_lines(result.matches, regex if timed else None)
    except _OutOfTime:
        lines = _content_lines(result.matches, None)
    yield from lines


def _content_lines(matches: list[GrepMatch], regex: re.Pattern[str] | None) -> list[Text]:
    """`path:N: text` for matched lines, `path-N- text` for context, `--` between groups."""

    def match_lines(match: GrepMatch) -> list[Text]:
        text = Text(match.text)
        if regex is not None:
            text.highlight_regex(regex, MATCH_STYLE)
        return list(text.split("\n")) if "\n" in match.text else [text]

    return [
        Text("--", style="cyan") if row is None else _line(*row)
        for row in plain.grep_rows(matches, match_lines, Text)
    ]


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
