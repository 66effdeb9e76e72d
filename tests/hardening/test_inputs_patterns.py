"""Hostile patterns on every provider: catastrophic and invalid regexes, patterns and
paths that look like ripgrep options or shell code, and glob bombs over deep and wide
trees. Each is bounded by the search time limit (an answer or TIMEOUT, never a hang),
answered exactly as documented, and the box answers the next call
(`inputs_support.Cases`).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sandkit.errors import ErrorCode

from .figures import Figures
from .inputs_support import (
    BOX_LIMITS,
    SEARCH_S,
    SLACK_S,
    WORKSPACE,
    Box,
    Cases,
    assert_equal,
    fails_with,
    lines_of,
    opened_box,
    result_or_timeout,
)
from .targets import Target


@pytest.fixture(scope="module")
def box(target: Target, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    """The module's box, one per kind."""
    data_root = tmp_path_factory.mktemp(f"patterns-{target.kind}")
    with opened_box(target, data_root, "patterns", BOX_LIMITS) as made:
        yield made


@pytest.fixture
def cases(box: Box, figures: Figures) -> Cases:
    return Cases(box, figures)


# -- regexes ---------------------------------------------------------------------------

HOSTILE_TEXT = "a" * 40 + "b\n" + "aaa\n" + "x" * 5000 + "\n" + "ab" * 30 + "\nword999 here\n"
# pattern -> matching line numbers of HOSTILE_TEXT (reasoned by hand: Python's `re`
# cannot be the oracle, it would backtrack for hours on some of them).
CATASTROPHIC = {
    r"(a+)+$": [2],
    r"(a|aa)+$": [2],
    r"(x+x+)+y": [],
    r"^(a?){30}a{30}$": [],
    r"(?:x*)*y": [],
    r"((a*)*)*b$": [1, 4],
    r"(.*a){20}": [1, 4],
    r"(\w+\s?)+$": [1, 2, 3, 4, 5],
    r"(a+)+b(?=c)": [],
    "a{1000000}": [],
}
# Also searched in one file (the Python engine, whose deadline is a signal).
CATASTROPHIC_SINGLE_FILE = (r"(a+)+$", r"(x+x+)+y", r"^(a?){30}a{30}$")
INVALID = [
    "(",
    "[z-a]",
    "a{2,1}",
    "(?P<x>a)(?P<x>b)",
    "\\",
    "(?<=a+)b",
    "a{4294967296}",
    "x" * 10_001,
    "|".join(f"word{i}" for i in range(2000)),  # 17 890 characters
]


def test_catastrophic_and_invalid_regexes(box: Box, cases: Cases) -> None:
    box.sandbox.write_file("re/hostile.txt", HOSTILE_TEXT)
    directory, single = f"{WORKSPACE}/re", f"{WORKSPACE}/re/hostile.txt"
    bound = SEARCH_S + SLACK_S

    def search(pattern: str, path: str, expected: list[int], **kw: Any) -> Callable[[], Any]:
        def case() -> Any:
            result = result_or_timeout(lambda: box.sandbox.grep(pattern, path=path, **kw))
            if result is not None:
                assert lines_of(result) == [(single, n) for n in expected], lines_of(result)
            return result

        return case

    for pattern, expected in CATASTROPHIC.items():
        cases.run(f"grep dir {pattern[:30]}", bound, search(pattern, directory, expected))
    for pattern in CATASTROPHIC_SINGLE_FILE:
        expected = CATASTROPHIC[pattern]
        cases.run(f"grep file {pattern}", bound, search(pattern, single, expected))
    cases.run(
        "grep multiline (a+)+$",
        bound,
        lambda: result_or_timeout(
            lambda: box.sandbox.grep(r"(a+)+$", path=directory, multiline=True)
        ),
    )
    alternation = "|".join(f"word{i}" for i in range(1000))  # 7 889 characters: allowed
    cases.run("grep 1000 alternatives", bound, search(alternation, directory, [5]))
    for pattern in INVALID:
        cases.run(
            f"grep invalid {pattern[:20]}",
            bound,
            lambda p=pattern: fails_with(
                ErrorCode.INVALID_PATTERN, lambda: box.sandbox.grep(p, path=directory)
            ),
        )
    cases.run(
        "grep empty pattern",
        bound,
        lambda: fails_with(
            ErrorCode.INVALID_ARGUMENT, lambda: box.sandbox.grep("", path=directory)
        ),
    )
    cases.finish()


# -- patterns that look like options or shell code -------------------------------------

