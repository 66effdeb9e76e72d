"""Docker engine failures as `SandboxError` codes.

Engine unreachable, image missing, container gone: `UNAVAILABLE` (the box
cannot be reached or started; the message says what to fix). The engine
refusing for lack of resources or our own `max_running` cap: `CAPACITY`.
Messages are masked: bind-mount errors would otherwise name host paths.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import docker.errors
import requests.exceptions

from sandkit.errors import ErrorCode, SandboxError

Masker = Callable[[str], str]

_CAPACITY_RE = re.compile(
    r"cannot allocate memory|no space left|out of memory|too many|resource temporarily "
    r"unavailable|quota",
    re.IGNORECASE,
)


def _identity(text: str) -> str:
    return text


def engine_error(exc: BaseException, doing: str, mask: Masker = _identity) -> SandboxError:
    """Classify an exception raised by the docker SDK while `doing` something (a
    `SandboxError` passes unchanged, so callers need no clause of their own for it)."""
    if isinstance(exc, SandboxError):
        return exc
    if isinstance(exc, docker.errors.ImageNotFound):
        return SandboxError(ErrorCode.UNAVAILABLE, mask(f"{doing}: image not found: {_text(exc)}"))
    if isinstance(exc, docker.errors.NotFound):
        return SandboxError(
            ErrorCode.UNAVAILABLE, mask(f"{doing}: container is gone: {_text(exc)}")
        )
    if isinstance(exc, docker.errors.APIError):
        text = mask(f"{doing}: {_text(exc)}")
        code = ErrorCode.CAPACITY if _CAPACITY_RE.search(text) else ErrorCode.UNAVAILABLE
        return SandboxError(code, text[:2000])
    if isinstance(exc, (docker.errors.DockerException, requests.exceptions.RequestException)):
        return SandboxError(
            ErrorCode.UNAVAILABLE, mask(f"{doing}: Docker engine unreachable: {exc}")[:2000]
        )
    if isinstance(exc, OSError):
        return SandboxError(ErrorCode.UNAVAILABLE, mask(f"{doing}: {exc}")[:2000])
    return SandboxError(ErrorCode.INTERNAL, mask(f"{doing}: {type(exc).__name__}: {exc}")[:2000])


def box_state_error(exc: BaseException, what: str) -> SandboxError | None:
    """The engine says the box is gone (404) or not running (409, an exec into it):
    UNAVAILABLE, and what to do; None for any other failure (the box is not known dead)."""
    if isinstance(exc, docker.errors.NotFound):
        state = "is gone"
    elif isinstance(exc, docker.errors.APIError) and exc.status_code == 409:
        state = "is not running"
    else:
        return None
    return SandboxError(ErrorCode.UNAVAILABLE, f"{what} {state}; acquire it again")


def _text(exc: docker.errors.DockerException) -> str:
    explanation = getattr(exc, "explanation", None)
    if isinstance(explanation, bytes):
        explanation = explanation.decode("utf-8", "replace")
    return str(explanation or exc)
