"""runtime/readyshell.py: a command handed to a shell started ahead runs as under
`bash -c COMMAND` (real shells, compared with `bash -c` itself), and no idle shell
outlives its sandbox."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandkit import SandboxKey, Settings
from sandkit.local import LocalProvider
from sandkit.runtime import process, readyshell
from sandkit.runtime.context import Context
from sandkit.runtime.limits import Limits
from sandkit.runtime.pathmap import WORKSPACE, Mount, PathMapping

pytestmark = pytest.mark.skipif(not os.access("/bin/bash", os.X_OK), reason="needs bash")

# Each is run by a ready shell and by `bash -c` in the same place; results must agree.
SAME_AS_BASH_C = [
    "echo hi; echo err >&2; exit 3",
    'echo "$0" $# "$-" "$_"',
    "echo $LINENO\necho $LINENO",
    'printf "%s" "$BASH_EXECUTION_STRING"',
    "echo )",
    "echo ran\necho )",
    "if true; then",
    "f() { echo in f; }; f; caller",
    "return 3",
    "not-a-command-here",
    "echo ${unset_variable:?is unset}",
    "readonly r=1; r=2",
    "trap 'echo bye' EXIT; echo hello",
    "echo $SECONDS; echo $SHLVL $BASH_SUBSHELL",
    "read line; echo read=$?",
    "set | grep -c BASH_EXECUTION_STRING",
    "env | sort",
    "pwd; echo $PWD; echo ${OLDPWD-unset}",
    "shopt -s extglob\necho !(nothing-matches)",
    "printf 'two trailing newlines\\n\\n'",
    "cat <<EOF\n$(echo from a substitution)\nEOF",
    "kill -TERM $$",
    "echo $(( $(cut -d' ' -f4 /proc/$$/stat) == PPID ))",
]


@pytest.fixture()
def ctx(tmp_path: Path) -> Iterator[Context]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    context = Context(
        PathMapping([Mount(WORKSPACE, str(workspace))]),
        limits=Limits(exec_default_timeout_s=20.0),
        execute_enabled=True,
    )
    yield context
    context.calls.ready.close()


def ready_pid(ctx: Context) -> int:
    """The waiting shell's pid, once the starter thread has made it (it waits for a quiet
    moment first); bounded by a generous deadline, not by how fast it usually is."""
    deadline = time.monotonic() + 30.0
    while (pid := ctx.calls.ready.ready_pid) is None:
        assert time.monotonic() < deadline, "no shell was started ahead"
        time.sleep(0.005)
    return pid


@pytest.fixture()
def handed(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each hand-over to a ready shell took (the command then ran in it)."""
    seen: list[bool] = []
    real = readyshell._Ready.hand

    def hand(self: readyshell._Ready, command: str) -> bool:
        seen.append(real(self, command))
        return seen[-1]

    monkeypatch.setattr(readyshell._Ready, "hand", hand)
    return seen


def run_ready(ctx: Context, command: str, handed: list[bool]) -> dict[str, object]:
    """Run `command` in the ready shell (asserting that it was that one)."""
    process.execute(ctx, "true")  # a start is wanted for this start (cwd, env)
    ready_pid(ctx)
    handed.clear()
    result: dict[str, object] = process.execute(ctx, command)
    assert handed == [True], "the command did not run in the ready shell"
    return result


def run_bash_c(ctx: Context, command: str) -> dict[str, object]:
    launch = process.prepare(ctx, command, None, None)
    done = subprocess.run(
        ["/bin/bash", "-c", command],
        cwd=launch.cwd,
        env=launch.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        start_new_session=True,
    )
    code = done.returncode if done.returncode >= 0 else 128 - done.returncode
    clean = process.cleaner(ctx)  # as execute's output: real paths shown virtual
    return {
        "exit_code": code,
        "stdout": clean(done.stdout.decode()),
        "stderr": clean(done.stderr.decode()),
    }


@pytest.mark.parametrize("command", SAME_AS_BASH_C)
def test_a_command_in_a_ready_shell_runs_as_under_bash_c(
    ctx: Context, handed: list[bool], command: str
) -> None:
    ours = run_ready(ctx, command, handed)
    theirs = run_bash_c(ctx, command)
    for field in ("exit_code", "stdout", "stderr"):
        assert ours[field] == theirs[field], (field, ours, theirs)


