"""sandkit's Docker provider: one hardened container per (user, thread), the agent inside."""

from .options import DockerOptions
from .provider import DockerProvider, DockerSandbox

__all__ = ["DockerOptions", "DockerProvider", "DockerSandbox"]
