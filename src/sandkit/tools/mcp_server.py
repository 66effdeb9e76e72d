"""The sandkit tools as an MCP server (official `mcp` SDK, low-level server).

Each `tools/call` answers with the rendered text as content, the result
model as `structuredContent`, and `isError` with `{"error": {"code", ...}}`
on failure. Which sandbox a call touches:

- user: the server's configured user, always (a client cannot pick another);
- thread: the request's `_meta["sandkit/thread_id"]`, else the HTTP header
  `X-Sandkit-Thread`, else one thread per MCP session on streamable HTTP
  (`mcp-<session id>`), else the configured default thread (stdio, and
  2026-07-28 clients, whose HTTP requests carry no session).

Needs the `mcp` extra: `pip install 'sandkit[mcp]'`.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Collection
from typing import Any

import anyio
import uvicorn
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette

from ..errors import SandboxError
from ..models import OutputChunk
from ..provider import SandboxKey, SandboxProvider, check_id
from ..runtime.limits import Limits
from .dispatch import ToolOutput, arun_tool, failure
from .specs import (
    ToolSpec,
    description,
    input_schema,
    instructions,
    output_schema,
    select_specs,
)

log = logging.getLogger("sandkit.mcp")

THREAD_META_KEY = "sandkit/thread_id"
THREAD_HEADER = "x-sandkit-thread"
SESSION_HEADER = "mcp-session-id"
DEFAULT_HTTP_PATH = "/mcp"
# The latest output a progress notification carries while a command runs.
PROGRESS_CHARS = 2000


def session_thread(session_id: str) -> str:
    """The thread of an MCP session: readable when the id allows it, else hashed."""
    thread = f"mcp-{session_id}"
    try:
        return check_id("thread_id", thread)
    except SandboxError:
        return "mcp-" + hashlib.sha256(session_id.encode()).hexdigest()[:32]


def thread_for(
    ctx: ServerRequestContext[Any, Any],
    params: types.CallToolRequestParams,
    default_thread: str,
    session_threads: bool = True,
) -> tuple[str, str]:
    """Which thread this call works on, and why: "meta", "header", "session" or "default"
    (see the module docstring for the order). Without `session_threads` an HTTP
    session that names no thread gets the default thread, not one of its own."""
    meta = params.meta or {}
    named = meta.get(THREAD_META_KEY)
    if named is not None:
        return str(named), "meta"
    headers = getattr(ctx.request, "headers", None)  # a starlette Request on HTTP, else None
    if headers is not None:
        if headers.get(THREAD_HEADER):
            return str(headers[THREAD_HEADER]), "header"
        if session_threads and headers.get(SESSION_HEADER):
            return session_thread(headers[SESSION_HEADER]), "session"
    return default_thread, "default"


def _tool_list(specs: tuple[ToolSpec, ...], limits: Limits) -> list[types.Tool]:
    return [
        types.Tool(
            name=spec.name,
            description=description(spec, limits),
            input_schema=input_schema(spec, limits),
            output_schema=output_schema(spec),
            annotations=types.ToolAnnotations(
                read_only_hint=spec.read_only,
                destructive_hint=not spec.read_only,
                idempotent_hint=spec.read_only,
                open_world_hint=False,
            ),
        )
        for spec in specs
    ]


def _result(output: ToolOutput, thread: str | None = None) -> types.CallToolResult:
    # The thread a call worked on travels in the result's _meta (clients can show it).
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=output.text)],
        structured_content=output.structured,
        is_error=output.is_error,
        _meta=None if thread is None else {THREAD_META_KEY: thread},
    )


def create_server(
    provider: SandboxProvider,
    *,
    user_id: str,
    default_thread: str = "default",
    name: str = "sandkit",
    include: Collection[str] | None = None,
    exclude: Collection[str] | None = None,
    session_threads: bool = True,
) -> Server[Any]:
    """An MCP server exposing the sandkit tools for `provider`'s sandboxes of `user_id`.

    The tools are what the provider allows (no bash tools where commands cannot
    run), narrowed by `include` (only these) and `exclude` (not these). With
    `session_threads` (the default) an HTTP session that names no thread works on
    a thread of its own, `mcp-<session id>`: a reconnecting client starts empty,
    which the server logs once per session; without it, such sessions share
    `default_thread`.
    """
    check_id("user_id", user_id)
    check_id("thread_id", default_thread)
    specs = select_specs(provider.execute_enabled, include, exclude)
    names = frozenset(spec.name for spec in specs)
    tools = _tool_list(specs, provider.limits)  # what its sandboxes run with
    announced: set[str] = set()

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name not in names:
            # Not a tool failure the model can fix: a protocol error, as the spec says.
            raise MCPError(types.INVALID_PARAMS, f"unknown tool: {params.name}")
        try:
            thread, why = thread_for(ctx, params, default_thread, session_threads)
            if why == "session" and thread not in announced:
                announced.add(thread)
                log.warning(
                    "MCP session names no thread (no %s header): it works on thread %s, "
                    "new and empty for each session; set the header or start the server "
                    "with --thread to keep one thread across reconnects",
                    THREAD_HEADER,
                    thread,
                )
            key = SandboxKey(user_id, thread)
            # Starting a box can take seconds (a container, a pod): not on the event loop.
            sandbox = await anyio.to_thread.run_sync(provider.acquire, key)
        except Exception as exc:
            return _result(failure(exc, params.name))

        async def progress(chunk: OutputChunk, count: int) -> None:
            # A no-op unless the client asked for progress (a progressToken in _meta).
            await ctx.session.report_progress(count, None, chunk.text[-PROGRESS_CHARS:])

        output = await arun_tool(sandbox, params.name, params.arguments, progress, names)
        return _result(output, thread)

    return Server(
        name,
        version=_version(),
        instructions=instructions(names),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sandkit")
    except PackageNotFoundError:
        return "0"


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client over this process's stdin/stdout until it disconnects."""
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def http_app(
    server: Server[Any], host: str = "127.0.0.1", path: str = DEFAULT_HTTP_PATH
) -> Starlette:
    """The streamable-HTTP ASGI app (stateful: each session gets an id, hence a thread)."""
    return server.streamable_http_app(streamable_http_path=path, host=host)


def serve_http(
    server: Server[Any],
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = DEFAULT_HTTP_PATH,
    log_level: str = "warning",
) -> None:
    """Serve streamable HTTP at http://HOST:PORT/PATH until interrupted."""
    config = uvicorn.Config(http_app(server, host, path), host=host, port=port, log_level=log_level)
    uvicorn.Server(config).run()