def test_a_syntax_error_runs_nothing_before_bash_reports_it(
    ctx: Context, handed: list[bool], tmp_path: Path
) -> None:
    marker = tmp_path / "workspace" / "marker"
    result = run_ready(ctx, "touch marker; echo )", handed)
    assert result["exit_code"] == 2
    assert "-c: line 1: syntax error" in str(result["stderr"])
    assert not marker.exists()  # one line: bash parses it whole, runs none of it
    run_ready(ctx, "touch marker\necho )", handed)
    assert marker.exists()  # a line before the bad one runs, as under bash -c


def test_another_cwd_or_env_starts_its_own_shell(ctx: Context, tmp_path: Path) -> None:
    (tmp_path / "workspace" / "sub").mkdir()
    process.execute(ctx, "true")
    waiting = ready_pid(ctx)
    result = process.execute(ctx, "echo $$; pwd; echo $X", cwd="sub", env={"X": "1"})
    pid, cwd, x = str(result["stdout"]).split()
    assert int(pid) != waiting and cwd == f"{WORKSPACE}/sub" and x == "1"
    assert wait_gone(waiting)  # made for the other start: not left waiting


def test_a_long_command_starts_its_own_shell(ctx: Context) -> None:
    process.execute(ctx, "true")
    waiting = ready_pid(ctx)
    text = "x" * readyshell.MAX_COMMAND_BYTES
    result = process.execute(ctx, f"echo $$; echo {text} | wc -c")
    pid, count = str(result["stdout"]).split()
    assert int(pid) != waiting and int(count) == len(text) + 1
    assert ctx.calls.ready.ready_pid in (waiting, None)  # still there for a short one


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_a_ready_shell_a_command_killed_or_stopped_still_runs_the_next(
    ctx: Context, sig: signal.Signals
) -> None:
    process.execute(ctx, "true")
    waiting = ready_pid(ctx)
    # Too long for a ready shell: it runs in its own, so the waiting one is left to kill.
    padding = "#" * readyshell.MAX_COMMAND_BYTES
    killed = process.execute(ctx, f"kill -{sig.name[3:]} {waiting}; echo $$ {padding}")
    assert killed["exit_code"] == 0 and int(str(killed["stdout"]).split()[0]) != waiting
    assert ctx.calls.ready.ready_pid == waiting  # still the one a short command would take
    if sig == signal.SIGSTOP:
        assert until(lambda: state(waiting) == "T"), "the waiting shell never stopped"
    result = process.execute(ctx, "echo $$; echo done", timeout=10)
    pid, said = str(result["stdout"]).split()
    assert result["exit_code"] == 0 and said == "done"
    # A killed one is dropped for a new shell; a stopped one is continued and runs it.
    assert (int(pid) == waiting) == (sig == signal.SIGSTOP)
    assert wait_gone(waiting)


def state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def until(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + 10.0
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_close_ends_the_waiting_shell_and_starts_no_more(ctx: Context) -> None:
    process.execute(ctx, "true")
    waiting = ready_pid(ctx)
    ctx.calls.ready.close()
    assert wait_gone(waiting)
    process.execute(ctx, "true")
    time.sleep(readyshell._Slot.QUIET_S * 20)  # what a start would wait, many times over
    assert ctx.calls.ready.ready_pid is None


def test_a_context_that_is_dropped_ends_its_shell(tmp_path: Path) -> None:
    def use() -> int:
        context = Context(PathMapping([Mount(WORKSPACE, str(tmp_path))]), execute_enabled=True)
        process.execute(context, "true")
        return ready_pid(context)

    waiting = use()
    gc.collect()
    assert wait_gone(waiting)


def test_release_on_the_local_provider_leaves_no_shell_on_the_host(tmp_path: Path) -> None:
    provider = LocalProvider(Settings(data_root=tmp_path, execute_enabled=True))
    key = SandboxKey("u", "t")
    try:
        sandbox = provider.acquire(key)
        sandbox.execute("true")
        waiting = ready_pid(sandbox.runtime.context)
        provider.release(key)
        assert wait_gone(waiting)
    finally:
        provider.shutdown()


def test_end_processes_ends_the_waiting_shell(ctx: Context) -> None:
    process.execute(ctx, "true")
    waiting = ready_pid(ctx)
    ctx.calls.end_all(wait_s=5.0)
    assert wait_gone(waiting)


def wait_gone(pid: int) -> bool:
    """Exited and reaped (an unreaped child is still there: a zombie)."""
    deadline = time.monotonic() + 10.0
    while os.path.exists(f"/proc/{pid}"):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
