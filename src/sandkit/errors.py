"""`SandboxError` and `ErrorCode`, defined in the stdlib-only runtime so the
in-sandbox agent raises the very same classes."""

from .runtime.errors import ErrorCode, SandboxError

__all__ = ["ErrorCode", "SandboxError"]
