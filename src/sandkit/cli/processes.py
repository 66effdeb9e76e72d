"""Commands that run things: `exec` (output live), and background processes
(`spawn`, `ps`, `logs [-f]`, `send`, `kill`, `wait`)."""

from __future__ import annotations

import re
import sys
import time
from datetime import datetime
from typing import Annotated

import typer
from rich.text import Text

from ..errors import ErrorCode, SandboxError
from ..models import ExecuteResult, OutputChunk, ProcessInfo, ProcessOutput
from ..runtime.operations import default
from . import render
from .commands import runs
from .output import EXIT_OK, EXIT_TIMED_OUT
from .session import Session

HandleArg = Annotated[str, typer.Argument(help="Handle of the background process (p-...).")]
CwdOpt = Annotated[
    str | None, typer.Option("--cwd", help="Working directory (default: the workspace).")
]
EnvOpt = Annotated[list[str] | None, typer.Option("--env", "-e", help="K=V, repeatable.")]
_ELIDED = re.compile(r"\n\.\.\. \[(\d+) bytes elided\] \.\.\.\n")
# `logs -f`: how long one long poll waits for new output.
FOLLOW_POLL_S = 30.0


@runs("execute_stream")
def exec_(
    session: Session,
    command: Annotated[str, typer.Argument(help="Shell command (bash -c; sh without bash).")],
    timeout: Annotated[
        float | None, typer.Option("--timeout", "-t", help="Seconds before the kill.")
    ] = None,
    env: EnvOpt = None,
    cwd: CwdOpt = None,
) -> int:
    """Run a command in the sandbox, its output as it happens; exits with its exit code."""
    result: ExecuteResult | None = None
    cut: set[str] = set()
    for item in session.sandbox.execute_stream(
        command, timeout=timeout, env=parse_env(env), cwd=cwd
    ):
        if isinstance(item, ExecuteResult):
            result = item
        elif not session.out.json_mode:
            _write_chunk(item)
            if item.elided:
                cut.add(item.stream)
    if result is None:
        raise SandboxError(ErrorCode.INTERNAL, "the command ended without a result")
    if session.out.json_mode:
        session.out.json(result)
    else:
        for stream in sorted(cut):  # the live output stopped at the cap: its last bytes
            text = result.stdout if stream == "stdout" else result.stderr
            parts = _ELIDED.split(text, maxsplit=1)
            if len(parts) == 3:
                session.out.note(f"[{stream}: {parts[1]} bytes elided; its last bytes follow]")
                _write(stream, parts[2])
        if result.timed_out:
            session.out.note(f"timed out after {result.duration_ms / 1000:.1f} s; killed")
    return _exit_status(result.exit_code, result.timed_out)


@runs("spawn")
def spawn(
    session: Session,
    command: Annotated[str, typer.Argument(help="Shell command to run in the background.")],
    env: EnvOpt = None,
    cwd: CwdOpt = None,
) -> None:
    """Start a command in the background; prints its handle (for logs, send, kill, wait)."""
    info = session.sandbox.spawn(command, env=parse_env(env), cwd=cwd)
    if session.out.json_mode:
        session.out.json(info)
        return
    session.out.data(info.handle)
    if session.provider_name == "local":
        session.out.note(
            "local provider: background processes live in the provider's process, so this "
            "one ends when this command exits (use a box provider, or the Python API)"
        )


@runs("list_processes")
def ps(session: Session) -> None:
    """List the sandbox's background processes (running, and recently ended)."""
    listing = session.sandbox.list_processes()
    if session.out.json_mode:
        session.out.json(listing)
        return
    rows = [_row(p) for p in listing.processes]
    if not rows:
        session.out.note("no background processes")
        return
    render.print_table(session.out.out, "", ["HANDLE", "PID", "STATUS", "STARTED", "COMMAND"], rows)