DASH_LINES = [
    "--pre=sh",
    "-e",
    "--files",
    "-f/etc/passwd",
    "--no-config",
    "$(touch pwned)",
    "`touch pwned2`",
    "; touch pwned3",
]
# Patterns that look like ripgrep options; none has a regex metacharacter.
DASHES = ["--pre=sh", "-e", "--files", "-f/etc/passwd", "--no-config", "--", "-", "--help", "-r"]
DASH_FILES = ("-e", "--pre=sh", "--files/inner.txt", "-f/etc/passwd")
DASH_GLOBS = {
    "-*": ["--pre=sh", "-e"],
    "**/-*": ["--pre=sh", "-e"],
    "--pre=sh": ["--pre=sh"],
    "-e": ["-e"],
    "--*/*": ["--files/inner.txt"],
    "-f/etc/passwd": ["-f/etc/passwd"],
    "--": [],
}


def test_leading_dash_and_shell_patterns_are_plain_text(box: Box, cases: Cases) -> None:
    sb = box.sandbox
    base = f"{WORKSPACE}/dash"
    notes = f"{base}/notes.txt"
    sb.write_file("dash/notes.txt", "".join(line + "\n" for line in DASH_LINES))
    for name in DASH_FILES:
        sb.write_file(f"dash/{name}", f"inside {name}\n")
    bound = SEARCH_S + SLACK_S

    def lines_with(pattern: str, literal: bool) -> Callable[[], Any]:
        def case() -> Any:
            result = sb.grep(pattern, path=notes, literal=literal)
            expected = [(notes, i + 1) for i, line in enumerate(DASH_LINES) if pattern in line]
            assert_equal(lines_of(result), expected)
            return result

        return case

    for pattern in DASHES:
        cases.run(f"grep literal {pattern}", bound, lines_with(pattern, True))
        cases.run(f"grep regex {pattern}", bound, lines_with(pattern, False))
    for pattern in DASH_LINES[5:]:
        cases.run(f"grep {pattern}", bound, lines_with(pattern, True))

    def files_with(
        pattern: str, names: list[str], path: str = base, **kw: Any
    ) -> Callable[[], Any]:
        def case() -> Any:
            result = sb.grep(pattern, path=path, output_mode="files_with_matches", **kw)
            assert_equal(result.files, sorted(f"{base}/{name}" for name in names))
            return result

        return case

    cases.run("grep dir --pre=sh", bound, files_with("--pre=sh", ["--pre=sh", "notes.txt"]))
    for glob in ("--pre=sh", "-e", "-f/etc/passwd", "--files/*"):
        names = [n for n in DASH_FILES if n == glob or n.startswith(glob.rstrip("*"))]
        cases.run(f"grep glob={glob}", bound, files_with("inside", names, glob=glob))
    cases.run(
        "grep path=--files",
        bound,
        files_with("inside", ["--files/inner.txt"], path=f"{base}/--files"),
    )
    cases.run(
        "grep path=-e (relative)",
        bound,
        lambda: assert_equal(lines_of(sb.grep("inside", path="dash/-e")), [(f"{base}/-e", 1)]),
    )
    cases.run(
        "grep path=/etc/passwd",
        bound,
        lambda: fails_with(ErrorCode.ACCESS_DENIED, lambda: sb.grep("root", path="/etc/passwd")),
    )
    for pattern, names in DASH_GLOBS.items():
        cases.run(
            f"glob {pattern}",
            bound,
            lambda p=pattern, n=names: assert_equal(
                sb.glob(p, path=base).paths, sorted(f"{base}/{x}" for x in n)
            ),
        )
    cases.run(
        "read_file -e", bound, lambda: assert_equal(sb.read_file("dash/-e").content, "inside -e\n")
    )
    cases.run(
        "list_dir --files",
        bound,
        lambda: assert_equal([e.name for e in sb.list_dir("dash/--files").entries], ["inner.txt"]),
    )
    cases.run(
        "no file made by a pattern",
        bound,
        lambda: assert_equal(sb.glob("**/*pwned*", path=WORKSPACE).paths, []),
    )
    cases.finish()


# -- glob bombs ------------------------------------------------------------------------

CHAIN_DEPTH = 1000
BUSH_DEPTH = 6  # 4**6 leaf directories
LONG_NAME = "a" * 200
MAKE_TREE = f"""\
import os
os.makedirs("tree/chain")
os.makedirs("tree/bush")
top = os.getcwd()
os.chdir("tree/chain")
for _ in range({CHAIN_DEPTH}):
    os.mkdir("d")
    os.chdir("d")
open("leaf.txt", "w").write("deep leaf\\n")
os.chdir(top)
def grow(base, depth):
    if depth == 0:
        open(base + "/leaf.txt", "w").write("bush leaf\\n")
        return
    for letter in "abcd":
        os.mkdir(base + "/" + letter)
        grow(base + "/" + letter, depth - 1)
grow("tree/bush", {BUSH_DEPTH})
open("tree/{LONG_NAME}", "w").write("long name\\n")
"""


