"""Run one agent tool against a sandbox: validate, call, render.

Every surface (MCP, LangChain, anything custom) goes through `run_tool` or
`arun_tool`, so a model gets the same text and the same structured result
whichever runtime it sits in. Failures come back as a `ToolOutput` with
`is_error` set, never as an empty result and never as an exception.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ..display import printable, printable_text
from ..errors import ErrorCode, SandboxError
from ..models import ExecuteResult, OutputChunk
from ..sandbox import Sandbox
from . import render
from .specs import EXECUTE_TOOLS, SPECS_BY_NAME, TOOL_NAMES, RenderContext, ToolSpec

# The names of the tools offered beside this one (None: what the sandbox allows).
Tools = Collection[str] | None

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


def _plan(
    name: str, arguments: Mapping[str, Any] | None, tools: Tools, sandbox: Sandbox
) -> tuple[ToolSpec, BaseModel]:
    spec = SPECS_BY_NAME.get(name)
    # A bash tool left out because commands cannot run here still says EXECUTE_DISABLED.
    withheld = name in EXECUTE_TOOLS and not sandbox.execute_enabled
    if spec is None or (tools is not None and name not in tools and not withheld):
        offered = [n for n in TOOL_NAMES if tools is None or n in tools]
        raise SandboxError(
            ErrorCode.INVALID_ARGUMENT,
            f"unknown tool {name!r}; the tools are {', '.join(offered)}",
        )
    if arguments is not None and not isinstance(arguments, Mapping):
        raise SandboxError(ErrorCode.INVALID_ARGUMENT, f"{name} takes an object of arguments")
    return spec, spec.args.model_validate(dict(arguments or {}))


def _success(
    spec: ToolSpec, args: BaseModel, result: BaseModel, sandbox: Sandbox, tools: Tools
) -> ToolOutput:
    shell = "bash" in tools if tools is not None else sandbox.execute_enabled
    text = spec.render(result, args, RenderContext(shell=shell))
    return ToolOutput(text, result.model_dump(mode="json"))


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
    progress: Callable[[OutputChunk, int], None] | None = None,
    tools: Tools = None,
) -> ToolOutput:
    """Run tool `name` with JSON `arguments` on `sandbox`; never raises.

    Caps (`max_results` and the like) are the sandbox's: the runtime clamps them.
    With `progress`, a foreground command streams (see `arun_tool`).
    """
    try:
        spec, args = _plan(name, arguments, tools, sandbox)
        operation, kwargs = spec.plan(args)
        if progress is not None and operation == "execute":
            result: BaseModel = _streamed_sync(sandbox, kwargs, progress)
        else:
            result = getattr(sandbox, operation)(**kwargs)
    except Exception as exc:
        return failure(exc, name)
    return _success(spec, args, result, sandbox, tools)


async def arun_tool(
    sandbox: Sandbox,
    name: str,
    arguments: Mapping[str, Any] | None,
    progress: Progress | None = None,
    tools: Tools = None,
) -> ToolOutput:
    """Async `run_tool`: uses the sandbox's async twins (native on remote sandboxes).

    With `progress`, a foreground command streams: `progress(chunk, n)` is awaited
    for its n-th piece of output as it happens (MCP progress notifications, LangChain
    custom events); the result is the same.
    """
    try:
        spec, args = _plan(name, arguments, tools, sandbox)
        operation, kwargs = spec.plan(args)
        if progress is not None and operation == "execute":
            result: BaseModel = await _streamed(sandbox, kwargs, progress)
        else:
            result = await getattr(sandbox, "a" + operation)(**kwargs)
    except Exception as exc:
        return failure(exc, name)
    return _success(spec, args, result, sandbox, tools)


Progress = Callable[[OutputChunk, int], Awaitable[None]]


def _streamed_sync(
    sandbox: Sandbox, kwargs: dict[str, Any], progress: Callable[[OutputChunk, int], None]
) -> BaseModel:
    for count, item in enumerate(sandbox.execute_stream(**kwargs), start=1):
        if isinstance(item, ExecuteResult):
            return item
        progress(item, count)
    raise SandboxError(ErrorCode.INTERNAL, "the command ended without a result")


async def _streamed(sandbox: Sandbox, kwargs: dict[str, Any], progress: Progress) -> BaseModel:
    count = 0
    async for item in sandbox.aexecute_stream(**kwargs):
        if isinstance(item, ExecuteResult):
            return item
        count += 1
        await progress(item, count)
    raise SandboxError(ErrorCode.INTERNAL, "the command ended without a result")
