"""The `sandkit` CLI against the local provider, the way a person or a script uses it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from sandkit.cli import app, render
from sandkit.cli.demo import DemoReport
from sandkit.cli.doctor import DoctorReport
from sandkit.cli.providers import ProvidersReport
from sandkit.models import (
    EditResult,
    ExecuteResult,
    GlobResult,
    GrepMatch,
    GrepResult,
    ListDirResult,
    ReadFileResult,
    SandboxInfo,
    WriteResult,
)

WS = "/mnt/user-data/workspace"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ambient sandkit settings, no forced colours, no sandkit.yaml in cwd."""
    for name in list(os.environ):
        if name.startswith("SANDKIT_") or name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "data"


class Cli:
    """Runs `sandkit --data-root ROOT ...` in-process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runner = CliRunner()

    def __call__(self, *args: str, input: str | bytes | None = None, code: int = 0) -> Result:
        result = self.runner.invoke(app, ["--data-root", str(self.root), *args], input=input)
        if result.exit_code != code:
            raise AssertionError(
                f"exit {result.exit_code} != {code}\nstdout: {result.stdout}\n"
                f"stderr: {result.stderr}\nexception: {result.exception!r}"
            )
        # The host data root is never shown, whatever happened.
        assert str(self.root) not in result.stdout + result.stderr
        return result

    def json(self, *args: str, code: int = 0) -> Any:
        return json.loads(self(*args, "--json", code=code).stdout)


@pytest.fixture
def cli(root: Path) -> Cli:
    return Cli(root)


def test_write_then_read_prints_cat_n_numbered_lines(cli: Cli) -> None:
    out = cli("write", "notes/todo.txt", "alpha\n\tbeta\ngamma\n")
    assert f"Created {WS}/notes/todo.txt (18 bytes)" in out.stdout
    out = cli("read", "notes/todo.txt")
    assert out.stdout == "     1\talpha\n     2\t\tbeta\n     3\tgamma\n"
    out = cli("write", "notes/todo.txt", "again\n")
    assert "Replaced" in out.stdout


def test_read_window_prints_continuation_hint(cli: Cli) -> None:
    cli("write", "long.txt", "".join(f"line {i}\n" for i in range(1, 11)))
    out = cli("read", "long.txt", "--start", "4", "--end", "5")
    assert out.stdout == "     4\tline 4\n     5\tline 5\n"
    assert "showing lines 4-5 of 10; continue with --start 6" in out.stderr
    assert "continue" not in cli("read", "long.txt", "--start", "9").stderr


def test_read_json_is_the_model(cli: Cli) -> None:
    cli("write", "a.py", "x = 1\ny = 2\n")
    result = ReadFileResult.model_validate(cli.json("read", "a.py", "--end", "1"))
    assert result.content == "x = 1\n"
    assert (result.total_lines, result.truncated, result.next_start_line) == (2, True, 2)


def test_write_from_stdin_file_and_append_round_trip_bytes(cli: Cli, tmp_path: Path) -> None:
    cli("write", "in.txt", input="from stdin\n")
    blob = bytes(range(256)) * 4
    (tmp_path / "blob.bin").write_bytes(blob)
    written = WriteResult.model_validate(
        cli.json("write", "bin/blob.bin", "--from-file", str(tmp_path / "blob.bin"))
    )
    assert (written.path, written.bytes_written, written.created) == (
        f"{WS}/bin/blob.bin",
        1024,
        True,
    )
    assert cli("read", "bin/blob.bin", "--raw").stdout_bytes == blob
    cli("write", "in.txt", "more\n", "--append")
    assert cli("read", "in.txt", "--raw").stdout == "from stdin\nmore\n"


def test_write_refuses_two_sources(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    out = cli("write", "a", "text", "--from-file", str(tmp_path / "f"), code=2)
    assert "Error [INVALID_ARGUMENT]" in out.stderr


def test_edit_replaces_once_and_reports_ambiguity(cli: Cli) -> None:
    cli("write", "app.py", "a = 1\nb = 1\n")
    out = cli("edit", "app.py", "a = 1", "a = 2")
    assert f"Edited {WS}/app.py: 1 replacement" in out.stdout
    out = cli("edit", "app.py", "= ", "== ", code=2)
    assert out.stderr.startswith("Error [INVALID_ARGUMENT]: ")
    result = EditResult.model_validate(cli.json("edit", "app.py", "= ", ":= ", "--all"))
    assert result.replacements == 2
    assert cli("read", "app.py", "--raw").stdout == "a := 2\nb := 1\n"


def test_ls_tree_depth_and_json(cli: Cli) -> None:
    cli("write", "pkg/mod.py", "x\n")
    cli("write", "pkg/sub/deep.py", "x\n")
    cli("write", "node_modules/dep.js", "x\n")
    out = cli("ls", "--depth", "1")
    assert out.stdout.splitlines()[0] == WS
    assert "pkg/" in out.stdout
    assert "mod.py" not in out.stdout
    assert "node_modules" not in out.stdout
    deep = cli("ls", "--depth", "3").stdout
    assert "deep.py" in deep
    assert "2 B" in deep
    listing = ListDirResult.model_validate(cli.json("ls", "pkg"))
    assert [e.path for e in listing.entries] == [
        f"{WS}/pkg/mod.py",
        f"{WS}/pkg/sub",
        f"{WS}/pkg/sub/deep.py",
    ]


def test_glob_prints_only_paths_on_stdout(cli: Cli) -> None:
    for name in ("src/a.py", "src/b/c.py", "src/d.txt"):
        cli("write", name, "x\n")
    out = cli("glob", "src/**/*.py")
    assert out.stdout.splitlines() == [f"{WS}/src/a.py", f"{WS}/src/b/c.py"]
    assert f"Found 2 paths under {WS}" in out.stderr
    result = GlobResult.model_validate(cli.json("glob", "*", "--path", "src", "--dirs"))
    assert result.paths == [f"{WS}/src/a.py", f"{WS}/src/b", f"{WS}/src/d.txt"]
    out = cli("glob", "*.rs")
    assert out.stdout == ""
    assert "No files matched" in out.stderr


def test_undecodable_names_are_raw_bytes_in_a_pipe_and_escapes_in_json(
    cli: Cli, root: Path
) -> None:
    cli("write", "ok.txt", "x\n")
    (workspace,) = {p.parent for p in root.rglob("ok.txt")}
    (workspace / os.fsdecode(b"bad\xff.txt")).write_text("x\n")
    out = cli("glob", "*.txt")
    assert out.stdout_bytes.splitlines() == [
        f"{WS}/bad".encode() + b"\xff.txt",
        f"{WS}/ok.txt".encode(),
    ]
    assert cli.json("glob", "*.txt")["paths"] == [f"{WS}/bad\\xff.txt", f"{WS}/ok.txt"]


def test_glob_truncation_is_announced(cli: Cli) -> None:
    for i in range(3):
        cli("write", f"f{i}.txt", "x\n")
    out = cli("glob", "*.txt", "--max", "2")
    assert len(out.stdout.splitlines()) == 2
    assert "showing first 2; more exist: next page with --offset 2" in out.stderr


def test_glob_offset_pages_like_grep(cli: Cli) -> None:
    for i in range(5):
        cli("write", f"f{i}.txt", "x\n")
    seen: list[str] = []
    offset = 0
    while True:
        page = cli.json("glob", "*.txt", "--max", "2", "--offset", str(offset))
        assert page["offset"] == offset
        seen += page["paths"]
        if not page["truncated"]:
            break
        offset += len(page["paths"])
    assert seen == [f"{WS}/f{i}.txt" for i in range(5)]
    last = cli("glob", "*.txt", "--max", "2", "--offset", "4")
    assert last.stdout.splitlines() == [f"{WS}/f4.txt"]
    assert "(from offset 4)" in last.stderr and "more exist" not in last.stderr
    past = cli("glob", "*.txt", "--offset", "9")
    assert past.stdout == "" and f"No files matched under {WS} past offset 9" in past.stderr
    bad = cli("glob", "*.txt", "--offset", "-1", code=2)
    assert "offset must be >= 0" in bad.stderr


def test_grep_content_context_and_modes(cli: Cli) -> None:
    cli("write", "a.py", "one\ntwo\nTODO three\nfour\n")
    cli("write", "b.txt", "todo: b\n")
    out = cli("grep", "todo", "-B", "1", "-A", "1")
    assert out.stdout.splitlines() == [
        f"{WS}/a.py-2- two",
        f"{WS}/a.py:3: TODO three",
        f"{WS}/a.py-4- four",
        "--",
        f"{WS}/b.txt:1: todo: b",
    ]
    assert f"Found 2 matches under {WS}" in out.stderr
    out = cli("grep", "TODO", "--case-sensitive", "--mode", "files")
    assert out.stdout.splitlines() == [f"{WS}/a.py"]
    out = cli("grep", "o", "--mode", "count", "--glob", "*.py")
    assert out.stdout.splitlines() == [f"{WS}/a.py:4"]


def test_grep_json_paging_and_exit_codes(cli: Cli) -> None:
    cli("write", "x.txt", "hit 1\nhit 2\nhit 3\n")
    page = GrepResult.model_validate(cli.json("grep", "hit", "--max", "2"))
    assert [m.line_number for m in page.matches] == [1, 2]
    assert page.truncated
    out = cli("grep", "hit", "--max", "2")
    assert "next page with --offset 2" in out.stderr
    rest = GrepResult.model_validate(cli.json("grep", "hit", "--max", "2", "--offset", "2"))
    assert [m.line_number for m in rest.matches] == [3]
    assert not rest.truncated
    out = cli("grep", "absent", code=1)
    assert out.stdout == ""
    assert "No matches found" in out.stderr
    out = cli("grep", "(unclosed", code=2)
    assert "Error [INVALID_PATTERN]" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


def test_grep_literal_treats_metacharacters_as_text(cli: Cli) -> None:
    cli("write", "m.txt", "a.b\naxb\n")
    out = cli("grep", "a.b", "--literal")
    assert out.stdout.splitlines() == [f"{WS}/m.txt:1: a.b"]


def test_exec_is_disabled_on_local_by_default(cli: Cli) -> None:
    out = cli("exec", "echo hi", code=2)
    assert out.stderr.startswith("Error [EXECUTE_DISABLED]")
    error = cli.json("exec", "echo hi", code=2)
    assert error["error"]["code"] == "EXECUTE_DISABLED"


def test_exec_streams_output_and_exit_code(cli: Cli) -> None:
    cli("write", "sub/f.txt", "content\n")
    out = cli(
        "--allow-execute",
        "exec",
        "cat f.txt; echo $GREETING; echo oops >&2; exit 3",
        "--cwd",
        "sub",
        "--env",
        "GREETING=hello",
        code=3,
    )
    assert out.stdout == "content\nhello\n"
    assert out.stderr == "oops\n"
    result = ExecuteResult.model_validate(cli.json("exec", "pwd", "--allow-execute"))
    assert (result.exit_code, result.stdout.strip()) == (0, WS)


def test_exec_timeout_exits_124(cli: Cli) -> None:
    started = time.monotonic()
    out = cli("exec", "sleep 30", "--timeout", "0.5", "--allow-execute", code=124)
    assert time.monotonic() - started < 10
    assert "timed out" in out.stderr


def test_exec_rejects_malformed_env(cli: Cli) -> None:
    out = cli("--allow-execute", "exec", "true", "--env", "NOVALUE", code=2)
    assert "NAME=VALUE" in out.stderr


def test_errors_are_one_red_line_or_a_json_document(cli: Cli) -> None:
    out = cli("read", "missing.txt", code=2)
    assert out.stdout == ""
    assert out.stderr == f"Error [NOT_FOUND]: {WS}/missing.txt does not exist\n"
    doc = cli.json("read", "/etc/passwd", code=2)
    assert doc["error"]["code"] == "ACCESS_DENIED"
    assert set(doc["error"]) == {"code", "message"}


def test_invalid_ids_and_unknown_provider_are_errors_not_tracebacks(cli: Cli) -> None:
    out = cli("--user", "../etc", "ls", code=2)
    assert "Error [INVALID_ARGUMENT]: user_id" in out.stderr
    out = cli("ls", "--provider", "nosuch", code=2)
    assert "unknown provider 'nosuch'" in out.stderr


def test_global_options_work_before_or_after_the_command(cli: Cli) -> None:
    cli("--thread", "t1", "write", "f.txt", "one\n")
    assert cli("read", "f.txt", "--thread", "t1", "--raw").stdout == "one\n"
    # Another thread (and another user with the same thread) sees nothing.
    cli("read", "f.txt", "--thread", "t2", code=2)
    cli("--user", "bob", "--thread", "t1", "read", "f.txt", code=2)


def test_user_and_thread_from_environment(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    cli("--user", "carol", "--thread", "x", "write", "f.txt", "c\n")
    monkeypatch.setenv("SANDKIT_USER", "carol")
    monkeypatch.setenv("SANDKIT_THREAD", "x")
    assert cli("read", "f.txt", "--raw").stdout == "c\n"


def test_release_and_destroy_keep_thread_data(cli: Cli) -> None:
    cli("--thread", "keep", "write", "f.txt", "kept\n")
    info = SandboxInfo.model_validate(cli.json("--thread", "keep", "destroy"))
    assert (info.user_id, info.thread_id, info.provider) == ("cli", "keep", "local")
    assert info.sandbox_id.startswith("sk-")
    assert "Released" in cli("release", "--thread", "keep").stdout
    assert cli("--thread", "keep", "read", "f.txt", "--raw").stdout == "kept\n"


def test_config_file_supplies_settings_and_is_not_left_in_env(tmp_path: Path) -> None:
    data = tmp_path / "from-config"
    config = tmp_path / "conf.yaml"
    config.write_text(f"data_root: {data}\nexecute_enabled: true\n")
    runner = CliRunner()
    result = runner.invoke(app, ["--config", str(config), "exec", "echo ok"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "ok\n"
    assert (data / "users" / "cli" / "threads" / "default" / "user-data" / "workspace").is_dir()
    assert "SANDKIT_CONFIG" not in os.environ


def test_bad_config_is_an_invalid_argument(tmp_path: Path) -> None:
    config = tmp_path / "conf.yaml"
    config.write_text("limits:\n  grep_max_results: 100000\n")
    result = CliRunner().invoke(app, ["--config", str(config), "ls"])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error [INVALID_ARGUMENT]: invalid configuration: limits")


def test_providers_lists_local_as_loading(cli: Cli) -> None:
    report = ProvidersReport.model_validate(cli.json("providers"))
    local = next(p for p in report.providers if p.name == "local")
    assert local.loads and local.default and local.target == "sandkit.local:LocalProvider"
    out = cli("providers")
    assert "local" in out.stdout and "ok" in out.stdout


def test_doctor_passes_here_and_names_a_bad_data_root(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The operator's own check: it names host paths, unlike sandbox results.
    result = CliRunner().invoke(app, ["--data-root", str(root), "doctor", "--json"])
    assert result.exit_code == 0, result.stdout
    report = DoctorReport.model_validate_json(result.stdout)
    assert report.ok, report
    names = {c.name: c for c in report.checks}
    assert names["provider local"].status == "ok"
    assert names["local execute"].detail.startswith("disabled")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SANDKIT_DATA_ROOT", str(blocker))
    result = CliRunner().invoke(app, ["doctor", "--json"])
    assert result.exit_code == 1, result.stdout
    bad = DoctorReport.model_validate_json(result.stdout)
    assert not bad.ok
    assert [c.status for c in bad.checks if c.name == "data root"] == ["fail"]


def test_demo_runs_the_tour_fast_and_cleans_up(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo"])
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    for step in ("Write", "List", "Find", "Search", "Read", "Edit"):
        assert step in result.stdout
    assert "Error [EXECUTE_DISABLED]" in result.stdout
    assert f"{WS}/calc/calc/ops.py" in result.stdout
    assert "return a * b" in result.stdout
    assert "/tmp" not in result.stdout  # temporary data root: not shown, removed


def test_demo_json_report_and_kept_data_root(root: Path) -> None:
    result = CliRunner().invoke(app, ["--data-root", str(root), "demo", "--json"])
    assert result.exit_code == 0, result.stderr
    report = DemoReport.model_validate_json(result.stdout)
    assert report.provider == "local"
    assert report.elapsed_ms < 2000
    codes = [s.error_code for s in report.steps if s.error_code]
    assert codes == ["ACCESS_DENIED", "READ_ONLY", "EXECUTE_DISABLED"]
    assert report.data_root == str(root)
    thread_dir = root / "users" / report.user_id / "threads" / report.thread_id
    ops = thread_dir / "user-data/workspace/calc/calc/ops.py"
    assert "return a * b" in ops.read_text()


def test_demo_with_execute_allowed_runs_the_code(root: Path) -> None:
    result = CliRunner().invoke(app, ["--data-root", str(root), "--allow-execute", "demo"])
    assert result.exit_code == 0, result.stderr
    assert "42" in result.stdout
    assert "EXECUTE_DISABLED" not in result.stdout


# -- rendering details --------------------------------------------------------


def test_numbered_lines_do_not_number_the_cut_marker() -> None:
    result = ReadFileResult(
        path="/f",
        content="abc\n[... line 1 cut ...]\n",
        start_line=1,
        end_line=1,
        total_lines=1,
        truncated=False,
    )
    assert render.numbered_lines(result) == ["     1\tabc", "      \t[... line 1 cut ...]"]


def test_overlapping_context_shows_each_line_once() -> None:
    matches = [
        GrepMatch(path="/f", line_number=2, text="b", before=["a"], after=["c"]),
        GrepMatch(path="/f", line_number=3, text="c", before=["b"], after=["d"]),
    ]
    result = GrepResult(
        path="/", pattern="x", output_mode="content", matches=matches, truncated=False
    )
    lines = [t.plain for t in render.grep_lines(result, None)]
    assert lines == ["/f-1- a", "/f:2: b", "/f:3: c", "/f-4- d"]


def test_highlighting_a_backtracking_pattern_is_bounded() -> None:
    text = "a" * 40 + "!" + " ok"
    result = GrepResult(
        path="/",
        pattern="x",
        output_mode="content",
        truncated=False,
        matches=[GrepMatch(path="/f", line_number=1, text=text)],
    )
    regex = render.highlighter("(a+)+$", literal=False, case_sensitive=True, multiline=False)
    started = time.monotonic()
    lines = list(render.grep_lines(result, regex))
    assert time.monotonic() - started < 5
    assert lines[0].plain == f"/f:1: {text}"


def test_uploads_put_ls_rm(cli: Cli, tmp_path: Path) -> None:
    UP = "/mnt/user-data/uploads"
    local = tmp_path / "report.csv"
    local.write_bytes(b"a,b\n1,2\n")
    assert f"Uploaded {UP}/report.csv (8 bytes)" in cli("uploads", "put", str(local)).stdout
    piped = cli("uploads", "put", "-", "in/notes.txt", input=b"hi\n")
    assert f"Uploaded {UP}/in/notes.txt (3 bytes)" in piped.stdout
    assert "Replaced" in cli("--user", "cli", "uploads", "put", str(local)).stdout
    listed = cli("uploads", "ls")
    assert listed.stdout.splitlines() == [f"{UP}/in/notes.txt", f"{UP}/report.csv"]
    assert "2 files, 11 bytes" in listed.stderr
    assert cli.json("uploads", "ls")["files"][1] == {"path": f"{UP}/report.csv", "size": 8}
    assert cli("read", f"{UP}/in/notes.txt").stdout == "     1\thi\n"  # the box sees it
    refused = cli("write", f"{UP}/report.csv", "changed", code=2)
    assert "Error [READ_ONLY]" in refused.stderr
    assert f"Removed {UP}/report.csv (8 bytes)" in cli("uploads", "rm", "report.csv").stdout
    assert "Error [NOT_FOUND]" in cli("uploads", "rm", "report.csv", code=2).stderr
    outside = cli("uploads", "put", str(local), "../workspace/x.csv", code=2)
    assert f"Error [ACCESS_DENIED]: /mnt/user-data/workspace/x.csv is not in {UP}" in outside.stderr
    assert "Error [INVALID_ARGUMENT]" in cli("uploads", "put", "-", input=b"x", code=2).stderr
    missing = cli("uploads", "put", str(tmp_path / "nope"), code=2)
    assert "Error [NOT_FOUND]" in missing.stderr
    assert cli("--user", "other", "uploads", "ls").stdout == ""  # keys never share


def test_uploads_put_refuses_over_the_transfer_limit_without_reading_it_all(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDKIT_LIMITS__TRANSFER_MAX_BYTES", "16")
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * 17)
    out = cli("uploads", "put", str(big), code=2)
    assert "Error [TOO_LARGE]" in out.stderr and "transfer_max_bytes" in out.stderr
    assert cli.json("uploads", "ls")["files"] == []
