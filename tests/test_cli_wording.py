"""The CLI speaks its own vocabulary (issue 13): options, not API parameter names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from sandkit.cli import app
from sandkit.errors import ErrorCode, SandboxError
from sandkit.tools.render import error_line


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("SANDKIT_") or name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")


def sk(tmp_path: Path, *args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(app, ["--data-root", str(tmp_path / "data"), *args])
    assert result.exit_code == code, (result.stdout, result.stderr)
    return result


def test_errors_name_the_cli_options(tmp_path: Path) -> None:
    sk(tmp_path, "write", "twice.txt", "a\na\n")
    edit = sk(tmp_path, "edit", "twice.txt", "a", "b", code=2)
    assert "pass --all" in edit.stderr and "replace_all" not in edit.stderr
    sk(tmp_path, "write", "--from-file", str(_binary(tmp_path)), "blob.bin")
    read = sk(tmp_path, "read", "blob.bin", code=2)
    assert "sandkit read --raw" in read.stderr and "read_bytes" not in read.stderr
    sk(tmp_path, "write", "one.txt", "x\n")
    past = sk(tmp_path, "read", "one.txt", "--start", "5", code=2)
    assert "(1 line)" in past.stderr and "1 lines" not in past.stderr
    assert "--start 5" in past.stderr and "start_line" not in past.stderr


def test_exec_timeouts_are_worded_alike(tmp_path: Path) -> None:
    for value in ("0", "-1"):
        out = sk(tmp_path, "--allow-execute", "exec", "--timeout", value, "true", code=2)
        assert "--timeout must be > 0 seconds" in out.stderr, out.stderr


def test_tools_never_point_to_an_api_the_model_lacks() -> None:
    line = error_line(
        SandboxError(
            ErrorCode.INVALID_ARGUMENT,
            "/x is a binary file (NUL byte or not UTF-8 in its first 8192 bytes); "
            "use read_bytes to download it",
        )
    )
    assert "read_bytes" not in line and "read_file reads text files only" in line


def test_one_grep_mode_vocabulary_and_no_short_flag_collision(tmp_path: Path) -> None:
    sk(tmp_path, "write", "a.py", "TODO\n")
    named = sk(tmp_path, "grep", "TODO", "--mode", "files_with_matches")
    short = sk(tmp_path, "grep", "TODO", "--mode", "files")
    assert named.stdout == short.stdout == "/mnt/user-data/workspace/a.py\n"
    wrong = sk(tmp_path, "grep", "TODO", "--mode", "paths", code=2)
    assert "files_with_matches" in wrong.stderr
    # -s is --start in read; grep's --case-sensitive has no short form
    assert "-s" not in sk(tmp_path, "grep", "--help").stdout.split("--case-sensitive")[1][:10]
    refused = CliRunner().invoke(app, ["--data-root", str(tmp_path), "grep", "-s", "TODO"])
    assert refused.exit_code == 2


def test_glob_depth_is_said_in_the_help(tmp_path: Path) -> None:
    sk(tmp_path, "write", "top.py", "x\n")
    sk(tmp_path, "write", "pkg/deep.py", "x\n")
    assert sk(tmp_path, "glob", "*.py").stdout == "/mnt/user-data/workspace/top.py\n"
    assert "pkg/deep.py" in sk(tmp_path, "glob", "**/*.py").stdout
    assert "a.py" not in sk(tmp_path, "grep", "x", "--glob", "*.py").stdout
    assert "pkg/deep.py" in sk(tmp_path, "grep", "x", "--glob", "*.py").stdout
    helptext = sk(tmp_path, "glob", "--help").stdout
    assert "top level only" in helptext and "any depth" in helptext


def _binary(tmp_path: Path) -> Path:
    path = tmp_path / "blob.bin"
    path.write_bytes(b"\x00\x01\x02")
    return path
