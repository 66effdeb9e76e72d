"""sandkit: one sandbox API for agent runtimes, many places to run it."""

from .config import Settings
from .errors import ErrorCode, SandboxError
from .models import (
    DirEntry,
    EditResult,
    ExecuteResult,
    GlobResult,
    GrepCount,
    GrepMatch,
    GrepResult,
    ListDirResult,
    ReadFileResult,
    WriteResult,
)
from .provider import SandboxKey, SandboxProvider, available_providers, create_provider
from .sandbox import Sandbox
from .uploads import UploadedFile, UploadList

__all__ = [
    "DirEntry",
    "EditResult",
    "ErrorCode",
    "ExecuteResult",
    "GlobResult",
    "GrepCount",
    "GrepMatch",
    "GrepResult",
    "ListDirResult",
    "ReadFileResult",
    "Sandbox",
    "SandboxError",
    "SandboxKey",
    "SandboxProvider",
    "Settings",
    "UploadList",
    "UploadedFile",
    "WriteResult",
    "available_providers",
    "create_provider",
]
