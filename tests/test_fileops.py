"""runtime/fileops.py on real directories: results, bounds, error codes, the jail."""

from __future__ import annotations

import dataclasses
import errno
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from sandkit.models import EditResult, ListDirResult, ReadFileResult, WriteResult
from sandkit.runtime import fileops, safefs, search
from sandkit.runtime.context import Context
from sandkit.runtime.errors import ErrorCode, SandboxError
from sandkit.runtime.limits import Limits
from sandkit.runtime.pathmap import OUTPUTS, UPLOADS, WORKSPACE, Mount, PathMapping, Resolved

WS = WORKSPACE


@dataclasses.dataclass
class Box:
    root: Path
    ws: Path
    up: Path
    out: Path
    outside: Path
    ctx: Context

    def with_limits(self, **changes: Any) -> Context:
        return self.ctx.replace(limits=self.ctx.limits.replace(**changes))


@pytest.fixture()
def box(tmp_path: Path) -> Box:
    ws, up, out, outside = (tmp_path / n for n in ("ws", "up", "out", "outside"))
    for d in (ws, up, out, outside):
        d.mkdir()
    (outside / "secret.txt").write_text("host secret\n")
    mapping = PathMapping(
        [Mount(WS, str(ws)), Mount(UPLOADS, str(up), read_only=True), Mount(OUTPUTS, str(out))]
    )
    return Box(tmp_path, ws, up, out, outside, Context(mapping=mapping, limits=Limits()))


def fails(code: ErrorCode, fn: Any, *args: Any, **kwargs: Any) -> SandboxError:
    with pytest.raises(SandboxError) as info:
        fn(*args, **kwargs)
    assert info.value.code == code, info.value
    return info.value


def no_temp_files(directory: Path) -> bool:
    return not [p for p in directory.rglob("*") if p.name.startswith(".sandkit-")]


# -- read_file -------------------------------------------------------------------


def read(ctx: Context, path: str, *args: Any) -> dict[str, Any]:
    result = fileops.read_file(ctx, path, *args)
    ReadFileResult.model_validate(result)  # exactly the model's fields
    return result


def test_read_whole_small_file(box: Box) -> None:
    (box.ws / "a.txt").write_text("one\ntwo\nthree\n")
    assert read(box.ctx, "a.txt") == {
        "path": WS + "/a.txt",
        "content": "one\ntwo\nthree\n",
        "start_line": 1,
        "end_line": 3,
        "total_lines": 3,
        "truncated": False,
        "next_start_line": None,
    }


def test_read_range_is_inclusive_and_end_is_clamped(box: Box) -> None:
    (box.ws / "a.txt").write_text("1\n2\n3\n4\n5\n")
    r = read(box.ctx, WS + "/a.txt", 2, 3)
    assert (r["content"], r["start_line"], r["end_line"]) == ("2\n3\n", 2, 3)
    assert r["truncated"] is True and r["next_start_line"] == 4
    r = read(box.ctx, "a.txt", 4, 99)
    assert (r["content"], r["end_line"], r["truncated"], r["next_start_line"]) == (
        "4\n5\n",
        5,
        False,
        None,
    )
    r = read(box.ctx, "a.txt", None, 2)
    assert (r["content"], r["start_line"]) == ("1\n2\n", 1)


def test_read_last_line_without_newline_counts(box: Box) -> None:
    (box.ws / "a.txt").write_bytes(b"x\r\ny")
    r = read(box.ctx, "a.txt")
    assert r["content"] == "x\r\ny" and r["total_lines"] == 2


def test_read_max_lines_pages_through_the_file(box: Box) -> None:
    lines = [f"line {i}\n" for i in range(1, 24)]
    (box.ws / "a.txt").write_text("".join(lines))
    ctx = box.with_limits(read_max_lines=5)
    got, start, calls = [], 1, 0
    while start is not None:
        r = read(ctx, "a.txt", start)
        assert r["end_line"] - r["start_line"] + 1 <= 5 and r["total_lines"] == 23
        got.append(r["content"])
        start, calls = r["next_start_line"], calls + 1
    assert "".join(got) == "".join(lines) and calls == 5


def test_read_max_bytes_stops_at_a_line_boundary(box: Box) -> None:
    (box.ws / "a.txt").write_text("aaaa\nbbbb\ncccc\n")  # 5 bytes a line
    r = read(box.with_limits(read_max_bytes=12), "a.txt")
    assert r["content"] == "aaaa\nbbbb\n" and r["end_line"] == 2
    assert r["truncated"] is True and r["next_start_line"] == 3


