"""What each agent tool is called, what it takes and what it tells the model.

The argument models are the single source of the JSON schemas (MCP input
schemas, LangChain args schemas) and of argument validation. Descriptions
teach the workflow (glob -> grep -> read_file -> edit_file) and name every
bound; `$name` placeholders are filled from the configured limits, so the
schema a model sees states the numbers this deployment enforces.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import models
from ..errors import ErrorCode, SandboxError
from ..models import GrepMode
from ..runtime.limits import Limits
from ..runtime.operations import OPERATIONS
from ..runtime.pathmap import WORKSPACE
from . import render
from .render import TOOL_LINE_CHARS

PATH_HELP = f"Absolute path, or relative to {WORKSPACE}."

_LAYOUT = f"""\
Work under {WORKSPACE} (the default \
directory; relative paths start there); /mnt/user-data/outputs is for results \
and /mnt/user-data/uploads holds the user's files (read-only). Paths outside \
/mnt/user-data (and /mnt/skills when present) are refused."""
_ANSWERS = """Every tool answers with text; a failure starts with \
"Error [CODE]:" and says what to fix."""

INSTRUCTIONS = f"""\
A sandbox with its own files and shell. {_LAYOUT}
Workflow: glob to find files by name, grep to find where something is, \
read_file to read the lines that matter, edit_file to change exact text \
(write_file only for new files or full rewrites), bash to run builds, tests \
and programs. {_ANSWERS}"""

# The tools that run commands: offered only where the sandbox may run them.
EXECUTE_TOOLS = frozenset({"bash", "bash_output", "bash_input", "bash_kill"})


def instructions(tool_names: Iterable[str]) -> str:
    """The server instructions for the tools actually offered (no shell promised without bash)."""
    names = set(tool_names)
    if "bash" in names:
        return INSTRUCTIONS
    steps = [
        ("glob", "glob to find files by name"),
        ("grep", "grep to find where something is"),
        ("read_file", "read_file to read the lines that matter"),
        ("edit_file", "edit_file to change exact text"),
        ("write_file", "write_file for new files or full rewrites"),
        ("ls", "ls to see a directory"),
    ]
    workflow = ", ".join(text for name, text in steps if name in names)
    return (
        f"A sandbox with its own files; commands cannot run here (no shell). {_LAYOUT}\n"
        f"Workflow: {workflow}. {_ANSWERS}"
    )


class _Args(BaseModel):
    # Unknown arguments are an error, not silently dropped: the model learns the real name.
    model_config = ConfigDict(extra="forbid")


class ReadFileArgs(_Args):
    path: str = Field(description=f"File to read. {PATH_HELP}")
    start_line: int | None = Field(
        default=None,
        ge=1,
        description="First line to show (1-based). Omit to start at line 1; to continue a "
        "long file, pass the start_line the previous output named.",
    )
    end_line: int | None = Field(
        default=None,
        ge=1,
        description="Last line to show (inclusive). Omit to read as far as one call allows "
        "($read_max_lines lines).",
    )


class WriteFileArgs(_Args):
    path: str = Field(description=f"File to create or replace. {PATH_HELP}")
    content: str = Field(description="The complete new text of the file (UTF-8).")
    append: bool = Field(default=False, description="Add content to the end instead of replacing.")


class EditFileArgs(_Args):
    path: str = Field(description=f"File to edit. {PATH_HELP}")
    old_string: str = Field(
        description="Exact text to replace, copied from read_file output without the "
        "line-number prefix; whitespace and indentation must match. Include enough "
        "surrounding lines to make it unique."
    )
    new_string: str = Field(description="Replacement text (must differ from old_string).")
    replace_all: bool = Field(
        default=False, description="Replace every occurrence instead of exactly one."
    )


class LsArgs(_Args):
    path: str = Field(default=WORKSPACE, description=f"Directory to list. {PATH_HELP}")
    max_depth: int = Field(
        default=2,
        ge=1,
        description="Levels to descend (1 = direct children; at most $list_max_depth).",
    )


