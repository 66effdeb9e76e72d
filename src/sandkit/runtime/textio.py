"""Text detection and bounded line windows over a file of any size.

The text/binary decision looks at the first 8 KiB only (the same rule grep
uses), so every line range of one file gets the same answer. A window is
found by streaming, never by loading the whole file.
"""

from __future__ import annotations

import codecs
import io

from .values import Value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO, List, Optional, Tuple

SNIFF_BYTES = 8192
_CHUNK = 1 << 20


def looks_binary(head: bytes, complete: bool) -> bool:
    """NUL byte, or bytes that are not UTF-8, within the first SNIFF_BYTES.

    `complete` says `head` is the whole file; otherwise a multi-byte
    character cut at the end of the sample is not held against it.
    """
    if b"\x00" in head:
        return True
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        decoder.decode(head, final=complete)
    except UnicodeDecodeError:
        return True
    return False


def utf8_prefix(data: bytes, limit: int) -> bytes:
    """At most `limit` bytes of `data`, never ending inside a UTF-8 character."""
    if len(data) <= limit:
        return data
    end = limit
    # data[end] is the first byte dropped; a continuation byte (10xxxxxx)
    # there means its character started earlier: drop that character too.
    for _ in range(3):
        if end > 0 and (data[end] & 0xC0) == 0x80:
            end -= 1
    return data[:end]


def utf8_suffix(data: bytes, limit: int) -> bytes:
    """At most the last `limit` bytes of `data`, never starting inside a character."""
    if len(data) <= limit:
        return data
    start = len(data) - limit
    for _ in range(3):
        if start < len(data) and (data[start] & 0xC0) == 0x80:
            start += 1
    return data[start:]


class LineWindow(Value):
    data: bytes
    first: int  # first line served (1-based)
    last: int  # last line served; first - 1 when nothing was served
    total: int  # lines in the file
    # (shown bytes, full bytes) when the only line served was cut to fit.
    cut: Optional[Tuple[int, int]]

    def __init__(
        self, data: bytes, first: int, last: int, total: int, cut: Optional[Tuple[int, int]] = None
    ) -> None:
        self._init(locals())


def _skip_lines(f: BinaryIO, count: int) -> int:
    """Advance past `count` newlines; returns how many were found before EOF."""
    seen = 0
    while seen < count:
        chunk = f.read(_CHUNK)
        if not chunk:
            break
        found = chunk.count(b"\n")
        if seen + found >= count:
            rest = chunk.split(b"\n", count - seen)[-1]
            f.seek(-len(rest), io.SEEK_CUR)
            return count
        seen += found
    return seen


def _finish_line(f: BinaryIO) -> Tuple[int, bool]:
    """Consume the rest of the current line; (bytes before the newline, saw newline)."""
    length = 0
    while True:
        piece = f.readline(_CHUNK)
        if not piece:
            return length, False
        if piece.endswith(b"\n"):
            return length + len(piece) - 1, True
        length += len(piece)


def _count_rest(f: BinaryIO) -> int:
    newlines = 0
    while True:
        chunk = f.read(_CHUNK)
        if not chunk:
            return newlines
        newlines += chunk.count(b"\n")


def _ends_with_newline(f: BinaryIO) -> Optional[bool]:
    """None for an empty file."""
    size = f.seek(0, io.SEEK_END)
    if size == 0:
        return None
    f.seek(size - 1)
    return f.read(1) == b"\n"


def read_window(f: BinaryIO, first: int, last: int, max_bytes: int) -> LineWindow:
    """Lines first..last of `f`, stopping before `max_bytes` would be exceeded.

    The first line is always served: whole if its text fits in `max_bytes`,
    otherwise cut at a character boundary (recorded in `cut`). `total` is
    exact; computing it costs one streaming pass over the rest of the file.
    """
    newlines = _skip_lines(f, first - 1) if first > 1 else 0
    parts: List[bytes] = []
    used = 0
    served = first - 1
    cut: Optional[Tuple[int, int]] = None
    reached = newlines == first - 1
    while reached and served < last:
        room = max_bytes - used
        line = f.readline(room + 1)
        if not line:
            break
        fits = len(line) <= room or (not parts and line.endswith(b"\n"))
        if fits:
            parts.append(line)
            used += len(line)
            served += 1
            newlines += line.endswith(b"\n")
            continue
        if parts:
            f.seek(-len(line), io.SEEK_CUR)
            break
        rest, ended = _finish_line(f)
        shown = utf8_prefix(line, room)
        parts.append(shown)
        served += 1
        newlines += ended
        cut = (len(shown), len(line) + rest)
        break
    newlines += _count_rest(f)
    ends = _ends_with_newline(f)
    total = newlines + (1 if ends is False else 0)
    return LineWindow(b"".join(parts), first, served, total, cut)
