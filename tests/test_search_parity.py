"""Differential tests: the ripgrep engine and the Python engine give identical answers.

Generated trees mix nested and hidden directories, ignored directories,
binary files (NUL early and late), CRLF and lone CR, invalid UTF-8, BOMs,
Unicode whose case folding or `\\w`/`\\s`/`\\d` class differs between Python
and Rust, empty files and long lines. Generated requests mix regexes (with
constructs Rust lacks), literals, case, context, modes, offsets, caps, glob
filters and multiline. glob has one (Python) engine, so it is checked
against an independent brute-force oracle instead.
"""

from __future__ import annotations

import itertools
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sandkit.runtime import search
from sandkit.runtime.context import Context
from sandkit.runtime.errors import SandboxError
from sandkit.runtime.ignore import is_ignored_dir, is_ignored_file
from sandkit.runtime.limits import Limits
from sandkit.runtime.pathmap import WORKSPACE, Mount, PathMapping
from sandkit.runtime.search import find_rg, glob, grep

RG = find_rg()
# CI runs 450 + 100 + 60 + 150 generated examples; raise this locally to fuzz harder.
SCALE = float(os.environ.get("SEARCH_PARITY_SCALE", "1"))
pytestmark = pytest.mark.skipif(RG is None, reason="ripgrep is not installed")

# Small limits so that cutting, context caps, size caps and paging all happen.
LIMITS = Limits(
    grep_line_chars=40,
    grep_max_context=3,
    grep_max_file_bytes=3000,
    grep_default_results=4,
    grep_max_results=7,
    glob_default_results=5,
    glob_max_results=9,
    search_timeout_s=60,
)

FRAGMENTS = [
    "foo",
    "Foo",
    "FOO",
    "bar",
    "baz",
    "import os",
    "def f(x):",
    "x = 1",
    "  ",
    "\t",
    "a",
    "aa",
    "ab",
    "abab",
    "k",
    "K",
    "s",
    "S",
    "i",
    "I",
    "_",
    "-",
    ".",
    "$",
    "^",
    "(",
    ")",
    "[",
    "]",
    "\\",
    "{",
    "}",
    "*",
    "+",
    "?",
    "|",
    "0",
    "42",
    "3.14",
    "é",
    "É",
    "ß",
    "ẞ",
    "İ",
    "\u0131",
    "\u212a",
    "\u017f",
    "日本",
    "\u03a3\u03c3\u03c2",
    "µ",
    "\u0301",
    "\u00b2",
    "\u00a0",
    "\u2003",
    "\x1c",
    "\x85",
    "\ufeff",
    "\ufffd",
    "\u2028",
    "‿",
    "٣",
    "\U0001f600",
    "\ue000",
]
RAW_BITS = [b"\xff", b"\xe2\x82", b"\xc3", b"\xed\xa0\x80", b"\x80", b"\r", b"\x00"]
LINE_ENDS = [b"\n", b"\n", b"\n", b"\r\n", b"\r"]

NAMES = ["a.txt", "b.py", "c.md", ".hidden", "x y.txt", "é.txt", "d", "A.TXT", "z.py"]
DIRS = ["src", "lib", ".cfg", "a", "src"]
IGNORED_DIRS = ["node_modules", "build", "__pycache__", "pkg.egg-info", "s.pyc"]


@st.composite
def line_bytes(draw: st.DrawFn) -> bytes:
    parts = draw(st.lists(st.sampled_from(FRAGMENTS), max_size=1 if draw(st.booleans()) else 4))
    raw = "".join(parts).encode("utf-8")
    if draw(st.integers(0, 7)) == 0:
        bit = draw(st.sampled_from(RAW_BITS))
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + bit + raw[at:]
    if draw(st.integers(0, 12)) == 0:
        raw = raw * draw(st.integers(8, 40))  # long lines, cut at 40 chars
    return raw


