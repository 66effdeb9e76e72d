"""The pure-Python grep scanner: one page of results from an ordered list of files.

Both engines end here for output: the Python engine walks the tree itself,
the ripgrep engine hands over the files ripgrep picked (and, when its
verdict is exact, the matching line numbers), so line cutting, context and
pagination are one piece of code.

Speed comes from searching each file's whole text once: a literal every match
must contain is found with `str.find` (C speed) and only its lines are given
to the regex; otherwise one regex search runs over the whole text and a
match that crosses a line boundary is re-checked line by line. Semantics
stay strictly per line (each line is searched as its own string).

Runs in-process for patterns that cannot backtrack badly, otherwise in a
worker process whose deadline is a SIGALRM (which does interrupt `re`),
see scanworker.py. Stdlib only; imports nothing but `globbing` (and through
it `ignore`) from the package, because the worker execs these sources.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
from typing import IO, Any, Dict, Iterator, List, Optional, Sequence, Tuple

from .globbing import KIND_FILE, Deadline, GlobError, GlobPattern, TimeUp, walk

BINARY_PROBE_BYTES = 8192
UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
ELLIPSIS = "\u2026"
# A multiline match shows at most this many lines in `text`.
MULTILINE_MAX_LINES = 20
# Literal prefilters shorter than this only pay off when a whole-text regex search is not allowed.
_MIN_PREFILTER = 3

_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


class ScanError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- files ----------------------------------------------------------------------


def is_binary(head: bytes) -> bool:
    """NUL in the first 8 KiB, or a UTF-16 byte-order mark."""
    return b"\x00" in head[:BINARY_PROBE_BYTES] or head.startswith(UTF16_BOMS)


def _open_regular(real: str, max_bytes: int) -> Optional[Tuple[int, int]]:
    """(fd, size) of a regular file no larger than `max_bytes`; never follows a final symlink."""
    try:
        fd = os.open(real, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
        os.close(fd)
        return None
    return fd, info.st_size


def probe(real: str, max_bytes: int) -> bool:
    """True when grep searches this file (regular, not too big, not binary)."""
    opened = _open_regular(real, max_bytes)
    if opened is None:
        return False
    fd = opened[0]
    try:
        head = os.read(fd, BINARY_PROBE_BYTES)
    except OSError:
        return False
    finally:
        os.close(fd)
    return not is_binary(head)


def read_searchable(real: str, max_bytes: int) -> Optional[bytes]:
    """The bytes of a file grep searches, or None when it is skipped."""
    opened = _open_regular(real, max_bytes)
    if opened is None:
        return None
    fd, size = opened
    chunks: List[bytes] = []
    total = 0
    try:
        while True:
            chunk = os.read(fd, max(size - total, 0) + 65536)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                return None
    except OSError:
        return None
    finally:
        os.close(fd)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if is_binary(data[:BINARY_PROBE_BYTES]):
        return None
    return data


class Text:
    """A file's text: UTF-8, BOM dropped; undecodable bytes become surrogate escapes."""

    __slots__ = ("_lines", "invalid", "n_lines", "text")

    def __init__(self, data: bytes) -> None:
        if data.startswith(UTF8_BOM):
            data = data[3:]
        try:
            self.text = data.decode("utf-8")
            self.invalid = False
        except UnicodeDecodeError:
            self.text = data.decode("utf-8", "surrogateescape")
            self.invalid = True
        text = self.text
        self.n_lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
        self._lines: Optional[List[str]] = None

    @property
    def lines(self) -> List[str]:
        if self._lines is None:
            self._lines = self.text.split("\n")
        return self._lines

    def shown(self, line: str, limit: int, start: Optional[int] = None) -> str:
        """A line as results show it: no trailing CR, cut to `limit`, U+FFFD for bad bytes."""
        if line.endswith("\r"):
            line = line[:-1]
        line = cut(line, limit, start)
        if self.invalid and not line.isascii():
            line = line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        return line


