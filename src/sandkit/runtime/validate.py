"""Argument checks shared by the runtime operations.

Requests reach the runtime as JSON from anywhere (the agent serves them), so
every operation checks its own arguments and answers INVALID_ARGUMENT.
"""

from __future__ import annotations

from .errors import ErrorCode, SandboxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional


def invalid(message: str) -> SandboxError:
    return SandboxError(ErrorCode.INVALID_ARGUMENT, message)


def require_str(name: str, value: Any, allow_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise invalid("%s must be a string" % name)
    if not allow_empty and value == "":
        raise invalid("%s must not be empty" % name)
    return value


def require_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise invalid("%s must be true or false" % name)
    return value


def require_int(
    name: str, value: Any, minimum: Optional[int] = None, maximum: Optional[int] = None
) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid("%s must be an integer" % name)
    if minimum is not None and value < minimum:
        raise invalid("%s must be >= %d" % (name, minimum))
    if maximum is not None and value > maximum:
        raise invalid("%s must be <= %d" % (name, maximum))
    return value


def optional_int(
    name: str, value: Any, minimum: Optional[int] = None, maximum: Optional[int] = None
) -> Optional[int]:
    return None if value is None else require_int(name, value, minimum, maximum)


def require_number(name: str, value: Any, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid("%s must be a number" % name)
    if value != value or value < minimum:  # NaN or too small
        raise invalid("%s must be >= %s" % (name, minimum))
    return float(value)


def clamp_results(name: str, value: Any, default: int, maximum: int) -> int:
    """None or <= 0 means the default; anything above the ceiling is clamped."""
    if value is None:
        return default
    number = require_int(name, value)
    if number <= 0:
        return default
    return min(number, maximum)


def require_env(value: Any) -> Optional[Dict[str, str]]:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid("env must be a mapping of strings to strings")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise invalid("env must be a mapping of strings to strings")
        if key == "" or "=" in key or "\x00" in key or "\x00" in item:
            raise invalid("env has an invalid name or value: %r" % key)
    return dict(value)