@st.composite
def file_bytes(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return b""
    lines = draw(st.lists(line_bytes(), min_size=1, max_size=8))
    ends = [draw(st.sampled_from(LINE_ENDS)) for _ in lines]
    data = b"".join(line + end for line, end in zip(lines, ends, strict=True))
    if draw(st.booleans()):
        data = data[: -len(ends[-1])]  # no final newline
    if kind == 1:
        data = b"\xef\xbb\xbf" + data
    elif kind == 2:
        data = data + b"\x00tail"  # binary: NUL in the first 8 KiB
    elif kind == 3:
        data = b"x" * 9000 + b"\n" + data + b"\x00"  # NUL after 8 KiB: still text
    elif kind == 4:
        data = b"\xff\xfe" + data  # UTF-16 byte-order mark: binary
    elif kind == 5:
        data = data * 80  # over the 3000-byte cap (usually)
    return data


@st.composite
def trees(draw: st.DrawFn) -> dict[str, bytes]:
    paths = draw(
        st.lists(
            st.tuples(
                st.lists(
                    st.sampled_from(DIRS)
                    if draw(st.integers(0, 4))
                    else st.sampled_from(IGNORED_DIRS),
                    max_size=2,
                ),
                st.sampled_from(NAMES),
            ),
            min_size=1,
            max_size=8,
        )
    )
    tree: dict[str, bytes] = {}
    dirs: set[str] = set()
    for parents, name in paths:
        rel = "/".join([*parents, name])
        prefixes = {"/".join(parents[: i + 1]) for i in range(len(parents))}
        if rel in dirs or any(p in tree for p in prefixes):
            continue
        dirs |= prefixes
        tree[rel] = draw(file_bytes())
    return tree


ATOMS = [
    "foo",
    "o",
    "a",
    "k",
    "s",
    "i",
    "é",
    "ß",
    "İ",
    "\u0131",
    "日",
    "\u03c3",
    "µ",
    "\\.",
    "\\$",
    "\\(",
    ".",
    "\\w",
    "\\W",
    "\\s",
    "\\S",
    "\\d",
    "\\D",
    "[a-f]",
    "[^a]",
    "[^\\n]",
    "[\\w.]",
    "[ßs]",
    "[A-Z]",
    "[\\u00e0-\\u00ff]",
    "\\x1c",
    "\\xa0",
    "\\u212a",
    "\\u017f",
    "\\ufffd",
    "\\r",
    "\\n",
    "\\t",
    " ",
    "(?i:k)",
    "(?-i:K)",
    "(?s:.)",
    "(?a:\\w)",
    "\\N{GREEK SMALL LETTER SIGMA}",
]
ANCHORS = ["^", "$", "\\b", "\\B", "\\A", "\\Z"]
QUANTS = ["*", "+", "?", "{1,2}", "*?", "+?", "{2}"]


@st.composite
def regexes(draw: st.DrawFn) -> str:
    # Most patterns stay within what ripgrep can answer exactly (so its counts are
    # trusted as they are); the rest use constructs that force the superset path.
    exact = draw(st.integers(0, 9)) < 7

    def piece() -> str:
        choice = draw(st.integers(0, 6 if exact else 9))
        if exact and choice == 5:
            choice = 0
        if choice <= 4:
            text = draw(st.sampled_from(ATOMS))
        elif choice == 5:
            text = draw(st.sampled_from(ANCHORS))
        elif choice == 6:
            a, b = draw(st.sampled_from(ATOMS)), draw(st.sampled_from(ATOMS))
            text = f"(?:{a}|{b})"
        elif choice == 7:
            group = draw(st.sampled_from(["a", "o", "ab", "\\w"]))
            text = f"({group})\\1"
        elif choice == 8:
            kind = draw(st.sampled_from(["?=", "?!", "?<=", "?<!"]))
            body = draw(st.sampled_from(["o", "a", "\\d", "x"]))
            text = f"({kind}{body})"
        else:
            text = "(?>" + draw(st.sampled_from(ATOMS)) + ")"
        if choice <= 4 and draw(st.integers(0, 3)) == 0:
            text += draw(st.sampled_from(QUANTS))
        return text

    # Short patterns match often enough for paging, context and cutting to happen.
    count = 1 if draw(st.booleans()) else draw(st.integers(2, 3))
    pieces = [piece() for _ in range(count)]
    pattern = "".join(pieces)
    if draw(st.integers(0, 4)) == 0:
        pattern = "^" + pattern
    if draw(st.integers(0, 4)) == 0:
        pattern = f"(?:{pattern})$"
    return pattern


GLOBS = [None, "*.txt", "**/*.py", "src/*", "*.{txt,md}", "[a-c]*", "?.txt", ".*", "src/**"]


# Atoms that match often, so that paging, context, cutting and truncation happen.
EASY = [
    "o",
    "a",
    ".",
    "\\w",
    "\\s",
    "\\W",
    "^",
    "$",
    "foo",
    "[a-z]",
    "s",
    "i",
    "k",
    "x",
    "\\d",
    "é",
    " ",
    "^.",
    ".$",
    "o+",
    "\\w+$",
    "^\\s*$",
]


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.integers(0, 9))
    literal = kind < 2
    if literal:
        pattern = draw(st.sampled_from([*FRAGMENTS, "a.", "o\\", "(x", "$x"]))
    elif kind < 5:
        pattern = draw(st.sampled_from(EASY))
    else:
        pattern = draw(regexes())
    return {
        "pattern": pattern,
        "literal": literal,
        "case_sensitive": draw(st.booleans()),
        "output_mode": draw(st.sampled_from(["content", "content", "files_with_matches", "count"])),
        "before": draw(st.integers(0, 4)),
        "after": draw(st.integers(0, 4)),
        "multiline": draw(st.integers(0, 4)) == 0,
        "max_results": draw(st.sampled_from([None, 1, 2, 3, 50])),
        "offset": draw(st.sampled_from([0, 0, 0, 1, 2, 5])),
        "glob": None if draw(st.booleans()) else draw(st.sampled_from(GLOBS)),
    }