def test_read_single_long_line_is_cut_at_a_character_boundary(box: Box) -> None:
    (box.ws / "a.txt").write_text("é" * 20 + "\nnext\n")  # 40 bytes, then a line
    r = read(box.with_limits(read_max_bytes=11), "a.txt")
    assert r["content"].startswith("é" * 5 + "\n[... line 1 cut: 10 of 40 bytes shown")
    assert "\ufffd" not in r["content"]
    assert (r["start_line"], r["end_line"], r["next_start_line"]) == (1, 1, 2)
    assert read(box.with_limits(read_max_bytes=11), "a.txt", 2)["content"] == "next\n"


def test_read_line_that_fits_except_its_newline_is_whole(box: Box) -> None:
    (box.ws / "a.txt").write_text("abcd\nef\n")
    r = read(box.with_limits(read_max_bytes=4), "a.txt")
    assert r["content"] == "abcd\n" and r["next_start_line"] == 2


def test_read_empty_file(box: Box) -> None:
    (box.ws / "e.txt").write_bytes(b"")
    for args in ((), (1,), (1, 5)):
        r = read(box.ctx, "e.txt", *args)
        assert (r["content"], r["start_line"], r["end_line"], r["total_lines"]) == ("", 0, 0, 0)
        assert r["truncated"] is False and r["next_start_line"] is None
    err = fails(ErrorCode.INVALID_ARGUMENT, fileops.read_file, box.ctx, "e.txt", 2)
    assert "0 lines" in err.message


def test_read_start_past_end_says_how_many_lines(box: Box) -> None:
    (box.ws / "a.txt").write_text("1\n2\n3\n")
    err = fails(ErrorCode.INVALID_ARGUMENT, fileops.read_file, box.ctx, "a.txt", 4)
    assert "3 lines" in err.message and WS + "/a.txt" in err.message
    assert read(box.ctx, "a.txt", 3)["content"] == "3\n"


@pytest.mark.parametrize(
    "start,end", [(0, None), (-1, None), (None, 0), (3, 2), ("1", None), (True, None), (1.0, 2)]
)
def test_read_bad_range(box: Box, start: Any, end: Any) -> None:
    (box.ws / "a.txt").write_text("1\n2\n3\n")
    fails(ErrorCode.INVALID_ARGUMENT, fileops.read_file, box.ctx, "a.txt", start, end)


def test_read_counts_lines_of_a_large_file_across_chunks(box: Box) -> None:
    lines = [f"{i} " * (i % 7) + "\n" for i in range(300_000)]  # several MiB
    (box.ws / "big.txt").write_text("".join(lines))
    r = read(box.with_limits(read_max_lines=3), "big.txt", 250_001)
    assert r["total_lines"] == 300_000
    assert r["content"] == "".join(lines[250_000:250_003])
    assert r["next_start_line"] == 250_004


