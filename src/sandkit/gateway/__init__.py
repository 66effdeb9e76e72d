"""The preview gateway: signed, expiring URLs to the ports a platform exposed.

    from sandkit.gateway import PreviewGateway, create_gateway

    gateway = create_gateway(provider)                  # secrets etc. from settings.gateway
    provider.expose(key, 3000)
    url = gateway.preview_url(key, 3000)                # give this to the user
    app.mount("/preview", gateway)                      # any ASGI framework, or `sandkit gateway`

Needs the `gateway` extra (httpx, websockets; uvicorn with httptools and uvloop for
`sandkit gateway`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .tokens import PreviewClaims, TokenError, sign, verify

if TYPE_CHECKING:
    from ..provider import SandboxProvider
    from .app import PreviewGateway


def create_gateway(provider: SandboxProvider, **overrides: object) -> PreviewGateway:
    """A gateway for `provider`, configured from `provider.settings.gateway`."""
    from ..errors import ErrorCode, SandboxError
    from .app import PreviewGateway

    settings = provider.settings.gateway
    secrets = [s.get_secret_value() for s in settings.secrets]
    if not secrets and "secrets" not in overrides:
        raise SandboxError(
            ErrorCode.INVALID_ARGUMENT,
            "the preview gateway needs gateway.secrets (SANDKIT_GATEWAY__SECRETS='[\"...\"]')",
        )
    options: dict[str, object] = {
        "secrets": secrets,
        "public_url": settings.public_url,
        "base_domain": settings.base_domain,
        "token_ttl_s": settings.token_ttl_s,
        **overrides,
    }
    return PreviewGateway(provider, **options)  # type: ignore[arg-type]


def __getattr__(name: str) -> object:
    if name == "PreviewGateway":
        from .app import PreviewGateway

        return PreviewGateway
    raise AttributeError(name)


__all__ = ["PreviewClaims", "PreviewGateway", "TokenError", "create_gateway", "sign", "verify"]
