"""Cleaning a stream of output chunk by chunk: no partial secret or real path ever leaves.

`execute` cleans its output once, at the end. A stream (execute_stream, the
output of a background process) is cleaned as it arrives, so a secret or a
real root split across two reads must never show in part. `StreamCleaner`
holds back the longest tail of the pending text that could still grow into
one of them (and never cuts through one that is complete), and cleans only
what is certain: the same masking and redaction as `execute`, applied to a
prefix that no later byte can change.
"""

from __future__ import annotations

import codecs
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Iterable, List, Optional

    Transform = Callable[[str], str]


class StreamCleaner:
    """Feed bytes, get cleaned text that is final; `flush()` at the end of the stream."""

    def __init__(self, clean: Transform, needles: Iterable[str]) -> None:
        self._clean = clean
        self._needles = sorted({n for n in needles if n}, key=len, reverse=True)
        self._longest = max((len(n) for n in self._needles), default=0)
        self._firsts = frozenset(n[0] for n in self._needles)
        self._any: Optional["re.Pattern[str]"] = (
            re.compile("|".join(re.escape(n) for n in self._needles)) if self._needles else None
        )
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending = ""

    def feed(self, data: bytes) -> str:
        self._pending += self._decoder.decode(data)
        return self._emit(final=False)

    def flush(self) -> str:
        self._pending += self._decoder.decode(b"", final=True)
        return self._emit(final=True)

    def _emit(self, final: bool) -> str:
        text = self._pending
        cut = len(text) if final else self._safe_cut(text)
        self._pending = text[cut:]
        return self._clean(text[:cut]) if cut else ""

    def _safe_cut(self, text: str) -> int:
        """Where `text` may be cut so that cleaning the head alone is final."""
        if self._any is None:
            return len(text)
        cut = len(text) - self._held_back(text)
        # A complete needle must not be split by the cut either.
        for match in self._any.finditer(text, max(0, cut - self._longest)):
            if match.start() < cut < match.end():
                cut = match.start()
                break
        return cut

    def _held_back(self, text: str) -> int:
        """Length of the longest tail of `text` that starts (or is) a needle."""
        start = max(0, len(text) - self._longest)
        for i in range(start, len(text)):
            if text[i] in self._firsts:
                tail = text[i:]
                if any(n.startswith(tail) for n in self._needles):
                    return len(text) - i
        return 0


def cleaner_for(clean: Transform, secrets: Iterable[str], masked: Iterable[str]) -> StreamCleaner:
    needles: List[str] = [s for s in secrets if s] + [m for m in masked if m]
    return StreamCleaner(clean, needles)
