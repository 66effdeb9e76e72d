"""`sandkit egress`, `expose`, `unexpose`, `gateway`: a box's network (docs/security.md#network)."""

from __future__ import annotations

import contextlib
import importlib.util
from typing import Annotated

import typer

from ..errors import ErrorCode, SandboxError
from .session import Session


def egress(
    session: Session,
    mode: Annotated[
        str | None,
        typer.Argument(help="none, allow or open; without it: show the current policy."),
    ] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option("--allow", help="An allow rule: pypi.org, *.github.com, 10.0.0.0/8:443."),
    ] = None,
    deny: Annotated[list[str] | None, typer.Option("--deny", help="A deny rule.")] = None,
) -> None:
    """Show or change where the sandbox's commands may connect to (also while it runs)."""
    provider, key = session.provider, session.key
    if mode is None:
        if allow or deny:
            raise SandboxError(ErrorCode.INVALID_ARGUMENT, "--allow/--deny need a mode")
        policy = provider.egress(key)
    else:
        policy = provider.set_egress(key, {"mode": mode, "allow": allow or [], "deny": deny or []})
    if session.out.json_mode:
        session.out.json(policy if policy is not None else {"mode": None})
    elif policy is None:
        typer.echo(
            f"not enforced by the {session.provider_name} provider: commands reach what its "
            "platform lets them reach (docs/security.md#network)"
        )
    else:
        typer.echo(policy.describe())


def expose(
    session: Session,
    port: Annotated[int, typer.Argument(help="The port a server in the sandbox listens on.")],
    ttl: Annotated[
        float | None, typer.Option("--ttl", help="Preview URL lifetime in seconds.")
    ] = None,
) -> None:
    """Open a port of the running sandbox; prints its preview URL when the gateway is set up
    (gateway.secrets), else the endpoint."""
    session.sandbox  # noqa: B018 - acquire: a port is opened in a running box
    endpoint = session.provider.expose(session.key, port)
    url = None
    if session.provider.settings.gateway.secrets:
        from ..gateway import create_gateway

        url = create_gateway(session.provider).preview_url(session.key, port, ttl)
    if session.out.json_mode:
        session.out.json({"endpoint": endpoint.model_dump(), "preview_url": url})
        return
    where = endpoint.unix_socket or endpoint.url
    typer.echo(url or f"exposed: {where} (set gateway.secrets for a preview URL)")


def unexpose(
    session: Session, port: Annotated[int, typer.Argument(help="The exposed port.")]
) -> None:
    """Close an exposed port of the sandbox."""
    session.provider.unexpose(session.key, port)


def gateway(
    session: Session,
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8080,
) -> int:
    """Serve the preview gateway: HTTP and WebSocket to exposed ports, for signed URLs only."""
    try:
        import uvicorn

        from ..gateway import create_gateway
    except ImportError as exc:
        raise SandboxError(
            ErrorCode.UNAVAILABLE,
            f"the gateway needs the gateway extra: pip install 'sandkit[gateway]' "
            f"({exc.name} missing)",
        ) from None
    app = create_gateway(session.provider)
    session.out.note(
        f"sandkit preview gateway on http://{host}:{port} (provider {session.provider_name}; "
        f"URLs as {app.public_url}/<sandbox id>/<port>/)"
    )
    # websockets' own protocol implementation where this uvicorn has it (>= 0.35).
    sansio = importlib.util.find_spec("uvicorn.protocols.websockets.websockets_sansio_impl")
    with contextlib.suppress(KeyboardInterrupt):
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_level="warning",
            ws="websockets-sansio" if sansio else "websockets",
        )
    return 0
