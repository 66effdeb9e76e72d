"""Masking: only virtual paths leave the API, whatever the command prints.

Every call in the suite already goes through `CheckedSandbox`, which fails
on any forbidden string in any result or error. These tests aim at the
places a host path is most likely to slip out.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sandkit import ErrorCode, SandboxError
from sandkit.sandbox import Sandbox

from .suite import (
    WORKSPACE,
    ConformanceBase,
    assert_clean,
    in_layout,
    make_dirs,
    q,
    raises_code,
    symlink,
)

# Commands that print where they are; each must show virtual paths only.
REVEALING_COMMANDS = [
    "pwd",
    "pwd -P",
    "realpath .",
    "readlink -f .",
    "echo $PWD",
    "cd .. && pwd",
    "cd ../.. && pwd -P",
    "ls -la",
    "ls -la ..",
    "ls -lR .",
    "env",
    "set",
    "readlink /proc/self/cwd",
    "ls -l /proc/self/cwd",
    "find . -maxdepth 2",
    'find "$PWD" -maxdepth 1',
    "stat .",
    "cat /proc/self/mountinfo",
    "cat /proc/mounts",
    "python3 -c 'import os; print(os.getcwd(), os.path.realpath(\".\"), os.environ)'",
    "ls -l link",
    "readlink link",
    "cat missing-file",
    "cd missing-dir",
    "ls -la /nonexistent-dir",
    "sh -c 'echo $0 $PWD'",
    "trap 'pwd' EXIT; false",
    'echo "$(pwd)/$(basename "$(pwd)")"',
]


class MaskingTests(ConformanceBase):
    @pytest.fixture
    def here(self, sb: Sandbox, ws: str) -> str:
        sb.write_file(f"{ws}/target.txt", "t\n")
        symlink(sb, f"{ws}/target.txt", f"{ws}/link")
        return ws

    @pytest.mark.parametrize("command", REVEALING_COMMANDS)
    def test_command_output_is_masked(
        self, sb: Sandbox, here: str, command: str, forbidden_strings: list[str]
    ) -> None:
        # The proxy fails the test on a leak; also check the raw result here so a
        # failure names the command.
        result = sb.execute(command, cwd=here, timeout=30)
        assert_clean(result, forbidden_strings, command)

    def test_paths_in_command_output_are_virtual(self, sb: Sandbox, here: str) -> None:
        assert sb.execute("realpath link", cwd=here).stdout == f"{here}/target.txt\n"
        assert sb.execute("readlink link", cwd=here).stdout == f"{here}/target.txt\n"
        missing = sb.execute(f"cat {q(here)}/nope.txt")
        assert missing.exit_code != 0
        assert f"{here}/nope.txt" in missing.stderr

    def test_error_messages_name_the_virtual_path(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "x")
        make_dirs(sb, f"{ws}/d")
        cases: list[tuple[Callable[[], object], str]] = [
            (lambda: sb.read_file(f"{ws}/missing.txt"), f"{ws}/missing.txt"),
            (lambda: sb.read_file(f"{ws}/d"), f"{ws}/d"),
            (lambda: sb.list_dir(f"{ws}/f.txt"), f"{ws}/f.txt"),
            (lambda: sb.read_bytes(f"{ws}/missing.bin"), f"{ws}/missing.bin"),
            (lambda: sb.edit_file(f"{ws}/missing.txt", "a", "b"), f"{ws}/missing.txt"),
            (lambda: sb.read_file("/etc/passwd"), "/etc/passwd"),
        ]
        for call, expected in cases:
            with pytest.raises(SandboxError) as info:
                call()
            assert expected in info.value.message, info.value.message

    def test_every_result_path_is_virtual(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/a/b.txt", "needle\n")
        symlink(sb, "a", f"{ws}/alias")
        paths = [
            sb.read_file(f"{ws}/alias/b.txt").path,
            sb.write_file(f"{ws}/alias/c.txt", "needle").path,
            sb.edit_file(f"{ws}/alias/c.txt", "needle", "needles").path,
            sb.write_bytes(f"{ws}/alias/d.bin", b"x").path,
            sb.list_dir(f"{ws}/alias").path,
            sb.glob("*", path=f"{ws}/alias").path,
            sb.grep("needle", path=f"{ws}/alias").path,
        ]
        paths += [e.path for e in sb.list_dir(ws, max_depth=3).entries]
        paths += sb.glob("**/*", path=ws, include_dirs=True).paths
        grep = sb.grep("needle", path=ws)
        paths += [m.path for m in grep.matches]
        paths += sb.grep("needle", path=ws, output_mode="files_with_matches").files
        paths += [c.path for c in sb.grep("needle", path=ws, output_mode="count").counts]
        assert paths and all(in_layout(p) for p in paths), paths

    def test_every_error_code_message_is_masked(
        self, sb: Sandbox, ws: str, forbidden_strings: list[str]
    ) -> None:
        sb.write_file(f"{ws}/f.txt", "x")
        calls: list[Callable[[], object]] = [
            lambda: sb.read_file(f"{ws}/f.txt/x"),
            lambda: sb.write_file(f"{ws}/f.txt/x", "x"),
            lambda: sb.list_dir(f"{ws}/nope"),
            lambda: sb.glob("[", path=ws),
            lambda: sb.grep("(", path=ws),
            lambda: sb.write_file("/mnt/user-data/uploads/x", "x"),
            lambda: sb.read_file(f"{ws}/f.txt", start_line=9),
            lambda: sb.execute("pwd", cwd=f"{ws}/f.txt"),
            lambda: sb.read_file(".." * 3000),
        ]
        codes = set()
        for call in calls:
            with pytest.raises(SandboxError) as info:
                call()
            codes.add(info.value.code)
            assert_clean([info.value.message, str(info.value)], forbidden_strings)
        assert len(codes) >= 5, codes

    def test_workspace_root_is_the_only_cwd_shown(self, sb: Sandbox) -> None:
        result = sb.execute("pwd; echo $PWD; realpath .")
        assert result.stdout.split() == [WORKSPACE] * 3

    def test_error_codes_are_not_masked_into_empty_results(self, sb: Sandbox, ws: str) -> None:
        # A failure is never "no matches" or "(empty)".
        with raises_code(ErrorCode.NOT_FOUND):
            sb.grep("x", path=f"{ws}/missing")
        with raises_code(ErrorCode.NOT_FOUND):
            sb.glob("*", path=f"{ws}/missing")
        with raises_code(ErrorCode.NOT_FOUND):
            sb.list_dir(f"{ws}/missing")
