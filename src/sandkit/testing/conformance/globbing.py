"""glob: pattern syntax, order, include_dirs, the ignore set, caps and truncation."""

from __future__ import annotations

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

TREE = {
    "a.py": "",
    "b.py": "",
    "c.txt": "",
    "README": "",
    "data1.csv": "",
    "data2.csv": "",
    "data10.csv": "",
    "src/d.py": "",
    "src/e.md": "",
    "src/sub/f.py": "",
    "src/sub/deep/g.py": "",
    "src/sub/deep/h.txt": "",
    "docs/guide.md": "",
    "docs/api/ref.md": "",
}


class GlobTests(ConformanceBase):
    @pytest.fixture
    def tree(self, sb: Sandbox, ws: str) -> str:
        write_tree(sb, ws, TREE)
        return ws

    @pytest.mark.parametrize(
        "pattern, expected",
        [
            ("*.py", ["a.py", "b.py"]),
            ("*", ["README", "a.py", "b.py", "c.txt", "data1.csv", "data10.csv", "data2.csv"]),
            ("?.py", ["a.py", "b.py"]),
            ("data?.csv", ["data1.csv", "data2.csv"]),
            ("data??.csv", ["data10.csv"]),
            ("data[12].csv", ["data1.csv", "data2.csv"]),
            ("data[0-9].csv", ["data1.csv", "data2.csv"]),
            ("data[!1].csv", ["data2.csv"]),
            ("[a-b].py", ["a.py", "b.py"]),
            ("{a,c}.*", ["a.py", "c.txt"]),
            ("*.{py,txt}", ["a.py", "b.py", "c.txt"]),
            ("src/*.py", ["src/d.py"]),
            ("src/*", ["src/d.py", "src/e.md"]),
            ("*/*.md", ["docs/guide.md", "src/e.md"]),
            ("**/*.py", ["a.py", "b.py", "src/d.py", "src/sub/deep/g.py", "src/sub/f.py"]),
            ("src/**/*.py", ["src/d.py", "src/sub/deep/g.py", "src/sub/f.py"]),
            ("src/**/deep/*", ["src/sub/deep/g.py", "src/sub/deep/h.txt"]),
            ("**/deep/*.txt", ["src/sub/deep/h.txt"]),
            ("**/*.md", ["docs/api/ref.md", "docs/guide.md", "src/e.md"]),
            ("docs/**", ["docs/api/ref.md", "docs/guide.md"]),
            ("**/{d,f}.py", ["src/d.py", "src/sub/f.py"]),
            ("{src,docs}/*.md", ["docs/guide.md", "src/e.md"]),
            ("README", ["README"]),
            ("readme", []),
            ("*.rs", []),
            ("nothing/**/*.py", []),
            ("./src/*.py", ["src/d.py"]),
            ("src/*/", ["src/sub"]),
            ("**/deep/", ["src/sub/deep"]),
            ("a**.py", ["a.py"]),
            ("**/**/*.md", ["docs/api/ref.md", "docs/guide.md", "src/e.md"]),
            ("data[^1].csv", ["data2.csv"]),
            ("{src,docs/{api,x}}/*.md", ["docs/api/ref.md", "src/e.md"]),
        ],
    )
    def test_glob_pattern_syntax(
        self, sb: Sandbox, tree: str, pattern: str, expected: list[str]
    ) -> None:
        result = sb.glob(pattern, path=tree)
        assert result.paths == [f"{tree}/{p}" for p in expected]
        assert result.truncated is False
        assert result.path == tree
        assert result.pattern == pattern

    def test_glob_double_star_matches_everything_below(self, sb: Sandbox, tree: str) -> None:
        result = sb.glob("**", path=tree)
        assert result.paths == sorted(f"{tree}/{p}" for p in TREE)

    def test_glob_include_dirs(self, sb: Sandbox, tree: str) -> None:
        assert sb.glob("src/*", path=tree, include_dirs=True).paths == [
            f"{tree}/src/d.py",
            f"{tree}/src/e.md",
            f"{tree}/src/sub",
        ]
        dirs = sb.glob("**/deep", path=tree, include_dirs=True).paths
        assert dirs == [f"{tree}/src/sub/deep"]
        assert sb.glob("**/deep", path=tree).paths == []

    def test_glob_relative_path_and_default_path(self, sb: Sandbox, tree: str) -> None:
        name = tree.rsplit("/", 1)[1]
        assert sb.glob("*.py", path=name).paths == [f"{tree}/a.py", f"{tree}/b.py"]
        assert sb.glob(f"{name}/src/*.py").paths == [f"{tree}/src/d.py"]
        assert sb.glob(f"{name}/src/*.py").path == WORKSPACE

    def test_glob_sorted_deterministically(self, sb: Sandbox, ws: str) -> None:
        names = ["b.txt", "B.txt", "a.txt", "_.txt", "10.txt", "9.txt", "é.txt", "a/z.txt"]
        for name in names:
            sb.write_file(f"{ws}/{name}", "")
        paths = sb.glob("**/*.txt", path=ws).paths
        assert paths == sorted(paths)
        assert len(paths) == len(names)
        assert paths == sb.glob("**/*.txt", path=ws).paths

    def test_glob_hidden_files(self, sb: Sandbox, ws: str) -> None:
        write_tree(sb, ws, {".env": "", ".config/app.toml": "", "visible.toml": ""})
        assert sb.glob(".env", path=ws).paths == [f"{ws}/.env"]
        assert f"{ws}/.config/app.toml" in sb.glob("**/*.toml", path=ws).paths

    def test_glob_ignore_set_is_shared(self, sb: Sandbox, ws: str) -> None:
        write_tree(
            sb,
            ws,
            {
                "src/app.js": "",
                "node_modules/lib/index.js": "",
                ".git/hooks/pre-commit.js": "",
                "build/out.js": "",
                "src/__pycache__/x.pyc": "",
                "src/y.pyc": "",
            },
        )
        assert sb.glob("**/*.js", path=ws).paths == [f"{ws}/src/app.js"]
        assert sb.glob("**/*.pyc", path=ws).paths == []
        # Asked for by name, an ignored directory is searched.
        assert sb.glob("**/*.js", path=f"{ws}/node_modules").paths == [
            f"{ws}/node_modules/lib/index.js"
        ]

    def test_glob_symlinks_are_not_followed_out(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/real/a.py", "")
        symlink(sb, "/etc", f"{ws}/etc-link")
        symlink(sb, "/", f"{ws}/root-link")
        found = sb.glob("**/*", path=ws, include_dirs=True).paths
        assert f"{ws}/real/a.py" in found
        # A link is an entry in the sandbox, whatever it points to; it is never entered.
        assert f"{ws}/etc-link" in found and f"{ws}/root-link" in found
        assert ws not in found, "path itself is never listed"
        assert not [p for p in found if p.startswith((f"{ws}/etc-link/", f"{ws}/root-link/"))]

    def test_glob_truncated_only_when_more_existed(self, sb: Sandbox, ws: str) -> None:
        for i in range(5):
            sb.write_file(f"{ws}/f{i}.txt", "")
        exact = sb.glob("*.txt", path=ws, max_results=5)
        assert len(exact.paths) == 5 and exact.truncated is False
        fewer = sb.glob("*.txt", path=ws, max_results=4)
        assert fewer.paths == exact.paths[:4] and fewer.truncated is True
        more = sb.glob("*.txt", path=ws, max_results=50)
        assert len(more.paths) == 5 and more.truncated is False

    def test_glob_offset_pages_through_results(self, sb: Sandbox, ws: str) -> None:
        for i in range(7):
            sb.write_file(f"{ws}/f{i}.txt", "")
        everything = sb.glob("*.txt", path=ws).paths
        seen: list[str] = []
        offset = 0
        while True:
            page = sb.glob("*.txt", path=ws, max_results=3, offset=offset)
            assert page.offset == offset
            seen += page.paths
            if not page.truncated:
                break
            offset += len(page.paths)
        assert seen == everything and len(seen) == 7
        last = sb.glob("*.txt", path=ws, max_results=3, offset=6)
        assert last.paths == everything[6:] and last.truncated is False
        past = sb.glob("*.txt", path=ws, max_results=3, offset=100)
        assert past.paths == [] and past.truncated is False and past.offset == 100

    @pytest.mark.parametrize("offset", [-1, "2", 1.5, True, None], ids=repr)
    def test_glob_bad_offset(self, sb: Sandbox, ws: str, offset: object) -> None:
        sb.write_file(f"{ws}/f.txt", "")
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.glob("*", path=ws, offset=offset)  # type: ignore[arg-type]

    def test_glob_default_cap_and_ceiling(self, sb: Sandbox, ws: str, limits: Limits) -> None:
        count = limits.glob_max_results + 5
        make_dirs(sb, ws)
        sh(sb, f"for i in $(seq 1 {count}); do : > f$i.txt; done", cwd=ws)
        default = sb.glob("*.txt", path=ws)
        assert len(default.paths) == limits.glob_default_results and default.truncated
        assert sb.glob("*.txt", path=ws, max_results=None).paths == default.paths
        assert sb.glob("*.txt", path=ws, max_results=0).paths == default.paths
        assert sb.glob("*.txt", path=ws, max_results=-3).paths == default.paths
        clamped = sb.glob("*.txt", path=ws, max_results=10**9)
        assert len(clamped.paths) == limits.glob_max_results and clamped.truncated

    def test_glob_path_errors(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "")
        with raises_code(ErrorCode.NOT_FOUND):
            sb.glob("*", path=f"{ws}/missing")
        with raises_code(ErrorCode.NOT_A_DIRECTORY):
            sb.glob("*", path=f"{ws}/f.txt")
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.glob("*", path="/etc")

    @pytest.mark.parametrize(
        "pattern",
        [
            "",
            "[",
            "[a-",
            "{a,b",
            "/etc/*",
            "/*",
            "../*",
            "src/../../*",
            "a\\",
            "[z-a]",
            "{a,b}" * 9,
        ],
        ids=[
            "empty",
            "open-class",
            "open-range",
            "open-brace",
            "absolute",
            "root",
            "dotdot",
            "dotdot-inside",
            "lone-backslash",
            "reversed-range",
            "expansion-bomb",
        ],
    )
    def test_glob_invalid_patterns(self, sb: Sandbox, ws: str, pattern: str) -> None:
        sb.write_file(f"{ws}/f.txt", "")
        with raises_code(ErrorCode.INVALID_PATTERN):
            sb.glob(pattern, path=ws)

    def test_glob_escapes_and_literal_metacharacters(self, sb: Sandbox, ws: str) -> None:
        write_tree(sb, ws, {"[x].txt": "", "x.txt": "", "a*b": "", "ab": "", "{c,d}": ""})
        assert sb.glob("\\[x].txt", path=ws).paths == [f"{ws}/[x].txt"]
        assert sb.glob("[x].txt", path=ws).paths == [f"{ws}/x.txt"]
        assert sb.glob("a\\*b", path=ws).paths == [f"{ws}/a*b"]
        assert sb.glob("\\{c,d}", path=ws).paths == [f"{ws}/{{c,d}}"]

    @pytest.mark.parametrize("max_results", ["10", 1.5, True], ids=repr)
    def test_glob_bad_max_results(self, sb: Sandbox, ws: str, max_results: object) -> None:
        sb.write_file(f"{ws}/f.txt", "")
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.glob("*", path=ws, max_results=max_results)  # type: ignore[arg-type]
