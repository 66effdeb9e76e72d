"""Error vocabulary shared by every provider.

Stdlib only: the runtime and the in-sandbox agent raise these too, and the
codes travel over the wire unchanged, so a caller can branch on them no
matter where the operation ran.
"""

from __future__ import annotations

import enum

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict


class ErrorCode(str, enum.Enum):
    NOT_FOUND = "NOT_FOUND"
    NOT_A_DIRECTORY = "NOT_A_DIRECTORY"
    IS_A_DIRECTORY = "IS_A_DIRECTORY"
    ACCESS_DENIED = "ACCESS_DENIED"
    READ_ONLY = "READ_ONLY"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    INVALID_PATTERN = "INVALID_PATTERN"
    TOO_LARGE = "TOO_LARGE"
    TIMEOUT = "TIMEOUT"
    EXECUTE_DISABLED = "EXECUTE_DISABLED"
    UNAVAILABLE = "UNAVAILABLE"
    CAPACITY = "CAPACITY"
    INTERNAL = "INTERNAL"

    def __str__(self) -> str:
        return self.value


class SandboxError(Exception):
    """The one exception type callers see; `code` is the stable part."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message

    def __str__(self) -> str:
        return "[%s] %s" % (self.code.value, self.message)

    def __repr__(self) -> str:
        return "SandboxError(%s, %r)" % (self.code.value, self.message)

    def __reduce__(self) -> Any:
        return (SandboxError, (self.code, self.message))

    def to_dict(self) -> Dict[str, str]:
        return {"code": self.code.value, "message": self.message}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "SandboxError":
        try:
            code = ErrorCode(data.get("code"))
        except ValueError:
            code = ErrorCode.INTERNAL
        return cls(code, str(data.get("message", "")))