class GlobArgs(_Args):
    pattern: str = Field(
        description="Glob matched against paths relative to `path`: `*` and `?` within one "
        "path segment, `[abc]`, `**` for any number of directories (zero included), "
        "`{a,b}` alternatives. `*.py` matches only files directly in `path`; `**/*.py` "
        "matches at any depth (grep's `glob` filter differs: there `*.py` is any depth). "
        "Examples: `**/*.py`, `src/**/test_*.py`, `*.{md,txt}`."
    )
    path: str = Field(default=WORKSPACE, description=f"Directory to search under. {PATH_HELP}")
    include_dirs: bool = Field(default=False, description="Also return matching directories.")
    max_results: int | None = Field(
        default=None,
        description="How many paths to return: default $glob_default_results, at most "
        "$glob_max_results (larger values are lowered); 0 or less means the default.",
    )
    offset: int = Field(
        default=0, ge=0, description="Skip this many paths: the next page of a long answer."
    )


class GrepArgs(_Args):
    pattern: str = Field(
        description="Python regular expression (or plain text with literal=true). "
        "Case-insensitive unless case_sensitive=true."
    )
    path: str = Field(
        default=WORKSPACE, description=f"Directory (searched recursively) or file. {PATH_HELP}"
    )
    glob: str | None = Field(
        default=None,
        description="Only search files matching this glob: without `/` it matches the file "
        "name at any depth (`*.py`, `*.{ts,tsx}`; unlike the glob tool, where `*.py` is "
        "the top level only), with `/` the path relative to `path`.",
    )
    literal: bool = Field(default=False, description="Treat pattern as plain text.")
    case_sensitive: bool = Field(default=False, description="Match case exactly.")
    output_mode: GrepMode = Field(
        default="content",
        description="content: matching lines as `path:line: text`; files_with_matches: "
        "only the paths; count: matching lines per file.",
    )
    before: int = Field(
        default=0, ge=0, description="Context lines before each match (at most $grep_max_context)."
    )
    after: int = Field(
        default=0, ge=0, description="Context lines after each match (at most $grep_max_context)."
    )
    multiline: bool = Field(
        default=False, description="Let a match span lines (the file is one string)."
    )
    max_results: int | None = Field(
        default=None,
        description="Results per call: default $grep_default_results, at most "
        "$grep_max_results (larger values are lowered); 0 or less means the default.",
    )
    offset: int = Field(
        default=0, ge=0, description="Skip this many results: the next page of a long answer."
    )


class BashArgs(_Args):
    command: str = Field(description="Shell command, run with bash -c (sh when bash is absent).")
    timeout: float | None = Field(
        default=None,
        gt=0,
        description="Seconds before the command is killed: default $exec_default_timeout_s, "
        "at most $exec_max_timeout_s.",
    )
    cwd: str | None = Field(
        default=None, description=f"Working directory; default {WORKSPACE}. {PATH_HELP}"
    )
    run_in_background: bool = Field(
        default=False,
        description="Start it and return at once with a handle (for servers, watchers, long "
        "builds); read its output with bash_output, stop it with bash_kill. No timeout "
        "applies; at most $process_max_live run at once.",
    )


class BashOutputArgs(_Args):
    handle: str = Field(description="The handle bash returned for a background command.")
    since: int = Field(
        default=0,
        ge=0,
        description="Offset the previous bash_output named, to get only new output "
        "(0: from the start).",
    )
    wait_s: float = Field(
        default=0.0,
        ge=0,
        description="Seconds to wait for new output if there is none yet "
        "(at most $process_wait_max_s).",
    )


class BashInputArgs(_Args):
    handle: str = Field(description="The handle of a background command.")
    text: str = Field(description="Text for its stdin; end lines with \\n yourself.")
    eof: bool = Field(default=False, description="Close its stdin afterwards (end of input).")


class BashKillArgs(_Args):
    handle: str = Field(description="The handle of a background command.")
    signal: str = Field(
        default="TERM",
        description="TERM (ask it to stop), KILL (stop it now), INT, HUP, USR1, USR2, ...",
    )


@dataclass(frozen=True)
class RenderContext:
    """What the text may point to: whether the model has bash (a way on from a cut line)."""

    shell: bool = True


