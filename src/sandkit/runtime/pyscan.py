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

from .globbing import KIND_FILE, Deadline, GlobError, GlobPattern, TimeUp, open_exact, walk

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any, Dict, Iterator, List, Optional, Sequence, Tuple

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
    """(fd, size) of a regular file no larger than `max_bytes`; never through a symlink."""
    try:
        fd = open_exact(real, _OPEN_FLAGS)
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
    try:
        # One read of size + 1 bytes: a short read means we saw the whole file.
        data = os.read(fd, size + 1)
        if len(data) > size:
            chunks = [data]
            total = len(data)
            while total <= max_bytes:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            if total > max_bytes:
                return None
            data = b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)
    if is_binary(data[:BINARY_PROBE_BYTES]):
        return None
    return data


def strip_bom(data: bytes) -> bytes:
    return data[3:] if data.startswith(UTF8_BOM) else data


class Text:
    """A file's text (BOM already dropped): UTF-8, undecodable bytes as surrogate escapes."""

    __slots__ = ("invalid", "text")

    def __init__(self, data: bytes) -> None:
        try:
            self.text = data.decode("utf-8")
            self.invalid = False
        except UnicodeDecodeError:
            self.text = data.decode("utf-8", "surrogateescape")
            self.invalid = True


def show(line: str, limit: int, start: Optional[int] = None) -> str:
    """A line as results show it: no trailing CR, cut to `limit`, U+FFFD for bad bytes."""
    if line.endswith("\r"):
        line = line[:-1]
    line = cut(line, limit, start)
    if not line.isascii():
        line = line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return line