def cut(line: str, limit: int, start: Optional[int] = None) -> str:
    """At most `limit` characters; a window around `start` when the match is far right.

    A cut side is marked with "…" (counted in the limit).
    """
    if len(line) <= limit:
        return line
    if limit < 8:
        return line[:limit]
    if start is None or start <= limit // 2:
        return line[: limit - 1] + ELLIPSIS
    begin = min(start - limit // 4, len(line) - (limit - 1))
    if begin + limit - 1 >= len(line):
        return ELLIPSIS + line[len(line) - (limit - 1):]
    return ELLIPSIS + line[begin: begin + limit - 2] + ELLIPSIS


# -- matching -------------------------------------------------------------------


class _LineCursor:
    """Line index of increasing positions, counting newlines only once."""

    __slots__ = ("line", "pos", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.line = 0

    def at(self, pos: int) -> int:
        if pos > self.pos:
            self.line += self.text.count("\n", self.pos, pos)
            self.pos = pos
        return self.line


class Matcher:
    def __init__(self, spec: Dict[str, Any]) -> None:
        self.rx = re.compile(spec["source"], spec["flags"])
        self._guarded_src: Optional[str] = spec.get("guarded")
        self._guarded_flags: int = spec.get("compile_flags", spec["flags"])
        self._guarded: Optional["re.Pattern[str]"] = None
        self.literal: Optional[str] = spec.get("literal")
        self.icase: bool = spec.get("icase", False)
        self.pure: bool = spec.get("pure_literal", False)
        self.never: bool = spec.get("never", False)
        self.whole_ok: bool = spec.get("whole_ok", False)
        self.multiline: bool = spec.get("multiline", False)

    def regex(self, text: Text) -> "re.Pattern[str]":
        if not text.invalid or self._guarded_src is None:
            return self.rx
        if self._guarded is None:
            self._guarded = re.compile(self._guarded_src, self._guarded_flags)
        return self._guarded

    def _needle(self, text: Text) -> Tuple[Optional[str], Optional[str]]:
        """(haystack, needle) for the literal prefilter, or (None, None) when unusable."""
        lit = self.literal
        if lit is None:
            return None, None
        if not self.icase:
            return text.text, lit
        if text.text.isascii():
            return text.text.lower(), lit.lower()
        return None, None

    def lines(self, text: Text, deadline: Deadline) -> Iterator[Tuple[int, int]]:
        """(line index, column of the first match) of every matching line, in order."""
        if self.never or text.n_lines == 0:
            return
        hay, needle = self._needle(text)
        if needle is not None and hay is not None:
            if self.pure:
                yield from self._by_literal(text, hay, needle, None, deadline)
                return
            if needle not in hay:
                return
            if len(needle) >= _MIN_PREFILTER or not self.whole_ok:
                yield from self._by_literal(text, hay, needle, self.regex(text), deadline)
                return
        if self.whole_ok:
            yield from self._whole(text, self.regex(text), deadline)
        else:
            yield from self._per_line(text, self.regex(text), deadline)

    def _by_literal(
        self,
        text: Text,
        hay: str,
        needle: str,
        rx: Optional["re.Pattern[str]"],
        deadline: Deadline,
    ) -> Iterator[Tuple[int, int]]:
        src = text.text
        n = len(src)
        cursor = _LineCursor(src)
        pos = 0
        while pos <= n:
            i = hay.find(needle, pos)
            if i < 0:
                return
            start = src.rfind("\n", 0, i) + 1
            end = src.find("\n", i)
            if end < 0:
                end = n
            index = cursor.at(start)
            if index >= text.n_lines:
                return
            if rx is None:
                yield index, i - start
            else:
                m = rx.search(src[start:end])
                if m is not None:
                    yield index, m.start()
            pos = end + 1
            deadline.check(64)

    def _whole(
        self, text: Text, rx: "re.Pattern[str]", deadline: Deadline
    ) -> Iterator[Tuple[int, int]]:
        src = text.text
        n = len(src)
        cursor = _LineCursor(src)
        pos = 0
        while pos <= n:
            m = rx.search(src, pos)
            if m is None:
                return
            s, e = m.span()
            start = src.rfind("\n", 0, s) + 1
            end = src.find("\n", s)
            if end < 0:
                end = n
            if e <= end:
                index = cursor.at(start)
                if index >= text.n_lines:
                    return
                yield index, s - start
                pos = end + 1
            else:
                # The match crossed a newline: decide each touched line on its own.
                cur = start
                while cur <= e - 1 and cur <= n:
                    line_end = src.find("\n", cur)
                    if line_end < 0:
                        line_end = n
                    index = cursor.at(cur)
                    if index >= text.n_lines:
                        return
                    m2 = rx.search(src[cur:line_end])
                    if m2 is not None:
                        yield index, m2.start()
                    cur = line_end + 1
                pos = cur
            deadline.check(64)

    def _per_line(
        self, text: Text, rx: "re.Pattern[str]", deadline: Deadline
    ) -> Iterator[Tuple[int, int]]:
        lines = text.lines
        search = rx.search
        for index in range(text.n_lines):
            m = search(lines[index])
            if m is not None:
                yield index, m.start()
            if index & 1023 == 0:
                deadline.check()

    def spans(self, text: Text, deadline: Deadline) -> Iterator[Tuple[int, int, int]]:
        """Multiline mode: (first line, last line, column) per line where a match starts."""
        if text.n_lines == 0:
            return
        hay, needle = self._needle(text)
        if needle is not None and hay is not None and needle not in hay:
            return
        src = text.text
        cursor = _LineCursor(src)
        last = -1
        for m in self.regex(text).finditer(src):
            deadline.check(256)
            s, e = m.span()
            index = cursor.at(s)
            if index >= text.n_lines:
                return
            if index == last:
                continue
            last = index
            line_start = src.rfind("\n", 0, s) + 1
            stop = max(s, e - 1)
            final = min(index + src.count("\n", s, stop), text.n_lines - 1)
            yield index, final, s - line_start

    def first(self, text: Text, deadline: Deadline) -> bool:
        if self.multiline:
            return next(iter(self.spans(text, deadline)), None) is not None
        return next(iter(self.lines(text, deadline)), None) is not None

    def count(self, text: Text, deadline: Deadline) -> int:
        found = self.spans(text, deadline) if self.multiline else self.lines(text, deadline)
        return sum(1 for _ in found)


# -- results ----------------------------------------------------------------------


def build_match(
    path: str,
    text: Text,
    index: int,
    column: int,
    final: int,
    before: int,
    after: int,
    limit: int,
) -> Dict[str, Any]:
    lines = text.lines
    shown = [text.shown(lines[index], limit, column)]
    last_shown = min(final, index + MULTILINE_MAX_LINES - 1)
    shown += [text.shown(lines[i], limit) for i in range(index + 1, last_shown + 1)]
    if final > last_shown:
        shown.append("%s (+%d more lines)" % (ELLIPSIS, final - last_shown))
    return {
        "path": path,
        "line_number": index + 1,
        "text": "\n".join(shown),
        "before": [text.shown(lines[i], limit) for i in range(max(0, index - before), index)],
        "after": [
            text.shown(lines[i], limit)
            for i in range(final + 1, min(text.n_lines, final + 1 + after))
        ],
    }


def _iter_files(req: Dict[str, Any], deadline: Deadline) -> Iterator[Tuple[str, str]]:
    candidates = req.get("candidates")
    if candidates is not None:
        for vpath, real in candidates:
            yield vpath, real
        return
    pattern = None
    if req.get("glob") is not None:
        try:
            pattern = GlobPattern(req["glob"], anywhere=True)
        except GlobError as exc:
            raise ScanError("INVALID_PATTERN", "invalid glob filter: %s" % exc) from None
    root, vroot = req["root"], req["vroot"]
    if req.get("root_is_file"):
        if pattern is None or pattern.match_path(os.path.basename(root)):
            yield vroot, root
        return
    for rel, real, _ in walk(root, pattern, deadline, (KIND_FILE,)):
        yield vroot + "/" + rel, real


def search(req: Dict[str, Any], deadline: Optional[Deadline] = None) -> Dict[str, Any]:
    """One page of grep results: {"items": [...], "more": bool}."""
    if deadline is None:
        deadline = Deadline(float(req["timeout"]))
    matcher = Matcher(req["spec"])
    mode = req["mode"]
    skip = int(req["offset"])
    cap = int(req["max_results"])
    limit = int(req["line_chars"])
    max_bytes = int(req["max_file_bytes"])
    before, after = int(req["before"]), int(req["after"])
    items: List[Any] = []
    for vpath, real in _iter_files(req, deadline):
        deadline.check()
        data = read_searchable(real, max_bytes)
        if data is None:
            continue
        text = Text(data)
        if mode == "content":
            found: Iterator[Tuple[int, int, int]]
            if matcher.multiline:
                found = matcher.spans(text, deadline)
            else:
                found = ((i, i, c) for i, c in matcher.lines(text, deadline))
            for index, final, column in found:
                if skip:
                    skip -= 1
                    continue
                if len(items) == cap:
                    return {"items": items, "more": True}
                items.append(build_match(vpath, text, index, column, final, before, after, limit))
            continue
        if skip or len(items) == cap:
            if not matcher.first(text, deadline):
                continue
            if skip:
                skip -= 1
                continue
            return {"items": items, "more": True}
        if mode == "files_with_matches":
            if matcher.first(text, deadline):
                items.append(vpath)
        else:
            count = matcher.count(text, deadline)
            if count:
                items.append({"path": vpath, "count": count})
    return {"items": items, "more": False}


def content_from_lines(
    pages: Sequence[Tuple[str, str, Sequence[Tuple[int, int]], int]],
    take: int,
    before: int,
    after: int,
    limit: int,
    max_bytes: int,
) -> Optional[List[Dict[str, Any]]]:
    """Content results from line numbers found elsewhere (ripgrep's exact verdict).

    `pages` holds (virtual path, real path, [(1-based line, byte column)], results
    to skip in this file). None when a file no longer reads the same (it changed
    or became unreadable), so the caller can start over in Python.
    """
    items: List[Dict[str, Any]] = []
    for vpath, real, found, skip in pages:
        data = read_searchable(real, max_bytes)
        if data is None:
            return None
        text = Text(data)
        for number, byte_column in list(found)[skip:]:
            if len(items) == take:
                return items
            index = number - 1
            if index >= text.n_lines:
                return None
            line = text.lines[index]
            column = byte_column
            if not line.isascii():
                raw = line.encode("utf-8", "surrogateescape")
                column = len(raw[:byte_column].decode("utf-8", "surrogateescape"))
            items.append(build_match(vpath, text, index, column, index, before, after, limit))
    return items


# -- worker side ------------------------------------------------------------------


def _on_alarm(signum: int, frame: Any) -> None:
    raise TimeUp()


def handle(req: Dict[str, Any]) -> Dict[str, Any]:
    """Run one request, turning failures into a plain error reply."""
    try:
        return {"ok": search(req)}
    except TimeUp:
        return {"error": ["TIMEOUT", "grep took longer than its time limit"]}
    except ScanError as exc:
        return {"error": [exc.code, exc.message]}
    except MemoryError:
        return {"error": ["TOO_LARGE", "grep ran out of memory"]}
    except RecursionError:
        return {"error": ["INVALID_PATTERN", "regular expression is too complex"]}


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """Worker loop: one JSON request per line in, one JSON reply per line out.

    The deadline is a real-time timer whose signal interrupts `re` even in
    the middle of a catastrophic backtrack, so the worker answers TIMEOUT and
    stays usable; the parent kills it only if it does not answer at all.
    """
    signal.signal(signal.SIGALRM, _on_alarm)
    while True:
        line = inp.readline()
        if not line:
            return
        try:
            req = json.loads(line)
            signal.setitimer(signal.ITIMER_REAL, max(0.001, float(req["timeout"])))
            try:
                reply = handle(req)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except TimeUp:
            reply = {"error": ["TIMEOUT", "grep took longer than its time limit"]}
        except Exception as exc:  # the parent turns this into INTERNAL
            reply = {"error": ["INTERNAL", "search worker failed: %s" % type(exc).__name__]}
        out.write(json.dumps(reply).encode("ascii") + b"\n")
        out.flush()
