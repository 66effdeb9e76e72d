"""read_file, write_file, edit_file, read_bytes, write_bytes."""

from __future__ import annotations

import os

import pytest

from sandkit import ErrorCode
from sandkit.runtime.limits import Limits
from sandkit.sandbox import Sandbox

from .suite import (
    OUTPUTS,
    WORKSPACE,
    ConformanceBase,
    SeedUpload,
    make_dirs,
    q,
    raises_code,
    sh,
    symlink,
)

FIVE = "one\ntwo\nthree\nfour\nfive\n"


class ReadFileTests(ConformanceBase):
    def test_round_trip(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/a.txt", "hello\nworld\n")
        result = sb.read_file(f"{ws}/a.txt")
        assert result.path == f"{ws}/a.txt"
        assert result.content == "hello\nworld\n"
        assert (result.start_line, result.end_line, result.total_lines) == (1, 2, 2)
        assert result.truncated is False
        assert result.next_start_line is None

    def test_relative_paths_are_under_the_workspace(self, sb: Sandbox, ws: str) -> None:
        name = ws.rsplit("/", 1)[1]
        sb.write_file(f"{name}/rel.txt", "x\n")
        assert sb.read_file(f"{ws}/rel.txt").content == "x\n"
        assert sb.read_file(f"{name}/rel.txt").path == f"{ws}/rel.txt"
        assert sb.read_file(f"./{name}/../{name}/rel.txt").path == f"{ws}/rel.txt"

    def test_last_line_without_newline(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/a.txt", "a\nb")
        result = sb.read_file(f"{ws}/a.txt")
        assert result.content == "a\nb"
        assert result.total_lines == 2

    @pytest.mark.parametrize(
        "start, end, content, served, truncated",
        [
            (2, 3, "two\nthree\n", (2, 3), True),
            (1, 1, "one\n", (1, 1), True),
            (4, None, "four\nfive\n", (4, 5), False),
            (None, 2, "one\ntwo\n", (1, 2), True),
            (5, 5, "five\n", (5, 5), False),
            (1, 5, FIVE, (1, 5), False),
            (3, 99, "three\nfour\nfive\n", (3, 5), False),
        ],
    )
    def test_line_ranges(
        self,
        sb: Sandbox,
        ws: str,
        start: int | None,
        end: int | None,
        content: str,
        served: tuple[int, int],
        truncated: bool,
    ) -> None:
        sb.write_file(f"{ws}/five.txt", FIVE)
        result = sb.read_file(f"{ws}/five.txt", start_line=start, end_line=end)
        assert result.content == content
        assert (result.start_line, result.end_line) == served
        assert result.total_lines == 5
        assert result.truncated is truncated
        assert result.next_start_line == (served[1] + 1 if truncated else None)

    @pytest.mark.parametrize(
        "start, end",
        [(6, None), (100, 200), (0, None), (-1, None), (3, 2), (None, 0), (1, -5)],
    )
    def test_bad_ranges_are_invalid_argument(
        self, sb: Sandbox, ws: str, start: int | None, end: int | None
    ) -> None:
        sb.write_file(f"{ws}/five.txt", FIVE)
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.read_file(f"{ws}/five.txt", start_line=start, end_line=end)

    @pytest.mark.parametrize("value", ["1", 1.5, True], ids=repr)
    def test_non_integer_lines_are_invalid_argument(
        self, sb: Sandbox, ws: str, value: object
    ) -> None:
        sb.write_file(f"{ws}/five.txt", FIVE)
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.read_file(f"{ws}/five.txt", start_line=value)  # type: ignore[arg-type]

    def test_empty_file(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/empty.txt", "")
        result = sb.read_file(f"{ws}/empty.txt")
        assert result.content == ""
        assert (result.start_line, result.end_line, result.total_lines) == (0, 0, 0)
        assert result.truncated is False and result.next_start_line is None
        assert sb.read_file(f"{ws}/empty.txt", start_line=1).content == ""
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.read_file(f"{ws}/empty.txt", start_line=2)

    def test_line_cap_gives_a_continuation(self, sb: Sandbox, ws: str, limits: Limits) -> None:
        count = limits.read_max_lines + 500
        sb.write_file(f"{ws}/long.txt", "".join(f"line {i}\n" for i in range(1, count + 1)))
        first = sb.read_file(f"{ws}/long.txt")
        assert (first.start_line, first.end_line) == (1, limits.read_max_lines)
        assert first.total_lines == count
        assert first.truncated is True
        assert first.next_start_line == limits.read_max_lines + 1
        rest = sb.read_file(f"{ws}/long.txt", start_line=first.next_start_line)
        assert rest.start_line == limits.read_max_lines + 1
        assert rest.end_line == count
        assert rest.content.splitlines()[-1] == f"line {count}"
        assert rest.truncated is False and rest.next_start_line is None

    def test_byte_cap_and_continuation_reassemble_the_file(
        self, sb: Sandbox, ws: str, limits: Limits
    ) -> None:
        line = "é" * 300 + "\n"  # 601 bytes
        lines = (limits.read_max_bytes // len(line.encode())) * 2 + 7
        original = "".join(f"{i:05d}{line}" for i in range(lines))
        sb.write_file(f"{ws}/wide.txt", original)
        pieces: list[str] = []
        start: int | None = 1
        calls = 0
        while start is not None:
            result = sb.read_file(f"{ws}/wide.txt", start_line=start)
            assert len(result.content.encode()) <= limits.read_max_bytes
            assert result.total_lines == lines
            assert result.start_line == start
            pieces.append(result.content)
            start = result.next_start_line
            calls += 1
        assert calls >= 3
        assert "".join(pieces) == original

    def test_a_single_line_over_the_byte_cap_is_cut_and_bounded(
        self, sb: Sandbox, ws: str, limits: Limits
    ) -> None:
        huge = "x" * (limits.read_max_bytes + 1000)
        sb.write_file(f"{ws}/huge.txt", huge + "\nsecond\n")
        result = sb.read_file(f"{ws}/huge.txt")
        assert result.start_line == 1 and result.end_line == 1
        assert result.content.startswith("x" * 1000)
        assert len(result.content.encode()) < limits.read_max_bytes + 1000
        assert result.total_lines == 2
        assert result.truncated is True and result.next_start_line == 2
        assert sb.read_file(f"{ws}/huge.txt", start_line=2).content == "second\n"

    @pytest.mark.parametrize(
        "data",
        [b"\x00\x01\x02", b"text then\x00nul", b"\xff\xfe\xfd not utf-8", bytes(range(256))],
        ids=["nul-first", "nul-later", "invalid-utf8", "all-bytes"],
    )
    def test_binary_files_are_an_error_not_mojibake(
        self, sb: Sandbox, ws: str, data: bytes
    ) -> None:
        sb.write_bytes(f"{ws}/bin.dat", data)
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.read_file(f"{ws}/bin.dat")

    def test_unicode(self, sb: Sandbox, ws: str) -> None:
        text = "héllo wörld 🌍\n日本語のテキスト\n\u0645\u0631\u062d\u0628\u0627\n"
        sb.write_file(f"{ws}/uni.txt", text)
        result = sb.read_file(f"{ws}/uni.txt")
        assert result.content == text
        assert result.total_lines == 3
        assert sb.read_file(f"{ws}/uni.txt", start_line=2, end_line=2).content == (
            "日本語のテキスト\n"
        )
        assert sb.read_bytes(f"{ws}/uni.txt") == text.encode()

    def test_crlf_and_lone_cr_are_kept(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/crlf.txt", "a\r\nb\r\nc")
        result = sb.read_file(f"{ws}/crlf.txt")
        assert result.content == "a\r\nb\r\nc"
        assert result.total_lines == 3
        assert sb.read_file(f"{ws}/crlf.txt", start_line=2, end_line=2).content == "b\r\n"
        # Only \n ends a line: \r, form feed and U+2028 are characters.
        sb.write_file(f"{ws}/cr.txt", "a\rb\x0cc\u2028d\n")
        odd = sb.read_file(f"{ws}/cr.txt")
        assert odd.total_lines == 1
        assert odd.content == "a\rb\x0cc\u2028d\n"

    def test_read_directory_is_a_directory(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/d/f.txt", "x")
        with raises_code(ErrorCode.IS_A_DIRECTORY):
            sb.read_file(f"{ws}/d")
        with raises_code(ErrorCode.IS_A_DIRECTORY):
            sb.read_file(WORKSPACE)

    def test_missing_is_not_found(self, sb: Sandbox, ws: str) -> None:
        with raises_code(ErrorCode.NOT_FOUND) as info:
            sb.read_file(f"{ws}/missing.txt")
        assert f"{ws}/missing.txt" in info.value.message

    def test_through_a_file_is_not_a_directory(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "x")
        with raises_code(ErrorCode.NOT_A_DIRECTORY):
            sb.read_file(f"{ws}/f.txt/child")

    def test_fifo_is_refused_without_blocking(self, sb: Sandbox, ws: str) -> None:
        make_dirs(sb, ws)
        sh(sb, f"mkfifo {q(ws)}/pipe")
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.read_file(f"{ws}/pipe")
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.read_bytes(f"{ws}/pipe")

    def test_symlink_inside_reads_the_target(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/target.txt", "target\n")
        symlink(sb, "target.txt", f"{ws}/link")
        result = sb.read_file(f"{ws}/link")
        assert result.content == "target\n"
        assert result.path == f"{ws}/target.txt"


class WriteFileTests(ConformanceBase):
    def test_create_reports_created_and_utf8_bytes(self, sb: Sandbox, ws: str) -> None:
        result = sb.write_file(f"{ws}/new.txt", "héllo\n")
        assert result.path == f"{ws}/new.txt"
        assert result.created is True
        assert result.bytes_written == len("héllo\n".encode())
        assert sb.read_bytes(f"{ws}/new.txt") == "héllo\n".encode()

    def test_overwrite_replaces_everything(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "a much longer first version\n")
        result = sb.write_file(f"{ws}/f.txt", "short\n")
        assert result.created is False
        assert result.bytes_written == 6
        assert sb.read_bytes(f"{ws}/f.txt") == b"short\n"

    def test_append(self, sb: Sandbox, ws: str) -> None:
        first = sb.write_file(f"{ws}/log.txt", "one\n", append=True)
        assert first.created is True
        second = sb.write_file(f"{ws}/log.txt", "two\n", append=True)
        assert second.created is False
        assert second.bytes_written == 4
        assert sb.read_file(f"{ws}/log.txt").content == "one\ntwo\n"

    def test_creates_parent_directories(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/a/b/c/d.txt", "deep")
        assert sb.read_file(f"{ws}/a/b/c/d.txt").content == "deep"
        kinds = {e.path: e.kind for e in sb.list_dir(ws, max_depth=3).entries}
        assert kinds[f"{ws}/a"] == kinds[f"{ws}/a/b"] == kinds[f"{ws}/a/b/c"] == "dir"

    def test_empty_content_creates_an_empty_file(self, sb: Sandbox, ws: str) -> None:
        result = sb.write_file(f"{ws}/empty", "")
        assert (result.created, result.bytes_written) == (True, 0)
        assert sb.read_bytes(f"{ws}/empty") == b""

    def test_overwrite_is_an_atomic_replace(self, sb: Sandbox, ws: str) -> None:
        # A replace (temp file + rename) gives the path a new inode, so a hard
        # link to the old file keeps the old content; an in-place write would not.
        sb.write_file(f"{ws}/f.txt", "old\n")
        sh(sb, f"ln {q(ws)}/f.txt {q(ws)}/hard")
        sb.write_file(f"{ws}/f.txt", "new\n")
        assert sb.read_file(f"{ws}/f.txt").content == "new\n"
        assert sb.read_file(f"{ws}/hard").content == "old\n"
        names = sorted(e.name for e in sb.list_dir(ws).entries)
        assert names == ["f.txt", "hard"], "no temporary files may be left behind"

    def test_overwrite_keeps_the_file_mode(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/run.sh", "#!/bin/sh\necho one\n")
        sh(sb, f"chmod 755 {q(ws)}/run.sh")
        sb.write_file(f"{ws}/run.sh", "#!/bin/sh\necho two\n")
        assert sh(sb, f"{q(ws)}/run.sh") == "two\n"

    def test_write_through_an_inner_symlink_writes_the_target(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/target.txt", "old")
        symlink(sb, "target.txt", f"{ws}/link")
        result = sb.write_file(f"{ws}/link", "new")
        assert result.path == f"{ws}/target.txt"
        assert sb.read_file(f"{ws}/target.txt").content == "new"
        kinds = {e.name: e.kind for e in sb.list_dir(ws).entries}
        assert kinds == {"link": "symlink", "target.txt": "file"}

    def test_size_cap(self, sb: Sandbox, ws: str, limits: Limits) -> None:
        assert sb.write_file(f"{ws}/max.txt", "a" * limits.write_max_bytes).bytes_written == (
            limits.write_max_bytes
        )
        with raises_code(ErrorCode.TOO_LARGE):
            sb.write_file(f"{ws}/over.txt", "a" * (limits.write_max_bytes + 1))
        with raises_code(ErrorCode.NOT_FOUND):
            sb.read_bytes(f"{ws}/over.txt")

    def test_size_cap_counts_utf8_bytes(self, sb: Sandbox, ws: str, limits: Limits) -> None:
        with raises_code(ErrorCode.TOO_LARGE):
            sb.write_file(f"{ws}/over.txt", "é" * (limits.write_max_bytes // 2 + 1))

    def test_append_past_the_cap_changes_nothing(
        self, sb: Sandbox, ws: str, limits: Limits
    ) -> None:
        sb.write_file(f"{ws}/log.txt", "a" * (limits.write_max_bytes - 10))
        with raises_code(ErrorCode.TOO_LARGE):
            sb.write_file(f"{ws}/log.txt", "b" * 11, append=True)
        assert sb.read_bytes(f"{ws}/log.txt") == b"a" * (limits.write_max_bytes - 10)

    def test_a_file_without_write_bits_is_not_writable(self, sb: Sandbox, ws: str) -> None:
        """Whoever the runtime runs as (root on a laptop, uid 1000 in a box)."""
        sb.write_file(f"{ws}/ro.txt", "keep")
        sh(sb, f"chmod 444 {q(ws)}/ro.txt")
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.write_file(f"{ws}/ro.txt", "x")
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.write_file(f"{ws}/ro.txt", "x", append=True)
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.edit_file(f"{ws}/ro.txt", "keep", "x")
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.write_bytes(f"{ws}/ro.txt", b"x")
        assert sb.read_file(f"{ws}/ro.txt").content == "keep"
        sh(sb, f"chmod 644 {q(ws)}/ro.txt")
        sb.write_file(f"{ws}/ro.txt", "now")
        assert sb.read_file(f"{ws}/ro.txt").content == "now"

    def test_write_directory_is_a_directory(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/d/f.txt", "x")
        with raises_code(ErrorCode.IS_A_DIRECTORY):
            sb.write_file(f"{ws}/d", "x")
        with raises_code(ErrorCode.IS_A_DIRECTORY):
            sb.write_file(OUTPUTS, "x")
        with raises_code(ErrorCode.IS_A_DIRECTORY):
            sb.write_file(f"{ws}/d", "x", append=True)

    def test_parent_is_a_file(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "x")
        with raises_code(ErrorCode.NOT_A_DIRECTORY):
            sb.write_file(f"{ws}/f.txt/child.txt", "x")
        with raises_code(ErrorCode.NOT_A_DIRECTORY):
            sb.write_file(f"{ws}/f.txt/a/b.txt", "x")

    def test_outputs_are_writable(self, sb: Sandbox, ws: str) -> None:
        name = ws.rsplit("/", 1)[1]
        result = sb.write_file(f"{OUTPUTS}/{name}/report.md", "# done\n")
        assert result.path == f"{OUTPUTS}/{name}/report.md"
        assert sb.read_file(f"{OUTPUTS}/{name}/report.md").content == "# done\n"

    @pytest.mark.parametrize(
        "content, append",
        [(None, False), (123, False), (b"bytes", False), ("x", "yes"), ("x", 1), ("\ud800", False)],
        ids=["none", "int", "bytes", "append-str", "append-int", "lone-surrogate"],
    )
    def test_write_bad_arguments(
        self, sb: Sandbox, ws: str, content: object, append: object
    ) -> None:
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.write_file(f"{ws}/f.txt", content, append=append)  # type: ignore[arg-type]
        with raises_code(ErrorCode.NOT_FOUND):
            sb.read_bytes(f"{ws}/f.txt")


class EditFileTests(ConformanceBase):
    def test_single_replacement(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.py", "def f():\n    return 1\n")
        result = sb.edit_file(f"{ws}/f.py", "return 1", "return 2")
        assert result.path == f"{ws}/f.py"
        assert result.replacements == 1
        assert sb.read_file(f"{ws}/f.py").content == "def f():\n    return 2\n"

    def test_not_found_and_ambiguous_are_errors_that_say_which(self, sb: Sandbox, ws: str) -> None:
        original = "x = 1\nx = 1\n"
        sb.write_file(f"{ws}/f.py", original)
        with raises_code(ErrorCode.INVALID_ARGUMENT) as none:
            sb.edit_file(f"{ws}/f.py", "y = 1", "y = 2")
        with raises_code(ErrorCode.INVALID_ARGUMENT) as many:
            sb.edit_file(f"{ws}/f.py", "x = 1", "x = 2")
        assert "not found" in none.value.message
        assert "occurs 2 times" in many.value.message
        assert sb.read_file(f"{ws}/f.py").content == original

    def test_overlapping_matches_are_ambiguous(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "aaa")
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.edit_file(f"{ws}/f.txt", "aa", "b")
        assert sb.read_file(f"{ws}/f.txt").content == "aaa"

    def test_replace_all(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "cat dog cat bird cat\n")
        result = sb.edit_file(f"{ws}/f.txt", "cat", "lion", replace_all=True)
        assert result.replacements == 3
        assert sb.read_file(f"{ws}/f.txt").content == "lion dog lion bird lion\n"

    def test_replace_all_with_no_match_is_an_error(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "abc")
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.edit_file(f"{ws}/f.txt", "zzz", "y", replace_all=True)

    def test_multiline_unicode_and_crlf(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "keep\r\nälpha\r\nbeta\r\nkeep\r\n")
        result = sb.edit_file(f"{ws}/f.txt", "älpha\r\nbeta", "\u03b3 🌍")
        assert result.replacements == 1
        assert sb.read_bytes(f"{ws}/f.txt") == "keep\r\n\u03b3 🌍\r\nkeep\r\n".encode()

    def test_delete_with_empty_new(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "keep DROP keep")
        sb.edit_file(f"{ws}/f.txt", " DROP", "")
        assert sb.read_file(f"{ws}/f.txt").content == "keep keep"

    @pytest.mark.parametrize(
        "old, new",
        [("", "x"), ("same", "same"), (None, "x"), ("a", None), (1, "x")],
        ids=["empty-old", "old-equals-new", "none-old", "none-new", "int-old"],
    )
    def test_edit_bad_arguments(self, sb: Sandbox, ws: str, old: object, new: object) -> None:
        sb.write_file(f"{ws}/f.txt", "same a 1")
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.edit_file(f"{ws}/f.txt", old, new)  # type: ignore[arg-type]
        assert sb.read_file(f"{ws}/f.txt").content == "same a 1"

    def test_missing_directory_and_binary(self, sb: Sandbox, ws: str) -> None:
        with raises_code(ErrorCode.NOT_FOUND):
            sb.edit_file(f"{ws}/missing.txt", "a", "b")
        sb.write_file(f"{ws}/d/f.txt", "a")
        with raises_code(ErrorCode.IS_A_DIRECTORY):
            sb.edit_file(f"{ws}/d", "a", "b")
        sb.write_bytes(f"{ws}/bin", b"a\x00b")
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.edit_file(f"{ws}/bin", "a", "b")
        assert sb.read_bytes(f"{ws}/bin") == b"a\x00b"

    def test_result_over_the_cap_is_too_large(self, sb: Sandbox, ws: str, limits: Limits) -> None:
        half = limits.write_max_bytes // 2 + 1
        sb.write_file(f"{ws}/f.txt", "a" * half)
        with raises_code(ErrorCode.TOO_LARGE):
            sb.edit_file(f"{ws}/f.txt", "a", "aa", replace_all=True)
        assert len(sb.read_bytes(f"{ws}/f.txt")) == half


class BytesTests(ConformanceBase):
    def test_all_byte_values_round_trip(self, sb: Sandbox, ws: str) -> None:
        data = bytes(range(256)) * 4
        result = sb.write_bytes(f"{ws}/all.bin", data)
        assert (result.path, result.bytes_written, result.created) == (
            f"{ws}/all.bin",
            len(data),
            True,
        )
        assert sb.read_bytes(f"{ws}/all.bin") == data

    def test_a_few_mebibytes_round_trip(self, sb: Sandbox, ws: str) -> None:
        data = os.urandom(3 * 1024 * 1024 + 17)
        sb.write_bytes(f"{ws}/big.bin", data)
        assert sb.read_bytes(f"{ws}/big.bin") == data

    def test_empty_and_overwrite(self, sb: Sandbox, ws: str) -> None:
        assert sb.write_bytes(f"{ws}/e.bin", b"").created is True
        assert sb.read_bytes(f"{ws}/e.bin") == b""
        again = sb.write_bytes(f"{ws}/e.bin", b"\x00\xff")
        assert (again.created, again.bytes_written) == (False, 2)
        assert sb.read_bytes(f"{ws}/e.bin") == b"\x00\xff"

    def test_text_written_as_text_reads_as_utf8(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/t.txt", "ünïcode\r\n")
        assert sb.read_bytes(f"{ws}/t.txt") == "ünïcode\r\n".encode()

    def test_write_cap(self, sb: Sandbox, ws: str, limits: Limits) -> None:
        with raises_code(ErrorCode.TOO_LARGE):
            sb.write_bytes(f"{ws}/over.bin", b"\x00" * (limits.transfer_max_bytes + 1))
        with raises_code(ErrorCode.NOT_FOUND):
            sb.read_bytes(f"{ws}/over.bin")

    def test_read_cap(self, sb: Sandbox, ws: str, limits: Limits) -> None:
        make_dirs(sb, ws)
        sh(sb, f"truncate -s {limits.transfer_max_bytes + 1} {q(ws)}/sparse.bin")
        with raises_code(ErrorCode.TOO_LARGE):
            sb.read_bytes(f"{ws}/sparse.bin")

    @pytest.mark.parametrize("data", ["text", None, 5, [1, 2]], ids=repr)
    def test_non_bytes_is_invalid_argument(self, sb: Sandbox, ws: str, data: object) -> None:
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.write_bytes(f"{ws}/x.bin", data)  # type: ignore[arg-type]

    def test_bytes_errors(self, sb: Sandbox, ws: str) -> None:
        with raises_code(ErrorCode.NOT_FOUND):
            sb.read_bytes(f"{ws}/missing")
        sb.write_bytes(f"{ws}/d/x", b"x")
        with raises_code(ErrorCode.IS_A_DIRECTORY):
            sb.read_bytes(f"{ws}/d")
        with raises_code(ErrorCode.IS_A_DIRECTORY):
            sb.write_bytes(f"{ws}/d", b"x")
        with raises_code(ErrorCode.NOT_A_DIRECTORY):
            sb.write_bytes(f"{ws}/d/x/y", b"x")

    def test_uploads_are_readable_not_writable(
        self, sb: Sandbox, seed_upload: SeedUpload, up: str
    ) -> None:
        path = seed_upload(f"{up}/data.bin", bytes(range(256)))
        assert sb.read_bytes(path) == bytes(range(256))
        with raises_code(ErrorCode.READ_ONLY):
            sb.write_bytes(path, b"changed")
        assert sb.read_bytes(path) == bytes(range(256))
