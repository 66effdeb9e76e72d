"""grep: modes, case, literal, glob filter, context, multiline, paging, caps, skips, dialect."""

from __future__ import annotations

import time

import pytest

from sandkit import ErrorCode
from sandkit.runtime.limits import Limits
from sandkit.sandbox import Sandbox

from .suite import (
    WORKSPACE,
    ConformanceBase,
    make_dirs,
    raises_code,
    sh,
    symlink,
    write_tree,
)

CODE = {
    "app.py": "import os\nimport sys\n\ndef main():\n    print('Hello World')\n    return 0\n",
    "lib/util.py": "def helper():\n    return 'hello'\n\nHELLO = 1\n",
    "lib/notes.md": "# Notes\nhello from markdown\nnothing here\n",
    "README.txt": "Say HELLO\n",
    "empty.py": "",
}


class GrepTests(ConformanceBase):
    @pytest.fixture
    def code(self, sb: Sandbox, ws: str) -> str:
        write_tree(sb, ws, CODE)
        return ws

    def test_grep_content_mode(self, sb: Sandbox, code: str) -> None:
        result = sb.grep("hello", path=code)
        assert result.output_mode == "content"
        assert result.path == code and result.pattern == "hello"
        assert [(m.path, m.line_number, m.text) for m in result.matches] == [
            (f"{code}/README.txt", 1, "Say HELLO"),
            (f"{code}/app.py", 5, "    print('Hello World')"),
            (f"{code}/lib/notes.md", 2, "hello from markdown"),
            (f"{code}/lib/util.py", 2, "    return 'hello'"),
            (f"{code}/lib/util.py", 4, "HELLO = 1"),
        ]
        assert all(m.before == [] and m.after == [] for m in result.matches)
        assert result.files == [] and result.counts == []
        assert result.truncated is False and result.offset == 0

    def test_grep_case_sensitive(self, sb: Sandbox, code: str) -> None:
        result = sb.grep("hello", path=code, case_sensitive=True)
        assert [(m.path, m.line_number) for m in result.matches] == [
            (f"{code}/lib/notes.md", 2),
            (f"{code}/lib/util.py", 2),
        ]
        upper = sb.grep("HELLO", path=code, case_sensitive=True)
        assert [m.text for m in upper.matches] == ["Say HELLO", "HELLO = 1"]

    def test_grep_files_with_matches(self, sb: Sandbox, code: str) -> None:
        result = sb.grep("hello", path=code, output_mode="files_with_matches")
        assert result.files == [
            f"{code}/README.txt",
            f"{code}/app.py",
            f"{code}/lib/notes.md",
            f"{code}/lib/util.py",
        ]
        assert result.matches == [] and result.counts == []

    def test_grep_count(self, sb: Sandbox, code: str) -> None:
        result = sb.grep("hello", path=code, output_mode="count")
        assert [(c.path, c.count) for c in result.counts] == [
            (f"{code}/README.txt", 1),
            (f"{code}/app.py", 1),
            (f"{code}/lib/notes.md", 1),
            (f"{code}/lib/util.py", 2),
        ]

    def test_grep_count_counts_lines_not_matches(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "a a a\nb\na\n")
        result = sb.grep("a", path=ws, output_mode="count")
        assert [(c.path, c.count) for c in result.counts] == [(f"{ws}/f.txt", 2)]

    def test_grep_single_file_path(self, sb: Sandbox, code: str) -> None:
        result = sb.grep("hello", path=f"{code}/lib/util.py")
        assert [m.line_number for m in result.matches] == [2, 4]

    def test_grep_default_path_is_the_workspace(self, sb: Sandbox, code: str) -> None:
        token = code.rsplit("/", 1)[1]
        sb.write_file(f"{code}/token.txt", f"{token}\n")
        result = sb.grep(token, output_mode="files_with_matches", case_sensitive=True)
        assert result.path == WORKSPACE
        assert result.files == [f"{code}/token.txt"]

    @pytest.mark.parametrize(
        "glob, expected",
        [
            ("*.py", ["app.py", "lib/util.py"]),
            ("*.md", ["lib/notes.md"]),
            ("**/*.py", ["app.py", "lib/util.py"]),
            ("lib/*", ["lib/notes.md", "lib/util.py"]),
            ("*.{md,txt}", ["README.txt", "lib/notes.md"]),
            ("*.rs", []),
        ],
    )
    def test_grep_glob_filter(self, sb: Sandbox, code: str, glob: str, expected: list[str]) -> None:
        result = sb.grep("hello", path=code, glob=glob, output_mode="files_with_matches")
        assert result.files == [f"{code}/{p}" for p in expected]

    def test_grep_literal(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "a.c\nabc\n(x+\n[y]\n")
        assert [m.text for m in sb.grep("a.c", path=ws).matches] == ["a.c", "abc"]
        assert [m.text for m in sb.grep("a.c", path=ws, literal=True).matches] == ["a.c"]
        assert [m.text for m in sb.grep("(x+", path=ws, literal=True).matches] == ["(x+"]
        assert [m.text for m in sb.grep("[Y]", path=ws, literal=True).matches] == ["[y]"]
        assert sb.grep("[Y]", path=ws, literal=True, case_sensitive=True).matches == []

    @pytest.mark.parametrize("pattern", ["(", "[a-", "a{2,1}", "(?P<x>a)(?P<x>b)", "\\", "*a"])
    def test_grep_invalid_regex_is_invalid_pattern(
        self, sb: Sandbox, code: str, pattern: str
    ) -> None:
        with raises_code(ErrorCode.INVALID_PATTERN):
            sb.grep(pattern, path=code)

    def test_grep_context_lines(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "".join(f"line{i}\n" for i in range(1, 11)))
        result = sb.grep("line5$", path=ws, before=2, after=3)
        [match] = result.matches
        assert match.line_number == 5
        assert match.text == "line5"
        assert match.before == ["line3", "line4"]
        assert match.after == ["line6", "line7", "line8"]

    def test_grep_context_at_the_edges(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "first\nsecond\nthird\n")
        [top] = sb.grep("first", path=ws, before=5, after=1).matches
        assert (top.before, top.after) == ([], ["second"])
        [bottom] = sb.grep("third", path=ws, before=1, after=5).matches
        assert (bottom.before, bottom.after) == (["second"], [])

    def test_grep_context_is_clamped(self, sb: Sandbox, ws: str, limits: Limits) -> None:
        lines = 3 * limits.grep_max_context
        sb.write_file(f"{ws}/f.txt", "".join(f"l{i}\n" for i in range(lines)) + "hit\n")
        [match] = sb.grep("hit", path=ws, before=10**6).matches
        assert len(match.before) == limits.grep_max_context

    def test_grep_invalid_glob_filter(self, sb: Sandbox, code: str) -> None:
        with raises_code(ErrorCode.INVALID_PATTERN):
            sb.grep("hello", path=code, glob="[")
        with raises_code(ErrorCode.INVALID_PATTERN):
            sb.grep("hello", path=code, glob="../*.py")

    @pytest.mark.parametrize("before, after", [(-1, 0), (0, -1), ("1", 0)])
    def test_grep_bad_context(self, sb: Sandbox, code: str, before: object, after: object) -> None:
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.grep("hello", path=code, before=before, after=after)  # type: ignore[arg-type]

    def test_grep_multiline(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.py", "x = 1\ndef f(\n    a,\n):\n    pass\n")
        assert sb.grep(r"def f\(\n\s+a", path=ws).matches == []
        result = sb.grep(r"def f\(\n\s+a", path=ws, multiline=True)
        [match] = result.matches
        assert match.line_number == 2
        assert match.text == "def f(\n    a,"

    def test_grep_multiline_dot_does_not_cross_lines_unless_asked(
        self, sb: Sandbox, ws: str
    ) -> None:
        sb.write_file(f"{ws}/f.txt", "start\nmiddle\nend\n")
        assert sb.grep("start.*end", path=ws, multiline=True).matches == []
        [match] = sb.grep("(?s)start.*end", path=ws, multiline=True).matches
        assert match.line_number == 1
        assert match.text == "start\nmiddle\nend"

    def test_grep_offset_pages_through_results(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "".join(f"hit {i}\n" for i in range(1, 8)))
        seen: list[int] = []
        offset = 0
        while True:
            page = sb.grep("hit", path=ws, max_results=3, offset=offset)
            assert page.offset == offset
            seen += [m.line_number for m in page.matches]
            if not page.truncated:
                break
            offset += len(page.matches)
        assert seen == list(range(1, 8))
        past = sb.grep("hit", path=ws, max_results=3, offset=100)
        assert past.matches == [] and past.truncated is False

    def test_grep_offset_in_files_and_count_modes(self, sb: Sandbox, ws: str) -> None:
        for i in range(5):
            sb.write_file(f"{ws}/f{i}.txt", "hit\n")
        files = sb.grep("hit", path=ws, output_mode="files_with_matches", max_results=2, offset=2)
        assert files.files == [f"{ws}/f2.txt", f"{ws}/f3.txt"] and files.truncated is True
        counts = sb.grep("hit", path=ws, output_mode="count", max_results=2, offset=4)
        assert [c.path for c in counts.counts] == [f"{ws}/f4.txt"] and not counts.truncated

    def test_grep_truncated_only_when_more_existed(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "hit\n" * 5)
        exact = sb.grep("hit", path=ws, max_results=5)
        assert len(exact.matches) == 5 and exact.truncated is False
        fewer = sb.grep("hit", path=ws, max_results=4)
        assert len(fewer.matches) == 4 and fewer.truncated is True
        paged = sb.grep("hit", path=ws, max_results=2, offset=3)
        assert len(paged.matches) == 2 and paged.truncated is False

    def test_grep_default_cap_and_ceiling(self, sb: Sandbox, ws: str, limits: Limits) -> None:
        lines = limits.grep_max_results + 10
        sb.write_file(f"{ws}/f.txt", "hit\n" * lines)
        default = sb.grep("hit", path=ws)
        assert len(default.matches) == limits.grep_default_results and default.truncated
        assert len(sb.grep("hit", path=ws, max_results=0).matches) == (limits.grep_default_results)
        clamped = sb.grep("hit", path=ws, max_results=10**6)
        assert len(clamped.matches) == limits.grep_max_results and clamped.truncated

    def test_grep_long_lines_are_cut(self, sb: Sandbox, ws: str, limits: Limits) -> None:
        long_line = "x" * 1000 + "needle" + "y" * 1000
        sb.write_file(f"{ws}/f.txt", f"{long_line}\nshort needle\n")
        result = sb.grep("needle", path=ws)
        assert [m.line_number for m in result.matches] == [1, 2]
        assert len(result.matches[0].text) <= limits.grep_line_chars + 20
        assert result.matches[0].text.startswith("x" * 50)
        assert "needle" in result.matches[0].text, "a match far right stays visible"
        assert result.matches[1].text == "short needle"

    def test_grep_binary_files_are_skipped(self, sb: Sandbox, ws: str) -> None:
        sb.write_bytes(f"{ws}/blob.bin", b"needle\x00needle\n")
        sb.write_bytes(f"{ws}/late.bin", b"a" * 100 + b"\x00" + b"needle\n")
        sb.write_file(f"{ws}/text.txt", "needle\n")
        result = sb.grep("needle", path=ws, output_mode="files_with_matches")
        assert result.files == [f"{ws}/text.txt"]

    def test_grep_oversize_files_are_skipped(self, sb: Sandbox, ws: str, limits: Limits) -> None:
        make_dirs(sb, ws)
        size = limits.grep_max_file_bytes + 1024
        sh(sb, f"{{ echo needle; head -c {size} /dev/zero | tr '\\0' a; }} > big.txt", cwd=ws)
        sb.write_file(f"{ws}/small.txt", "needle\n")
        result = sb.grep("needle", path=ws, output_mode="files_with_matches")
        assert result.files == [f"{ws}/small.txt"]

    def test_grep_ignore_set_is_shared(self, sb: Sandbox, ws: str) -> None:
        write_tree(
            sb,
            ws,
            {
                "src/a.js": "needle",
                "node_modules/m/i.js": "needle",
                ".git/config": "needle",
                "dist/bundle.js": "needle",
            },
        )
        result = sb.grep("needle", path=ws, output_mode="files_with_matches")
        assert result.files == [f"{ws}/src/a.js"]
        named = sb.grep("needle", path=f"{ws}/node_modules", output_mode="files_with_matches")
        assert named.files == [f"{ws}/node_modules/m/i.js"]

    def test_grep_ordering_is_by_path_then_line(self, sb: Sandbox, ws: str) -> None:
        for name in ["b.txt", "a/z.txt", "a.txt", "A.txt", "c/d/e.txt"]:
            sb.write_file(f"{ws}/{name}", "hit\nmiss\nhit\n")
        result = sb.grep("hit", path=ws)
        keys = [(m.path, m.line_number) for m in result.matches]
        assert keys == sorted(keys)
        assert len(keys) == 10

    def test_grep_unicode_and_crlf(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "première ligne\r\nZweite Straße\r\n日本語\r\n")
        [match] = sb.grep("straße", path=ws).matches
        assert match.line_number == 2
        assert match.text == "Zweite Straße", "the \\r of a CRLF ending is not shown"
        assert [m.line_number for m in sb.grep("日本", path=ws).matches] == [3]
        assert [m.line_number for m in sb.grep("ligne$", path=ws).matches] == [1]

    def test_grep_python_re_dialect(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(
            f"{ws}/f.txt", "foo123\nfoobar\nabab\nxyz\nword boundary\nnamed: 42\nprice $5\n"
        )

        def lines(pattern: str, **kw: object) -> list[int]:
            return [m.line_number for m in sb.grep(pattern, path=ws, **kw).matches]  # type: ignore[arg-type]

        assert lines(r"foo(?=\d)") == [1]  # lookahead
        assert lines(r"foo(?!\d)") == [2]  # negative lookahead
        assert lines(r"(ab)\1") == [3]  # backreference
        assert lines(r"(?<=foo)bar") == [2]  # lookbehind
        assert lines(r"\bboundary\b") == [5]
        assert lines(r"(?P<n>\d+)$") == [1, 6, 7]
        assert lines(r"\$5") == [7]
        assert lines(r"(?-i:XYZ)") == []
        assert lines(r"XYZ") == [4]

    def test_grep_unicode_case_folding_is_pythons(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "\u212a kelvin\nplain k\n\u0130stanbul\n")
        assert [m.line_number for m in sb.grep("k ", path=ws).matches] == [1]
        assert [m.line_number for m in sb.grep("k", path=ws, case_sensitive=True).matches] == [1, 2]
        assert [m.line_number for m in sb.grep("istanbul", path=ws).matches] == [3]

    def test_grep_invalid_utf8_never_matches(self, sb: Sandbox, ws: str) -> None:
        sb.write_bytes(f"{ws}/f.txt", b"abc\xffdef\n")
        assert sb.grep("c.d", path=ws).matches == []
        assert sb.grep("c[^x]d", path=ws).matches == []
        [match] = sb.grep("def", path=ws).matches
        assert match.text == "abc\ufffddef"

    def test_grep_utf8_bom_is_dropped(self, sb: Sandbox, ws: str) -> None:
        sb.write_bytes(f"{ws}/f.txt", "\ufeffhello\nworld\n".encode())
        [match] = sb.grep("^hello$", path=ws).matches
        assert (match.line_number, match.text) == (1, "hello")

    def test_grep_glob_filter_on_a_single_file(self, sb: Sandbox, code: str) -> None:
        util = f"{code}/lib/util.py"
        assert sb.grep("hello", path=util, glob="*.md").matches == []
        assert len(sb.grep("hello", path=util, glob="*.py").matches) == 2

    def test_grep_overlapping_contexts_repeat(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "a\nhit1\nhit2\nb\n")
        first, second = sb.grep("hit", path=ws, before=1, after=1).matches
        assert (first.before, first.after) == (["a"], ["hit2"])
        assert (second.before, second.after) == (["hit1"], ["b"])

    def test_grep_multiline_long_match_and_same_line_starts(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "BEGIN\n" + "x\n" * 30 + "END\n" + "ab ab ab\n")
        [match] = sb.grep(r"BEGIN\n(x\n)+END", path=ws, multiline=True).matches
        lines = match.text.split("\n")
        assert lines[0] == "BEGIN"
        assert len(lines) <= 21
        [same] = sb.grep("ab", path=ws, multiline=True).matches
        assert same.line_number == 33
        counts = sb.grep("ab", path=ws, multiline=True, output_mode="count").counts
        assert [c.count for c in counts] == [1]

    def test_grep_does_not_search_through_symlinks(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/real.txt", "needle\n")
        symlink(sb, "real.txt", f"{ws}/alias.txt")
        result = sb.grep("needle", path=ws, output_mode="files_with_matches")
        assert result.files == [f"{ws}/real.txt"]
        # Named explicitly, a link inside the mount is resolved first; the path
        # reported names the same file.
        [match] = sb.grep("needle", path=f"{ws}/alias.txt").matches
        assert match.path in (f"{ws}/alias.txt", f"{ws}/real.txt")
        assert sb.read_bytes(match.path) == b"needle\n"

    def test_grep_hostile_patterns_are_inert(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "-e\n--pre=sh\n$(touch pwned)\n--files\n")
        for pattern, line in [("-e", 1), ("--pre=sh", 2), ("--files", 4)]:
            assert [m.line_number for m in sb.grep(pattern, path=ws).matches] == [line], pattern
        literal = sb.grep("$(touch pwned)", path=ws, literal=True)
        assert [m.line_number for m in literal.matches] == [3]
        sb.grep("$(touch pwned)", path=ws)
        sb.grep("`touch pwned`", path=ws, glob="$(touch pwned)")
        names = {e.name for e in sb.list_dir(ws).entries}
        names |= {e.name for e in sb.list_dir(WORKSPACE, max_depth=1).entries}
        assert "pwned" not in names

    def test_grep_catastrophic_backtracking_is_bounded(
        self, sb: Sandbox, ws: str, limits: Limits
    ) -> None:
        sb.write_file(f"{ws}/f.txt", "a" * 40 + "!\n")
        started = time.monotonic()
        try:
            result = sb.grep(r"^(a+)+$", path=ws)
        except Exception as exc:
            assert getattr(exc, "code", None) is ErrorCode.TIMEOUT, exc
        else:
            assert result.matches == []
        assert time.monotonic() - started < limits.search_timeout_s + 10

    def test_grep_runaway_regex_is_a_timeout(self, sb: Sandbox, ws: str, limits: Limits) -> None:
        # The lookbehind fails only after exponential backtracking over the line;
        # no engine may hang on it, and the sandbox stays usable afterwards.
        sb.write_file(f"{ws}/f.txt", "a" * 48 + "\n")
        started = time.monotonic()
        with raises_code(ErrorCode.TIMEOUT):
            sb.grep(r"^(a+)+(?<!a)$", path=ws)
        assert time.monotonic() - started < limits.search_timeout_s + 10
        assert [m.line_number for m in sb.grep("a$", path=ws).matches] == [1]

    def test_grep_path_errors(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "x")
        with raises_code(ErrorCode.NOT_FOUND):
            sb.grep("x", path=f"{ws}/missing")
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.grep("x", path="/etc")

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"output_mode": "lines"},
            {"offset": -1},
            {"max_results": "5"},
            {"literal": "yes"},
            {"case_sensitive": 1},
            {"multiline": None},
            {"glob": 5},
            {"pattern": ""},
        ],
        ids=lambda kw: next(iter(kw)),
    )
    def test_grep_bad_arguments(self, sb: Sandbox, code: str, kwargs: dict[str, object]) -> None:
        arguments: dict[str, object] = {"pattern": "hello", "path": code, **kwargs}
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.grep(**arguments)  # type: ignore[arg-type]
