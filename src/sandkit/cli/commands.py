"""The sandbox commands: one sandbox operation each, rendered or as JSON."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from ..errors import ErrorCode, SandboxError
from ..models import GrepMode, SandboxInfo, WriteResult
from ..runtime.operations import default
from . import render
from .output import EXIT_NO_MATCH, EXIT_OK
from .session import Session

PathArg = Annotated[str, typer.Argument(help="Virtual path (relative = under the workspace).")]
UnderOpt = Annotated[str, typer.Option("--path", help="Directory to search under.")]
F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True)
class Runs:
    """Which operation of the table a command runs, and how its options map to it."""

    operation: str
    aliases: Mapping[str, str]  # option -> operation parameter, where the names differ
    extras: frozenset[str]  # options of the CLI's own (no operation parameter)


def runs(operation: str, *, extras: tuple[str, ...] = (), **aliases: str) -> Callable[[F], F]:
    """Mark a command as the terminal form of `operation` (checked against the table)."""

    def mark(fn: F) -> F:
        fn.runs = Runs(operation, aliases, frozenset(extras))  # type: ignore[attr-defined]
        return fn

    return mark


GREP_MODES: dict[str, GrepMode] = {
    "content": "content",
    "files": "files_with_matches",
    "files_with_matches": "files_with_matches",
    "count": "count",
}


@runs("list_dir", depth="max_depth")
def ls(
    session: Session,
    path: Annotated[str, typer.Argument(help="Directory to list.")] = default("list_dir", "path"),
    depth: Annotated[int, typer.Option("--depth", "-d", help="Levels to descend.")] = default(
        "list_dir", "max_depth"
    ),
) -> None:
    """List a directory as a tree (ignored dirs such as .git and node_modules skipped)."""
    result = session.sandbox.list_dir(path, max_depth=depth)
    if session.out.json_mode:
        session.out.json(result)
        return
    session.out.out.print(render.dir_tree(result))
    if not result.entries:
        session.out.note(f"{result.path} is empty")
    if result.truncated:
        session.out.note("listing truncated; list a subdirectory or lower --depth")


@runs("read_file", start="start_line", end="end_line", extras=("raw",))
def read(
    session: Session,
    path: PathArg,
    start: Annotated[
        int | None, typer.Option("--start", "-s", help="First line (1-based).")
    ] = None,
    end: Annotated[int | None, typer.Option("--end", "-e", help="Last line (inclusive).")] = None,
    raw: Annotated[
        bool, typer.Option("--raw", help="Write the file's bytes to stdout, unnumbered.")
    ] = False,
) -> None:
    """Print a file with line numbers (`cat -n` style), a window at a time."""
    if raw:
        if start is not None or end is not None:
            raise SandboxError(ErrorCode.INVALID_ARGUMENT, "--raw reads the whole file")
        data = session.sandbox.read_bytes(path)
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    result = session.sandbox.read_file(path, start_line=start, end_line=end)
    if session.out.json_mode:
        session.out.json(result)
        return
    for line in render.numbered_lines(result):
        session.out.data(line)
    hint = render.read_hint(result)
    if hint:
        session.out.note(hint)


@runs("write_file", extras=("from_file",))
def write(
    session: Session,
    path: PathArg,
    content: Annotated[
        str | None, typer.Argument(help="Text to write; omit to use --from-file or stdin.")
    ] = None,
    from_file: Annotated[
        Path | None,
        typer.Option("--from-file", "-f", exists=True, dir_okay=False, help="Upload this file."),
    ] = None,
    append: Annotated[bool, typer.Option("--append", "-a", help="Append, don't replace.")] = False,
) -> None:
    """Write (create or replace) a file from an argument, a local file or stdin."""
    result = _write(session, path, content, from_file, append)
    if session.out.json_mode:
        session.out.json(result)
        return
    verb = "Appended" if append else ("Created" if result.created else "Replaced")
    session.out.success(f"{verb} {result.path} ({result.bytes_written} bytes)")


def _write(
    session: Session, path: str, content: str | None, from_file: Path | None, append: bool
) -> WriteResult:
    if content is not None and from_file is not None:
        raise SandboxError(ErrorCode.INVALID_ARGUMENT, "give CONTENT or --from-file, not both")
    if content is not None:
        return session.sandbox.write_file(path, content, append=append)
    if from_file is not None:
        data = from_file.read_bytes()
    elif not sys.stdin.isatty():
        data = sys.stdin.buffer.read()
    else:
        raise SandboxError(
            ErrorCode.INVALID_ARGUMENT, "no content: pass CONTENT, --from-file FILE or pipe stdin"
        )
    if not append:
        return session.sandbox.write_bytes(path, data)  # byte-exact upload
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SandboxError(
            ErrorCode.INVALID_ARGUMENT, "--append needs UTF-8 text; this input is binary"
        ) from None
    return session.sandbox.write_file(path, text, append=True)


@runs("edit_file", replace_all="replace_all")
def edit(
    session: Session,
    path: PathArg,
    old: Annotated[str, typer.Argument(help="Exact text to replace (must occur once).")],
    new: Annotated[str, typer.Argument(help="Replacement text.")],
    replace_all: Annotated[bool, typer.Option("--all", help="Replace every occurrence.")] = False,
) -> None:
    """Replace exact text in a file; OLD must match once unless --all."""
    result = session.sandbox.edit_file(path, old, new, replace_all=replace_all)
    if session.out.json_mode:
        session.out.json(result)
        return
    plural = "" if result.replacements == 1 else "s"
    session.out.success(f"Edited {result.path}: {result.replacements} replacement{plural}")


@runs("glob", dirs="include_dirs")
def glob(
    session: Session,
    pattern: Annotated[
        str,
        typer.Argument(
            help="Glob against paths under --path: * ? [..] within a segment, ** any depth, "
            "{a,b}. '*.py' is the top level only; '**/*.py' any depth (grep --glob '*.py' "
            "matches names at any depth)."
        ),
    ],
    path: UnderOpt = default("glob", "path"),
    dirs: Annotated[bool, typer.Option("--dirs", help="Include directories.")] = False,
    max_results: Annotated[
        int | None, typer.Option("--max", help="Result cap (clamped to the configured max).")
    ] = None,
    offset: Annotated[int, typer.Option("--offset", help="Skip this many paths.")] = 0,
) -> None:
    """Find paths matching a glob pattern, sorted."""
    result = session.sandbox.glob(
        pattern, path=path, include_dirs=dirs, max_results=max_results, offset=offset
    )
    if session.out.json_mode:
        session.out.json(result)
        return
    for found in result.paths:
        session.out.data(found)
    session.out.note(render.glob_summary(result))


@runs("grep", mode="output_mode", extras=("context",))
def grep(
    session: Session,
    pattern: Annotated[str, typer.Argument(help="Python `re` pattern (or text with --literal).")],
    path: UnderOpt = default("grep", "path"),
    glob: Annotated[
        str | None,
        typer.Option(
            "--glob",
            "-g",
            help="Only files matching this glob: without / the file name at any depth "
            "('*.py'), with / the path under --path.",
        ),
    ] = None,
    literal: Annotated[
        bool, typer.Option("--literal", "-F", help="PATTERN is plain text.")
    ] = False,
    # No short form: -s is --start in `read`; one letter means one thing across commands.
    case_sensitive: Annotated[
        bool, typer.Option("--case-sensitive", help="Match case exactly (default: ignore case).")
    ] = False,
    mode: Annotated[
        str,
        typer.Option(
            "--mode", help="content | files_with_matches (short: files) | count, as in the API."
        ),
    ] = default("grep", "output_mode"),
    before: Annotated[int, typer.Option("-B", "--before", help="Context lines before.")] = 0,
    after: Annotated[int, typer.Option("-A", "--after", help="Context lines after.")] = 0,
    context: Annotated[
        int | None, typer.Option("-C", "--context", help="Context lines before and after.")
    ] = None,
    multiline: Annotated[
        bool, typer.Option("--multiline", "-U", help="Let a match span lines.")
    ] = False,
    max_results: Annotated[
        int | None, typer.Option("--max", help="Result cap (clamped to the configured max).")
    ] = None,
    offset: Annotated[int, typer.Option("--offset", help="Skip this many results.")] = 0,
) -> int:
    """Search file contents; exits 1 when nothing matched, like grep."""
    output_mode = GREP_MODES.get(mode)
    if output_mode is None:
        raise SandboxError(
            ErrorCode.INVALID_ARGUMENT,
            f"--mode must be content, files_with_matches (or files) or count, not {mode!r}",
        )
    if context is not None:
        before = before or context
        after = after or context
    result = session.sandbox.grep(
        pattern,
        path=path,
        glob=glob,
        literal=literal,
        case_sensitive=case_sensitive,
        output_mode=output_mode,
        before=before,
        after=after,
        multiline=multiline,
        max_results=max_results,
        offset=offset,
    )
    found = bool(result.matches or result.files or result.counts)
    if session.out.json_mode:
        session.out.json(result)
    else:
        regex = (
            render.highlighter(pattern, literal, case_sensitive, multiline)
            if session.out.out.is_terminal
            else None
        )
        for line in render.grep_lines(result, regex):
            session.out.data(line)
        session.out.note(render.grep_summary(result))
    return EXIT_OK if found else EXIT_NO_MATCH


def release(session: Session) -> None:
    """Stop the thread's box and keep its data; the next command starts it again."""
    _stop(session, remove=False)


def destroy(session: Session) -> None:
    """Remove the thread's box; its files on the host stay (thread data outlives boxes)."""
    _stop(session, remove=True)


def _stop(session: Session, remove: bool) -> None:
    key = session.key
    provider = session.provider
    if remove:
        provider.destroy(key)
    else:
        provider.release(key)
    info = SandboxInfo(
        sandbox_id=key.sandbox_id,
        user_id=key.user_id,
        thread_id=key.thread_id,
        provider=provider.name,
        state="stopped",
    )
    if session.out.json_mode:
        session.out.json(info)
        return
    verb = "Destroyed" if remove else "Released"
    session.out.success(f"{verb} {info.sandbox_id} ({key}) on {info.provider}; thread data kept")
