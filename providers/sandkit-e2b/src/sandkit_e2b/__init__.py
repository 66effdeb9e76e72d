"""sandkit's E2B provider: one E2B sandbox per (user, thread), the sandkit agent inside."""

from .options import E2BOptions
from .provider import E2BProvider, E2BSandbox

__all__ = ["E2BOptions", "E2BProvider", "E2BSandbox"]
