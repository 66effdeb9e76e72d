"""Kubernetes API failures as `SandboxError` codes.

API unreachable, RBAC refusal, namespace or pod missing, image missing:
`UNAVAILABLE` (no box right now; the message says what to fix). A quota
refusal, an unschedulable pod or our own `max_running` cap: `CAPACITY`.
A pod spec the API rejects (a bad `pod_template`): `INVALID_ARGUMENT`.
Messages are masked: volume errors would otherwise name host paths.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from sandkit.errors import ErrorCode, SandboxError

Masker = Callable[[str], str]

_CAPACITY_RE = re.compile(r"exceeded quota|insufficient|too many pods|forbidden: .*quota", re.I)


def _identity(text: str) -> str:
    return text


def api_message(exc: BaseException) -> str:
    """The Status message of an ApiException (or the exception text)."""
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str) and body:
        try:
            status = json.loads(body)
        except ValueError:
            return body[:1000]
        if isinstance(status, dict) and status.get("message"):
            return str(status["message"])
    reason = getattr(exc, "reason", None)
    return str(reason or exc)


def api_error(exc: BaseException, doing: str, mask: Masker = _identity) -> SandboxError:
    """Classify an exception raised by the kubernetes client while `doing` something (a
    `SandboxError` passes unchanged, so callers need no clause of their own for it)."""
    if isinstance(exc, SandboxError):
        return exc
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    if isinstance(exc, ApiException):
        status = exc.status or 0
        text = mask(f"{doing}: {api_message(exc)}")[:2000]
        if status == 403 and _CAPACITY_RE.search(text):
            return SandboxError(ErrorCode.CAPACITY, text)
        if status in (401, 403):
            return SandboxError(
                ErrorCode.UNAVAILABLE,
                f"{text} (HTTP {status}: check the credentials and the RBAC Role; "
                "deploy/kubernetes has the one the provider needs)",
            )
        if status == 422:
            return SandboxError(ErrorCode.INVALID_ARGUMENT, f"the API rejected the pod: {text}")
        if status == 0:
            return SandboxError(ErrorCode.UNAVAILABLE, f"{text} (Kubernetes API unreachable)")
        return SandboxError(ErrorCode.UNAVAILABLE, f"{text} (HTTP {status})")
    if isinstance(exc, ConfigException):
        return SandboxError(ErrorCode.UNAVAILABLE, mask(f"{doing}: no cluster configured: {exc}"))
    if isinstance(exc, OSError) or type(exc).__module__.startswith("urllib3"):
        return SandboxError(
            ErrorCode.UNAVAILABLE, mask(f"{doing}: Kubernetes API unreachable: {exc}")[:2000]
        )
    return SandboxError(ErrorCode.INTERNAL, mask(f"{doing}: {type(exc).__name__}: {exc}")[:2000])
