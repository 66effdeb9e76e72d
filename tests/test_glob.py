"""glob semantics. glob has one engine; it must not care whether ripgrep is present."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from sandkit.runtime.context import Context
from sandkit.runtime.errors import ErrorCode, SandboxError
from sandkit.runtime.globbing import GlobPattern
from sandkit.runtime.limits import Limits
from sandkit.runtime.pathmap import WORKSPACE, Mount, PathMapping
from sandkit.runtime.rg import find_rg
from sandkit.runtime.search import glob

TREE = [
    "a.py",
    "b.py",
    "c.txt",
    "README",
    "data1.csv",
    "data2.csv",
    "data10.csv",
    "src/d.py",
    "src/e.md",
    "src/sub/f.py",
    "src/sub/deep/g.py",
    "src/sub/deep/h.txt",
    "docs/guide.md",
    "docs/api/ref.md",
    ".env",
    ".github/workflows/ci.yml",
    "weird/[x].txt",
    "weird/{y}.txt",
    "weird/*.txt",
    "weird/a b.txt",
]


@pytest.fixture(params=["rg", "python"])
def ctx(request: pytest.FixtureRequest, tmp_path: Path) -> Context:
    root = tmp_path / "ws"
    for rel in TREE:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x")
    return Context(
        mapping=PathMapping([Mount(WORKSPACE, str(root))]),
        rg_path=find_rg() if request.param == "rg" else None,
    )


def root_of(ctx: Context) -> Path:
    return Path(ctx.mapping.mounts[0].real)


def rels(ctx: Context, pattern: str, **kw: Any) -> list[str]:
    result = glob(ctx, pattern, **kw)
    base = result["path"] + "/"
    assert all(p.startswith(base) for p in result["paths"])
    return [p[len(base) :] for p in result["paths"]]


def code(ctx: Context, pattern: Any, **kw: Any) -> ErrorCode:
    with pytest.raises(SandboxError) as info:
        glob(ctx, pattern, **kw)
    return info.value.code


@pytest.mark.parametrize(
    "pattern, expected",
    [
        ("*.py", ["a.py", "b.py"]),
        ("?.py", ["a.py", "b.py"]),
        ("data??.csv", ["data10.csv"]),
        ("data[!1].csv", ["data2.csv"]),
        ("data[^1].csv", ["data2.csv"]),
        ("[a-b].py", ["a.py", "b.py"]),
        ("**/*.py", ["a.py", "b.py", "src/d.py", "src/sub/deep/g.py", "src/sub/f.py"]),
        ("src/**/*.py", ["src/d.py", "src/sub/deep/g.py", "src/sub/f.py"]),
        ("src/**/**/**/*.py", ["src/d.py", "src/sub/deep/g.py", "src/sub/f.py"]),
        ("**/deep/*.txt", ["src/sub/deep/h.txt"]),
        ("src/**/deep/*", ["src/sub/deep/g.py", "src/sub/deep/h.txt"]),
        ("{src,docs}/*.md", ["docs/guide.md", "src/e.md"]),
        ("{src/{sub,x},docs}/*.{py,md}", ["docs/guide.md", "src/sub/f.py"]),
        ("./src/./*.md", ["src/e.md"]),
        ("src//e.md", ["src/e.md"]),
        ("*", [".env", "README", "a.py", "b.py", "c.txt", "data1.csv", "data10.csv", "data2.csv"]),
        (".*", [".env"]),
        ("**/*.yml", [".github/workflows/ci.yml"]),
        ("weird/\\[x\\].txt", ["weird/[x].txt"]),
        ("weird/[[]x].txt", ["weird/[x].txt"]),
        ("weird/\\{y\\}.txt", ["weird/{y}.txt"]),
        ("weird/\\*.txt", ["weird/*.txt"]),
        ("weird/a b.txt", ["weird/a b.txt"]),
        ("weird/[]]*", []),
        ("src/*/", ["src/sub"]),
        ("**/deep/", ["src/sub/deep"]),
        ("nothing/**", []),
        ("README/**", []),
        ("readme", []),
    ],
)
def test_pattern_syntax(ctx: Context, pattern: str, expected: list[str]) -> None:
    result = glob(ctx, pattern)
    assert result["pattern"] == pattern and result["path"] == WORKSPACE
    assert rels(ctx, pattern) == expected
    assert result["truncated"] is False


def test_double_star_alone_and_include_dirs(ctx: Context) -> None:
    assert rels(ctx, "**") == sorted(TREE)
    assert rels(ctx, "src/*", include_dirs=True) == ["src/d.py", "src/e.md", "src/sub"]
    assert rels(ctx, "**/deep", include_dirs=True) == ["src/sub/deep"]
    assert rels(ctx, "**/deep") == []
    # A trailing ** lists what is inside, not the directory itself.
    assert rels(ctx, "src/**", include_dirs=True) == [
        "src/d.py",
        "src/e.md",
        "src/sub",
        "src/sub/deep",
        "src/sub/deep/g.py",
        "src/sub/deep/h.txt",
        "src/sub/f.py",
    ]


def test_order_is_plain_string_order(ctx: Context) -> None:
    root = root_of(ctx)
    for rel in ["o/a", "o/a.b", "o/a/c", "o/B", "o/_", "o/é"]:
        path = root / rel
        if rel == "o/a":
            path.mkdir(parents=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
    found = glob(ctx, "o/**", include_dirs=True)["paths"]
    assert found == sorted(found)
    assert rels(ctx, "o/**", include_dirs=True) == ["o/B", "o/_", "o/a", "o/a.b", "o/a/c", "o/é"]


def test_relative_path_argument(ctx: Context) -> None:
    result = glob(ctx, "*.md", path="src")
    assert result["path"] == f"{WORKSPACE}/src"
    assert result["paths"] == [f"{WORKSPACE}/src/e.md"]
    assert glob(ctx, "*.md", path=f"{WORKSPACE}/src/")["path"] == f"{WORKSPACE}/src"


def test_ignore_set_below_path_only(ctx: Context) -> None:
    root = root_of(ctx)
    for rel in [
        "node_modules/lib/i.js",
        ".git/hooks/x.js",
        "build/o.js",
        "app/m.pyc",
        "app/x.js",
        "odd.pyc/y.js",
        "pkg.egg-info/z.js",
        "app/.DS_Store",
    ]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    assert rels(ctx, "**/*.js") == ["app/x.js"]
    assert rels(ctx, "**/*.pyc") == []
    assert rels(ctx, "**/.DS_Store") == []
    assert rels(ctx, "**/*.js", path=f"{WORKSPACE}/node_modules") == ["lib/i.js"]
    assert "node_modules" not in rels(ctx, "*", include_dirs=True)


def test_symlinks_listed_not_followed(ctx: Context, tmp_path: Path) -> None:
    root = root_of(ctx)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("")
    (root / "out").symlink_to(outside)
    (root / "etc").symlink_to("/etc")
    (root / "same.py").symlink_to(root / "a.py")
    (root / "loop").symlink_to(root / "loop")
    found = rels(ctx, "**", include_dirs=True)
    assert {"out", "etc", "same.py", "loop"} <= set(found)
    assert not [p for p in found if p.startswith(("out/", "etc/", "loop/"))]
    assert rels(ctx, "*.py") == ["a.py", "b.py", "same.py"]


def test_special_files_are_listed_but_not_opened(ctx: Context) -> None:
    os.mkfifo(root_of(ctx) / "pipe.txt")
    assert "pipe.txt" in rels(ctx, "*.txt")


def test_truncated_only_when_more_existed(ctx: Context) -> None:
    everything = rels(ctx, "**")
    exact = glob(ctx, "**", max_results=len(everything))
    assert exact["truncated"] is False and len(exact["paths"]) == len(everything)
    fewer = glob(ctx, "**", max_results=3)
    assert fewer["truncated"] is True and fewer["paths"] == exact["paths"][:3]


def test_default_cap_and_ceiling(tmp_path: Path) -> None:
    root = tmp_path / "many"
    root.mkdir()
    for i in range(30):
        (root / f"f{i:02}.txt").write_text("")
    ctx = Context(
        mapping=PathMapping([Mount(WORKSPACE, str(root))]),
        limits=Limits(glob_default_results=5, glob_max_results=12),
    )
    for value in (None, 0, -4):
        result = glob(ctx, "*.txt", max_results=value)
        assert len(result["paths"]) == 5 and result["truncated"] is True
    clamped = glob(ctx, "*.txt", max_results=10**9)
    assert len(clamped["paths"]) == 12 and clamped["truncated"] is True


@pytest.mark.parametrize(
    "pattern",
    [
        "",
        "/etc/*",
        "../*",
        "src/../../x",
        "{/etc,a}/*",
        "a[",
        "a{b",
        "[z-a]",
        "a\x00b",
        "trailing\\",
        "{a,b}" * 9,
        "x" * 4097,
    ],
    ids=repr,
)
def test_invalid_patterns(ctx: Context, pattern: str) -> None:
    assert code(ctx, pattern) is ErrorCode.INVALID_PATTERN


def test_path_errors(ctx: Context) -> None:
    assert code(ctx, "*", path=f"{WORKSPACE}/missing") is ErrorCode.NOT_FOUND
    assert code(ctx, "*", path=f"{WORKSPACE}/a.py") is ErrorCode.NOT_A_DIRECTORY
    assert code(ctx, "*", path="/etc") is ErrorCode.ACCESS_DENIED
    assert code(ctx, "*", path=f"{WORKSPACE}/../..") is ErrorCode.ACCESS_DENIED
    (root_of(ctx) / "escape").symlink_to("/etc")
    assert code(ctx, "*", path=f"{WORKSPACE}/escape") is ErrorCode.ACCESS_DENIED


@pytest.mark.parametrize(
    "kwargs",
    [
        {"pattern": 5},
        {"pattern": None},
        {"include_dirs": "yes"},
        {"max_results": "3"},
        {"max_results": 1.5},
        {"max_results": True},
        {"path": 3},
        {"path": ""},
    ],
    ids=lambda kw: "{}={!r}".format(*next(iter(kw.items()))),
)
def test_bad_arguments(ctx: Context, kwargs: dict[str, Any]) -> None:
    arguments: dict[str, Any] = {"pattern": "*", **kwargs}
    with pytest.raises(SandboxError) as info:
        glob(ctx, **arguments)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_glob_bombs_are_bounded(tmp_path: Path) -> None:
    root = tmp_path / "deep"
    path = root
    for i in range(40):
        path = path / f"d{i}"
    path.mkdir(parents=True)
    (path / ("a" * 200)).write_text("")
    ctx = Context(mapping=PathMapping([Mount(WORKSPACE, str(root))]))
    started = time.monotonic()
    assert len(glob(ctx, "**/" * 500 + "*")["paths"]) == 1
    assert glob(ctx, "**/" + "*a" * 60 + "*b")["paths"] == []
    assert glob(ctx, "**/" + "{a,b}" * 8 + "c*")["paths"] == []
    assert time.monotonic() - started < 5
    assert GlobPattern("*a*a*a*a*a*a*a*a*b").match_path("a" * 250) is False


def test_timeout(tmp_path: Path) -> None:
    root = tmp_path / "wide"
    for i in range(600):
        (root / f"d{i % 20}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 20}" / f"f{i}").write_text("")
    ctx = Context(
        mapping=PathMapping([Mount(WORKSPACE, str(root))]), limits=Limits(search_timeout_s=1e-6)
    )
    with pytest.raises(SandboxError) as info:
        glob(ctx, "**", max_results=1000)
    assert info.value.code is ErrorCode.TIMEOUT
