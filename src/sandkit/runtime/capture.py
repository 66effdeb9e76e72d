"""Bounded capture of a command's output, with redaction that survives the cut.

A stream keeps its first and last bytes and counts the middle. Secrets and
real paths are replaced *before* the cut is decided: each kept end is
transformed together with a margin of extra bytes (longer than any secret or
path), and only the part that the transform of the bare end agrees on is
shown. So a secret or real root that straddles the cut is either replaced
whole or not shown at all; a partial one never leaks.
"""

from __future__ import annotations

import re

from .textio import utf8_prefix, utf8_suffix

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Iterable, Optional

    Transform = Callable[[str], str]

REDACTED = "[REDACTED]"
ELIDED_MARKER = "\n... [%d bytes elided] ...\n"
# Longest real path a mask could replace (PATH_MAX), plus a lookahead byte.
_PATH_MARGIN = 4096 + 8


class Redactor:
    """Replaces every configured secret value with REDACTED, longest first."""

    def __init__(self, secrets: Iterable[str]) -> None:
        values = sorted({s for s in secrets if isinstance(s, str) and s}, key=len, reverse=True)
        self.longest_bytes = max((len(v.encode("utf-8", "replace")) for v in values), default=0)
        self._pattern: Optional[re.Pattern[str]] = (
            re.compile("|".join(re.escape(v) for v in values)) if values else None
        )

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(REDACTED, text)


def margin_for(redactor: Redactor) -> int:
    return max(_PATH_MARGIN, redactor.longest_bytes + 8)


def _common_prefix(a: str, b: str) -> int:
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _common_suffix(a: str, b: str) -> int:
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid :] == b[len(b) - mid :]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def safe_head(region: bytes, keep: int, transform: Transform) -> str:
    """Transformed text of region[:keep], trimmed where a replacement straddles keep."""
    full = transform(_decode(region))
    bare = transform(_decode(utf8_prefix(region, keep)))
    return full[: _common_prefix(full, bare)]


def safe_tail(region: bytes, keep: int, transform: Transform) -> str:
    """Transformed text of region[-keep:], trimmed where a replacement straddles the start."""
    full = transform(_decode(region))
    bare = transform(_decode(utf8_suffix(region, keep)))
    n = _common_suffix(full, bare)
    return full[len(full) - n :]


class HeadTail:
    """Keeps `head` + `tail` bytes of a stream (plus margins) in bounded memory."""

    def __init__(self, head: int, tail: int, margin: int) -> None:
        self.head = max(head, 0)
        self.tail = max(tail, 0)
        self._head_cap = self.head + margin
        self._tail_cap = self.tail + margin
        self._first = bytearray()
        self._last = bytearray()
        self._dropped = False
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self._head_cap - len(self._first)
        if room > 0:
            self._first += data[:room]
            data = data[room:]
        if data:
            self._last += data
            excess = len(self._last) - self._tail_cap
            if excess > 0:
                del self._last[:excess]
                self._dropped = True

    @property
    def truncated(self) -> bool:
        return self.total > self.head + self.tail

    def render(self, transform: Transform) -> str:
        if not self.truncated:
            # Nothing was dropped: head + tail caps exceed what arrived.
            return transform(_decode(bytes(self._first) + bytes(self._last)))
        first = bytes(self._first)
        # The tail region is the stream's last bytes; until the tail buffer has
        # dropped anything, some of them still sit in the head buffer.
        joined = bytes(self._last) if self._dropped else first + bytes(self._last)
        last = joined[-self._tail_cap :]
        elided = self.total - self.head - self.tail
        return (
            safe_head(first, self.head, transform)
            + ELIDED_MARKER % elided
            + safe_tail(last, self.tail, transform)
        )
