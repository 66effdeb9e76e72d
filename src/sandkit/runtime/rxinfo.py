"""What a grep pattern means, in forms both search engines can use.

Python's `re` dialect is the contract. The pattern is parsed with `re`'s own
parser and turned into:

- a ripgrep (Rust regex) translation. Every single-character construct
  (literal, `.`, class, `\\w`, case-insensitive letter, ...) becomes an
  explicit class computed by running Python's own `re` over every code
  point, so Unicode tables, case folding and `\\s`/`\\w`/`\\d` cannot differ
  between the dialects. The translation is *exact* (ripgrep's per-line
  verdict equals Python's) unless the pattern uses a construct Rust lacks or
  defines differently (`\\b`, `\\B`, lookaround, backreferences, conditionals,
  atomic groups, possessive repeats) or multiline mode is on; then it is a
  *superset* and only picks candidate files for the Python scanner.
- the "guarded" Python pattern used on text that is not valid UTF-8: every
  character-consuming node refuses the surrogate escapes that stand for
  undecodable bytes, which is exactly how ripgrep treats such bytes.
- facts the Python scanner uses to go fast and stay bounded.

Stdlib only.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
import sys
import threading
import unicodedata

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

_parser: Any
_c: Any
try:
    _parser = importlib.import_module("re._parser")
    _c = importlib.import_module("re._constants")
except ImportError:  # python < 3.11
    _parser = importlib.import_module("sre_parse")
    _c = importlib.import_module("sre_constants")

LITERAL = _c.LITERAL
NOT_LITERAL = _c.NOT_LITERAL
ANY = _c.ANY
IN = _c.IN
AT = _c.AT
BRANCH = _c.BRANCH
SUBPATTERN = _c.SUBPATTERN
MAX_REPEAT = _c.MAX_REPEAT
MIN_REPEAT = _c.MIN_REPEAT
POSSESSIVE_REPEAT = getattr(_c, "POSSESSIVE_REPEAT", object())
ATOMIC_GROUP = getattr(_c, "ATOMIC_GROUP", object())
GROUPREF = _c.GROUPREF
GROUPREF_EXISTS = _c.GROUPREF_EXISTS
ASSERT = _c.ASSERT
ASSERT_NOT = _c.ASSERT_NOT
CATEGORY = _c.CATEGORY
RANGE = _c.RANGE
NEGATE = _c.NEGATE
MAXREPEAT = _c.MAXREPEAT

_AT_PY = {
    _c.AT_BEGINNING: "^",
    _c.AT_BEGINNING_STRING: "\\A",
    _c.AT_END: "$",
    _c.AT_END_STRING: "\\Z",
    _c.AT_BOUNDARY: "\\b",
    _c.AT_NON_BOUNDARY: "\\B",
}
_CATEGORY_PY = {
    _c.CATEGORY_DIGIT: "\\d",
    _c.CATEGORY_NOT_DIGIT: "\\D",
    _c.CATEGORY_SPACE: "\\s",
    _c.CATEGORY_NOT_SPACE: "\\S",
    _c.CATEGORY_WORD: "\\w",
    _c.CATEGORY_NOT_WORD: "\\W",
}
_CHAR_OPS = (LITERAL, NOT_LITERAL, ANY, IN)
_REPEATS = (MAX_REPEAT, MIN_REPEAT, POSSESSIVE_REPEAT)

ICASE, M, S, X, A, U = int(re.I), int(re.M), int(re.S), int(re.X), int(re.A), int(re.U)
_FLAG_LETTERS = ((ICASE, "i"), (M, "m"), (S, "s"), (A, "a"), (U, "u"))

MAX_PATTERN_CHARS = 10000
# Bounds for the translation; past them ripgrep is simply not used.
MAX_SET_SCANS = 48
MAX_RUST_CHARS = 100_000
# Patterns up to this many nodes without repeats run in-process (bounded cost).
SAFE_NODES = 16

# ASCII letters that match a non-ASCII character under re.IGNORECASE (K: the
# Kelvin sign, U+0130, U+0131, U+017F). tests/test_grep.py recomputes this from `re` itself.
ICASE_PARTNERED = frozenset("iksIKS")

if TYPE_CHECKING:
    Ranges = Tuple[Tuple[int, int], ...]
_ANY_NO_NL: Ranges = ((0, 9), (11, 0xD7FF), (0xE000, 0x10FFFF))
_ANY_ALL: Ranges = ((0, 0xD7FF), (0xE000, 0x10FFFF))
_SURROGATE_ESCAPES = "[\\U0000dc80-\\U0000dcff]"
NEVER_RUST = "[^\\x{0}-\\x{10FFFF}]"


class PatternError(ValueError):
    """Not a valid pattern in Python's dialect (reported as INVALID_PATTERN)."""


