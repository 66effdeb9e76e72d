"""Signed, expiring preview tokens bound to (user, thread, port).

    token = base64url(claims) "." base64url(HMAC-SHA256(secret, "sandkit-preview-v1." claims))

`claims` is compact JSON: user `u`, thread `t`, port `p`, expiry `e` (Unix seconds) and a
random nonce `n`. A token opens one port of one sandbox until it expires: the gateway
checks the signature (any of the configured secrets, so a secret can be rotated), the
expiry, and that the sandbox and port the request addresses are the token's own. Nothing
is stored: a token cannot be revoked before it expires, so keep the lifetime short.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Sequence

from ..provider import SandboxKey

CONTEXT = b"sandkit-preview-v1."
MIN_SECRET_BYTES = 16
MAX_TOKEN_CHARS = 2048


class TokenError(Exception):
    """Why a token does not open what it was presented for (safe to show the user)."""


@dataclasses.dataclass(frozen=True)
class PreviewClaims:
    key: SandboxKey
    port: int
    expires: float


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: str, payload: str) -> bytes:
    return hmac.new(
        secret.encode("utf-8"), CONTEXT + payload.encode("ascii"), hashlib.sha256
    ).digest()


def _check_secret(secret: str) -> str:
    if len(secret.encode("utf-8")) < MIN_SECRET_BYTES:
        raise ValueError(f"a preview secret needs at least {MIN_SECRET_BYTES} bytes")
    return secret


def sign(secret: str, key: SandboxKey, port: int, ttl_s: float, now: float | None = None) -> str:
    """A token for `port` of `key`'s sandbox, valid for `ttl_s` seconds."""
    if not 1 <= int(port) <= 65535:
        raise ValueError("port must be 1-65535")
    if ttl_s <= 0:
        raise ValueError("ttl_s must be > 0")
    expires = int((time.time() if now is None else now) + ttl_s)
    claims = {
        "u": key.user_id,
        "t": key.thread_id,
        "p": int(port),
        "e": expires,
        "n": _b64(secrets.token_bytes(8)),
    }
    payload = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
    return payload + "." + _b64(_mac(_check_secret(secret), payload))


def verify(
    secrets_: Sequence[str],
    token: str,
    sandbox_id: str | None = None,
    port: int | None = None,
    now: float | None = None,
) -> PreviewClaims:
    """The token's claims if it is genuine, unexpired and (when given) for this sandbox
    and port; TokenError otherwise."""
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS:
        raise TokenError("malformed preview token")
    payload, dot, signature = token.partition(".")
    if not dot or not payload or not signature:
        raise TokenError("malformed preview token")
    try:
        given = _unb64(signature)
        payload.encode("ascii")
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise TokenError("malformed preview token") from None
    if not any(hmac.compare_digest(given, _mac(s, payload)) for s in secrets_):
        raise TokenError("preview token not signed by this gateway")
    try:
        claims = json.loads(_unb64(payload))
        key = SandboxKey(str(claims["u"]), str(claims["t"]))
        token_port = int(claims["p"])
        expires = float(claims["e"])
    except Exception:
        raise TokenError("malformed preview token") from None
    if (time.time() if now is None else now) >= expires:
        raise TokenError("preview token expired")
    if sandbox_id is not None and key.sandbox_id != sandbox_id:
        raise TokenError("preview token is for another sandbox")
    if port is not None and token_port != port:
        raise TokenError("preview token is for another port")
    return PreviewClaims(key, token_port, expires)