@contextmanager
def workspace(tree: dict[str, bytes]) -> Iterator[tuple[Context, Context, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        for rel, data in tree.items():
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        mapping = PathMapping([Mount(WORKSPACE, str(root))])
        yield (
            Context(mapping=mapping, limits=LIMITS, rg_path=RG),
            Context(mapping=mapping, limits=LIMITS, rg_path=None),
            str(root),
        )


def outcome(ctx: Context, **kwargs: Any) -> Any:
    try:
        return grep(ctx, **kwargs)
    except SandboxError as exc:
        return ("error", exc.code)


def python_compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


@settings(
    max_examples=int(450 * SCALE),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(tree=trees(), request=requests())
def test_rg_and_python_engines_agree(tree: dict[str, bytes], request: dict[str, Any]) -> None:
    assume(request["literal"] or python_compiles(request["pattern"]))
    with workspace(tree) as (with_rg, python_only, _):
        fast = outcome(with_rg, **request)
        slow = outcome(python_only, **request)
        assert fast == slow


@settings(
    max_examples=int(100 * SCALE),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(tree=trees(), request=requests())
def test_two_pass_route_agrees(tree: dict[str, bytes], request: dict[str, Any]) -> None:
    """Content queries whose single ripgrep pass overflows its budget: count, then page."""
    assume(request["literal"] or python_compiles(request["pattern"]))
    request = dict(request, output_mode="content")
    with (
        mock.patch.object(search, "SINGLE_PASS_SAFE_OUTPUT", 0),
        mock.patch.object(search, "SINGLE_PASS_MAX_OUTPUT", 0),
        workspace(tree) as (with_rg, python_only, _),
    ):
        assert outcome(with_rg, **request) == outcome(python_only, **request)


@settings(max_examples=int(60 * SCALE), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), request=requests(), name=st.sampled_from(NAMES))
def test_engines_agree_on_a_single_file(
    tree: dict[str, bytes], request: dict[str, Any], name: str
) -> None:
    assume(request["literal"] or python_compiles(request["pattern"]))
    tree = {name: b"foo\nbar foo\n", **{k: v for k, v in tree.items() if "/" in k}}
    with workspace(tree) as (with_rg, python_only, _):
        request = dict(request, path=f"{WORKSPACE}/{name}")
        assert outcome(with_rg, **request) == outcome(python_only, **request)


# -- glob against an independent oracle ----------------------------------------------


def _oracle_expand(pattern: str) -> list[str]:
    """Brace expansion by repeated textual substitution of the innermost group."""
    results = [pattern]
    while True:
        out, changed = [], False
        for text in results:
            m = re.search(r"\{([^{}]*)\}", text)
            if m is None:
                out.append(text)
                continue
            changed = True
            out += [text[: m.start()] + alt + text[m.end() :] for alt in m.group(1).split(",")]
        results = out
        if not changed:
            return list(dict.fromkeys(results))


def _oracle_segment(segment: str) -> str:
    out, i = [], 0
    while i < len(segment):
        ch = segment[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = segment.index("]", i + 2)
            body = segment[i + 1 : end]
            neg = body.startswith("!")
            out.append("[" + ("^" if neg else "") + re.escape(body[neg:]).replace("\\-", "-") + "]")
            i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def oracle_glob(root: str, pattern: str, include_dirs: bool) -> list[str]:
    regexes_ = []
    for alt in _oracle_expand(pattern):
        dir_only = alt.endswith("/")
        segs = [s for s in alt.split("/") if s not in ("", ".")]
        if not segs:
            continue
        if segs[-1] == "**":
            segs.append("*")  # a trailing ** needs something inside
        body = "".join("(?:[^/]+/)*" if s == "**" else _oracle_segment(s) + "/" for s in segs)
        regexes_.append((re.compile(body), dir_only))
    found = []
    for top, dirnames, filenames in os.walk(root):
        rel_top = os.path.relpath(top, root)
        rel_top = "" if rel_top == "." else rel_top + "/"
        entries = []
        for name in list(dirnames):
            full = os.path.join(top, name)
            if os.path.islink(full):
                dirnames.remove(name)
                if not is_ignored_dir(name) and not is_ignored_file(name):
                    entries.append((name, False))
            elif is_ignored_dir(name) or is_ignored_file(name):
                dirnames.remove(name)
            else:
                entries.append((name, True))
        entries += [(name, False) for name in filenames if not is_ignored_file(name)]
        for name, is_dir in entries:
            rel = rel_top + name
            for rx, dir_only in regexes_:
                if rx.fullmatch(rel + "/") and (
                    (is_dir and (include_dirs or dir_only)) or (not is_dir and not dir_only)
                ):
                    found.append(rel)
                    break
    return sorted(found)


GLOB_PIECES = [
    "*",
    "?",
    "a",
    "b",
    ".",
    "txt",
    "py",
    "src",
    "[ab]",
    "[!a]",
    "[a-c]",
    "{a,b}",
    "{src,lib}",
    "x y",
    "é",
]


@st.composite
def glob_patterns(draw: st.DrawFn) -> str:
    segments = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 3)) == 0:
            segments.append("**")
        else:
            segments.append(
                "".join(draw(st.lists(st.sampled_from(GLOB_PIECES), min_size=1, max_size=3)))
            )
    pattern = "/".join(segments)
    if draw(st.integers(0, 7)) == 0:
        pattern += "/"
    assume(".." not in pattern.split("/"))  # rejected on purpose (INVALID_PATTERN)
    return pattern


@settings(
    max_examples=int(150 * SCALE), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    tree=trees(),
    pattern=glob_patterns(),
    include_dirs=st.booleans(),
    links=st.lists(st.sampled_from(["ln", "src/ln", "lib.py"]), max_size=2, unique=True),
)
def test_glob_matches_brute_force_oracle(
    tree: dict[str, bytes], pattern: str, include_dirs: bool, links: list[str]
) -> None:
    with workspace(tree) as (ctx, _, root):
        for link in links:
            target = Path(root) / link
            if not target.parent.is_dir() or target.exists():
                continue
            target.symlink_to("/etc" if link.endswith("ln") else "a.txt")
        unlimited = Context(
            mapping=ctx.mapping, limits=Limits(glob_default_results=10**6, glob_max_results=10**6)
        )
        result = glob(unlimited, pattern, include_dirs=include_dirs)
        expected = oracle_glob(root, pattern, include_dirs)
        assert result["paths"] == [f"{WORKSPACE}/{rel}" for rel in expected]
        assert result["truncated"] is False
        capped = glob(ctx, pattern, include_dirs=include_dirs, max_results=3)
        assert capped["paths"] == result["paths"][:3]
        assert capped["truncated"] == (len(result["paths"]) > 3)


def test_oracle_sanity() -> None:
    assert _oracle_expand("{a,b{c,d}}x") == ["ax", "bcx", "bdx"]
    assert list(itertools.islice(_oracle_expand("{a,b}{c,d}"), 4)) == ["ac", "ad", "bc", "bd"]