def cut(line: str, limit: int, start: Optional[int] = None) -> str:
    """At most `limit` characters of a line, "…" marking what was left out.

    The line's beginning is always kept; when the match starts too far right
    to be seen, the second half shows a window around it instead.
    """
    if len(line) <= limit:
        return line
    if limit < 16:
        return line[:limit]
    if start is None or start < limit - limit // 4:
        return line[: limit - 1] + ELLIPSIS
    head = limit // 2 - 1
    room = limit - head - 1
    begin = max(head, min(start - room // 5, len(line) - room))
    window = line[begin : begin + room]
    if begin + room < len(line):
        window = window[:-1] + ELLIPSIS
    return line[:head] + ELLIPSIS + window


def _around(
    buf: Any, nl: Any, start: int, end: int, before: int, after: int
) -> Tuple[List[Any], List[Any]]:
    """Raw lines just before the line starting at `start` and after the one ending at `end`."""
    above: List[Any] = []
    pos = start
    while len(above) < before and pos > 0:
        prev = buf.rfind(nl, 0, pos - 1) + 1
        above.append(buf[prev : pos - 1])
        pos = prev
    above.reverse()
    below: List[Any] = []
    pos = end + 1
    size = len(buf)
    while len(below) < after and pos < size:
        stop = buf.find(nl, pos)
        if stop < 0:
            stop = size
        below.append(buf[pos:stop])
        pos = stop + 1
    return above, below


def _same(raw: str) -> str:
    return raw


def _decoded(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _item(
    vpath: str,
    number: int,
    buf: Any,
    nl: Any,
    start: int,
    end: int,
    column: int,
    before: int,
    after: int,
    limit: int,
) -> Dict[str, Any]:
    """One content result from a str (or bytes) buffer and the match's line span."""
    as_str = _same if isinstance(buf, str) else _decoded
    body = buf[start:end].split(nl, MULTILINE_MAX_LINES)
    rest = 0
    if len(body) > MULTILINE_MAX_LINES:
        rest = body.pop().count(nl) + 1
    shown = [show(as_str(body[0]), limit, column)]
    shown += [show(as_str(raw), limit) for raw in body[1:]]
    if rest:
        shown.append("%s (+%d more lines)" % (ELLIPSIS, rest))
    above, below = _around(buf, nl, start, end, before, after)
    return {
        "path": vpath,
        "line_number": number,
        "text": "\n".join(shown),
        "before": [show(as_str(raw), limit) for raw in above],
        "after": [show(as_str(raw), limit) for raw in below],
    }


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


# (line index, line start, line end, column of the first match); in multiline
# mode the end is the end of the last line the match touches.
if TYPE_CHECKING:
    Hit = Tuple[int, int, int, int]


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
        self.fast_prefix: bool = spec.get("fast_prefix", False)
        self.multiline: bool = spec.get("multiline", False)
        lit = self.literal
        # Byte-level prefilter: the literal's UTF-8 bytes occur in every file it matches.
        self.needle_b: Optional[bytes] = None
        self.needle_lb: Optional[bytes] = None
        self.lower_any = bool(spec.get("icase_bytes_any"))
        if lit:
            if not self.icase or lit.lower() == lit.upper():
                self.needle_b = lit.encode("utf-8", "surrogatepass")
            elif lit.isascii():
                self.needle_lb = lit.lower().encode("ascii")
        # Every other literal run a match must contain: all must be in the file.
        self.others_b: List[bytes] = []
        for run in spec.get("literals", ()):
            if run != lit and (not self.icase or run.lower() == run.upper()):
                self.others_b.append(run.encode("utf-8", "surrogatepass"))
        # A pure literal decides files_with_matches and count from the bytes alone.
        self.bytes_decide = self.pure and bool(lit) and "\n" not in (lit or "\n")

    def regex(self, text: Text) -> "re.Pattern[str]":
        if not text.invalid or self._guarded_src is None:
            return self.rx
        if self._guarded is None:
            self._guarded = re.compile(self._guarded_src, self._guarded_flags)
        return self._guarded

    def byte_needle(self, data: bytes) -> Optional[Tuple[bytes, bytes]]:
        """(haystack, needle) for a byte-level literal search of this file, if valid."""
        if self.needle_b is not None:
            return data, self.needle_b
        if self.needle_lb is not None and (self.lower_any or data.isascii()):
            return data.lower(), self.needle_lb
        return None

    def rejects(self, data: bytes) -> Tuple[bool, Optional[Tuple[bytes, bytes]]]:
        """(True when the file cannot match, the byte-level haystack and needle if any).

        Checked on the raw bytes, before decoding.
        """
        if self.never:
            return True, None
        found = self.byte_needle(data)
        if found is not None and found[0].find(found[1]) < 0:
            return True, found
        for other in self.others_b:
            if other not in data:
                return True, None
        return False, found

    def _needle(self, text: Text) -> Tuple[Optional[str], Optional[str]]:
        """(haystack, needle) for the text-level literal search, or (None, None)."""
        lit = self.literal
        if lit is None:
            return None, None
        if not self.icase:
            return text.text, lit
        if text.text.isascii():
            return text.text.lower(), lit.lower()
        return None, None

    def lines(self, text: Text, deadline: Deadline) -> Iterator[Hit]:
        """Every matching line, in order."""
        if self.never or not text.text:
            return
        hay, needle = self._needle(text)
        if needle is not None and hay is not None:
            if self.pure:
                yield from self._by_literal(text, hay, needle, None, deadline)
                return
            if needle not in hay:
                return
            if not self.whole_ok or (len(needle) >= _MIN_PREFILTER and not self.fast_prefix):
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
    ) -> Iterator[Hit]:
        src = text.text
        n = len(src)
        cursor = _LineCursor(src)
        pos = 0
        while pos <= n:
            i = hay.find(needle, pos)
            if i < 0:
                return
            start = src.rfind("\n", 0, i) + 1
            if start >= n:
                return  # the empty "line" after a final newline
            end = src.find("\n", i)
            if end < 0:
                end = n
            if rx is None:
                yield cursor.at(start), start, end, i - start
            else:
                m = rx.search(src[start:end])
                if m is not None:
                    yield cursor.at(start), start, end, m.start()
            pos = end + 1
            deadline.check(64)

    def _whole(self, text: Text, rx: "re.Pattern[str]", deadline: Deadline) -> Iterator[Hit]:
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
            if start >= n:
                return
            end = src.find("\n", s)
            if end < 0:
                end = n
            if e <= end:
                yield cursor.at(start), start, end, s - start
                pos = end + 1
            else:
                # The match crossed a newline: decide each touched line on its own.
                cur = start
                while cur <= e - 1 and cur < n:
                    line_end = src.find("\n", cur)
                    if line_end < 0:
                        line_end = n
                    m2 = rx.search(src[cur:line_end])
                    if m2 is not None:
                        yield cursor.at(cur), cur, line_end, m2.start()
                    cur = line_end + 1
                pos = cur
            deadline.check(64)

    def _per_line(self, text: Text, rx: "re.Pattern[str]", deadline: Deadline) -> Iterator[Hit]:
        lines = text.text.split("\n")
        if lines[-1] == "":
            lines.pop()
        search = rx.search
        start = 0
        for index, line in enumerate(lines):
            m = search(line)
            if m is not None:
                yield index, start, start + len(line), m.start()
            start += len(line) + 1
            if index & 1023 == 0:
                deadline.check()

    def spans(self, text: Text, deadline: Deadline) -> Iterator[Hit]:
        """Multiline mode: one hit per line where a match starts."""
        src = text.text
        if not src:
            return
        hay, needle = self._needle(text)
        if needle is not None and hay is not None and needle not in hay:
            return
        n = len(src)
        cursor = _LineCursor(src)
        last = -1
        for m in self.regex(text).finditer(src):
            deadline.check(256)
            s, e = m.span()
            start = src.rfind("\n", 0, s) + 1
            if start >= n:
                return
            index = cursor.at(start)
            if index == last:
                continue
            last = index
            end = src.find("\n", max(s, e - 1))
            yield index, start, n if end < 0 else end, s - start

    def hits(self, text: Text, deadline: Deadline) -> Iterator[Hit]:
        return self.spans(text, deadline) if self.multiline else self.lines(text, deadline)

    def byte_hits(
        self, data: bytes, found: Optional[Tuple[bytes, bytes]], deadline: Deadline
    ) -> Optional[Iterator[Hit]]:
        """Hits of a pure literal found on the raw bytes (positions in bytes), if possible.

        Valid for invalid UTF-8 too: the literal's encoding can only start at a
        character boundary, and no undecodable byte is part of it.
        """
        if not self.bytes_decide or self.multiline or found is None:
            return None
        return self._byte_hits(data, found[0], found[1], deadline)

    def _byte_hits(
        self, data: bytes, hay: bytes, needle: bytes, deadline: Deadline
    ) -> Iterator[Hit]:
        n = len(data)
        line = 0
        counted = 0
        pos = 0
        while True:
            i = hay.find(needle, pos)
            if i < 0:
                return
            start = data.rfind(b"\n", 0, i) + 1
            end = data.find(b"\n", i + len(needle))
            if end < 0:
                end = n
            line += data.count(b"\n", counted, start)
            counted = start
            head = data[start:i]
            column = i - start if head.isascii() else len(head.decode("utf-8", "surrogateescape"))
            yield line, start, end, column
            pos = end + 1
            if pos >= n:
                return
            deadline.check(64)

    def first(self, data: bytes, found: Optional[Tuple[bytes, bytes]], deadline: Deadline) -> bool:
        if self.bytes_decide and found is not None:
            return True  # `rejects` already found the literal in these bytes
        return next(iter(self.hits(Text(data), deadline)), None) is not None

    def count(self, data: bytes, found: Optional[Tuple[bytes, bytes]], deadline: Deadline) -> int:
        if not self.bytes_decide or found is None:
            return sum(1 for _ in self.hits(Text(data), deadline))
        hay, needle = found
        total = 0
        pos = 0
        while True:
            i = hay.find(needle, pos)
            if i < 0:
                return total
            total += 1
            end = hay.find(b"\n", i + len(needle))
            if end < 0:
                return total
            pos = end + 1


# -- results ----------------------------------------------------------------------


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
        raw = read_searchable(real, max_bytes)
        if raw is None:
            continue
        data = strip_bom(raw)
        rejected, needle = matcher.rejects(data)
        if rejected:
            continue
        if mode == "content":
            buf: Any = data
            hits = matcher.byte_hits(data, needle, deadline)
            if hits is None:
                text = Text(data)
                buf = text.text
                hits = matcher.hits(text, deadline)
            nl = "\n" if isinstance(buf, str) else b"\n"
            for index, start, end, column in hits:
                if skip:
                    skip -= 1
                    continue
                if len(items) == cap:
                    return {"items": items, "more": True}
                items.append(
                    _item(vpath, index + 1, buf, nl, start, end, column, before, after, limit)
                )
            continue
        if skip or len(items) == cap:
            if not matcher.first(data, needle, deadline):
                continue
            if skip:
                skip -= 1
                continue
            return {"items": items, "more": True}
        if mode == "files_with_matches":
            if matcher.first(data, needle, deadline):
                items.append(vpath)
        else:
            count = matcher.count(data, needle, deadline)
            if count:
                items.append({"path": vpath, "count": count})
    return {"items": items, "more": False}


def content_from_lines(
    pages: Sequence[Tuple[str, bytes, Sequence[Tuple[int, int, int]], int]],
    take: int,
    before: int,
    after: int,
    limit: int,
) -> Optional[List[Dict[str, Any]]]:
    """Content results from matches found elsewhere (ripgrep's exact verdict).

    `pages` holds (virtual path, the file's bytes, [(1-based line, byte offset of
    the line, column of the match)], results to skip in this file). The column
    is in bytes, or in characters when written as -1 - column. None when the
    bytes do not fit those offsets (the file changed between ripgrep's read and
    ours), so the caller can start over in Python.
    """
    items: List[Dict[str, Any]] = []
    for vpath, raw, found, skip in pages:
        data = strip_bom(raw)
        size = len(data)
        for number, offset, byte_column in list(found)[skip:]:
            if len(items) == take:
                return items
            if offset >= size or (offset and data[offset - 1] != 10):
                return None
            end = data.find(b"\n", offset)
            if end < 0:
                end = size
            if byte_column < 0:
                column = -1 - byte_column
            else:
                head = data[offset : offset + byte_column]
                column = len(head.decode("utf-8", "surrogateescape"))
            items.append(
                _item(vpath, number, data, b"\n", offset, end, column, before, after, limit)
            )
    return items


def verify_lines(spec: Dict[str, Any], lines: Sequence[str]) -> List[int]:
    """Column of the first match in each line (-1: no match), per-line semantics.

    Lines come decoded with surrogate escapes; one that holds any had
    undecodable bytes and is checked with the guarded pattern.
    """
    matcher = Matcher(spec)
    guarded: Optional["re.Pattern[str]"] = None
    if matcher._guarded_src is not None:
        guarded = re.compile(matcher._guarded_src, matcher._guarded_flags)
    out: List[int] = []
    for line in lines:
        rx = matcher.rx
        if guarded is not None and not line.isascii() and _ESCAPES.search(line):
            rx = guarded
        m = rx.search(line)
        out.append(-1 if m is None else m.start())
    return out


_ESCAPES = re.compile("[\udc80-\udcff]")


# -- worker side ------------------------------------------------------------------


def _on_alarm(signum: int, frame: Any) -> None:
    raise TimeUp()


def handle(req: Dict[str, Any]) -> Dict[str, Any]:
    """Run one request, turning failures into a plain error reply."""
    try:
        if req.get("op") == "verify":
            return {"ok": verify_lines(req["spec"], req["lines"])}
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