class _Untranslatable(Exception):
    pass


# -- exact character sets, computed by Python's re itself ------------------------

_ALL: Optional[Tuple[str, str]] = None
_SET_CACHE: Dict[Tuple[str, int], Ranges] = {}
_ASCII_TABLES: Dict[int, Dict[int, Ranges]] = {}


# Character sets a fresh process would otherwise compute on its first grep (scanning
# all of Unicode, ~0.25 s): computed once when the agent zipapp is built, shipped in it,
# used when the interpreter in the box has the same Python and Unicode versions.
TABLES_FILE = "unicode_tables.json"
# As `py_char_node` writes them (sre parses a bare \w as a class holding the category).
_COMMON_SETS = ("[\\w]", "[\\W]", "[\\d]", "[\\D]", "[\\s]", "[\\S]")
_TABLES_LOADED = False
# Held while the tables load: a search that came while another thread (the agent's warm-up)
# was loading them found none yet and computed its set from all of Unicode (~0.1 s).
# Reentrant: building this machine's cache (build_tables) comes back here.
_TABLES_LOCK = threading.RLock()
_TABLES_LOADING = False
# The shipped parts not decoded yet, each its own JSON text: decoding all of them took a
# first grep ~10 ms (84 KB), most of it sets the query does not use.
_SHIPPED_ASCII: Dict[int, str] = {}
_SHIPPED_SETS: Dict[Tuple[str, int], str] = {}


def tables_key() -> str:
    return "%d.%d/%s" % (sys.version_info[0], sys.version_info[1], unicodedata.unidata_version)


def build_tables() -> Dict[str, Any]:
    """The precomputed sets, as JSON-able data (see TABLES_FILE)."""
    flag_sets = sorted({_set_flags(f) for f in (ICASE, ICASE | S, ICASE | A, ICASE | S | A)})
    ascii_tables = {
        str(f): _compact([list(map(list, _ascii_table(f)[c])) for c in range(128)])
        for f in flag_sets
    }
    sets = [
        [src, f, _compact([list(r) for r in scan_ranges(src, f)])]
        for src in _COMMON_SETS
        for f in (0, ICASE, S, A)
    ]
    return {"key": tables_key(), "ascii": ascii_tables, "sets": sets}


