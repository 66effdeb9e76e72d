"""runtime/process.py (execute) and runtime/capture.py: real shells, real process groups."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandkit import SandboxKey, Settings
from sandkit.local import LocalProvider, cgroups, hostlimits
from sandkit.models import ExecuteResult
from sandkit.runtime import process
from sandkit.runtime.capture import ELIDED_MARKER, REDACTED, HeadTail, Redactor
from sandkit.runtime.context import Context
from sandkit.runtime.errors import ErrorCode, SandboxError
from sandkit.runtime.limits import Limits
from sandkit.runtime.pathmap import OUTPUTS, UPLOADS, WORKSPACE, Mount, PathMapping

SECRET = "sk-live-0123456789abcdef"


@dataclasses.dataclass
class Box:
    root: Path
    ws: Path
    up: Path
    out: Path
    ctx: Context

    def with_limits(self, **changes: Any) -> Context:
        return self.ctx.replace(limits=self.ctx.limits.replace(**changes))


@pytest.fixture()
def box(tmp_path: Path) -> Box:
    ws, up, out = (tmp_path / "data" / n for n in ("workspace", "uploads", "outputs"))
    for d in (ws, up, out):
        d.mkdir(parents=True)
    mounts = [Mount(WORKSPACE, str(ws)), Mount(UPLOADS, str(up), True), Mount(OUTPUTS, str(out))]
    mapping = PathMapping(mounts)
    ctx = Context(
        mapping=mapping,
        limits=Limits(exec_default_timeout_s=20.0, exec_max_timeout_s=60.0),
        execute_enabled=True,
        secrets=(SECRET,),
    )
    return Box(tmp_path, ws, up, out, ctx)


def run(ctx: Context, command: str, **kwargs: Any) -> dict[str, Any]:
    result: dict[str, Any] = process.execute(ctx, command, **kwargs)
    ExecuteResult.model_validate(result)  # exactly the model's fields
    return result


def fails(code: ErrorCode, ctx: Context, command: Any, **kwargs: Any) -> SandboxError:
    with pytest.raises(SandboxError) as info:
        process.execute(ctx, command, **kwargs)
    assert info.value.code == code, info.value
    return info.value


def is_dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # an unreaped zombie is dead too
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def wait_dead(pid: int, seconds: float = 3.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if is_dead(pid):
            return True
        time.sleep(0.02)
    return is_dead(pid)


# -- basics -------------------------------------------------------------------------


def test_disabled_by_context(box: Box) -> None:
    ctx = box.ctx.replace(execute_enabled=False)
    fails(ErrorCode.EXECUTE_DISABLED, ctx, "touch pwned")
    assert not (box.ws / "pwned").exists()


def test_exit_code_and_separate_streams(box: Box) -> None:
    r = run(box.ctx, "echo out; echo err >&2; exit 3")
    assert (r["exit_code"], r["stdout"], r["stderr"]) == (3, "out\n", "err\n")
    assert r["timed_out"] is False and r["truncated"] is False
    assert isinstance(r["duration_ms"], float) and r["duration_ms"] > 0


def test_signal_death_reads_as_128_plus_signal(box: Box) -> None:
    assert run(box.ctx, "kill -KILL $$")["exit_code"] == 137
    assert run(box.ctx, "kill -TERM $$")["exit_code"] == 143


def test_signals_the_host_ignores_reach_commands_at_their_default(box: Box) -> None:
    # A host started with `nohup ... &` ignores SIGINT/SIGQUIT; that survives exec, and a
    # shell cannot undo it, so an interrupt would do nothing to the command.
    import signal

    before = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGQUIT)}
    try:
        assert run(box.ctx, "kill -INT $$; echo survived")["exit_code"] == 130
        quit_itself = "import os, signal; os.kill(os.getpid(), signal.SIGQUIT)"  # bash ignores it
        assert (
            run(box.ctx, f"exec {shlex.quote(sys.executable)} -c '{quit_itself}'")["exit_code"]
            == 131
        )
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


def test_stdin_is_empty(box: Box) -> None:
    r = run(box.ctx, "cat; echo done", timeout=5)
    assert r["stdout"] == "done\n" and r["timed_out"] is False


@pytest.mark.skipif(not os.access("/bin/bash", os.X_OK), reason="no bash")
def test_runs_under_bash_when_present(box: Box) -> None:
    r = run(box.ctx, 'echo "${BASH_VERSION:+bash}" $SHELL; [[ 1 == 1 ]] && echo ok')
    assert r["stdout"] == "bash /bin/bash\nok\n"


def test_invalid_utf8_output_is_replaced(box: Box) -> None:
    assert run(box.ctx, r"printf 'a\377b'")["stdout"] == "a\ufffdb"


@pytest.mark.parametrize("command", ["", "   ", None, 12, ["ls"], "echo a\x00b"])
def test_bad_commands(box: Box, command: Any) -> None:
    fails(ErrorCode.INVALID_ARGUMENT, box.ctx, command)


def test_overlong_command(box: Box) -> None:
    fails(ErrorCode.INVALID_ARGUMENT, box.ctx, "true " + "x" * process.MAX_COMMAND_BYTES)


# -- paths: cwd, masking, unmasking ----------------------------------------------------


def test_cwd_defaults_to_the_workspace_and_prints_virtual(box: Box) -> None:
    r = run(box.ctx, 'pwd; /bin/pwd -P; echo $HOME; ls -d "$PWD"')
    assert r["stdout"] == (WORKSPACE + "\n") * 4
    assert str(box.root) not in r["stdout"]


def test_virtual_paths_in_the_command_reach_the_files(box: Box) -> None:
    (box.up / "in.txt").write_text("uploaded\n")
    r = run(box.ctx, f"cp {UPLOADS}/in.txt {OUTPUTS}/copy.txt && cat {OUTPUTS}/copy.txt")
    assert r["exit_code"] == 0 and r["stdout"] == "uploaded\n"
    assert (box.out / "copy.txt").read_text() == "uploaded\n"


def test_real_root_never_appears_in_output_or_errors(box: Box) -> None:
    r = run(box.ctx, f"realpath .; ls {OUTPUTS}/nope")
    assert r["stdout"] == WORKSPACE + "\n"
    assert OUTPUTS + "/nope" in r["stderr"]
    assert str(box.root) not in r["stdout"] + r["stderr"]


def test_cwd_argument(box: Box) -> None:
    (box.ws / "sub").mkdir()
    (box.ws / "f.txt").write_text("")
    assert run(box.ctx, "pwd", cwd="sub")["stdout"] == WORKSPACE + "/sub\n"
    assert run(box.ctx, "pwd", cwd=UPLOADS)["stdout"] == UPLOADS + "\n"  # read-only is fine
    fails(ErrorCode.NOT_A_DIRECTORY, box.ctx, "pwd", cwd="f.txt")
    err = fails(ErrorCode.NOT_FOUND, box.ctx, "pwd", cwd="nope")
    assert str(box.root) not in err.message
    fails(ErrorCode.ACCESS_DENIED, box.ctx, "pwd", cwd="/tmp")
    fails(ErrorCode.ACCESS_DENIED, box.ctx, "pwd", cwd="../..")
    fails(ErrorCode.INVALID_ARGUMENT, box.ctx, "pwd", cwd=3)


# -- environment -------------------------------------------------------------------------


def test_base_environment(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDKIT_TEST_PARENT_ONLY", "leaky")
    monkeypatch.setenv("TZ", "UTC")
    r = run(box.ctx, "env | sort")
    env = dict(line.split("=", 1) for line in r["stdout"].splitlines() if "=" in line)
    assert env["HOME"] == WORKSPACE and env["LANG"] == "C.UTF-8" and env["TERM"] == "dumb"
    assert env["PATH"] == os.environ["PATH"] and env["TZ"] == "UTC"
    assert "SANDKIT_TEST_PARENT_ONLY" not in env and "leaky" not in r["stdout"]


def test_scrubbed_names_and_secret_values_are_not_inherited(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "Europe/Paris")
    monkeypatch.setenv("USER", "user-" + SECRET)
    ctx = box.ctx.replace(scrubbed_env=("TZ",))
    env = run(ctx, "env")["stdout"]
    assert "TZ=" not in env and "USER=" not in env


def test_caller_env_is_merged_and_may_name_scrubbed_variables(box: Box) -> None:
    ctx = box.ctx.replace(scrubbed_env=("API_TOKEN",))
    r = run(
        ctx,
        'echo "$GREETING|$API_TOKEN|$LANG|$OUT"; ls "$OUT"',
        env={"GREETING": "hi there", "API_TOKEN": "t0k", "LANG": "C", "OUT": OUTPUTS},
    )
    assert r["stdout"] == f"hi there|t0k|C|{OUTPUTS}\n"  # $OUT reached the real dir
    assert r["exit_code"] == 0


@pytest.mark.parametrize(
    "env", [["A=1"], {"A": 1}, {1: "a"}, {"": "x"}, {"A=B": "x"}, {"A": "x\x00y"}, "A=1"]
)
def test_bad_env(box: Box, env: Any) -> None:
    fails(ErrorCode.INVALID_ARGUMENT, box.ctx, "true", env=env)


# -- timeouts and process groups -------------------------------------------------------------


def test_timeout_reports_timed_out_with_output_so_far(box: Box) -> None:
    started = time.monotonic()
    r = run(box.ctx, "echo started; sleep 30", timeout=0.5)
    assert r["timed_out"] is True and r["exit_code"] is None
    assert r["stdout"] == "started\n"
    assert time.monotonic() - started < 5
    assert 400 < r["duration_ms"] < 5000


def test_default_timeout_comes_from_limits(box: Box) -> None:
    r = run(box.with_limits(exec_default_timeout_s=0.3), "sleep 30")
    assert r["timed_out"] is True


def test_timeout_kills_background_children_of_the_group(box: Box) -> None:
    r = run(box.ctx, "sleep 100 & echo $! > child.pid; sleep 100 & wait", timeout=0.5)
    assert r["timed_out"] is True
    assert wait_dead(int((box.ws / "child.pid").read_text()))


def test_timeout_kills_a_command_that_ignores_sigterm(box: Box) -> None:
    started = time.monotonic()
    r = run(
        box.ctx, "trap '' TERM; echo $$ > sh.pid; sleep 100 & echo $! > c.pid; wait", timeout=0.5
    )
    assert r["timed_out"] is True
    assert time.monotonic() - started < 0.5 + process.TERM_GRACE_S + 3
    assert wait_dead(int((box.ws / "c.pid").read_text()))
    assert wait_dead(int((box.ws / "sh.pid").read_text()))


def test_background_children_end_with_the_shell(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    # A grace far longer than the call may take even on a loaded machine: a call that
    # waited it out would show, however slow the rest was.
    monkeypatch.setattr(process, "TERM_GRACE_S", 60.0)
    started = time.monotonic()
    r = run(box.ctx, "sleep 30 & echo $! > bg.pid; echo done", timeout=20)
    assert (r["exit_code"], r["stdout"], r["timed_out"]) == (0, "done\n", False)
    assert time.monotonic() - started < 30  # no grace needed: sleep dies of SIGTERM
    assert wait_dead(int((box.ws / "bg.pid").read_text()))


def test_redirected_and_nohup_children_end_with_the_shell_too(box: Box) -> None:
    r = run(box.ctx, "nohup sleep 30 >/dev/null 2>&1 </dev/null & echo $! > bg.pid; disown")
    assert r["exit_code"] == 0
    assert wait_dead(int((box.ws / "bg.pid").read_text()))


def test_background_child_ignoring_sigterm_is_killed_after_the_grace(box: Box) -> None:
    started = time.monotonic()
    r = run(
        box.ctx,
        "(trap '' TERM; touch ready; exec sleep 30) & echo $! > bg.pid; "
        "until [ -e ready ]; do sleep 0.01; done; echo done",  # the trap is set
    )
    assert (r["exit_code"], r["stdout"]) == (0, "done\n")
    assert process.TERM_GRACE_S <= time.monotonic() - started < process.TERM_GRACE_S + 2
    assert wait_dead(int((box.ws / "bg.pid").read_text()))


def test_output_of_background_children_before_the_shell_exits_is_kept(box: Box) -> None:
    r = run(box.ctx, "(echo from-child; sleep 30) & sleep 0.2; echo from-shell")
    assert sorted(r["stdout"].splitlines()) == ["from-child", "from-shell"]


@pytest.mark.skipif(shutil.which("setsid") is None, reason="no setsid")
def test_a_process_in_its_own_session_outlives_the_call(box: Box) -> None:
    """The documented way to keep something running: it left before the shell exited."""
    r = run(box.ctx, "setsid -w sh -c 'sleep 30 >/dev/null 2>&1 & echo $!'")
    pid = int(r["stdout"])
    try:
        assert r["exit_code"] == 0 and not is_dead(pid)
    finally:
        os.kill(pid, 9)


@pytest.mark.skipif(shutil.which("setsid") is None, reason="no setsid")
def test_child_that_escapes_the_group_and_holds_the_pipes_cannot_hang_a_timeout(box: Box) -> None:
    started = time.monotonic()
    r = run(box.ctx, "setsid sleep 30 & echo $! > esc.pid; sleep 30", timeout=0.5)
    assert r["timed_out"] is True
    assert time.monotonic() - started < 0.5 + process.TERM_GRACE_S + 2
    os.kill(int((box.ws / "esc.pid").read_text()), 9)  # it left our group: not ours to kill


def test_shell_that_closes_its_output_still_times_out(box: Box) -> None:
    r = run(box.ctx, "exec >&- 2>&-; sleep 30", timeout=0.5)
    assert r["timed_out"] is True and r["exit_code"] is None


@pytest.mark.parametrize("timeout", [0, -1, 61, "5", True, float("nan"), [1]])
def test_bad_timeouts(box: Box, timeout: Any) -> None:
    fails(ErrorCode.INVALID_ARGUMENT, box.ctx, "true", timeout=timeout)


def test_fractional_and_integer_timeouts(box: Box) -> None:
    assert run(box.ctx, "true", timeout=1)["exit_code"] == 0
    assert run(box.ctx, "true", timeout=60)["exit_code"] == 0


# -- output caps and redaction ----------------------------------------------------------------


def test_output_keeps_head_and_tail(box: Box) -> None:
    ctx = box.with_limits(exec_output_bytes=200)
    r = run(ctx, "seq 1 10000")
    out = r["stdout"]
    assert r["truncated"] is True
    total = sum(len(f"{i}\n") for i in range(1, 10001))
    assert out.startswith("1\n2\n3\n") and out.endswith("9999\n10000\n")
    assert ELIDED_MARKER % (total - 200) in out
    head, tail = out.split(ELIDED_MARKER % (total - 200))
    assert len(head) == 100 and len(tail) == 100


def test_output_exactly_at_the_cap_is_not_truncated(box: Box) -> None:
    ctx = box.with_limits(exec_output_bytes=100)
    r = run(ctx, "head -c 100 /dev/zero | tr '\\0' a; head -c 101 /dev/zero | tr '\\0' b >&2")
    assert r["stdout"] == "a" * 100
    assert r["stderr"].startswith("b" * 50) and r["stderr"].endswith("b" * 50)
    assert r["truncated"] is True


def test_huge_output_is_bounded_and_fast(box: Box) -> None:
    started = time.monotonic()
    r = run(box.ctx, "head -c 200000000 /dev/zero | tr '\\0' x; echo END")
    assert time.monotonic() - started < 20
    assert r["truncated"] is True and r["stdout"].endswith("xEND\n")
    assert len(r["stdout"]) < box.ctx.limits.exec_output_bytes + 100


def test_secrets_are_redacted_in_both_streams(box: Box) -> None:
    r = run(box.ctx, f"echo key={SECRET}; echo $TOKEN >&2", env={"TOKEN": SECRET})
    assert r["stdout"] == f"key={REDACTED}\n" and r["stderr"] == REDACTED + "\n"


@pytest.mark.parametrize("offset", range(-30, 5, 3))
def test_secret_straddling_the_head_cut_never_leaks_partly(box: Box, offset: int) -> None:
    ctx = box.with_limits(exec_output_bytes=2000)
    pad = 1000 + offset  # the secret starts around the end of the kept head
    dots = "head -c 5000 /dev/zero | tr '\\0' ."
    r = run(ctx, f"printf '%*s' {pad} ''; printf {SECRET}; {dots}; echo")
    assert r["truncated"] is True
    assert "sk-" not in r["stdout"] and "cdef" not in r["stdout"]


@pytest.mark.parametrize("offset", range(-30, 5, 3))
def test_secret_straddling_the_tail_cut_never_leaks_partly(box: Box, offset: int) -> None:
    ctx = box.with_limits(exec_output_bytes=2000)
    after = 1000 + offset  # the secret ends around the start of the kept tail
    r = run(ctx, f"head -c 5000 /dev/zero | tr '\\0' .; printf {SECRET}; printf '%*s' {after} ''")
    assert "sk-" not in r["stdout"] and "cdef" not in r["stdout"]


def test_real_root_straddling_the_cut_never_leaks_partly(box: Box) -> None:
    ctx = box.with_limits(exec_output_bytes=200)
    for pad in range(70, 101, 3):
        r = run(ctx, f"printf '%*s' {pad} ''; pwd -P; seq 1 400")
        assert str(box.root)[:8] not in r["stdout"], pad


# -- capture units ----------------------------------------------------------------------------


def test_redactor_prefers_the_longest_secret() -> None:
    redact = Redactor(["abc", "abcdef", ""])
    assert redact("xx abcdef abc") == f"xx {REDACTED} {REDACTED}"
    assert Redactor([])("abc") == "abc"


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(["a", "b\n", "é", "@@QQ##", "ab" * 7]), max_size=60),
    head=st.integers(0, 40),
    tail=st.integers(0, 40),
    chunk=st.integers(1, 17),
)
def test_capture_never_shows_part_of_a_secret(
    pieces: list[str], head: int, tail: int, chunk: int
) -> None:
    redact = Redactor(["@@QQ##"])
    stream = "".join(pieces).encode()
    buf = HeadTail(head, tail, margin=16)
    for i in range(0, len(stream), chunk):
        buf.feed(stream[i : i + chunk])
    shown = buf.render(redact)
    assert not set("@Q#") & set(shown)
    full = redact(stream.decode())
    if len(stream) <= head + tail:
        assert shown == full and not buf.truncated
    else:
        assert buf.truncated
        first, last = shown.split(ELIDED_MARKER % (len(stream) - head - tail))
        assert full.startswith(first) and full.endswith(last)
        # Nothing from the elided middle: each end is a transform of its own bytes.
        assert redact(stream[:head].decode("utf-8", "ignore")).startswith(first)
        assert redact(stream[len(stream) - tail :].decode("utf-8", "ignore")).endswith(last)


def test_missing_bash_falls_back_to_sh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process, "SHELLS", ("/nonexistent/bash", "/bin/sh"))
    assert process.pick_shell() == "/bin/sh"
    monkeypatch.setattr(process, "SHELLS", ("/nonexistent/bash",))
    with pytest.raises(SandboxError) as info:
        process.pick_shell()
    assert info.value.code == ErrorCode.UNAVAILABLE


def test_no_zombie_or_leftover_from_a_finished_command(box: Box) -> None:
    r = run(box.ctx, "echo $$")
    assert wait_dead(int(r["stdout"]))
    assert shutil.which("sh")


# -- host limits: the local provider's cgroup, or rlimits -----------------------------------

FORK_COUNT = (
    "import os, time\n"
    "n = 0\n"
    "try:\n"
    "    while n < 200:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(20)\n"
    "            os._exit(0)\n"
    "        n += 1\n"
    "except OSError:\n"
    "    pass\n"
    "print(n)\n"
)
HOG = "b = b'x' * (256 << 20); print('survived')"
PY = shlex.quote(sys.executable)


def require_cgroups() -> None:
    """Skip on a machine where we may not make cgroups; under CI=true that is a failure."""
    probe = hostlimits.create(64, 64 * 1024 * 1024)
    probe.remove()
    if probe.mechanism == {"processes": "cgroup", "memory": "cgroup"}:
        return
    reason = f"no writable cgroup with pids and memory here ({probe.mechanism})"
    if os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}:
        pytest.fail(f"{reason} (CI=true: the local bounds must be tested)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture()
def bounded(box: Box) -> Iterator[tuple[Context, hostlimits.ProcessBounds]]:
    require_cgroups()
    bounds = hostlimits.create(32, 64 * 1024 * 1024)
    try:
        yield box.ctx.replace(bounds=bounds), bounds
    finally:
        bounds.remove()


def test_commands_run_in_the_sandboxs_cgroups(
    bounded: tuple[Context, hostlimits.ProcessBounds],
) -> None:
    ctx, bounds = bounded
    joined = run(ctx, "cat /proc/self/cgroup")["stdout"]
    for path in bounds.cgroups:
        assert os.path.basename(path) in joined


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_a_cgroup_that_cannot_be_joined_is_an_error_not_an_unbounded_command(
    bounded: tuple[Context, hostlimits.ProcessBounds], sigint: str
) -> None:
    """Also when the provider was started with SIGINT ignored (`cmd &` from a script), so
    that commands get a step that restores it: the launcher's failure is still an error."""
    ctx, bounds = bounded
    bounds.remove()  # gone underneath the sandbox (e.g. removed by an operator)
    before = signal.signal(signal.SIGINT, signal.SIG_IGN if sigint == "ignored" else signal.SIG_DFL)
    try:
        with pytest.raises(SandboxError) as info:
            run(ctx, "echo ran > ran.txt")
    finally:
        signal.signal(signal.SIGINT, before)
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert not (Path(ctx.mapping.resolve(WORKSPACE).real) / "ran.txt").exists()


