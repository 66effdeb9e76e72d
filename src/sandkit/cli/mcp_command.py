"""`sandkit mcp`: the sandbox tools as an MCP server, over stdio or streamable HTTP."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import ErrorCode, SandboxError
from .session import Session


def mcp(
    session: Session,
    http: Annotated[
        bool, typer.Option("--http", help="Serve streamable HTTP instead of stdio.")
    ] = False,
    host: Annotated[str, typer.Option("--host", help="HTTP: address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="HTTP: port to listen on.")] = 8000,
    path: Annotated[str, typer.Option("--path", help="HTTP: endpoint path.")] = "/mcp",
    include: Annotated[
        list[str] | None,
        typer.Option("--tool", help="Offer only this tool (repeatable; default: all)."),
    ] = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option("--no-tool", help="Do not offer this tool (repeatable)."),
    ] = None,
) -> int:
    """Serve glob, grep, read_file, edit_file, write_file, ls and the bash tools over MCP.

    The bash tools (bash, bash_output, bash_input, bash_kill) are offered only where
    commands may run (local: --allow-execute). stdio (default) serves one client on
    --user/--thread. With --http each MCP session gets its own thread unless the
    client names one, or --thread gives the default for all of them.
    """
    try:
        import anyio

        from ..tools import mcp_server
    except ImportError as exc:
        raise SandboxError(
            ErrorCode.UNAVAILABLE,
            f"the MCP server needs the mcp extra: pip install 'sandkit[mcp]' ({exc.name} missing)",
        ) from None
    key = session.key
    # An explicit --thread is every HTTP session's thread unless the client names one.
    shared_thread = session.opts.thread is not None
    server = mcp_server.create_server(
        session.provider,
        user_id=key.user_id,
        default_thread=key.thread_id,
        include=include or None,
        exclude=exclude,
        session_threads=not shared_thread,
    )
    try:
        if http:
            threads = (
                f"thread {key.thread_id} unless a client names one"
                if shared_thread
                else "a new thread per MCP session unless the client sends "
                "X-Sandkit-Thread; --thread sets one for all"
            )
            session.out.note(
                f"sandkit MCP server on http://{host}:{port}{path} "
                f"(provider {session.provider_name}, user {key.user_id}; {threads})"
            )
            mcp_server.serve_http(server, host=host, port=port, path=path)
        else:
            anyio.run(mcp_server.serve_stdio, server)
    except KeyboardInterrupt:
        pass
    return 0
