"""Text that must leave the process as UTF-8: names the file system allows, JSON does not.

A file name may hold bytes that are not UTF-8. The Python API keeps them as
surrogate escapes (as `os.fsdecode` does), so such a name round-trips through
`read_file` and friends. Where text leaves as UTF-8 (MCP, the CLI's JSON, a
model's prompt) a lone surrogate is an encoding error, so each undecodable byte
is shown as `\\xNN` instead: readable, unambiguous enough for a person, never a
crash. A model that must touch such a file goes through `execute`.
"""

from __future__ import annotations

from typing import Any


def printable_text(text: str) -> str:
    """`text`, with each undecodable byte as `\\xNN` (other lone surrogates as `\\udNNN`)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            raw = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a surrogate that is no escaped byte
            return text.encode("utf-8", "backslashreplace").decode("utf-8")
        return raw.decode("utf-8", "backslashreplace")
    return text


def printable(value: Any) -> Any:
    """`printable_text` applied to every string inside JSON-like data (keys included)."""
    if isinstance(value, str):
        return printable_text(value)
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [printable(item) for item in value]
    return value
