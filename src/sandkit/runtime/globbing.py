"""Glob patterns and the sorted, jail-respecting directory walk.

One implementation serves `glob` and grep's `glob=` filter in both grep
engines, so a pattern means the same thing everywhere. Matching never uses a
backtracking regex on more than two stars per segment (a name is at most 255
bytes, so that stays cheap), and `{a,b}` expansion is counted before it
happens, so no pattern can make the walk slow on its own.

Stdlib only; also executed inside the search worker process (see
scanworker.py), so it imports nothing from the package except `ignore`.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

from .ignore import is_ignored_dir, is_ignored_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterator, List, Optional, Sequence, Set, Tuple, Union

MAX_PATTERN_CHARS = 4096
MAX_EXPANSIONS = 256
# A star-heavy segment is matched by the linear wildcard algorithm instead of `re`.
_MAX_REGEX_STARS = 2


class GlobError(ValueError):
    """The pattern is not a valid glob (reported as INVALID_PATTERN)."""


class TimeUp(Exception):
    """The walk ran past its deadline (reported as TIMEOUT)."""


# -- pattern model ---------------------------------------------------------------


class _Wild:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


_STAR = _Wild("*")
_ANY = _Wild("?")
RECURSIVE = _Wild("**")


class _Class:
    __slots__ = ("negate", "ranges")

    def __init__(self, negate: bool, ranges: List[Tuple[str, str]]) -> None:
        self.negate = negate
        self.ranges = ranges

    def matches(self, ch: str) -> bool:
        hit = any(lo <= ch <= hi for lo, hi in self.ranges)
        return hit != self.negate

    def regex(self) -> str:
        parts = []
        for lo, hi in self.ranges:
            if lo == hi:
                parts.append("\\U%08x" % ord(lo))
            else:
                parts.append("\\U%08x-\\U%08x" % (ord(lo), ord(hi)))
        return "[" + ("^" if self.negate else "") + "".join(parts) + "]"


if TYPE_CHECKING:
    _Token = Union[str, _Wild, _Class]  # a literal character, _STAR, _ANY or a class


class Segment:
    """One path component of a pattern: literal characters, `*`, `?`, classes."""

    __slots__ = ("_regex", "literal", "tokens")

    def __init__(self, tokens: List[_Token], literal: Optional[str]) -> None:
        self.tokens = tokens
        self.literal = literal  # set when the segment has no wildcard at all
        self._regex: Optional["re.Pattern[str]"] = None
        if literal is None:
            stars = sum(1 for t in tokens if t is _STAR)
            if stars <= _MAX_REGEX_STARS:
                self._regex = re.compile(self._to_regex(), re.DOTALL)

    def _to_regex(self) -> str:
        out = []
        for tok in self.tokens:
            if isinstance(tok, _Class):
                out.append(tok.regex())
            elif tok is _STAR:
                out.append(".*")
            elif tok is _ANY:
                out.append(".")
            else:
                out.append(re.escape(str(tok)))
        return "".join(out)

    def match(self, name: str) -> bool:
        if self.literal is not None:
            return name == self.literal
        if self._regex is not None:
            return self._regex.fullmatch(name) is not None
        return _wildcard_match(self.tokens, name)


def _token_matches(tok: _Token, ch: str) -> bool:
    if isinstance(tok, _Class):
        return tok.matches(ch)
    return tok is _ANY or tok == ch


def _wildcard_match(tokens: Sequence[_Token], name: str) -> bool:
    """Linear-time wildcard match (one backtrack point, the last star seen)."""
    ti = ni = 0
    star_ti = -1
    star_ni = 0
    while ni < len(name):
        if ti < len(tokens) and tokens[ti] is _STAR:
            star_ti, star_ni = ti, ni
            ti += 1
        elif ti < len(tokens) and _token_matches(tokens[ti], name[ni]):
            ti += 1
            ni += 1
        elif star_ti >= 0:
            star_ni += 1
            ti, ni = star_ti + 1, star_ni
        else:
            return False
    while ti < len(tokens) and tokens[ti] is _STAR:
        ti += 1
    return ti == len(tokens)


if TYPE_CHECKING:
    _Part = Union[Segment, _Wild]  # a Segment or RECURSIVE


class Alternative:
    __slots__ = ("dir_only", "parts")

    def __init__(self, parts: List[_Part], dir_only: bool) -> None:
        self.parts = parts
        self.dir_only = dir_only


# -- parsing ---------------------------------------------------------------------


def _class_end(text: str, start: int) -> int:
    """Index just past the `]` closing the class that opens at `start`."""
    i = start + 1
    if i < len(text) and text[i] in "!^":
        i += 1
    if i < len(text) and text[i] == "]":
        i += 1
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "]":
            return i + 1
        if ch == "/":
            break
        i += 1
    raise GlobError("unclosed '[' in glob pattern")


# A brace tree: a list whose items are plain text or lists of alternatives.
if TYPE_CHECKING:
    _Brace = List[Union[str, List["_Brace"]]]


def _parse_braces(text: str, pos: int, depth: int, nested: bool) -> Tuple[List[_Brace], int]:
    if depth > 16:
        raise GlobError("braces nested too deeply")
    alternatives: List[_Brace] = []
    current: _Brace = []
    buf: List[str] = []
    i = pos
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            buf.append(text[i : i + 2])
            i += 2
        elif ch == "[":
            end = _class_end(text, i)
            buf.append(text[i:end])
            i = end
        elif ch == "{":
            if buf:
                current.append("".join(buf))
                buf = []
            inner, i = _parse_braces(text, i + 1, depth + 1, True)
            current.append(inner)
        elif ch == "," and nested:
            current.append("".join(buf))
            buf = []
            alternatives.append(current)
            current = []
            i += 1
        elif ch == "}" and nested:
            current.append("".join(buf))
            alternatives.append(current)
            return alternatives, i + 1
        else:
            buf.append(ch)
            i += 1
    if nested:
        raise GlobError("unclosed '{' in glob pattern")
    current.append("".join(buf))
    alternatives.append(current)
    return alternatives, i


def _count(seq: _Brace) -> int:
    total = 1
    for item in seq:
        if isinstance(item, list):
            total *= sum(_count(alt) for alt in item)
            if total > MAX_EXPANSIONS:
                return total
    return total


def _expand(seq: _Brace) -> List[str]:
    results = [""]
    for item in seq:
        if isinstance(item, str):
            results = [r + item for r in results]
        else:
            options = [o for alt in item for o in _expand(alt)]
            results = [r + o for r in results for o in options]
    return results


def expand_braces(pattern: str) -> List[str]:
    tree, _ = _parse_braces(pattern, 0, 0, False)
    if _count(tree[0]) > MAX_EXPANSIONS:
        raise GlobError("glob pattern expands to more than %d alternatives" % MAX_EXPANSIONS)
    seen: List[str] = []
    for text in _expand(tree[0]):
        if text not in seen:
            seen.append(text)
    return seen


def _parse_class(text: str, start: int) -> Tuple[_Class, int]:
    end = _class_end(text, start)
    body = text[start + 1 : end - 1]
    i = 0
    negate = False
    if body[:1] in ("!", "^"):
        negate = True
        i = 1
    chars: List[Tuple[str, bool]] = []  # (character, was escaped)
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            chars.append((body[i + 1], True))
            i += 2
        else:
            chars.append((body[i], False))
            i += 1
    ranges: List[Tuple[str, str]] = []
    j = 0
    while j < len(chars):
        if j + 2 < len(chars) and chars[j + 1] == ("-", False):
            lo, hi = chars[j][0], chars[j + 2][0]
            if lo > hi:
                raise GlobError("bad range %s-%s in glob class" % (lo, hi))
            ranges.append((lo, hi))
            j += 3
        else:
            ranges.append((chars[j][0], chars[j][0]))
            j += 1
    return _Class(negate, ranges), end


def _parse_segment(text: str) -> Segment:
    tokens: List[_Token] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 >= len(text):
                raise GlobError("glob pattern ends with a lone backslash")
            tokens.append(text[i + 1])
            i += 2
        elif ch == "*":
            if not tokens or tokens[-1] is not _STAR:
                tokens.append(_STAR)
            i += 1
        elif ch == "?":
            tokens.append(_ANY)
            i += 1
        elif ch == "[":
            cls, i = _parse_class(text, i)
            tokens.append(cls)
        else:
            tokens.append(ch)
            i += 1
    literal = None
    if all(isinstance(t, str) for t in tokens):
        literal = "".join(t for t in tokens if isinstance(t, str))
    return Segment(tokens, literal)


def _parse_alternative(text: str, anywhere: bool) -> Optional[Alternative]:
    if text.startswith("/"):
        raise GlobError("glob pattern must be relative (it is matched below `path`)")
    raw = text.split("/")
    dir_only = len(raw) > 1 and raw[-1] == ""
    parts: List[_Part] = []
    for piece in raw:
        if piece in ("", "."):
            continue
        if piece == "..":
            raise GlobError("'..' is not allowed in a glob pattern")
        if piece == "**":
            if not parts or parts[-1] is not RECURSIVE:
                parts.append(RECURSIVE)
            continue
        parts.append(_parse_segment(piece))
    if not parts:
        return None
    if parts[-1] is RECURSIVE:
        # A trailing `**` means "everything inside": at least one more segment,
        # so `src/**` lists what is in src, not src itself.
        parts.append(_parse_segment("*"))
    if anywhere and len(parts) == 1:
        parts.insert(0, RECURSIVE)
    return Alternative(parts, dir_only)


class GlobPattern:
    """A compiled glob: a set of alternatives matched against relative paths.

    `anywhere=True` (grep's filter) makes a slash-free alternative match the
    basename at any depth, like `**/alt`.
    """

    def __init__(self, pattern: str, anywhere: bool = False) -> None:
        if not isinstance(pattern, str):
            raise GlobError("glob pattern must be a string")
        if pattern == "":
            raise GlobError("glob pattern must not be empty")
        if "\x00" in pattern:
            raise GlobError("glob pattern contains a NUL byte")
        if len(pattern) > MAX_PATTERN_CHARS:
            raise GlobError("glob pattern is longer than %d characters" % MAX_PATTERN_CHARS)
        self.pattern = pattern
        self.expanded = expand_braces(pattern)
        alts = []
        for text in self.expanded:
            alt = _parse_alternative(text, anywhere)
            if alt is not None:
                alts.append(alt)
        self.alternatives: List[Alternative] = alts
        # A trailing "/" asks for directories, whether or not include_dirs is set.
        self.has_dir_only = any(alt.dir_only for alt in alts)

    # NFA over (alternative, part index); RECURSIVE may consume zero or more names.

    def _closure(self, states: Set[Tuple[int, int]]) -> Set[Tuple[int, int]]:
        out = set(states)
        todo = list(states)
        while todo:
            a, i = todo.pop()
            parts = self.alternatives[a].parts
            if i < len(parts) and parts[i] is RECURSIVE and (a, i + 1) not in out:
                out.add((a, i + 1))
                todo.append((a, i + 1))
        return out

    def start(self) -> Set[Tuple[int, int]]:
        return self._closure({(a, 0) for a in range(len(self.alternatives))})

    def step(self, states: Set[Tuple[int, int]], name: str) -> Set[Tuple[int, int]]:
        nxt: Set[Tuple[int, int]] = set()
        for a, i in states:
            parts = self.alternatives[a].parts
            if i >= len(parts):
                continue
            part = parts[i]
            if part is RECURSIVE:
                nxt.add((a, i))
            elif part.match(name):  # type: ignore[union-attr]
                nxt.add((a, i + 1))
        return self._closure(nxt) if nxt else nxt

    def accepts(self, states: Set[Tuple[int, int]], is_dir: bool, list_dirs: bool = True) -> bool:
        for a, i in states:
            alt = self.alternatives[a]
            if i != len(alt.parts):
                continue
            if (is_dir and (list_dirs or alt.dir_only)) or (not is_dir and not alt.dir_only):
                return True
        return False

    def can_descend(self, states: Set[Tuple[int, int]]) -> bool:
        return any(i < len(self.alternatives[a].parts) for a, i in states)

    def match_path(self, rel: str, is_dir: bool = False) -> bool:
        states = self.start()
        for name in rel.split("/"):
            states = self.step(states, name)
            if not states:
                return False
        return self.accepts(states, is_dir)

    def rg_basename_globs(self) -> Optional[List[str]]:
        """Basename globs for ripgrep that select a superset of our matches.

        None when no safe superset exists (then ripgrep gets no filter and
        the exact match is done on its output only).
        """
        out: List[str] = []
        for alt in self.alternatives:
            last = alt.parts[-1]
            if not isinstance(last, Segment) or alt.dir_only:
                return None
            text = []
            for tok in last.tokens:
                if tok is _STAR or tok is _ANY:
                    # ripgrep's `?` is one byte, not one character: `*` keeps a superset.
                    text.append("*")
                elif isinstance(tok, str) and _RG_SAFE.fullmatch(tok):
                    text.append(tok)
                else:
                    return None
            glob = re.sub(r"\*+", "*", "".join(text))  # ripgrep rejects a `**` inside a name
            if glob not in out:
                out.append(glob)
        return out


_RG_SAFE = re.compile(r"[A-Za-z0-9._-]")


# -- walking ---------------------------------------------------------------------

KIND_FILE = "f"
KIND_DIR = "d"
KIND_LINK = "l"
KIND_OTHER = "o"


# -- opening by path without following a swapped-in symlink ---------------------------

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW


def _kernel_path(fd: int) -> Optional[bytes]:
    """The kernel's own name for an open file; None where the platform cannot tell."""
    try:
        return os.readlink(b"/proc/self/fd/%d" % fd)
    except OSError:
        pass
    getpath = getattr(fcntl, "F_GETPATH", None)  # macOS
    if getpath is not None:
        try:
            return bytes(fcntl.fcntl(fd, getpath, bytes(1024))).rstrip(b"\0")
        except OSError:
            pass
    return None


def _open_by_components(path: str, flags: int) -> int:
    """Open `path` from / one component at a time, never following a symlink."""
    names = [name for name in path.split("/") if name]
    fd = os.open("/", _DIR_FLAGS)
    try:
        for name in names[:-1]:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        if not names:
            return os.dup(fd)
        return os.open(names[-1], flags | _NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)


def open_exact(path: str, flags: int) -> int:
    """os.open of `path` that fails (ELOOP) if any component of it was a symlink.

    Search paths are symlink-free by construction (a realpath'd root plus names
    read from directories), but something in the sandbox can swap a directory
    on such a path for a symlink at any moment. O_NOFOLLOW guards only the last
    component; the kernel's name for the opened file (/proc/self/fd, F_GETPATH)
    shows whether an earlier one was followed. Without either, the path is
    opened component by component instead.
    """
    fd = os.open(path, flags | _NOFOLLOW)
    try:
        actual = _kernel_path(fd)
    except BaseException:
        os.close(fd)
        raise
    if actual is None:
        os.close(fd)
        return _open_by_components(path, flags)
    if actual != os.fsencode(path):
        os.close(fd)
        raise OSError(errno.ELOOP, "a directory on the path is a symbolic link", path)
    return fd


def entry_kind(entry: "os.DirEntry[str]") -> str:
    try:
        if entry.is_symlink():
            return KIND_LINK
        if entry.is_dir(follow_symlinks=False):
            return KIND_DIR
        if entry.is_file(follow_symlinks=False):
            return KIND_FILE
    except OSError:
        return KIND_OTHER
    return KIND_OTHER


# The ignore module's name globs as one regex (same meaning as its fnmatchcase calls).
def is_ignored_entry(name: str, kind: str) -> bool:
    """The shared ignore set, applied the way ripgrep applies its `--glob` negations.

    ripgrep's `!*.pyc` style globs exclude directories too, so we do the same
    to keep both grep engines identical.
    """
    if kind in (KIND_FILE, KIND_OTHER):
        return is_ignored_file(name)
    return is_ignored_dir(name)


class Deadline:
    __slots__ = ("_ticks", "at")

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self._ticks = 0

    def check(self, every: int = 1) -> None:
        self._ticks += 1
        if self._ticks % every == 0 and time.monotonic() > self.at:
            raise TimeUp()

    def remaining(self) -> float:
        return self.at - time.monotonic()


if TYPE_CHECKING:
    _States = Set[Tuple[int, int]]
# (sort key, 0 = the entry itself / 1 = its subtree, name, real path, kind, NFA states)
if TYPE_CHECKING:
    _Item = Tuple[str, int, str, str, str, Optional[_States]]


def walk(
    root: str,
    pattern: Optional[GlobPattern],
    deadline: Deadline,
    want: Tuple[str, ...] = (KIND_FILE,),
) -> Iterator[Tuple[str, str, str]]:
    """Yield (relative path, real path, kind) below `root` in string order of the relative path.

    Symlinks are never followed (they are yielded as KIND_LINK when wanted);
    ignored entries below `root` are skipped; `pattern` both filters and prunes.
    A directory is listed at its own position ("a") but its contents at
    "a/", so "a.b" comes between the directory "a" and the file "a/c".
    """
    start = pattern.start() if pattern is not None else None
    list_dirs = KIND_DIR in want

    def listing(real_dir: str, states: Optional[_States]) -> List[_Item]:
        items: List[_Item] = []
        deadline.check()
        # Listed through an fd opened with open_exact: a directory swapped for a
        # symlink after its parent was listed is not entered.
        base = real_dir.rstrip("/") + "/"
        try:
            fd = open_exact(real_dir, _DIR_FLAGS)
        except OSError:
            return []
        try:
            with os.scandir(fd) as it:
                for entry in it:
                    deadline.check(256)
                    name = entry.name
                    kind = entry_kind(entry)
                    if is_ignored_entry(name, kind):
                        continue
                    nxt = None
                    if pattern is not None:
                        nxt = pattern.step(states, name)  # type: ignore[arg-type]
                        if not nxt:
                            continue
                    if kind == KIND_DIR:
                        if list_dirs or (pattern is not None and pattern.has_dir_only):
                            items.append((name, 0, name, base + name, kind, nxt))
                        if nxt is None or pattern.can_descend(nxt):  # type: ignore[union-attr]
                            items.append((name + "/", 1, name, base + name, kind, nxt))
                    elif kind in want:
                        items.append((name, 0, name, base + name, kind, nxt))
        except OSError:
            return []
        finally:
            os.close(fd)
        items.sort(key=lambda item: item[0])
        return items

    stack: List[Tuple[List[_Item], int, str]] = [(listing(root, start), 0, "")]
    while stack:
        items, index, prefix = stack[-1]
        if index >= len(items):
            stack.pop()
            continue
        stack[-1] = (items, index + 1, prefix)
        _, sub, name, real, kind, states = items[index]
        rel = prefix + name
        if sub:
            stack.append((listing(real, states), 0, rel + "/"))
            continue
        if (
            pattern is not None
            and states is not None
            and not pattern.accepts(states, kind == KIND_DIR, list_dirs)
        ):
            continue
        yield rel, real, kind


def is_regular(real: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(real).st_mode)
    except OSError:
        return False