def test_cgroup_caps_the_processes_of_a_command(
    bounded: tuple[Context, hostlimits.ProcessBounds],
) -> None:
    ctx, _ = bounded
    r = run(ctx, f"{PY} -c {shlex.quote(FORK_COUNT)}")
    assert 20 < int(r["stdout"]) < 32  # the shell and python take two of the 32


def test_cgroup_memory_limit_kills_the_hog_not_the_caller(
    bounded: tuple[Context, hostlimits.ProcessBounds],
) -> None:
    ctx, _ = bounded
    r = run(ctx, f"{PY} -c {shlex.quote(HOG)}")
    assert r["exit_code"] == 137 and "survived" not in r["stdout"]
    assert run(ctx, "echo ok")["stdout"] == "ok\n"


def test_remove_kills_what_left_the_group_and_deletes_the_cgroups(
    bounded: tuple[Context, hostlimits.ProcessBounds],
) -> None:
    ctx, bounds = bounded
    pid = int(run(ctx, "setsid -w sh -c 'sleep 60 >/dev/null 2>&1 & echo $!'")["stdout"])
    assert not is_dead(pid)  # it outlived the call ...
    bounds.remove()
    assert wait_dead(pid)  # ... not the sandbox
    assert not any(os.path.exists(path) for path in bounds.cgroups)