def _compact(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"))


# Where a process without shipped tables (the host side: the local provider, the CLI)
# keeps them for the next process on this machine; None: computed per process.
_TABLES_CACHE: Optional[str] = None


def use_tables_cache(path: str) -> None:
    """Keep the tables in `path` (built once, by the first process that needs them, in
    ~1 s; a later process decodes what it uses, as an agent does with the shipped ones).
    Without it every process computes what it needs on its first case-insensitive
    search: ~0.3 s of building a 1.1-million-character string."""
    global _TABLES_CACHE
    _TABLES_CACHE = path


def _cached_tables() -> Optional[bytes]:
    """The tables of this machine's cache, built and written (atomically) when missing."""
    path = _TABLES_CACHE
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        pass
    import os
    import tempfile

    raw = json.dumps(build_tables(), sort_keys=True, separators=(",", ":")).encode()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tables-")
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache: this process still has them
    return raw


def _load_tables() -> None:
    """Seed the caches from the shipped tables (or this machine's cache), once; a caller
    that comes while another thread loads them waits for that."""
    global _TABLES_LOADED, _TABLES_LOADING
    if _TABLES_LOADED:
        return
    with _TABLES_LOCK:
        if _TABLES_LOADED or _TABLES_LOADING:
            return  # loading: this thread, building the tables it could not read
        _TABLES_LOADING = True
        try:
            _read_tables()
        finally:
            _TABLES_LOADED = True


def _read_tables() -> None:
    raw = _shipped_file()
    try:
        data = json.loads(raw or _cached_tables() or b"null")
    except ValueError:
        return
    if not isinstance(data, dict) or data.get("key") != tables_key():
        return
    for flags, text in data["ascii"].items():
        if isinstance(text, str):
            _SHIPPED_ASCII[int(flags)] = text
    for src, flags, text in data["sets"]:
        if isinstance(text, str):
            _SHIPPED_SETS[(src, flags)] = text


def _shipped_file() -> Optional[bytes]:
    """TABLES_FILE beside this module, through its loader (a zipapp's too), or None.
    Not `pkgutil.get_data`: importing pkgutil loads typing (~2 ms of a first search)."""
    spec = globals().get("__spec__")
    loader, origin = getattr(spec, "loader", None), getattr(spec, "origin", None)
    if loader is None or not origin or not hasattr(loader, "get_data"):
        return None
    import os

    try:
        return bytes(loader.get_data(os.path.join(os.path.dirname(origin), TABLES_FILE)))
    except OSError:
        return None


def warm() -> None:
    """Decode, ahead of the first search, what a default (case-insensitive) one uses and
    the common classes; called by an agent's warm-up thread after `initialize`. Only what
    is shipped: computing a missing part costs ~0.3 s, left to a search that needs it."""
    _load_tables()
    if not _SHIPPED_ASCII:
        return
    _ascii_table(ICASE)
    for src in _COMMON_SETS[::2]:  # \w, \d, \s
        scan_ranges(src, 0)
        scan_ranges(src, ICASE)


def _shipped(text: Optional[str], tables: bool) -> Any:
    """A shipped part, decoded: its Ranges, or with `tables` a list of them (None when
    there is none or it does not decode)."""
    if text is None:
        return None
    try:
        data = json.loads(text)
        if tables:
            return [tuple((lo, hi) for lo, hi in ranges) for ranges in data]
        return tuple((lo, hi) for lo, hi in data)
    except (ValueError, TypeError):
        return None


def _all_chars() -> Tuple[str, str]:
    global _ALL
    if _ALL is None:
        _ALL = (
            "".join(map(chr, range(0xD800))),
            "".join(map(chr, range(0xE000, 0x110000))),
        )
    return _ALL


def _set_flags(flags: int) -> int:
    return flags & (ICASE | S | A)


def scan_ranges(src: str, flags: int) -> Ranges:
    """The code points (surrogates excluded) that the one-character regex `src` matches."""
    _load_tables()
    key = (src, _set_flags(flags))
    cached = _SET_CACHE.get(key)
    if cached is not None:
        return cached
    shipped: Optional[Ranges] = _shipped(_SHIPPED_SETS.get(key), tables=False)
    if shipped is not None:
        _SET_CACHE[key] = shipped
        return shipped
    rx = re.compile("(?:%s)+" % src, _set_flags(flags))
    low, high = _all_chars()
    ranges = [(m.start(), m.end() - 1) for m in rx.finditer(low)]
    ranges += [(m.start() + 0xE000, m.end() - 1 + 0xE000) for m in rx.finditer(high)]
    result = tuple(ranges)
    if len(_SET_CACHE) > 512:
        _SET_CACHE.clear()  # the shipped sets come back from the next computation
    _SET_CACHE[key] = result
    return result


def _ascii_table(flags: int) -> Dict[int, Ranges]:
    """For each ASCII character, every code point it matches under `flags` (with IGNORECASE)."""
    _load_tables()
    key = _set_flags(flags)
    table = _ASCII_TABLES.get(key)
    if table is not None:
        return table
    shipped = _shipped(_SHIPPED_ASCII.get(key), tables=True)
    if shipped is not None and len(shipped) == 128:
        _ASCII_TABLES[key] = table = dict(enumerate(shipped))
        return table
    candidates = [cp for lo, hi in scan_ranges("[\\x00-\\x7f]", key) for cp in range(lo, hi + 1)]
    built: Dict[int, List[int]] = {c: [] for c in range(128)}
    for c in range(128):
        rx = re.compile(_py_char(c), key)
        for cp in candidates:
            if rx.fullmatch(chr(cp)):
                built[c].append(cp)
    table = {c: _to_ranges(cps) for c, cps in built.items()}
    _ASCII_TABLES[key] = table
    return table


def _to_ranges(cps: Sequence[int]) -> Ranges:
    out: List[Tuple[int, int]] = []
    for cp in sorted(set(cps)):
        if out and out[-1][1] + 1 == cp and cp != 0xE000:
            out[-1] = (out[-1][0], cp)
        else:
            out.append((cp, cp))
    return tuple(out)


def _without(ranges: Ranges, cp: int) -> Ranges:
    out: List[Tuple[int, int]] = []
    for lo, hi in ranges:
        if lo <= cp <= hi:
            if lo < cp:
                out.append((lo, cp - 1))
            if cp < hi:
                out.append((cp + 1, hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def _complement(ranges: Ranges) -> Ranges:
    out: List[Tuple[int, int]] = []
    nxt = 0
    for lo, hi in sorted(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = max(nxt, hi + 1)
    if nxt <= 0x10FFFF:
        out.append((nxt, 0x10FFFF))
    return _minus_surrogates(tuple(out))


def _minus_surrogates(ranges: Ranges) -> Ranges:
    out: List[Tuple[int, int]] = []
    for lo, hi in ranges:
        if hi < 0xD800 or lo > 0xDFFF:
            out.append((lo, hi))
            continue
        if lo < 0xD800:
            out.append((lo, 0xD7FF))
        if hi > 0xDFFF:
            out.append((0xE000, hi))
    return tuple(out)


# -- Python source of single nodes ------------------------------------------------


def _py_char(cp: int) -> str:
    return "\\U%08x" % cp


def _py_in_item(op: Any, av: Any) -> str:
    if op is LITERAL:
        return _py_char(av)
    if op is RANGE:
        return "%s-%s" % (_py_char(av[0]), _py_char(av[1]))
    if op is CATEGORY:
        return _CATEGORY_PY[av]
    raise _Untranslatable(str(op))


def py_char_node(op: Any, av: Any) -> str:
    if op is LITERAL:
        return _py_char(av)
    if op is NOT_LITERAL:
        return "[^%s]" % _py_char(av)
    if op is ANY:
        return "."
    if op is IN:
        negate = bool(av) and av[0][0] is NEGATE
        items = av[1:] if negate else av
        return "[" + ("^" if negate else "") + "".join(_py_in_item(o, a) for o, a in items) + "]"
    raise _Untranslatable(str(op))


def node_ranges(op: Any, av: Any, flags: int) -> Ranges:
    """Exact set of code points one character node matches (surrogates excluded)."""
    icase = bool(flags & ICASE)
    if op is LITERAL:
        if 0xD800 <= av <= 0xDFFF:
            return ()
        if not icase:
            return ((av, av),)
        if av < 128:
            return _ascii_table(flags)[av]
        return scan_ranges(_py_char(av), flags)
    if op is ANY:
        return _ANY_ALL if flags & S else _ANY_NO_NL
    if op is NOT_LITERAL and not icase:
        return _without(_ANY_ALL, av)
    if op is IN and not icase:
        negate = bool(av) and av[0][0] is NEGATE
        items = av[1:] if negate else av
        if all(o is LITERAL or o is RANGE for o, _ in items):
            spans = [(a, a) if o is LITERAL else (a[0], a[1]) for o, a in items]
            plain = _minus_surrogates(_to_ranges_spans(spans))
            return _complement(plain) if negate else plain
    return scan_ranges(py_char_node(op, av), flags)


def _to_ranges_spans(spans: Sequence[Tuple[int, int]]) -> Ranges:
    out: List[Tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


# -- Rust emission ----------------------------------------------------------------


def _rs_char(cp: int) -> str:
    ch = chr(cp)
    if ch.isalnum() and (cp < 128 or cp > 0xFF):
        return ch
    return "\\x{%X}" % cp


@functools.lru_cache(maxsize=1024)
def rust_class(ranges: Ranges) -> str:
    if not ranges:
        return NEVER_RUST
    if ranges == _ANY_NO_NL:
        return "."
    if ranges == _ANY_ALL:
        return "(?s:.)"
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return _rs_char(ranges[0][0])
    parts = []
    for lo, hi in ranges:
        if lo == hi:
            parts.append(_rs_char(lo))
        elif hi == lo + 1:
            parts.append(_rs_char(lo) + _rs_char(hi))
        else:
            parts.append("%s-%s" % (_rs_char(lo), _rs_char(hi)))
    return "[" + "".join(parts) + "]"


def _quantifier(lo: int, hi: Any) -> str:
    if hi is MAXREPEAT or hi == MAXREPEAT:
        if lo == 0:
            return "*"
        if lo == 1:
            return "+"
        return "{%d,}" % lo
    if lo == 0 and hi == 1:
        return "?"
    if lo == hi:
        return "{%d}" % lo
    return "{%d,%d}" % (lo, hi)


class _RustEmitter:
    """Python AST -> Rust regex; `exact` drops to False on any approximation."""

    def __init__(self, multiline: bool) -> None:
        self.multiline = multiline
        self.exact = not multiline
        self.groups: Dict[int, str] = {}
        self.scanned: Set[Tuple[Any, Any, int]] = set()

    def seq(self, items: Any, flags: int, tail: bool = False) -> str:
        items = list(items)
        last = len(items) - 1
        out = []
        for i, (op, av) in enumerate(items):
            if op is AT and av is _c.AT_BOUNDARY and tail and i == last and i > 0:
                out.append(self.edge_boundary(items[i - 1], flags))
            else:
                out.append(self.node(op, av, flags, tail and i == last))
        return "".join(out)

    def edge_boundary(self, before: Any, flags: int) -> str:
        """A final `\\b` right after a word character.

        Python's boundary there means "line end or a non-word character next";
        Rust cannot use Python's word set for `\\b`, but it can require the line
        end, a non-ASCII-word character or a raw high byte (an undecodable byte
        counts as non-word in Python). Still a superset (a non-ASCII word
        character also passes), just a tight one. Only at the end: in front, an
        alternation would cost ripgrep its literal prefilter.
        """
        self.exact = False
        ranges = _edge_ranges(before, flags, first=False)
        if ranges is None or not _within(ranges, scan_ranges("\\w", flags)):
            return ""
        edge = "(?m:$)" if self.multiline else "$"
        return "(?:%s|[^0-9A-Za-z_]|(?-u:[\\x80-\\xFF]))" % edge

    def chars(self, op: Any, av: Any, flags: int) -> str:
        if op is not ANY and (flags & ICASE or op is not LITERAL):
            self.scanned.add((op, repr(av), flags & (ICASE | S | A)))
            if len(self.scanned) > MAX_SET_SCANS:
                raise _Untranslatable("too many distinct character classes")
        ranges = node_ranges(op, av, flags)
        if not self.multiline:
            ranges = _without(ranges, 10)
        return rust_class(ranges)

    def node(self, op: Any, av: Any, flags: int, tail: bool) -> str:
        """`tail`: nothing that consumes text can follow this node in a match."""
        if op in _CHAR_OPS:
            return self.chars(op, av, flags)
        if op is BRANCH:
            return "(?:" + "|".join(self.seq(alt, flags, tail) for alt in av[1]) + ")"
        if op is SUBPATTERN:
            gid, add, delete, sub = av
            inner = self.seq(sub, (flags | add) & ~delete, tail)
            if gid is not None:
                self.groups[gid] = inner
            return "(?:" + inner + ")"
        if op in _REPEATS:
            lo, hi, sub = av
            if op is POSSESSIVE_REPEAT:
                self.exact = False
            return "(?:" + self.seq(sub, flags) + ")" + _quantifier(lo, hi)
        if op is AT:
            return self.at(av, tail)
        if op is GROUPREF:
            self.exact = False
            return "(?:" + self.groups.get(av, "(?s:.)*" if self.multiline else ".*") + ")"
        if op is GROUPREF_EXISTS:
            self.exact = False
            _, yes, no = av
            no_src = self.seq(no, flags, tail) if no else ""
            return "(?:" + self.seq(yes, flags, tail) + "|" + no_src + ")"
        if op is ASSERT or op is ASSERT_NOT:
            self.exact = False
            return ""
        if op is ATOMIC_GROUP:
            self.exact = False
            return "(?:" + self.seq(av, flags, tail) + ")"
        raise _Untranslatable(str(op))

    def at(self, code: Any, tail: bool) -> str:
        if code in (_c.AT_BOUNDARY, _c.AT_NON_BOUNDARY):
            self.exact = False
            return ""
        if code in (_c.AT_BEGINNING, _c.AT_BEGINNING_STRING):
            # Per line, both mean the line start; in multiline mode only `^` keeps a meaning.
            if not self.multiline:
                return "^"
            return "(?m:^)" if code is _c.AT_BEGINNING else ""
        # `$` also matches before the CR of a CRLF ending (see crlf_end below). ripgrep
        # consumes that CR instead, which is only equivalent when nothing can follow.
        if not self.multiline and tail:
            return "\\r?$"
        self.exact = False
        return ""


def _edge_ranges(node: Any, flags: int, first: bool) -> Optional[Ranges]:
    """The characters a node's first (or last) consumed character can be, if simple."""
    op, av = node
    if op in _CHAR_OPS:
        return node_ranges(op, av, flags)
    if op in _REPEATS and av[0] >= 1 and len(av[2]):
        body = list(av[2])
        return _edge_ranges(body[0] if first else body[-1], flags, first)
    return None


def _within(inner: Ranges, outer: Ranges) -> bool:
    return all(any(lo <= a and b <= hi for lo, hi in outer) for a, b in inner)


# -- guarded Python emission --------------------------------------------------------


def _flag_letters(flags: int) -> str:
    return "".join(letter for bit, letter in _FLAG_LETTERS if flags & bit)


# `$` (and, per line, `\\Z`) also match just before the CR of a CRLF line ending.
CRLF_END = "(?=\\r?$)"
CRLF_END_STRING = "(?=\\r?\\Z)"


class _PyEmitter:
    """Python AST -> Python source with the grep semantics.

    `crlf`: `$` (and per-line `\\Z`) accept a CR before the line end.
    `guard`: undecodable bytes (surrogate escapes) never match.
    """

    def __init__(self, guard: bool, crlf: bool, multiline: bool) -> None:
        self.guard = guard
        self.crlf = crlf
        self.multiline = multiline

    def seq(self, items: Any) -> str:
        return "".join(self.node(op, av) for op, av in items)

    def node(self, op: Any, av: Any) -> str:
        if op is LITERAL:
            if self.guard and 0xDC80 <= av <= 0xDCFF:
                return "(?!)"
            return _py_char(av)
        if op in _CHAR_OPS:
            src = py_char_node(op, av)
            return "(?:(?!%s)%s)" % (_SURROGATE_ESCAPES, src) if self.guard else src
        if op is BRANCH:
            return "(?:" + "|".join(self.seq(alt) for alt in av[1]) + ")"
        if op is SUBPATTERN:
            gid, add, delete, sub = av
            inner = self.seq(sub)
            add_s = _flag_letters(add)
            del_s = _flag_letters(delete & (ICASE | M | S))
            if add_s or del_s:
                inner = "(?%s%s:%s)" % (add_s, "-" + del_s if del_s else "", inner)
            elif gid is None:
                inner = "(?:%s)" % inner
            if gid is not None:
                return "(?P<g%d>%s)" % (gid, inner)
            return inner
        if op in _REPEATS:
            lo, hi, sub = av
            suffix = "?" if op is MIN_REPEAT else "+" if op is POSSESSIVE_REPEAT else ""
            unbounded = hi is MAXREPEAT or hi == MAXREPEAT
            quant = "{%d,}" % lo if unbounded else "{%d,%d}" % (lo, hi)
            return "(?:%s)%s%s" % (self.seq(sub), quant, suffix)
        if op is AT:
            if self.crlf and av is _c.AT_END:
                return CRLF_END
            if self.crlf and av is _c.AT_END_STRING and not self.multiline:
                return CRLF_END_STRING
            return _AT_PY[av]
        if op is GROUPREF:
            return "(?P=g%d)" % av
        if op is GROUPREF_EXISTS:
            gid, yes, no = av
            if no is None:
                return "(?(g%d)%s)" % (gid, self.seq(yes))
            return "(?(g%d)%s|%s)" % (gid, self.seq(yes), self.seq(no))
        if op is ASSERT or op is ASSERT_NOT:
            direction, sub = av
            kind = (
                ("=" if op is ASSERT else "!")
                if direction == 1
                else ("<=" if op is ASSERT else "<!")
            )
            return "(?%s%s)" % (kind, self.seq(sub))
        if op is ATOMIC_GROUP:
            return "(?>%s)" % self.seq(av)
        raise _Untranslatable(str(op))


def emit_python(parsed: Any, guard: bool, crlf: bool = True, multiline: bool = False) -> str:
    return _PyEmitter(guard, crlf, multiline).seq(parsed)


# -- facts for the scanner ---------------------------------------------------------


class _Facts:
    def __init__(self) -> None:
        self.nodes = 0
        self.repeats = False
        self.backrefs = False
        self.whole_ok = True
        self.line_end = False

    def visit(self, items: Any, flags: int) -> None:
        for op, av in items:
            self.nodes += 1
            if op is BRANCH:
                for alt in av[1]:
                    self.visit(alt, flags)
            elif op is SUBPATTERN:
                self.visit(av[3], (flags | av[1]) & ~av[2])
            elif op in _REPEATS:
                self.repeats = True
                self.visit(av[2], flags)
            elif op is GROUPREF:
                self.backrefs = True
            elif op is GROUPREF_EXISTS:
                self.backrefs = True
                self.visit(av[1], flags)
                if av[2]:
                    self.visit(av[2], flags)
            elif op is ASSERT or op is ASSERT_NOT:
                self.whole_ok = False
                self.visit(av[1], flags)
            elif op is ATOMIC_GROUP:
                self.visit(av, flags)
            elif op is AT:
                if av in (_c.AT_END, _c.AT_END_STRING):
                    self.line_end = True
                string_anchor = av in (_c.AT_BEGINNING_STRING, _c.AT_END_STRING)
                line_anchor = av in (_c.AT_BEGINNING, _c.AT_END)
                if string_anchor or av is _c.AT_NON_BOUNDARY or (line_anchor and not flags & M):
                    self.whole_ok = False


def _literal_runs(items: Any, flags: int, icase: bool) -> Tuple[List[str], bool]:
    """Literal runs every match must contain, and whether `items` is nothing but literals."""
    runs: List[str] = []
    current: List[str] = []
    pure = True

    def flush() -> None:
        if current:
            runs.append("".join(current))
            current.clear()

    for op, av in items:
        if op is LITERAL and (not icase or av < 128):
            current.append(chr(av))
            continue
        if op is SUBPATTERN and not av[1] and not av[2]:
            inner_runs, inner_pure = _literal_runs(av[3], flags, icase)
            if inner_pure:
                current.extend(inner_runs)
                continue
            flush()
            runs.extend(inner_runs)
            pure = False
            continue
        pure = False
        flush()
        if op in _REPEATS and av[0] >= 1:
            runs.extend(_literal_runs(av[2], flags, icase)[0])
    flush()
    return runs, pure


class PatternInfo:
    """Everything both engines need to know about one grep pattern."""

    def __init__(
        self,
        pattern: str,
        literal: bool,
        case_sensitive: bool,
        multiline: bool,
        translate: bool = True,
    ) -> None:
        if len(pattern) > MAX_PATTERN_CHARS:
            raise PatternError("pattern is longer than %d characters" % MAX_PATTERN_CHARS)
        self.source = re.escape(pattern) if literal else pattern
        self.multiline = multiline
        # multiline lets a match span lines; `.` still stops at "\\n" unless (?s) is used.
        self.flags = M | (0 if case_sensitive else ICASE)
        try:
            self.compiled = re.compile(self.source, self.flags)
            parsed = _parser.parse(self.source, self.flags)
        except re.error as exc:
            raise PatternError("invalid regular expression: %s" % exc) from None
        except (RecursionError, OverflowError, MemoryError):
            raise PatternError("regular expression is too complex") from None
        state_flags = parsed.state.flags
        self.icase = bool(state_flags & ICASE)
        facts = _Facts()
        facts.visit(parsed, state_flags)
        runs, pure = _literal_runs(list(parsed), state_flags, self.icase)
        if pure:
            self.literal: Optional[str] = "".join(runs)
        else:
            self.literal = max(runs, key=len) if runs else None
        self.literals = [run for run in runs if run]
        self.pure_literal = pure
        # `re` finds a case-sensitive literal prefix by itself, in C: no need to help it.
        items = list(parsed)
        self.fast_prefix = (
            not self.icase and bool(items) and items[0][0] is LITERAL and items[0][1] != 10
        )
        # Lower-casing the raw bytes is a valid prefilter even for non-ASCII files.
        self.icase_bytes_any = (
            self.icase
            and self.literal is not None
            and self.literal.isascii()
            and not ICASE_PARTNERED.intersection(self.literal)
        )
        # A line never contains "\n", so outside multiline mode such a literal never matches.
        self.never = not multiline and self.literal is not None and "\n" in self.literal
        self.whole_ok = facts.whole_ok
        self.safe = pure or (not facts.repeats and not facts.backrefs and facts.nodes <= SAFE_NODES)
        self.compile_flags = state_flags & ~X
        self.effective = self.source
        self.effective_flags = self.flags
        if facts.line_end:
            # Re-emitted so that `$` also matches before the CR of a CRLF ending.
            try:
                self.effective = emit_python(parsed, False, True, multiline)
                self.effective_flags = self.compile_flags
                re.compile(self.effective, self.effective_flags)
            except (_Untranslatable, re.error, RecursionError, OverflowError):
                self.effective, self.effective_flags = self.source, self.flags
        try:
            self.guarded: Optional[str] = emit_python(parsed, True, True, multiline)
            re.compile(self.guarded, self.compile_flags)
        except (_Untranslatable, re.error, RecursionError, OverflowError):
            self.guarded = None
        self.rust: Optional[str] = None
        self.rust_exact = False
        self._parsed = parsed
        self._state_flags = state_flags
        if translate:
            self.translate()

    def translate(self) -> None:
        """Compute the ripgrep translation (only needed when ripgrep will run)."""
        if self.rust is not None:
            return
        try:
            emitter = _RustEmitter(self.multiline)
            rust = emitter.seq(self._parsed, self._state_flags, tail=True)
            if len(rust) <= MAX_RUST_CHARS:
                self.rust = rust
                self.rust_exact = emitter.exact
        except (_Untranslatable, RecursionError):
            pass

    def scan_spec(self) -> Dict[str, Any]:
        """The JSON-able part the Python scanner needs (it may run in another process)."""
        return {
            "source": self.effective,
            "flags": self.effective_flags,
            "guarded": self.guarded,
            "compile_flags": self.compile_flags,
            "literal": self.literal,
            "literals": self.literals,
            "icase": self.icase,
            "pure_literal": self.pure_literal,
            "icase_bytes_any": self.icase_bytes_any,
            "never": self.never,
            "whole_ok": self.whole_ok,
            "fast_prefix": self.fast_prefix,
            "multiline": self.multiline,
        }


@functools.lru_cache(maxsize=256)
def pattern_info(pattern: str, literal: bool, case_sensitive: bool, multiline: bool) -> PatternInfo:
    """A shared, cached PatternInfo (agents repeat their searches; the analysis is pure)."""
    return PatternInfo(pattern, literal, case_sensitive, multiline, translate=False)