def bush_leaves(min_d: int) -> list[str]:
    """Bush leaves whose path has at least `min_d` segments named d."""
    found = []
    for n in range(4**BUSH_DEPTH):
        letters = ["abcd"[(n >> (2 * i)) & 3] for i in reversed(range(BUSH_DEPTH))]
        if letters.count("d") >= min_d:
            found.append("bush/" + "/".join(letters) + "/leaf.txt")
    return found


def test_glob_bombs(box: Box, cases: Cases) -> None:
    sb = box.sandbox
    made = box.run(f"python3 -c {shlex.quote(MAKE_TREE)}", timeout=120)
    assert made.exit_code == 0, made
    tree = f"{WORKSPACE}/tree"
    chain_leaf = "chain/" + "d/" * CHAIN_DEPTH + "leaf.txt"
    bound = SEARCH_S + SLACK_S

    def globbed(pattern: str, check: Callable[[list[str]], None], **kw: Any) -> Callable[[], Any]:
        def case() -> Any:
            result = result_or_timeout(lambda: sb.glob(pattern, path=tree, **kw))
            if result is not None:
                check([p[len(tree) + 1 :] for p in result.paths])
            return result

        return case

    def exactly(expected: list[str]) -> Callable[[list[str]], None]:
        def check(paths: list[str]) -> None:
            assert_equal(paths, sorted(expected)[:200])

        return check

    def deep_enough(segments: int) -> Callable[[list[str]], None]:
        def check(paths: list[str]) -> None:
            assert len(paths) == 200, len(paths)
            assert all(p.count("/") + 1 >= segments for p in paths), paths[:3]

        return check

    everything = result_or_timeout(lambda: sb.glob("**/*", path=tree))
    cases.run(
        "glob **/ x30",
        bound,
        globbed(
            "**/" * 30 + "*",
            (lambda p: assert_equal(p, [x[len(tree) + 1 :] for x in everything.paths]))
            if everything is not None
            else deep_enough(1),
        ),
    )
    cases.run("glob (**/*/) x7", bound, globbed("**/*/" * 6 + "**/*", deep_enough(7)))
    four_d = [*bush_leaves(4), chain_leaf]
    cases.run("glob **/d/ x4 leaf", bound, globbed("**/d/" * 4 + "**/leaf.txt", exactly(four_d)))
    cases.run("glob **/d/ x4 nomatch", bound, globbed("**/d/" * 4 + "**/nope.txt", exactly([])))
    cases.run(
        "glob **/[a-d]/ x3 leaf",
        bound,
        globbed("**/[a-d]/" * 3 + "**/leaf.txt", exactly([*bush_leaves(0), chain_leaf])),
    )
    cases.run("glob chain/**/leaf.txt", bound, globbed("chain/**/leaf.txt", exactly([chain_leaf])))
    star_a = "*a" * 11
    cases.run("glob *a x11 b", bound, globbed(star_a + "*b", exactly([])))
    cases.run("glob *a x11 *", bound, globbed(star_a + "*", exactly([LONG_NAME])))
    cases.run("glob {a,b} x8 (256)", bound, globbed("{a,b}" * 8, exactly([])))
    extensions = "**/*.{" + ",".join(f"e{i}" for i in range(256)) + "}"
    cases.run("glob 256 extensions", bound, globbed(extensions, exactly([])))
    for name, pattern in {
        "{a,b} x9 (512)": "{a,b}" * 9,
        "braces nested 60": "{a," * 60 + "b" + "}" * 60,
        "unclosed [": "**/[abc",
        "4097 characters": "*" * 4097,
        "..": "**/../*",
        "absolute": "/etc/*",
    }.items():
        cases.run(
            f"glob invalid {name}",
            bound,
            lambda p=pattern: fails_with(ErrorCode.INVALID_PATTERN, lambda: sb.glob(p, path=tree)),
        )

    def grep_glob(glob: str, expected: list[str] | None) -> Callable[[], Any]:
        def case() -> Any:
            result = result_or_timeout(
                lambda: sb.grep("leaf", path=tree, glob=glob, output_mode="files_with_matches")
            )
            if result is not None and expected is not None:
                assert_equal(result.files, [f"{tree}/{p}" for p in sorted(expected)[:100]])
            return result

        return case

    cases.run("grep glob (**/*/) x5", bound, grep_glob("**/*/" * 4 + "**/*", None))
    cases.run("grep glob **/d/ x4", bound, grep_glob("**/d/" * 4 + "**/leaf.txt", four_d))
    cases.run("grep glob *a x11 b", bound, grep_glob(star_a + "*b", []))
    cases.run(
        "list_dir chain depth 10",
        bound,
        lambda: assert_equal(len(sb.list_dir("tree/chain", max_depth=10).entries), 10),
    )
    assert box.run("rm -rf tree", timeout=120).exit_code == 0
    cases.finish()