def test_read_binary_files_are_refused(box: Box) -> None:
    (box.ws / "nul.bin").write_bytes(b"abc\x00def")
    (box.ws / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    for name in ("nul.bin", "latin1.txt"):
        err = fails(ErrorCode.INVALID_ARGUMENT, fileops.read_file, box.ctx, name)
        assert "read_bytes" in err.message


def test_read_text_sniff_is_the_first_8_kib_only(box: Box) -> None:
    # A stray invalid byte later in a text file is served as U+FFFD, and a
    # multi-byte character cut by the 8 KiB sample is not held against it.
    body = b"a" * 8191 + "é".encode() + b"\n" + b"\xff\n"
    (box.ws / "a.txt").write_bytes(body)
    r = read(box.ctx, "a.txt")
    assert r["content"].endswith("é\n\ufffd\n") and r["total_lines"] == 2


def test_read_error_codes(box: Box) -> None:
    (box.ws / "d").mkdir()
    (box.ws / "f.txt").write_text("x")
    fails(ErrorCode.IS_A_DIRECTORY, fileops.read_file, box.ctx, "d")
    fails(ErrorCode.IS_A_DIRECTORY, fileops.read_file, box.ctx, WS)
    err = fails(ErrorCode.NOT_FOUND, fileops.read_file, box.ctx, "missing.txt")
    assert err.message == WS + "/missing.txt does not exist"
    fails(ErrorCode.NOT_A_DIRECTORY, fileops.read_file, box.ctx, "f.txt/x")
    fails(ErrorCode.ACCESS_DENIED, fileops.read_file, box.ctx, "/etc/passwd")
    fails(ErrorCode.ACCESS_DENIED, fileops.read_file, box.ctx, "../../outside/secret.txt")
    fails(ErrorCode.INVALID_ARGUMENT, fileops.read_file, box.ctx, 42)


def test_read_fifo_is_refused_without_blocking(box: Box) -> None:
    os.mkfifo(box.ws / "pipe")
    err = fails(ErrorCode.INVALID_ARGUMENT, fileops.read_file, box.ctx, "pipe")
    assert "not a regular file" in err.message


def test_read_from_read_only_mount(box: Box) -> None:
    (box.up / "in.csv").write_text("a,b\n")
    assert read(box.ctx, UPLOADS + "/in.csv")["content"] == "a,b\n"


def test_symlinks_pointing_outside_are_denied(box: Box) -> None:
    (box.ws / "out-file").symlink_to(box.outside / "secret.txt")
    (box.ws / "out-dir").symlink_to(box.outside)
    (box.ws / "to-outputs").symlink_to(box.out)
    for path in ("out-file", "out-dir/secret.txt", "to-outputs"):
        err = fails(ErrorCode.ACCESS_DENIED, fileops.read_file, box.ctx, path)
        assert str(box.root) not in err.message
    fails(ErrorCode.ACCESS_DENIED, fileops.write_file, box.ctx, "out-file", "pwned")
    fails(ErrorCode.ACCESS_DENIED, fileops.write_file, box.ctx, "out-dir/new.txt", "pwned")
    fails(ErrorCode.ACCESS_DENIED, fileops.list_dir, box.ctx, "out-dir")
    fails(ErrorCode.ACCESS_DENIED, fileops.read_bytes, box.ctx, "out-file")
    assert (box.outside / "secret.txt").read_text() == "host secret\n"
    assert sorted(p.name for p in box.outside.iterdir()) == ["secret.txt"]


def test_symlink_inside_the_workspace_is_followed_to_its_canonical_path(box: Box) -> None:
    (box.ws / "real.txt").write_text("hello\n")
    (box.ws / "alias.txt").symlink_to("real.txt")
    r = read(box.ctx, "alias.txt")
    assert r["path"] == WS + "/real.txt" and r["content"] == "hello\n"
    w = fileops.write_file(box.ctx, "alias.txt", "bye\n")
    assert w["path"] == WS + "/real.txt"
    assert (box.ws / "alias.txt").is_symlink() and (box.ws / "real.txt").read_text() == "bye\n"


# -- a symlink swapped in after resolve (the race) ------------------------------------


class SwappingMapping(PathMapping):
    """Resolves, then lets an attacker replace a path with a symlink."""

    def __init__(self, base: PathMapping, swap: Any) -> None:
        super().__init__(base.mounts, base.default_dir)
        self.swap = swap

    def resolve(self, path: object, for_write: bool = False) -> Resolved:
        resolved = super().resolve(path, for_write)
        self.swap()
        return resolved


def swap_to_symlink(victim: Path, target: Path) -> Any:
    def swap() -> None:
        if victim.is_dir() and not victim.is_symlink():
            for child in victim.iterdir():
                child.unlink()
            victim.rmdir()
        elif victim.exists() or victim.is_symlink():
            victim.unlink()
        victim.symlink_to(target)

    return swap


def test_swapped_parent_directory_cannot_redirect_a_write(box: Box) -> None:
    (box.ws / "sub").mkdir()
    mapping = SwappingMapping(box.ctx.mapping, swap_to_symlink(box.ws / "sub", box.outside))
    ctx = box.ctx.replace(mapping=mapping)
    fails(ErrorCode.ACCESS_DENIED, fileops.write_file, ctx, "sub/evil.txt", "pwned")
    assert not (box.outside / "evil.txt").exists()


def test_swapped_final_component_cannot_redirect_a_write_or_read(box: Box) -> None:
    (box.ws / "f.txt").write_text("mine\n")
    swap = swap_to_symlink(box.ws / "f.txt", box.outside / "secret.txt")
    ctx = box.ctx.replace(mapping=SwappingMapping(box.ctx.mapping, swap))
    fails(ErrorCode.ACCESS_DENIED, fileops.write_file, ctx, "f.txt", "pwned")
    assert (box.outside / "secret.txt").read_text() == "host secret\n"
    (box.ws / "f.txt").unlink()
    (box.ws / "f.txt").write_text("mine\n")
    fails(ErrorCode.ACCESS_DENIED, fileops.read_file, ctx, "f.txt")
    (box.ws / "f.txt").unlink()
    (box.ws / "f.txt").write_text("mine\n")
    fails(ErrorCode.ACCESS_DENIED, fileops.write_file, ctx, "f.txt", "x", append=True)
    assert (box.outside / "secret.txt").read_text() == "host secret\n"


# -- write_file ------------------------------------------------------------------


def write(ctx: Context, path: str, content: str, append: bool = False) -> dict[str, Any]:
    result = fileops.write_file(ctx, path, content, append)
    WriteResult.model_validate(result)
    return result


def test_write_creates_parents_and_reports_created(box: Box) -> None:
    r = write(box.ctx, "deep/er/new.txt", "héllo\n")
    assert r == {"path": WS + "/deep/er/new.txt", "bytes_written": 7, "created": True}
    assert (box.ws / "deep/er/new.txt").read_text() == "héllo\n"
    r = write(box.ctx, WS + "/deep/er/new.txt", "x")
    assert r["created"] is False and (box.ws / "deep/er/new.txt").read_text() == "x"
    assert no_temp_files(box.ws)


def test_write_to_outputs_and_empty_content(box: Box) -> None:
    assert write(box.ctx, OUTPUTS + "/r.md", "")["bytes_written"] == 0
    assert (box.out / "r.md").read_bytes() == b""


def test_write_keeps_mode_of_an_existing_file(box: Box) -> None:
    script = box.ws / "run.sh"
    script.write_text("echo old\n")
    script.chmod(0o750)
    write(box.ctx, "run.sh", "echo new\n")
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    write(box.ctx, "fresh.txt", "x")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((box.ws / "fresh.txt").stat().st_mode) == 0o666 & ~umask


def test_write_failure_leaves_old_content_and_no_temp_file(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    (box.ws / "keep.txt").write_text("original\n")

    def disk_full(fd: int, data: bytes) -> None:
        os.write(fd, data[:3])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safefs, "write_all", disk_full)
    fails(ErrorCode.TOO_LARGE, fileops.write_file, box.ctx, "keep.txt", "replacement\n")
    fails(ErrorCode.TOO_LARGE, fileops.write_bytes, box.ctx, "new.bin", b"abcdef")
    assert (box.ws / "keep.txt").read_text() == "original\n"
    assert not (box.ws / "new.bin").exists()
    assert no_temp_files(box.ws)


def test_failed_append_leaves_no_partial_content(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    (box.ws / "log.txt").write_text("a\n")

    def disk_full(fd: int, data: bytes) -> None:
        os.write(fd, data[:2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safefs, "write_all", disk_full)
    fails(ErrorCode.TOO_LARGE, fileops.write_file, box.ctx, "log.txt", "bbbb\n", append=True)
    assert (box.ws / "log.txt").read_text() == "a\n"


def test_write_size_cap(box: Box) -> None:
    ctx = box.with_limits(write_max_bytes=10)
    assert write(ctx, "ten.txt", "0123456789")["bytes_written"] == 10
    fails(ErrorCode.TOO_LARGE, fileops.write_file, ctx, "ten.txt", "0123456789A")
    fails(ErrorCode.TOO_LARGE, fileops.write_file, ctx, "é.txt", "é" * 6)  # 12 bytes
    assert (box.ws / "ten.txt").read_text() == "0123456789"


def test_append(box: Box) -> None:
    r = write(box.ctx, "log.txt", "a\n", append=True)
    assert r == {"path": WS + "/log.txt", "bytes_written": 2, "created": True}
    r = write(box.ctx, "log.txt", "b\n", append=True)
    assert r["created"] is False and (box.ws / "log.txt").read_text() == "a\nb\n"


def test_append_never_writes_through_a_hard_link(box: Box) -> None:
    """A hard link to a file outside the mount shares its inode: append must not touch it."""
    secret = box.outside / "secret.txt"
    os.link(secret, box.ws / "link.txt")
    (box.ws / "link.txt").chmod(0o640)
    r = write(box.ctx, "link.txt", "appended\n", append=True)
    assert r == {"path": WS + "/link.txt", "bytes_written": 9, "created": False}
    assert secret.read_text() == "host secret\n"
    assert (box.ws / "link.txt").read_text() == "host secret\nappended\n"
    info = (box.ws / "link.txt").stat()
    assert info.st_nlink == 1 and info.st_ino != secret.stat().st_ino
    assert stat.S_IMODE(info.st_mode) == 0o640
    assert no_temp_files(box.ws)


def test_append_to_a_hard_linked_file_keeps_the_cap(box: Box) -> None:
    secret = box.outside / "secret.txt"
    os.link(secret, box.ws / "link.txt")
    ctx = box.with_limits(write_max_bytes=14)
    fails(ErrorCode.TOO_LARGE, fileops.write_file, ctx, "link.txt", "abc", append=True)
    assert secret.read_text() == "host secret\n" and secret.stat().st_nlink == 2


def test_append_checks_the_link_count_of_the_file_it_opened(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link made between the check and the open is seen on the open file itself."""
    (box.ws / "log.txt").write_text("mine\n")
    secret = box.outside / "secret.txt"
    real_lstat = safefs.lstat_at

    def swap_after_check(dir_fd: int, name: str) -> os.stat_result | None:
        info = real_lstat(dir_fd, name)
        os.unlink(name, dir_fd=dir_fd)
        os.link(secret, name, dst_dir_fd=dir_fd)
        return info

    monkeypatch.setattr(safefs, "lstat_at", swap_after_check)
    write(box.ctx, "log.txt", "appended\n", append=True)
    assert secret.read_text() == "host secret\n"
    assert (box.ws / "log.txt").read_text() == "host secret\nappended\n"


def test_append_to_a_file_created_between_check_and_open(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something else creates the file after the check: it is appended to, not an error."""
    real_lstat = safefs.lstat_at
    calls = []

    def create_after_check(dir_fd: int, name: str) -> os.stat_result | None:
        info = real_lstat(dir_fd, name)
        if not calls:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=dir_fd)
            os.write(fd, b"theirs\n")
            os.close(fd)
        calls.append(name)
        return info

    monkeypatch.setattr(safefs, "lstat_at", create_after_check)
    r = write(box.ctx, "log.txt", "mine\n", append=True)
    assert r["created"] is False
    assert (box.ws / "log.txt").read_text() == "theirs\nmine\n"


def test_append_cap_applies_to_the_resulting_size(box: Box) -> None:
    ctx = box.with_limits(write_max_bytes=6)
    write(ctx, "log.txt", "abcd", append=True)
    err = fails(ErrorCode.TOO_LARGE, fileops.write_file, ctx, "log.txt", "efg", append=True)
    assert "7 bytes" in err.message
    write(ctx, "log.txt", "ef", append=True)
    assert (box.ws / "log.txt").read_text() == "abcdef"


def test_write_error_codes(box: Box) -> None:
    (box.ws / "d").mkdir()
    (box.ws / "f.txt").write_text("x")
    fails(ErrorCode.IS_A_DIRECTORY, fileops.write_file, box.ctx, "d", "x")
    fails(ErrorCode.IS_A_DIRECTORY, fileops.write_file, box.ctx, "d", "x", append=True)
    fails(ErrorCode.IS_A_DIRECTORY, fileops.write_file, box.ctx, WS, "x")
    fails(ErrorCode.NOT_A_DIRECTORY, fileops.write_file, box.ctx, "f.txt/child", "x")
    fails(ErrorCode.NOT_A_DIRECTORY, fileops.write_file, box.ctx, "f.txt/a/b", "x")
    fails(ErrorCode.READ_ONLY, fileops.write_file, box.ctx, UPLOADS + "/x.txt", "x")
    fails(ErrorCode.ACCESS_DENIED, fileops.write_file, box.ctx, "/tmp/x.txt", "x")
    fails(ErrorCode.INVALID_ARGUMENT, fileops.write_file, box.ctx, "a.txt", b"bytes")
    fails(ErrorCode.INVALID_ARGUMENT, fileops.write_file, box.ctx, "a.txt", None)
    fails(ErrorCode.INVALID_ARGUMENT, fileops.write_file, box.ctx, "a.txt", "x", "yes")
    fails(ErrorCode.INVALID_ARGUMENT, fileops.write_file, box.ctx, "a.txt", "\ud800")
    assert not list(box.up.iterdir()) and not (box.ws / "a.txt").exists()


def test_write_over_a_fifo_is_refused(box: Box) -> None:
    os.mkfifo(box.ws / "pipe")
    fails(ErrorCode.INVALID_ARGUMENT, fileops.write_file, box.ctx, "pipe", "x")
    fails(ErrorCode.INVALID_ARGUMENT, fileops.write_file, box.ctx, "pipe", "x", append=True)


def test_write_respects_a_read_only_file(box: Box) -> None:
    """Also as root, which the kernel lets write anywhere: the same result in every box."""
    (box.ws / "ro.txt").write_text("keep")
    (box.ws / "ro.txt").chmod(0o444)
    fails(ErrorCode.ACCESS_DENIED, fileops.write_file, box.ctx, "ro.txt", "x")
    assert (box.ws / "ro.txt").read_text() == "keep"


# -- edit_file --------------------------------------------------------------------


def edit(ctx: Context, path: str, old: str, new: str, replace_all: bool = False) -> int:
    result = fileops.edit_file(ctx, path, old, new, replace_all)
    EditResult.model_validate(result)
    assert result["path"] == WS + "/" + path
    return int(result["replacements"])


def test_edit_unique_match(box: Box) -> None:
    (box.ws / "a.py").write_text("x = 1\ny = 2\n")
    assert edit(box.ctx, "a.py", "y = 2", "y = 3") == 1
    assert (box.ws / "a.py").read_text() == "x = 1\ny = 3\n"
    assert no_temp_files(box.ws)


def test_edit_zero_and_several_matches_say_which(box: Box) -> None:
    (box.ws / "a.py").write_text("v = 1\nv = 1\n")
    err = fails(ErrorCode.INVALID_ARGUMENT, fileops.edit_file, box.ctx, "a.py", "w", "z")
    assert err.message == f"old text not found in {WS}/a.py"
    err = fails(ErrorCode.INVALID_ARGUMENT, fileops.edit_file, box.ctx, "a.py", "v = 1", "v")
    assert "occurs 2 times" in err.message and "replace_all" in err.message
    assert (box.ws / "a.py").read_text() == "v = 1\nv = 1\n"
    assert edit(box.ctx, "a.py", "v = 1", "v = 2", replace_all=True) == 2
    assert (box.ws / "a.py").read_text() == "v = 2\nv = 2\n"


def test_edit_overlapping_occurrences_are_ambiguous(box: Box) -> None:
    (box.ws / "a.txt").write_text("aaa")
    err = fails(ErrorCode.INVALID_ARGUMENT, fileops.edit_file, box.ctx, "a.txt", "aa", "b")
    assert "more than once" in err.message
    assert edit(box.ctx, "a.txt", "aa", "b", replace_all=True) == 1
    assert (box.ws / "a.txt").read_text() == "ba"


def test_edit_bad_arguments(box: Box) -> None:
    (box.ws / "a.txt").write_text("abc")
    for old, new, replace_all in (
        ("", "x", False),
        ("a", "a", False),
        (1, "x", False),
        ("a", None, False),
        ("a", "b", 1),
        ("\udc80", "x", False),
    ):
        fails(
            ErrorCode.INVALID_ARGUMENT, fileops.edit_file, box.ctx, "a.txt", old, new, replace_all
        )
    assert (box.ws / "a.txt").read_text() == "abc"


def test_edit_error_codes(box: Box) -> None:
    (box.ws / "d").mkdir()
    (box.ws / "bin").write_bytes(b"a\x00b")
    (box.up / "in.txt").write_text("abc")
    fails(ErrorCode.NOT_FOUND, fileops.edit_file, box.ctx, "nope.txt", "a", "b")
    fails(ErrorCode.IS_A_DIRECTORY, fileops.edit_file, box.ctx, "d", "a", "b")
    fails(ErrorCode.READ_ONLY, fileops.edit_file, box.ctx, UPLOADS + "/in.txt", "a", "b")
    err = fails(ErrorCode.INVALID_ARGUMENT, fileops.edit_file, box.ctx, "bin", "a", "b")
    assert "binary" in err.message
    assert (box.up / "in.txt").read_text() == "abc"


def test_edit_result_cap(box: Box) -> None:
    ctx = box.with_limits(write_max_bytes=8)
    (box.ws / "a.txt").write_text("abcdef")
    fails(ErrorCode.TOO_LARGE, fileops.edit_file, ctx, "a.txt", "a", "xyz1")
    assert (box.ws / "a.txt").read_text() == "abcdef"
    assert edit(ctx, "a.txt", "a", "xyz") == 1
    (box.ws / "big.txt").write_text("a" * 9)
    fails(ErrorCode.TOO_LARGE, fileops.edit_file, ctx, "big.txt", "aaa", "b")


def test_edit_keeps_mode_and_bytes_it_did_not_touch(box: Box) -> None:
    body = b"x" * 9000 + b"\xff raw\nold\r\n"
    (box.ws / "f.txt").write_bytes(body)
    (box.ws / "f.txt").chmod(0o600)
    assert edit(box.ctx, "f.txt", "old", "new") == 1
    assert (box.ws / "f.txt").read_bytes() == body.replace(b"old", b"new")
    assert stat.S_IMODE((box.ws / "f.txt").stat().st_mode) == 0o600


# -- read_bytes / write_bytes ---------------------------------------------------------


def test_bytes_round_trip(box: Box) -> None:
    data = bytes(range(256)) * 3
    r = fileops.write_bytes(box.ctx, OUTPUTS + "/blob.bin", data)
    WriteResult.model_validate(r)
    assert r == {"path": OUTPUTS + "/blob.bin", "bytes_written": 768, "created": True}
    assert fileops.read_bytes(box.ctx, OUTPUTS + "/blob.bin") == data
    assert fileops.write_bytes(box.ctx, "b.bin", bytearray(b"xy"))["bytes_written"] == 2
    assert fileops.read_bytes(box.ctx, "b.bin") == b"xy"
    (box.up / "u.bin").write_bytes(b"\x00\x01")
    assert fileops.read_bytes(box.ctx, UPLOADS + "/u.bin") == b"\x00\x01"
    assert no_temp_files(box.root)


def test_bytes_caps_and_errors(box: Box) -> None:
    ctx = box.with_limits(transfer_max_bytes=4)
    (box.ws / "five.bin").write_bytes(b"12345")
    (box.ws / "d").mkdir()
    fails(ErrorCode.TOO_LARGE, fileops.read_bytes, ctx, "five.bin")
    fails(ErrorCode.TOO_LARGE, fileops.write_bytes, ctx, "x.bin", b"12345")
    assert fileops.write_bytes(ctx, "x.bin", b"1234")["bytes_written"] == 4
    fails(ErrorCode.INVALID_ARGUMENT, fileops.write_bytes, ctx, "y.bin", "text")
    fails(ErrorCode.INVALID_ARGUMENT, fileops.write_bytes, ctx, "y.bin", [1, 2])
    fails(ErrorCode.IS_A_DIRECTORY, fileops.read_bytes, ctx, "d")
    fails(ErrorCode.IS_A_DIRECTORY, fileops.write_bytes, ctx, "d", b"1")
    fails(ErrorCode.NOT_FOUND, fileops.read_bytes, ctx, "none.bin")
    fails(ErrorCode.READ_ONLY, fileops.write_bytes, ctx, UPLOADS + "/y.bin", b"1")
    fails(ErrorCode.ACCESS_DENIED, fileops.read_bytes, ctx, "/etc/hostname")


# -- list_dir ---------------------------------------------------------------------


def listing(ctx: Context, *args: Any) -> dict[str, Any]:
    result = fileops.list_dir(ctx, *args)
    ListDirResult.model_validate(result)
    return result


def names(result: dict[str, Any]) -> list[str]:
    return [e["path"].removeprefix(result["path"] + "/") for e in result["entries"]]


def test_list_dir_sorted_with_kinds_sizes_and_depths(box: Box) -> None:
    (box.ws / "a").mkdir()
    (box.ws / "a" / "b.txt").write_text("12345")
    (box.ws / "a" / "c").mkdir()
    (box.ws / "a" / "c" / "deep.txt").write_text("x")
    (box.ws / "a-c.txt").write_text("xy")
    (box.ws / "Z.md").write_text("")
    os.mkfifo(box.ws / "fifo")
    r = listing(box.ctx)  # default: the workspace, depth 2
    assert r["path"] == WS and r["truncated"] is False
    assert names(r) == ["Z.md", "a", "a/b.txt", "a/c", "a-c.txt", "fifo"]
    by_name = {e["name"]: e for e in r["entries"]}
    assert by_name["b.txt"] == {
        "path": WS + "/a/b.txt",
        "name": "b.txt",
        "kind": "file",
        "size": 5,
        "depth": 2,
    }
    assert (by_name["a"]["kind"], by_name["a"]["size"], by_name["a"]["depth"]) == ("dir", None, 1)
    assert by_name["fifo"]["kind"] == "other"
    assert names(listing(box.ctx, WS, 1)) == ["Z.md", "a", "a-c.txt", "fifo"]
    assert "a/c/deep.txt" in names(listing(box.ctx, WS, 3))


def test_list_dir_symlinks_are_listed_never_followed(box: Box) -> None:
    (box.ws / "escape").symlink_to(box.outside)
    (box.ws / "dangling").symlink_to(box.ws / "nowhere")
    r = listing(box.ctx, WS, 5)
    assert [(e["name"], e["kind"], e["size"]) for e in r["entries"]] == [
        ("dangling", "symlink", None),
        ("escape", "symlink", None),
    ]
    assert "secret" not in str(r) and str(box.root) not in str(r)


def test_list_dir_ignore_set_applies_below_the_root_only(box: Box) -> None:
    for d in ("node_modules/pkg", ".git/objects", "src/__pycache__", "x.egg-info"):
        (box.ws / d).mkdir(parents=True)
    (box.ws / "src" / "m.py").write_text("")
    (box.ws / "src" / "m.pyc").write_text("")
    (box.ws / "node_modules" / "pkg" / "index.js").write_text("")
    (box.ws / "node_modules" / "pkg" / ".git").mkdir()
    assert names(listing(box.ctx, WS, 3)) == ["src", "src/m.py"]
    assert names(listing(box.ctx, WS + "/node_modules")) == ["pkg", "pkg/index.js"]


def test_list_dir_hides_exactly_what_glob_hides(box: Box) -> None:
    # A directory named like an ignored file (`*.pyc`) is hidden by ripgrep's
    # negation globs, so list_dir and glob must hide it too.
    (box.ws / "odd.pyc").mkdir()
    (box.ws / "odd.pyc" / "inside.txt").write_text("")
    (box.ws / "keep.txt").write_text("")
    assert names(listing(box.ctx, WS, 3)) == ["keep.txt"]
    assert search.glob(box.ctx, "**", WS, include_dirs=True)["paths"] == [WS + "/keep.txt"]


def test_list_dir_cap_prefers_shallow_entries_and_truncates_only_when_more(box: Box) -> None:
    (box.ws / "a").mkdir()
    for i in range(5):
        (box.ws / "a" / f"f{i}").write_text("")
    (box.ws / "b.txt").write_text("")
    (box.ws / "c").mkdir()
    r = listing(box.with_limits(list_max_entries=4), WS, 2)
    assert r["truncated"] is True
    assert names(r) == ["a", "a/f0", "b.txt", "c"]
    assert listing(box.with_limits(list_max_entries=8), WS, 2)["truncated"] is False
    assert listing(box.with_limits(list_max_entries=7), WS, 2)["truncated"] is True
    assert listing(box.with_limits(list_max_entries=3), WS, 1)["truncated"] is False


def test_list_dir_errors(box: Box) -> None:
    (box.ws / "f.txt").write_text("x")
    err = fails(ErrorCode.NOT_A_DIRECTORY, fileops.list_dir, box.ctx, "f.txt")
    assert err.message == WS + "/f.txt is not a directory"
    fails(ErrorCode.NOT_FOUND, fileops.list_dir, box.ctx, "missing")
    fails(ErrorCode.ACCESS_DENIED, fileops.list_dir, box.ctx, "/mnt/user-data")
    fails(ErrorCode.ACCESS_DENIED, fileops.list_dir, box.ctx, "/")
    for depth in (0, -1, 11, "2", True, None, 1.5):
        fails(ErrorCode.INVALID_ARGUMENT, fileops.list_dir, box.ctx, WS, depth)


def test_list_dir_read_only_mount_and_empty_dir(box: Box) -> None:
    (box.up / "in.csv").write_text("a")
    assert names(listing(box.ctx, UPLOADS)) == ["in.csv"]
    assert listing(box.ctx, OUTPUTS) == {"path": OUTPUTS, "entries": [], "truncated": False}
