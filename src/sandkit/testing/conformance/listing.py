"""list_dir: depth, order, kinds, the shared ignore set, symlinks, the entry cap."""

from __future__ import annotations

import pytest

from sandkit import ErrorCode
from sandkit.runtime.limits import Limits
from sandkit.sandbox import Sandbox

from .suite import (
    WORKSPACE,
    ConformanceBase,
    SeedUpload,
    make_dirs,
    q,
    raises_code,
    sh,
    symlink,
    write_tree,
)

TREE = {
    "a.txt": "aaa",
    "b/c.txt": "cc",
    "b/d/e.txt": "e",
    "b/d/f/g.txt": "g",
    "z.md": "",
}


class ListDirTests(ConformanceBase):
    def test_default_is_the_workspace(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/x.txt", "x")
        result = sb.list_dir()
        assert result.path == WORKSPACE
        assert result == sb.list_dir(WORKSPACE, max_depth=2)
        # Depth 1 only: other tests may share this box and fill the workspace.
        assert ws in {e.path for e in sb.list_dir(max_depth=1).entries}

    @pytest.mark.parametrize(
        "depth, expected",
        [
            (1, ["a.txt", "b", "z.md"]),
            (2, ["a.txt", "b", "b/c.txt", "b/d", "z.md"]),
            (3, ["a.txt", "b", "b/c.txt", "b/d", "b/d/e.txt", "b/d/f", "z.md"]),
            (4, ["a.txt", "b", "b/c.txt", "b/d", "b/d/e.txt", "b/d/f", "b/d/f/g.txt", "z.md"]),
        ],
    )
    def test_depth(self, sb: Sandbox, ws: str, depth: int, expected: list[str]) -> None:
        write_tree(sb, ws, TREE)
        result = sb.list_dir(ws, max_depth=depth)
        assert [e.path for e in result.entries] == [f"{ws}/{p}" for p in expected]
        assert result.truncated is False

    def test_default_depth_is_two(self, sb: Sandbox, ws: str) -> None:
        write_tree(sb, ws, TREE)
        assert sb.list_dir(ws) == sb.list_dir(ws, max_depth=2)

    def test_entry_fields(self, sb: Sandbox, ws: str) -> None:
        write_tree(sb, ws, TREE)
        entries = {e.path: e for e in sb.list_dir(ws, max_depth=2).entries}
        a = entries[f"{ws}/a.txt"]
        assert (a.name, a.kind, a.size, a.depth) == ("a.txt", "file", 3, 1)
        b = entries[f"{ws}/b"]
        assert (b.name, b.kind, b.size, b.depth) == ("b", "dir", None, 1)
        c = entries[f"{ws}/b/c.txt"]
        assert (c.name, c.kind, c.size, c.depth) == ("c.txt", "file", 2, 2)
        assert entries[f"{ws}/z.md"].size == 0

    def test_sorted_by_path_segments(self, sb: Sandbox, ws: str) -> None:
        names = ["b", "B", "a-b", "a", "a.b", "_x", "10", "9", "é", "Z"]
        for name in names:
            sb.write_file(f"{ws}/{name}/f", "")
        entries = sb.list_dir(ws, max_depth=2).entries
        paths = [e.path for e in entries]
        assert paths == sorted(paths, key=lambda p: p.split("/"))
        # Children directly follow their directory.
        assert paths[paths.index(f"{ws}/a") + 1] == f"{ws}/a/f"

    def test_kinds_of_special_entries(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "x")
        make_dirs(sb, f"{ws}/dir")
        symlink(sb, "f.txt", f"{ws}/file-link")
        symlink(sb, "dir", f"{ws}/dir-link")
        symlink(sb, "/etc", f"{ws}/outside-link")
        symlink(sb, "missing", f"{ws}/dangling")
        sh(sb, f"mkfifo {q(ws)}/fifo")
        entries = sb.list_dir(ws, max_depth=3).entries
        kinds = {e.name: (e.kind, e.size) for e in entries}
        assert kinds == {
            "dangling": ("symlink", None),
            "dir": ("dir", None),
            "dir-link": ("symlink", None),
            "f.txt": ("file", 1),
            "fifo": ("other", None),
            "file-link": ("symlink", None),
            "outside-link": ("symlink", None),
        }, "symlinks are listed as symlinks and never followed"

    def test_shared_ignore_set(self, sb: Sandbox, ws: str) -> None:
        write_tree(
            sb,
            ws,
            {
                "src/main.py": "print()",
                "src/main.pyc": "",
                "src/__pycache__/main.cpython-311.pyc": "",
                ".git/HEAD": "ref",
                "node_modules/pkg/index.js": "",
                ".venv/bin/python": "",
                "pkg.egg-info/PKG-INFO": "",
                "build/out.o": "",
                ".DS_Store": "",
                ".env": "KEY=1",
                ".github/workflows/ci.yml": "on: push",
            },
        )
        paths = {e.path[len(ws) + 1 :] for e in sb.list_dir(ws, max_depth=3).entries}
        assert paths == {
            "src",
            "src/main.py",
            ".env",
            ".github",
            ".github/workflows",
            ".github/workflows/ci.yml",
        }

    def test_an_ignored_directory_can_be_listed_by_name(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/node_modules/pkg/index.js", "x")
        result = sb.list_dir(f"{ws}/node_modules")
        assert [e.path for e in result.entries] == [
            f"{ws}/node_modules/pkg",
            f"{ws}/node_modules/pkg/index.js",
        ]

    def test_empty_directory(self, sb: Sandbox, ws: str) -> None:
        make_dirs(sb, f"{ws}/empty")
        result = sb.list_dir(f"{ws}/empty")
        assert result.entries == [] and result.truncated is False
        assert result.path == f"{ws}/empty"

    def test_list_truncated_only_when_more_existed(
        self, sb: Sandbox, ws: str, limits: Limits
    ) -> None:
        cap = limits.list_max_entries
        make_dirs(sb, f"{ws}/exact", f"{ws}/over")
        sh(sb, f"for i in $(seq 1 {cap}); do : > f$i; done", cwd=f"{ws}/exact")
        sh(sb, f"for i in $(seq 1 {cap + 1}); do : > f$i; done", cwd=f"{ws}/over")
        exact = sb.list_dir(f"{ws}/exact")
        assert len(exact.entries) == cap and exact.truncated is False
        over = sb.list_dir(f"{ws}/over")
        assert len(over.entries) == cap and over.truncated is True

    def test_cap_keeps_shallow_entries_first(self, sb: Sandbox, ws: str, limits: Limits) -> None:
        cap = limits.list_max_entries
        make_dirs(sb, f"{ws}/t/a-dir")
        sh(sb, "for i in $(seq 1 20); do : > a-dir/deep$i; done", cwd=f"{ws}/t")
        sh(sb, f"for i in $(seq 1 {cap - 1}); do : > top$i; done", cwd=f"{ws}/t")
        result = sb.list_dir(f"{ws}/t", max_depth=2)
        assert result.truncated is True
        assert len(result.entries) == cap
        assert all(e.depth == 1 for e in result.entries)

    def test_uploads_are_listable(self, sb: Sandbox, seed_upload: SeedUpload, up: str) -> None:
        path = seed_upload(f"{up}/doc.txt", b"hello")
        result = sb.list_dir(path.rsplit("/", 1)[0])
        assert [(e.path, e.size) for e in result.entries] == [(path, 5)]

    def test_through_an_inner_symlink(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/real/f.txt", "x")
        symlink(sb, "real", f"{ws}/alias")
        result = sb.list_dir(f"{ws}/alias")
        assert result.path == f"{ws}/real"
        assert [e.path for e in result.entries] == [f"{ws}/real/f.txt"]

    def test_list_errors(self, sb: Sandbox, ws: str, limits: Limits) -> None:
        sb.write_file(f"{ws}/f.txt", "x")
        with raises_code(ErrorCode.NOT_A_DIRECTORY):
            sb.list_dir(f"{ws}/f.txt")
        with raises_code(ErrorCode.NOT_FOUND):
            sb.list_dir(f"{ws}/missing")
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.list_dir("/mnt/user-data")

    @pytest.mark.parametrize("depth", [0, -1, "2", None, 2.5], ids=repr)
    def test_bad_depth(self, sb: Sandbox, ws: str, depth: object) -> None:
        sb.write_file(f"{ws}/f.txt", "x")
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.list_dir(ws, max_depth=depth)  # type: ignore[arg-type]

    def test_depth_over_the_ceiling(self, sb: Sandbox, ws: str, limits: Limits) -> None:
        sb.write_file(f"{ws}/f.txt", "x")
        assert sb.list_dir(ws, max_depth=limits.list_max_depth).entries
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.list_dir(ws, max_depth=limits.list_max_depth + 1)
