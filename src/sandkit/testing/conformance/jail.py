"""The path jail: read-only mounts, symlinks in and out, odd but legal names."""

from __future__ import annotations

import pytest

from sandkit import ErrorCode
from sandkit.sandbox import Sandbox

from .suite import (
    OUTPUTS,
    UPLOADS,
    WORKSPACE,
    ConformanceBase,
    SeedUpload,
    make_dirs,
    raises_code,
    symlink,
)

ODD_NAMES = [
    "with space.txt",
    "tab\there",
    "new\nline",
    "quote'single",
    'quote"double',
    "back\\slash",
    "-rf",
    "--help",
    "$(touch pwned)",
    "`touch pwned`",
    "; rm -rf ~",
    "*.txt",
    "[abc]",
    "{a,b}",
    "日本語.txt",
    "emoji 🌍",
    "\u202etxt.exe",
    "e\u0301-decomposed",
    "%2e%2e",
    "...",
    ".hidden",
    "x" * 255,
    "é" * 127 + "a",
]


class ReadOnlyTests(ConformanceBase):
    def test_uploads_read_but_never_change(
        self, sb: Sandbox, seed_upload: SeedUpload, up: str
    ) -> None:
        path = seed_upload(f"{up}/report.txt", b"original\n")
        assert sb.read_file(path).content == "original\n"
        with raises_code(ErrorCode.READ_ONLY):
            sb.write_file(path, "changed")
        with raises_code(ErrorCode.READ_ONLY):
            sb.write_file(path, "more", append=True)
        with raises_code(ErrorCode.READ_ONLY):
            sb.edit_file(path, "original", "changed")
        with raises_code(ErrorCode.READ_ONLY):
            sb.write_bytes(path, b"changed")
        assert sb.read_bytes(path) == b"original\n"

    @pytest.mark.parametrize(
        "path",
        [
            f"{UPLOADS}/new.txt",
            f"{UPLOADS}/deep/new.txt",
            UPLOADS,
            "../uploads/new.txt",
            f"{WORKSPACE}/../uploads/new.txt",
        ],
    )
    def test_nothing_can_be_created_in_uploads(self, sb: Sandbox, path: str) -> None:
        with raises_code(ErrorCode.READ_ONLY):
            sb.write_file(path, "x")
        with raises_code(ErrorCode.READ_ONLY):
            sb.write_bytes(path, b"x")

    def test_uploads_are_searchable(self, sb: Sandbox, seed_upload: SeedUpload, up: str) -> None:
        path = seed_upload(f"{up}/notes/todo.md", b"- needle in uploads\n")
        base = f"{UPLOADS}/{up}"
        assert sb.glob("**/*.md", path=base).paths == [path]
        assert [m.path for m in sb.grep("needle", path=base).matches] == [path]


class SymlinkTests(ConformanceBase):
    def test_absolute_virtual_target_inside_the_mount(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/target.txt", "in\n")
        symlink(sb, f"{ws}/target.txt", f"{ws}/abs-link")
        assert sb.read_file(f"{ws}/abs-link").content == "in\n"
        sb.write_file(f"{ws}/abs-link", "written through\n")
        assert sb.read_file(f"{ws}/target.txt").content == "written through\n"

    def test_directory_link_inside_the_mount(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/real/f.txt", "x")
        symlink(sb, "real", f"{ws}/alias")
        result = sb.write_file(f"{ws}/alias/new.txt", "y")
        assert result.path == f"{ws}/real/new.txt"
        assert sb.read_file(f"{ws}/real/new.txt").content == "y"

    @pytest.mark.parametrize(
        "target",
        [
            "/etc/passwd",
            "/etc",
            "/",
            "/proc/self/root",
            "/proc/self/cwd",
            "../..",
            "../../uploads",
            "/nonexistent/x",
            f"{OUTPUTS}",
            f"{UPLOADS}",
        ],
    )
    def test_escaping_links_are_access_denied_everywhere(
        self, sb: Sandbox, ws: str, target: str
    ) -> None:
        make_dirs(sb, ws)
        symlink(sb, target, f"{ws}/esc")
        link = f"{ws}/esc"
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.read_file(link)
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.read_bytes(link)
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.write_file(link, "x")
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.write_file(f"{link}/below.txt", "x")
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.edit_file(link, "root", "toor")
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.list_dir(link)
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.glob("*", path=link)
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.grep("root", path=link)
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.execute("pwd", cwd=link)

    def test_searches_do_not_follow_escaping_links(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/mine.txt", "root of my project\n")
        symlink(sb, "/etc", f"{ws}/etc")
        symlink(sb, "/etc/passwd", f"{ws}/passwd")
        symlink(sb, "/", f"{ws}/slash")
        matches = sb.grep("root", path=ws).matches
        assert [m.path for m in matches] == [f"{ws}/mine.txt"]
        found = sb.glob("**/*", path=ws, include_dirs=True).paths
        assert all(not p.startswith((f"{ws}/etc/", f"{ws}/slash/")) for p in found)
        assert f"{ws}/mine.txt" in found

    def test_link_loop_is_refused_not_hung(self, sb: Sandbox, ws: str) -> None:
        make_dirs(sb, ws)
        symlink(sb, "loop", f"{ws}/loop")
        symlink(sb, "ping", f"{ws}/pong")
        symlink(sb, "pong", f"{ws}/ping")
        for link in ("loop", "ping"):
            with raises_code(ErrorCode.ACCESS_DENIED):
                sb.read_file(f"{ws}/{link}")
            with raises_code(ErrorCode.ACCESS_DENIED):
                sb.write_file(f"{ws}/{link}", "x")
        assert sb.grep("x", path=ws).matches == []


class NameTests(ConformanceBase):
    @pytest.mark.parametrize("name", ODD_NAMES, ids=ascii)
    def test_odd_names_round_trip_literally(self, sb: Sandbox, ws: str, name: str) -> None:
        path = f"{ws}/{name}"
        assert sb.write_file(path, "content\n").path == path
        assert sb.read_file(path).content == "content\n"
        entries = sb.list_dir(ws).entries
        assert [(e.name, e.path) for e in entries] == [(name, path)]
        listed = sb.execute("ls -A", cwd=ws).stdout
        assert "pwned" not in listed.replace(name, "")

    @pytest.mark.parametrize(
        "path",
        ["x" * 256, "é" * 128, "a\x00b", "", "p" * 4097],
        ids=["name-256", "name-256-bytes", "nul", "empty", "path-4097"],
    )
    def test_malformed_names_are_invalid_argument(self, sb: Sandbox, ws: str, path: str) -> None:
        target = f"{ws}/{path}" if path and len(path) < 4000 else path
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.write_file(target, "x")
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.read_file(target)
