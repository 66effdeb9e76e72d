"""Run one agent tool against a sandbox: validate, clamp, call, render.

Every surface (MCP, LangChain, anything custom) goes through `run_tool` or
`arun_tool`, so a model gets the same text and the same structured result
whichever runtime it sits in. Failures come back as a `ToolOutput` with
`is_error` set, never as an empty result and never as an exception.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ..config import LimitsSettings
from ..display import printable, printable_text
from ..errors import ErrorCode, SandboxError
from ..sandbox import Sandbox
from . import render
from .specs import (
    SPECS_BY_NAME,
    TOOL_NAMES,
    BashArgs,
    EditFileArgs,
    GlobArgs,
    GrepArgs,
    LsArgs,
    ReadFileArgs,
    WriteFileArgs,
)

log = logging.getLogger("sandkit.tools")


@dataclass(frozen=True)
class ToolOutput:
    """What a tool call returns: text for the model, the model's JSON for programs."""

    text: str
    structured: dict[str, Any]
    is_error: bool = False

    def __post_init__(self) -> None:
        # Both go out as UTF-8 (an MCP frame, a model's prompt): no lone surrogates.
        object.__setattr__(self, "text", printable_text(self.text))
        object.__setattr__(self, "structured", printable(self.structured))

    @property
    def error_code(self) -> str | None:
        error = self.structured.get("error") if self.is_error else None
        return str(error["code"]) if isinstance(error, dict) else None


@dataclass(frozen=True)
class _Call:
    method: str  # the Sandbox method; its async twin is "a" + method
    kwargs: dict[str, Any]
    render: Callable[[Any], str]


def clamp_results(requested: int | None, default: int, ceiling: int) -> int:
    """`max_results` as served: None or <= 0 means the default; never above the ceiling."""
    if requested is None or requested <= 0:
        return default
    return min(requested, ceiling)


def _read(args: ReadFileArgs, limits: LimitsSettings) -> _Call:
    kwargs = {"path": args.path, "start_line": args.start_line, "end_line": args.end_line}
    return _Call("read_file", kwargs, render.render_read)


def _write(args: WriteFileArgs, limits: LimitsSettings) -> _Call:
    kwargs = {"path": args.path, "content": args.content, "append": args.append}
    return _Call("write_file", kwargs, lambda result: render.render_write(result, args.append))


def _edit(args: EditFileArgs, limits: LimitsSettings) -> _Call:
    kwargs = {
        "path": args.path,
        "old": args.old_string,
        "new": args.new_string,
        "replace_all": args.replace_all,
    }
    return _Call("edit_file", kwargs, render.render_edit)


def _ls(args: LsArgs, limits: LimitsSettings) -> _Call:
    kwargs = {"path": args.path, "max_depth": args.max_depth}
    return _Call("list_dir", kwargs, render.render_ls)


def _glob(args: GlobArgs, limits: LimitsSettings) -> _Call:
    kwargs = {
        "pattern": args.pattern,
        "path": args.path,
        "include_dirs": args.include_dirs,
        "max_results": clamp_results(
            args.max_results, limits.glob_default_results, limits.glob_max_results
        ),
    }
    return _Call("glob", kwargs, render.render_glob)


def _grep(args: GrepArgs, limits: LimitsSettings) -> _Call:
    kwargs = args.model_dump()
    kwargs["max_results"] = clamp_results(
        args.max_results, limits.grep_default_results, limits.grep_max_results
    )
    return _Call("grep", kwargs, render.render_grep)


def _bash(args: BashArgs, limits: LimitsSettings) -> _Call:
    kwargs = {"command": args.command, "timeout": args.timeout, "cwd": args.cwd}
    return _Call("execute", kwargs, render.render_execute)


_PLANNERS: dict[str, Callable[[Any, LimitsSettings], _Call]] = {
    "read_file": _read,
    "write_file": _write,
    "edit_file": _edit,
    "ls": _ls,
    "glob": _glob,
    "grep": _grep,
    "bash": _bash,
}


def _plan(name: str, arguments: Mapping[str, Any] | None, limits: LimitsSettings) -> _Call:
    spec = SPECS_BY_NAME.get(name)
    if spec is None:
        raise SandboxError(
            ErrorCode.INVALID_ARGUMENT,
            f"unknown tool {name!r}; the tools are {', '.join(TOOL_NAMES)}",
        )
    if arguments is not None and not isinstance(arguments, Mapping):
        raise SandboxError(ErrorCode.INVALID_ARGUMENT, f"{name} takes an object of arguments")
    args = spec.args.model_validate(dict(arguments or {}))
    return _PLANNERS[name](args, limits)


def _success(call: _Call, result: BaseModel) -> ToolOutput:
    return ToolOutput(call.render(result), result.model_dump(mode="json"))


def failure(exc: Exception, tool: str = "tool") -> ToolOutput:
    """The rendered form of any failure: `Error [CODE]: message` plus `{"error": ...}`."""
    if isinstance(exc, ValidationError):
        exc = SandboxError(ErrorCode.INVALID_ARGUMENT, _argument_problems(tool, exc))
    elif not isinstance(exc, SandboxError):
        # A bug, not a sandbox condition: log it whole here, show the model only its type
        # (an arbitrary exception message could carry a host path).
        log.exception("tool %s failed unexpectedly", tool)
        exc = SandboxError(
            ErrorCode.INTERNAL, f"{tool} failed unexpectedly ({type(exc).__name__}); see server log"
        )
    return ToolOutput(render.error_line(exc), {"error": exc.to_dict()}, is_error=True)


def _argument_problems(tool: str, exc: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
        for err in exc.errors()
    )
    return f"invalid arguments for {tool}: {problems}"


def run_tool(
    sandbox: Sandbox,
    name: str,
    arguments: Mapping[str, Any] | None,
    limits: LimitsSettings | None = None,
) -> ToolOutput:
    """Run tool `name` with JSON `arguments` on `sandbox`; never raises."""
    try:
        call = _plan(name, arguments, limits or LimitsSettings.model_validate({}))
        result = getattr(sandbox, call.method)(**call.kwargs)
    except Exception as exc:
        return failure(exc, name)
    return _success(call, result)


async def arun_tool(
    sandbox: Sandbox,
    name: str,
    arguments: Mapping[str, Any] | None,
    limits: LimitsSettings | None = None,
) -> ToolOutput:
    """Async `run_tool`: uses the sandbox's async twins (native on remote sandboxes)."""
    try:
        call = _plan(name, arguments, limits or LimitsSettings.model_validate({}))
        result = await getattr(sandbox, "a" + call.method)(**call.kwargs)
    except Exception as exc:
        return failure(exc, name)
    return _success(call, result)