@runs("process_output", wait="wait_s", extras=("follow",))
def logs(
    session: Session,
    handle: HandleArg,
    since: Annotated[
        int, typer.Option("--since", help="Offset to read from (a previous `offset`).")
    ] = default("process_output", "since"),
    wait: Annotated[
        float, typer.Option("--wait", help="Seconds to wait for output when there is none.")
    ] = default("process_output", "wait_s"),
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the process ends.")
    ] = False,
) -> int:
    """Print a background process's output after an offset (both streams, in order)."""
    box = session.sandbox
    offset = since
    while True:
        out = box.process_output(handle, since=offset, wait_s=FOLLOW_POLL_S if follow else wait)
        _print_output(session, out)
        offset = out.offset
        if not follow or not out.running:
            break
    if session.out.json_mode:
        return EXIT_OK
    session.out.note(
        f"offset {out.offset}; "
        + ("running" if out.running else f"exited {_exit_text(out.exit_code)}")
    )
    return EXIT_OK


@runs("write_stdin")
def send(
    session: Session,
    handle: HandleArg,
    data: Annotated[str, typer.Argument(help="Text for its stdin (add \\n yourself).")] = default(
        "write_stdin", "data"
    ),
    eof: Annotated[bool, typer.Option("--eof", help="Close its stdin afterwards.")] = False,
) -> None:
    """Write text to a background process's stdin."""
    info = session.sandbox.write_stdin(handle, data, eof=eof)
    if session.out.json_mode:
        session.out.json(info)


@runs("signal_process")
def kill(
    session: Session,
    handle: HandleArg,
    signal: Annotated[
        str, typer.Option("--signal", "-s", help="TERM, KILL, INT, HUP, USR1, ... or a number.")
    ] = default("signal_process", "signal"),
) -> None:
    """Send a signal to a background process's whole process group."""
    sig: str | int = int(signal) if signal.isdigit() else signal
    info = session.sandbox.signal_process(handle, sig)
    if session.out.json_mode:
        session.out.json(info)
        return
    session.out.success(f"sent {signal} to {info.handle} (pid {info.pid})")


@runs("wait_process")
def wait(
    session: Session,
    handle: HandleArg,
    timeout: Annotated[
        float | None, typer.Option("--timeout", "-t", help="Seconds to wait (default: the cap).")
    ] = default("wait_process", "timeout"),
) -> int:
    """Wait for a background process to end; exits with its exit code (124: still running)."""
    info = session.sandbox.wait_process(handle, timeout=timeout)
    if session.out.json_mode:
        session.out.json(info)
    elif info.running:
        session.out.note(f"{info.handle} is still running")
    return _exit_status(info.exit_code, info.running)


def parse_env(pairs: list[str] | None) -> dict[str, str] | None:
    if not pairs:
        return None
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SandboxError(ErrorCode.INVALID_ARGUMENT, f"--env needs NAME=VALUE, got {pair!r}")
        env[name] = value
    return env


def _exit_status(code: int | None, unfinished: bool) -> int:
    if unfinished or code is None:
        return EXIT_TIMED_OUT
    # A signal death may come back negative; report it the way shells do.
    return code if code >= 0 else 128 - code


def _exit_text(code: int | None) -> str:
    return "?" if code is None else str(code)


def _print_output(session: Session, out: ProcessOutput) -> None:
    if session.out.json_mode:
        session.out.json(out)
        return
    if out.elided_bytes:
        session.out.note(f"[{out.elided_bytes} bytes elided]")
    for chunk in out.chunks:
        _write_chunk(chunk)


def _write_chunk(chunk: OutputChunk) -> None:
    _write(chunk.stream, chunk.text)


def _write(stream: str, text: str) -> None:
    if not text:
        return
    target = sys.stdout if stream == "stdout" else sys.stderr
    target.write(text)
    target.flush()


def _row(info: ProcessInfo) -> list[Text]:
    status = "running" if info.running else f"exited {_exit_text(info.exit_code)}"
    started = datetime.fromtimestamp(info.started_at).strftime("%H:%M:%S")
    age = time.time() - info.started_at
    return [
        Text(info.handle),
        Text(str(info.pid)),
        Text(status, style="green" if info.running else "dim"),
        Text(f"{started} ({age:.0f} s ago)"),
        Text(info.command[:80]),
    ]
