"""execute: exit codes, streams, timeout, output caps, cwd, env, redaction."""

from __future__ import annotations

import time

import pytest

from sandkit import ErrorCode
from sandkit.runtime.limits import Limits
from sandkit.sandbox import Sandbox

from .suite import (
    OUTPUTS,
    UPLOADS,
    WORKSPACE,
    ConformanceBase,
    SeedUpload,
    make_dirs,
    q,
    raises_code,
    sh,
)

# Slack for the elision marker in a capped stream.
MARKER_SLACK = 200


class ExecuteTests(ConformanceBase):
    def test_stdout_and_success(self, sb: Sandbox) -> None:
        result = sb.execute("echo hello")
        assert result.exit_code == 0
        assert result.stdout == "hello\n"
        assert result.stderr == ""
        assert result.timed_out is False
        assert result.truncated is False
        assert result.duration_ms >= 0

    @pytest.mark.parametrize(
        "command, code",
        [
            ("exit 3", 3),
            ("false", 1),
            ("exit 255", 255),
            ("true", 0),
            ("kill -9 $$", 137),
            ("kill -TERM $$", 143),
            ("sh -c 'exit 7'", 7),
        ],
    )
    def test_exit_codes(self, sb: Sandbox, command: str, code: int) -> None:
        result = sb.execute(command)
        assert result.exit_code == code
        assert result.timed_out is False

    def test_missing_command_is_a_result_not_an_error(self, sb: Sandbox) -> None:
        result = sb.execute("no-such-command-sandkit")
        assert result.exit_code == 127
        assert "no-such-command-sandkit" in result.stderr

    def test_stderr_is_separate(self, sb: Sandbox) -> None:
        result = sb.execute("echo out; echo err >&2; exit 2")
        assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 2)

    def test_stdin_is_empty(self, sb: Sandbox) -> None:
        started = time.monotonic()
        result = sb.execute("cat; echo done", timeout=20)
        assert result.stdout == "done\n"
        assert time.monotonic() - started < 10

    def test_unicode_and_invalid_utf8_output(self, sb: Sandbox) -> None:
        assert sb.execute("echo '日本語 🌍'").stdout == "日本語 🌍\n"
        result = sb.execute(r"printf 'ok\377\376end'")
        assert result.exit_code == 0
        assert result.stdout.startswith("ok") and result.stdout.endswith("end")
        assert "\ufffd" in result.stdout

    def test_timeout(self, sb: Sandbox) -> None:
        started = time.monotonic()
        result = sb.execute("echo before; sleep 30; echo after", timeout=1)
        elapsed = time.monotonic() - started
        assert result.timed_out is True
        assert result.exit_code is None
        assert result.stdout == "before\n", "output produced before the timeout is kept"
        assert elapsed < 10
        assert 900 <= result.duration_ms < 10_000

    def test_timeout_kills_the_whole_process_group(self, sb: Sandbox, ws: str) -> None:
        make_dirs(sb, ws)
        result = sb.execute(
            f"(sleep 2; touch {q(ws)}/late) & (trap '' TERM; sleep 3; touch {q(ws)}/stubborn) & "
            "sleep 30",
            timeout=1,
        )
        assert result.timed_out is True
        time.sleep(3.5)
        names = {e.name for e in sb.list_dir(ws).entries}
        assert "late" not in names and "stubborn" not in names

    def test_background_children_do_not_hold_execute(self, sb: Sandbox) -> None:
        started = time.monotonic()
        result = sb.execute("sleep 8 & echo started", timeout=60)
        assert result.exit_code == 0
        assert result.stdout == "started\n"
        assert time.monotonic() - started < 6

    def test_output_cap_keeps_head_and_tail(self, sb: Sandbox, limits: Limits) -> None:
        total = limits.exec_output_bytes * 3
        result = sb.execute(
            f"echo HEAD; head -c {total} /dev/zero | tr '\\0' x; echo; echo TAIL; "
            f"echo EHEAD >&2; head -c {total} /dev/zero | tr '\\0' y >&2; echo ETAIL >&2"
        )
        assert result.exit_code == 0
        assert result.truncated is True
        assert result.stdout.startswith("HEAD\nxxx")
        assert result.stdout.endswith("xxx\nTAIL\n")
        assert result.stderr.startswith("EHEAD\nyyy")
        assert result.stderr.endswith("yyyETAIL\n")
        for stream in (result.stdout, result.stderr):
            assert len(stream.encode()) <= limits.exec_output_bytes + MARKER_SLACK
            assert len(stream.encode()) >= limits.exec_output_bytes // 2

    def test_output_exactly_at_the_cap_is_not_truncated(self, sb: Sandbox, limits: Limits) -> None:
        cap = limits.exec_output_bytes
        exact = sb.execute(f"head -c {cap} /dev/zero | tr '\\0' x")
        assert exact.truncated is False
        assert exact.stdout == "x" * cap
        over = sb.execute(f"head -c {cap + 1} /dev/zero | tr '\\0' x")
        assert over.truncated is True

    def test_cwd_defaults_to_the_workspace(self, sb: Sandbox) -> None:
        assert sb.execute("pwd").stdout == WORKSPACE + "\n"

    def test_cwd_argument(self, sb: Sandbox, ws: str) -> None:
        make_dirs(sb, f"{ws}/sub")
        assert sb.execute("pwd", cwd=f"{ws}/sub").stdout == f"{ws}/sub\n"
        name = ws.rsplit("/", 1)[1]
        assert sb.execute("pwd", cwd=f"{name}/sub").stdout == f"{ws}/sub\n"
        assert sb.execute("pwd", cwd=OUTPUTS).stdout == OUTPUTS + "\n"
        # A read-only mount is a fine place to run a command from.
        assert sb.execute("pwd", cwd=UPLOADS).stdout == UPLOADS + "\n"

    def test_relative_files_are_found_from_the_cwd(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/sub/data.txt", "payload\n")
        assert sb.execute("cat data.txt", cwd=f"{ws}/sub").stdout == "payload\n"

    def test_cwd_errors(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/f.txt", "x")
        with raises_code(ErrorCode.NOT_FOUND):
            sb.execute("pwd", cwd=f"{ws}/missing")
        with raises_code(ErrorCode.NOT_A_DIRECTORY):
            sb.execute("pwd", cwd=f"{ws}/f.txt")
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.execute("pwd", cwd="/etc")
        with raises_code(ErrorCode.ACCESS_DENIED):
            sb.execute("pwd", cwd="../../..")

    def test_env(self, sb: Sandbox) -> None:
        result = sb.execute('printf "%s|%s" "$FOO" "$EMPTY"', env={"FOO": "bar baz", "EMPTY": ""})
        assert result.stdout == "bar baz|"

    def test_env_values_may_name_virtual_paths(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/in.txt", "via env\n")
        result = sb.execute('cat "$INPUT"', env={"INPUT": f"{ws}/in.txt"})
        assert result.stdout == "via env\n"

    def test_home_is_the_workspace(self, sb: Sandbox) -> None:
        assert sb.execute('printf %s "$HOME"').stdout == WORKSPACE

    @pytest.mark.parametrize(
        "env",
        [{"": "x"}, {"A=B": "x"}, {"A": 1}, {"A\x00": "x"}, {"A": "x\x00y"}, ["A"]],
        ids=["empty-name", "equals-in-name", "int-value", "nul-name", "nul-value", "list"],
    )
    def test_bad_env(self, sb: Sandbox, env: object) -> None:
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.execute("true", env=env)  # type: ignore[arg-type]

    @pytest.mark.parametrize("command", ["", "   ", "\n\t", "echo a\x00b", None, 42], ids=repr)
    def test_bad_command(self, sb: Sandbox, command: object) -> None:
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.execute(command)  # type: ignore[arg-type]

    def test_command_over_the_argv_limit(self, sb: Sandbox) -> None:
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.execute("echo " + "x" * (256 * 1024))

    @pytest.mark.parametrize("timeout", [0, -1, float("nan"), "5", 10**9], ids=repr)
    def test_bad_timeout(self, sb: Sandbox, timeout: object) -> None:
        with raises_code(ErrorCode.INVALID_ARGUMENT):
            sb.execute("true", timeout=timeout)  # type: ignore[arg-type]

    def test_virtual_paths_work_in_commands(self, sb: Sandbox, ws: str) -> None:
        sb.write_file(f"{ws}/in.txt", "from the api\n")
        result = sb.execute(f"cat {q(ws)}/in.txt > {q(ws)}/out.txt && ls {q(ws)}")
        assert result.stdout.split() == ["in.txt", "out.txt"]
        assert sb.read_file(f"{ws}/out.txt").content == "from the api\n"

    def test_files_written_by_commands_are_seen_by_the_api(self, sb: Sandbox, ws: str) -> None:
        make_dirs(sb, ws)
        sh(sb, "printf 'x\\ny\\n' > made.txt && mkdir -p sub && : > sub/empty", cwd=ws)
        assert sb.read_file(f"{ws}/made.txt").total_lines == 2
        assert [e.path for e in sb.list_dir(ws).entries] == [
            f"{ws}/made.txt",
            f"{ws}/sub",
            f"{ws}/sub/empty",
        ]

    def test_uploads_from_a_command(self, sb: Sandbox, seed_upload: SeedUpload, up: str) -> None:
        path = seed_upload(f"{up}/in.csv", b"a,b\n1,2\n")
        assert sb.execute(f"wc -l < {q(path)}").stdout.strip() == "2"


class RedactionTests(ConformanceBase):
    @pytest.fixture
    def secret(self, secret_values: list[str]) -> str:
        if not secret_values:
            pytest.skip("no secret values configured for this provider")
        return secret_values[0]

    def test_secret_in_stdout_and_stderr_is_redacted(self, sb: Sandbox, secret: str) -> None:
        result = sb.execute(f"echo token={secret}; echo err {secret} >&2", env={"S": secret})
        assert secret not in result.stdout and secret not in result.stderr
        assert "[REDACTED]" in result.stdout and "[REDACTED]" in result.stderr
        assert result.stdout.startswith("token=")

    def test_secret_from_the_environment_is_redacted(self, sb: Sandbox, secret: str) -> None:
        result = sb.execute('echo "$S$S"', env={"S": secret})
        assert secret not in result.stdout
        assert result.stdout.count("[REDACTED]") == 2

    def test_secret_across_the_output_cut_never_leaks(
        self, sb: Sandbox, secret: str, limits: Limits
    ) -> None:
        half = limits.exec_output_bytes // 2
        # Secrets repeated densely around both edges of the elided middle.
        result = sb.execute(
            f"i=0; while [ $i -lt {4 * half // (len(secret) + 1) + 10} ]; do "
            f'printf "%s," "$S"; i=$((i+1)); done',
            env={"S": secret},
        )
        assert result.truncated is True
        assert "[REDACTED]" in result.stdout
        # Not even a piece of a secret cut in half at either edge of the elision.
        assert secret[:-1] not in result.stdout
        assert secret[1:] not in result.stdout