def test_without_cgroups_rlimits_bound_each_command(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unavailable(proc_root: str) -> dict[str, str]:
        raise OSError("read-only file system")

    monkeypatch.setattr(cgroups, "parents", unavailable)
    bounds = hostlimits.create(32, 64 * 1024 * 1024)
    assert bounds.cgroups == ()
    expected = "none" if os.geteuid() == 0 else "rlimit"  # root ignores RLIMIT_NPROC
    assert bounds.mechanism == {"processes": expected, "memory": "rlimit"}
    ctx = box.ctx.replace(bounds=bounds)
    assert run(ctx, "ulimit -d")["stdout"] == f"{64 * 1024}\n"  # KiB, hard limit too
    assert run(ctx, "ulimit -H -d")["stdout"] == f"{64 * 1024}\n"
    r = run(ctx, f"{PY} -c {shlex.quote(HOG)}")
    assert r["exit_code"] == 1 and "MemoryError" in r["stderr"]


def _fake_proc(tmp_path: Path, cgroup: str, mounts: list[str]) -> str:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    (proc / "self" / "mountinfo").write_text("".join(line + "\n" for line in mounts))
    return str(proc)


def test_cgroup_v1_discovery_uses_our_own_cgroup_under_each_hierarchy(tmp_path: Path) -> None:
    cg = tmp_path / "cg"
    (cg / "pids").mkdir(parents=True)
    (cg / "memory" / "api" / "a b").mkdir(parents=True)
    proc = _fake_proc(
        tmp_path,
        "8:pids:/\n4:memory:/api/a b\n1:cpu,cpuacct:/\n0::/\n",
        [
            f"31 23 0:28 / {tmp_path} rw - tmpfs tmpfs rw",
            f"39 31 0:36 / {cg}/pids rw,relatime - cgroup cgroup rw,pids",
            f"35 31 0:32 / {cg}/memory rw,relatime - cgroup cgroup rw,memory",
            f"41 31 0:38 / {cg}/unified rw,relatime - cgroup2 cgroup2 rw",
        ],
    )
    bounds = hostlimits.create(48, 1 << 30, proc_root=proc)
    pids, memory = sorted(bounds.cgroups, key=lambda p: "memory" in p)
    assert Path(pids).parent == cg / "pids" and Path(memory).parent == cg / "memory/api/a b"
    assert os.path.basename(pids).startswith(f"sandkit-{os.getpid()}-")
    assert Path(pids, "pids.max").read_text() == "48"
    assert Path(memory, "memory.limit_in_bytes").read_text() == str(1 << 30)
    assert bounds.pids_by_cgroup and bounds.memory_by_cgroup


def test_cgroup_v2_discovery_enables_the_controllers_for_children(tmp_path: Path) -> None:
    ours = tmp_path / "cg" / "user.slice" / "app"
    ours.mkdir(parents=True)
    (ours / "cgroup.controllers").write_text("cpu memory pids\n")
    (ours / "cgroup.subtree_control").write_text("")
    proc = _fake_proc(
        tmp_path,
        "0::/user.slice/app\n",
        [f"25 1 0:22 / {tmp_path}/cg rw,nosuid - cgroup2 cgroup2 rw,nsdelegate"],
    )
    bounds = hostlimits.create(48, 1 << 30, proc_root=proc)
    (made,) = bounds.cgroups
    assert Path(made).parent == ours
    # Each controller is enabled by its own write ("+memory", then "+pids"); a
    # plain file keeps the last one.
    assert (ours / "cgroup.subtree_control").read_text() == "+pids"
    assert Path(made, "pids.max").read_text() == "48"
    assert Path(made, "memory.max").read_text() == str(1 << 30)
    assert Path(made, "memory.swap.max").read_text() == "0"


def test_a_named_cgroup_replaces_a_leftover_of_its_name(tmp_path: Path) -> None:
    """A provider whose boxes have stable names (examples/sandkit-bwrap) finds the cgroup a
    crashed run left under the same name: it goes, and the new one gets the limits."""
    ours = tmp_path / "cg" / "app"
    ours.mkdir(parents=True)
    (ours / "cgroup.controllers").write_text("memory pids\n")
    (ours / "cgroup.subtree_control").write_text("memory pids\n")
    proc = _fake_proc(tmp_path, "0::/app\n", [f"25 1 0:22 / {tmp_path}/cg rw - cgroup2 cgroup2 rw"])
    leftover = ours / "box-1"
    leftover.mkdir()  # (an empty cgroup: rmdir takes it, as the kernel's does)
    assert cgroups.paths("box-1", proc) == [str(leftover)]
    made = cgroups.make("box-1", 0, 1 << 20, proc)
    assert made == cgroups.Made((str(leftover),), pids=True, memory=True)  # 0: no pids limit
    assert not (leftover / "pids.max").exists()
    assert (leftover / "memory.max").read_text() == str(1 << 20)
    assert cgroups.launcher((), "never shown") == []
    assert cgroups.remove(str(tmp_path / "never-made"))


def test_a_cgroup_outside_the_mounted_hierarchy_means_rlimits(tmp_path: Path) -> None:
    proc = _fake_proc(
        tmp_path,
        "0::/elsewhere\n",
        [f"25 1 0:22 /container {tmp_path}/cg rw - cgroup2 cgroup2 rw"],
    )
    assert hostlimits.create(48, 1 << 30, proc_root=proc).cgroups == ()


def test_cgroups_of_a_dead_provider_are_swept(tmp_path: Path) -> None:
    require_cgroups()
    dead = subprocess.Popen(["true"])
    dead.wait()
    bounds = hostlimits.create(32, 64 * 1024 * 1024)
    try:
        parent = os.path.dirname(bounds.cgroups[0])
        stale = os.path.join(parent, f"sandkit-{dead.pid}-0123456789ab")
        os.mkdir(stale)
        hostlimits.create(32, 64 * 1024 * 1024).remove()  # making one sweeps the parent
        assert not os.path.exists(stale)
    finally:
        bounds.remove()


def test_local_provider_bounds_each_sandbox_and_release_ends_everything(tmp_path: Path) -> None:
    require_cgroups()
    settings = Settings(data_root=tmp_path / "data", execute_enabled=True)
    provider = LocalProvider(settings)
    key = SandboxKey("u", "t")
    try:
        sandbox = provider.acquire(key)
        bounds = provider._bounds[key]
        assert len(bounds.cgroups) == 2
        out = sandbox.execute("setsid -w sh -c 'sleep 60 >/dev/null 2>&1 & echo $!'")
        pid = int(out.stdout)
        assert not is_dead(pid)
        provider.release(key)
        assert wait_dead(pid)
        assert not any(os.path.exists(path) for path in bounds.cgroups)
    finally:
        provider.shutdown()
    quiet = LocalProvider(Settings(data_root=tmp_path / "data"))  # execute off: no cgroup
    quiet.acquire(key)
    assert quiet._bounds == {}
    quiet.shutdown()


class _Collected:
    """A sink that keeps every byte it is fed."""

    def __init__(self) -> None:
        self.data = bytearray()

    def feed(self, data: bytes) -> None:
        self.data += data


def _pipes_of(code: str) -> tuple[subprocess.Popen[bytes], process.Pipes, _Collected, _Collected]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = _Collected(), _Collected()
    return proc, process.Pipes(proc, out, err), out, err


def test_a_late_pump_still_reads_what_the_pipes_hold() -> None:
    """A thread that gets the CPU (or the GIL) only after the drain's deadline must still
    read what was written in time: a load test (50 threads in one process) lost the
    output of a `wc -c` that exited 0 this way."""
    proc, pipes, out, err = _pipes_of(
        "import sys; sys.stdout.write('x' * 60000); sys.stderr.write('err')"
    )
    try:
        proc.wait()  # all written (less than a pipe holds), the writer gone
        pipes.pump(time.monotonic() - 1.0, lambda: False)  # its deadline long past
    finally:
        pipes.close()
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            stream.close()
    assert bytes(out.data) == b"x" * 60000 and bytes(err.data) == b"err"


def test_a_late_pump_does_not_follow_a_writer_that_never_stops() -> None:
    proc, pipes, out, _ = _pipes_of("import sys\nwhile True: sys.stdout.write('y' * 65536)")
    try:
        assert proc.stdout is not None
        assert select.select([proc.stdout], [], [], 60.0)[0], "the writer never wrote"
        pipes.pump(time.monotonic() - 1.0, lambda: False)  # returns: bounded by bytes
        assert 0 < len(out.data) <= process._LATE_BYTES + (1 << 16)
        assert proc.poll() is None, "the writer still writes"
    finally:
        proc.kill()
        proc.wait()
        pipes.close()
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            stream.close()


def test_a_group_member_that_misses_the_kill_is_killed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Linux makes a group kill and a fork exclude each other; gVisor did not always (a
    fork bomb's survivors held a CI box's process slots after the call had ended it).
    The kernel's miss is played by dropping the first SIGKILL: the group must still be
    gone when end_group returns."""
    real_killpg = os.killpg
    dropped: list[int] = []

    def missing_the_first_kill(pgid: int, sig: int) -> None:
        if sig == signal.SIGKILL and not dropped:
            dropped.append(pgid)
            return
        real_killpg(pgid, sig)

    proc = subprocess.Popen(
        ["sh", "-c", "trap '' TERM; sleep 600 & echo ready; sleep 600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    assert os.read(proc.stdout.fileno(), 6) == b"ready\n"  # SIGTERM is ignored from here
    pipes = process.Pipes(proc, _Collected(), _Collected())
    ending = threading.Thread(target=process.end_group, args=(proc, pipes), daemon=True)
    try:
        monkeypatch.setattr(os, "killpg", missing_the_first_kill)
        ending.start()
        ending.join(60.0)  # without the second kill it waits for a shell that still runs
        monkeypatch.undo()
        assert not ending.is_alive(), "end_group still waits for a group that missed the kill"
        assert dropped == [proc.pid], "the first SIGKILL never went out"
        assert not process._group_alive(proc.pid), "a member that missed the kill still runs"
    finally:
        monkeypatch.undo()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        ending.join(60.0)
        pipes.close()
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            stream.close()
