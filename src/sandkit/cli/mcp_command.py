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
) -> int:
    """Serve read_file, write_file, edit_file, ls, glob, grep and bash over MCP.

    stdio (default) serves one client on --user/--thread. With --http each MCP
    session gets its own thread unless the client names one.
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
    server = mcp_server.create_server(
        session.provider,
        user_id=key.user_id,
        default_thread=key.thread_id,
    )
    try:
        if http:
            session.out.note(
                f"sandkit MCP server on http://{host}:{port}{path} "
                f"(provider {session.provider_name}, user {key.user_id}; "
                "one thread per MCP session)"
            )
            mcp_server.serve_http(server, host=host, port=port, path=path)
        else:
            anyio.run(mcp_server.serve_stdio, server)
    except KeyboardInterrupt:
        pass
    return 0
