"""E2B service failures as `SandboxError` codes.

`CAPACITY`: the service refused for lack of room — rate limit or the team's
concurrent-sandbox quota (HTTP 429), no capacity to place a sandbox (503),
no disk space. Everything else that keeps a box from existing or answering
is `UNAVAILABLE`, with a message that says what to fix: no or wrong API
key, template not found, sandbox gone (killed, timed out), service
unreachable. Classes are matched by name along the MRO, so this module needs
the SDK only for what it recognises, and an SDK that moved a class keeps
working.
"""

from __future__ import annotations

import re

from sandkit.errors import ErrorCode, SandboxError

_CAPACITY_RE = re.compile(
    r"quota|rate limit|too many|maximum number|concurrent|no capacity|not enough space",
    re.IGNORECASE,
)
_CAPACITY_CLASSES = {"RateLimitException", "ServiceBusyException", "NotEnoughSpaceException"}
_GONE_CLASSES = {
    "SandboxNotFoundException",
    "SandboxNotRunningException",
    "SandboxUnreachableException",
}
_NETWORK_CLASSES = {"HTTPError", "TransportError", "ConnectError", "TimeoutException"}


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def is_gone(exc: BaseException) -> bool:
    """The sandbox does not exist or does not run any more (killed, paused, timed out)."""
    names = _names(exc)
    if names & _GONE_CLASSES:
        return True
    return "NotFoundException" in names and "FileNotFoundException" not in names


def service_error(exc: BaseException, doing: str) -> SandboxError:
    """Classify an exception raised by the E2B SDK while `doing` something (a
    `SandboxError` passes unchanged, so callers need no clause of their own for it)."""
    if isinstance(exc, SandboxError):
        return exc
    names = _names(exc)
    text = f"{doing}: {str(exc) or type(exc).__name__}"[:2000]
    status = getattr(exc, "status_code", None)
    if "AuthenticationException" in names:
        message = f"{doing}: E2B refused the credentials ({exc})"[:1900]
        return SandboxError(
            ErrorCode.UNAVAILABLE, f"{message}; set E2B_API_KEY or providers.e2b.api_key"
        )
    if names & _CAPACITY_CLASSES or status in (429, 503):
        return SandboxError(ErrorCode.CAPACITY, text)
    if is_gone(exc):
        return SandboxError(ErrorCode.UNAVAILABLE, f"{text} (the sandbox is gone; acquire again)")
    if "TemplateException" in names:
        return SandboxError(ErrorCode.UNAVAILABLE, f"{text} (rebuild the template)")
    if "SandboxException" in names:
        code = ErrorCode.CAPACITY if _CAPACITY_RE.search(str(exc)) else ErrorCode.UNAVAILABLE
        return SandboxError(code, text)
    if names & _NETWORK_CLASSES or isinstance(exc, OSError | TimeoutError):
        return SandboxError(ErrorCode.UNAVAILABLE, f"{text} (E2B unreachable)")
    return SandboxError(ErrorCode.INTERNAL, f"{doing}: {type(exc).__name__}: {exc}"[:2000])