Render = Callable[[Any, Any, RenderContext], str]


def _plain(render: Callable[[Any], str]) -> Render:
    return lambda result, _args, _ctx: render(result)


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its argument model and text, and the operation of the table it runs."""

    name: str
    description: str  # a template: `$limit_name` placeholders
    args: type[_Args]
    operation: str
    render: Render  # (result, arguments, context) -> the text the model reads
    # Tool argument -> operation parameter, where the tool's name differs.
    aliases: Mapping[str, str] = field(default_factory=dict)
    # Arguments of the tool's own that choose another operation (see `plan`).
    extras: frozenset[str] = frozenset()
    # (arguments) -> the operation to run instead of `operation`, or None.
    switch: Callable[[Any], str | None] | None = None

    @property
    def result(self) -> type[BaseModel]:
        model: type[BaseModel] = getattr(models, OPERATIONS[self.operation].result)
        return model

    @property
    def read_only(self) -> bool:
        return OPERATIONS[self.operation].read_only

    def plan(self, args: BaseModel) -> tuple[str, dict[str, Any]]:
        """The operation to run for validated tool arguments, and its keyword arguments."""
        operation = (self.switch(args) if self.switch is not None else None) or self.operation
        wanted = set(OPERATIONS[operation].parameter_names)
        kwargs = {
            self.aliases.get(name, name): value
            for name, value in args.model_dump().items()
            if name not in self.extras
        }
        return operation, {k: v for k, v in kwargs.items() if k in wanted}


SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "glob",
        "Find files by path pattern. Start here to locate files by name; then grep to find "
        "content, read_file to read it, edit_file to change it. Returns sorted absolute "
        "paths, at most $glob_max_results per call (paged with max_results and offset). "
        "Directories such as .git, node_modules and virtualenvs are skipped unless you "
        "search inside them.",
        GlobArgs,
        "glob",
        _plain(render.render_glob),
    ),
    ToolSpec(
        "grep",
        "Search file contents with a regular expression: where something is defined, used "
        "or configured. Content mode answers `path:line: text`; then read_file around those "
        "line numbers. Narrow with `glob` (e.g. `*.py`) or `path`. Binary files and files "
        "over $grep_max_file_bytes are skipped; lines are cut to $grep_line_chars "
        "characters. Long answers are paged with max_results and offset.",
        GrepArgs,
        "grep",
        _plain(render.render_grep),
    ),
    ToolSpec(
        "read_file",
        "Read a text file with line numbers (`cat -n` layout: number, tab, line). One call "
        "shows at most $read_max_lines lines; when the file goes on, the output ends with "
        "the start_line to pass next. Read the range you need rather than whole large files. "
        f"Lines over {TOOL_LINE_CHARS} characters are cut with a marker. Binary files are "
        "an error. Read a file before editing it.",
        ReadFileArgs,
        "read_file",
        lambda result, _args, ctx: render.render_read(result, ctx.shell),
    ),
    ToolSpec(
        "edit_file",
        "Replace exact text in an existing file. old_string must occur exactly once "
        "(unless replace_all); otherwise the call fails saying whether it was not found or "
        "occurs several times, and nothing changes. Prefer this to write_file for changes.",
        EditFileArgs,
        "edit_file",
        _plain(render.render_edit),
        {"old_string": "old", "new_string": "new"},
    ),
    ToolSpec(
        "write_file",
        "Create a file or replace its whole content (missing directories are created; the "
        "replace is atomic). Use edit_file to change part of an existing file. At most "
        "$write_max_bytes.",
        WriteFileArgs,
        "write_file",
        lambda result, args, _ctx: render.render_write(result, args.append),
    ),
    ToolSpec(
        "ls",
        "List a directory as an indented tree: directories end in `/`, symlinks in `@`, "
        "files show their size. At most $list_max_entries entries; .git, node_modules, "
        "caches and the like are not listed below the directory you ask for. Use glob to "
        "find files by pattern.",
        LsArgs,
        "list_dir",
        _plain(render.render_ls),
    ),
    ToolSpec(
        "bash",
        "Run a shell command in the sandbox (cwd /mnt/user-data/workspace by default) for "
        "builds, tests, git and programs. Use glob, grep, read_file and edit_file instead of "
        "find, grep, cat and sed for files. Each stream keeps at most $exec_output_bytes "
        "(head and tail). The output ends with the exit code; a command that runs past "
        "its timeout is killed.",
        BashArgs,
        "execute",
        lambda result, args, _ctx: (
            render.render_started(result)
            if args.run_in_background
            else render.render_execute(result)
        ),
        extras=frozenset({"run_in_background"}),
        switch=lambda args: "spawn" if args.run_in_background else None,
    ),
    ToolSpec(
        "bash_output",
        "Read the output of a background command (bash with run_in_background): what it "
        "printed after `since`, both streams in order, and whether it still runs. Pass the "
        "offset it names to get only new output next time; wait_s waits for output to "
        "arrive. Keeps the first and last bytes of up to $process_output_bytes per process.",
        BashOutputArgs,
        "process_output",
        _plain(render.render_process_output),
    ),
    ToolSpec(
        "bash_input",
        "Send text to the stdin of a background command (answers to a prompt, a REPL's "
        "input); eof=true closes its stdin.",
        BashInputArgs,
        "write_stdin",
        lambda result, args, _ctx: render.render_input(result, len(args.text), args.eof),
        aliases={"text": "data"},
    ),
    ToolSpec(
        "bash_kill",
        "Stop a background command: sends a signal (TERM by default, KILL if it does not "
        "stop) to its whole process group.",
        BashKillArgs,
        "signal_process",
        lambda result, args, _ctx: render.render_signal(result, args.signal),
    ),
)

SPECS_BY_NAME = {spec.name: spec for spec in SPECS}
TOOL_NAMES = tuple(spec.name for spec in SPECS)


def select_specs(
    execute_enabled: bool = True,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
) -> tuple[ToolSpec, ...]:
    """The tools to offer: `include` (default all) less `exclude`, and no bash tools where
    commands cannot run. An unknown name is INVALID_ARGUMENT (a typo must not silently
    drop or keep a tool)."""
    wanted = None if include is None else list(include)
    unwanted = list(exclude or ())
    unknown = [n for n in [*(wanted or ()), *unwanted] if n not in SPECS_BY_NAME]
    if unknown:
        raise SandboxError(
            ErrorCode.INVALID_ARGUMENT,
            f"unknown tool {unknown[0]!r}; the tools are {', '.join(TOOL_NAMES)}",
        )
    return tuple(
        spec
        for spec in SPECS
        if (wanted is None or spec.name in wanted)
        and spec.name not in unwanted
        and (execute_enabled or spec.name not in EXECUTE_TOOLS)
    )


def _number(name: str, value: Any) -> str:
    if name.endswith("_bytes") and isinstance(value, int):
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size and value % size == 0:
                return f"{value // size} {unit}"
        return f"{value} bytes"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def fill(text: str, limits: Limits) -> str:
    """Put the configured limits into a description template."""
    values = {name: _number(name, value) for name, value in limits.to_dict().items()}
    return string.Template(text).safe_substitute(values)


def _fill_all(node: Any, limits: Limits) -> Any:
    if isinstance(node, dict):
        return {
            key: fill(value, limits)
            if key == "description" and isinstance(value, str)
            # "title" is pydantic noise the model does not need.
            else _fill_all(value, limits)
            for key, value in node.items()
            if not (key == "title" and isinstance(value, str))
        }
    if isinstance(node, list):
        return [_fill_all(item, limits) for item in node]
    return node


def input_schema(spec: ToolSpec, limits: Limits) -> dict[str, Any]:
    """JSON schema of the tool's arguments, with this deployment's limits filled in."""
    schema: dict[str, Any] = _fill_all(spec.args.model_json_schema(), limits)
    return schema


def output_schema(spec: ToolSpec) -> dict[str, Any]:
    """JSON schema of the structured result (the result model)."""
    schema: dict[str, Any] = spec.result.model_json_schema()
    return schema


def description(spec: ToolSpec, limits: Limits) -> str:
    return fill(spec.description, limits)
