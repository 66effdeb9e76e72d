"""execute: one shell command, bounded in time and output, in its own process group.

The command runs under bash (or /bin/sh when bash is missing) in a new
session, so a timeout can kill everything it started. Both pipes are read
concurrently into bounded head/tail buffers; secrets are redacted and real
paths masked before the output leaves. docs/operations.md has the contract.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from typing import Any, Callable, Dict, List, Optional

from .capture import HeadTail, Redactor, margin_for
from .context import Context
from .errors import ErrorCode, SandboxError
from .oserrors import to_sandbox_error
from .validate import invalid, require_env, require_number, require_str

SHELLS = ("/bin/bash", "/bin/sh")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Inherited from the runtime's own environment when set (and not scrubbed).
INHERITED_ENV = ("PATH", "TZ", "TMPDIR", "USER", "LOGNAME")
# Linux refuses a single argv string longer than this (MAX_ARG_STRLEN).
MAX_COMMAND_BYTES = 128 * 1024 - 1

TERM_GRACE_S = 1.0  # between SIGTERM and SIGKILL of the group on timeout
DRAIN_AFTER_EXIT_S = 0.2  # how long pipes held open by background children are read
_POLL_S = 0.05
_CHUNK = 1 << 16


def pick_shell() -> str:
    for shell in SHELLS:
        if os.access(shell, os.X_OK):
            return shell
    raise SandboxError(ErrorCode.UNAVAILABLE, "no shell found (tried %s)" % ", ".join(SHELLS))


def _environment(
    ctx: Context, home: str, shell: str, extra: Optional[Dict[str, str]]
) -> Dict[str, str]:
    scrubbed = set(ctx.scrubbed_env)
    secrets = [s for s in ctx.secrets if s]
    env: Dict[str, str] = {}
    for name in INHERITED_ENV:
        value = os.environ.get(name)
        if value is None or name in scrubbed or any(s in value for s in secrets):
            continue
        env[name] = value
    env.setdefault("PATH", DEFAULT_PATH)
    env.update({"HOME": home, "LANG": "C.UTF-8", "TERM": "dumb", "SHELL": shell})
    for name, value in (extra or {}).items():
        env[name] = ctx.mapping.unmask(value)
    return env


def _timeout(ctx: Context, value: Any) -> float:
    limits = ctx.limits
    if value is None:
        return float(limits.exec_default_timeout_s)
    seconds = require_number("timeout", value)
    if seconds <= 0:
        raise invalid("timeout must be > 0 seconds")
    if seconds > limits.exec_max_timeout_s:
        raise invalid("timeout must be <= %g seconds" % limits.exec_max_timeout_s)
    return seconds


def _directory(ctx: Context, path: Any) -> str:
    """Real path of a directory inside a mount (read-only mounts are fine)."""
    resolved = ctx.mapping.resolve(ctx.mapping.default_dir if path is None else path)
    virtual = ctx.mapping.to_virtual(resolved.real)
    try:
        if not os.path.isdir(resolved.real):
            os.stat(resolved.real)  # raises NOT_FOUND for a missing path
            raise SandboxError(ErrorCode.NOT_A_DIRECTORY, "%s is not a directory" % virtual)
    except OSError as exc:
        raise to_sandbox_error(ctx.mapping, exc, virtual) from None
    return resolved.real


def _home(ctx: Context, cwd: str) -> str:
    try:
        return ctx.mapping.resolve(ctx.mapping.default_dir).real
    except SandboxError:
        return cwd


class _Pipes:
    """Both output pipes of a child, read without blocking into bounded buffers."""

    def __init__(self, proc: "subprocess.Popen[bytes]", out: HeadTail, err: HeadTail) -> None:
        self._selector = selectors.DefaultSelector()
        for stream, sink in ((proc.stdout, out), (proc.stderr, err)):
            assert stream is not None
            os.set_blocking(stream.fileno(), False)
            self._selector.register(stream.fileno(), selectors.EVENT_READ, sink)

    @property
    def open(self) -> bool:
        return bool(self._selector.get_map())

    def pump(self, until: float, stop: Callable[[], bool]) -> None:
        """Read until both pipes hit EOF, `until` passes or `stop()` says so.

        `stop` is asked at most every _POLL_S, so it may cost a few syscalls.
        """
        next_check = 0.0
        while self.open:
            now = time.monotonic()
            if now >= until:
                return
            if now >= next_check:
                if stop():
                    return
                next_check = now + _POLL_S
            for key, _ in self._selector.select(min(until - now, _POLL_S)):
                try:
                    data = os.read(key.fd, _CHUNK)
                except BlockingIOError:
                    continue
                if data:
                    key.data.feed(data)
                else:
                    self._selector.unregister(key.fd)

    def close(self) -> None:
        self._selector.close()


def _kill_group(proc: "subprocess.Popen[bytes]", sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(proc.pid, sig)


def _group_alive(pgid: int) -> bool:
    """Is any member of the group still running? Zombies do not count.

    Orphans are reaped by init, and not every init reaps promptly (some
    container inits never do), so where /proc exists it is read instead of
    trusting killpg(pgid, 0), which zombies answer too.
    """
    try:
        names = os.listdir("/proc")
    except OSError:
        names = []
    if "self" not in names:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                data = f.read()
        except OSError:
            continue  # exited meanwhile
        # "pid (comm) state ppid pgrp ..."; comm may contain spaces and parens.
        fields = data[data.rfind(b")") + 1 :].split()
        if len(fields) > 2 and fields[0] != b"Z" and fields[2] == str(pgid).encode():
            return True
    return False


def _group_gone(proc: "subprocess.Popen[bytes]") -> bool:
    proc.poll()  # reap the shell so it does not count
    return not _group_alive(proc.pid)


def _exit_code(returncode: int) -> int:
    """A signal death reads like it does in a shell: 128 + the signal number."""
    return 128 - returncode if returncode < 0 else returncode


def _run(
    argv: List[str], cwd: str, env: Dict[str, str], timeout: float, out: HeadTail, err: HeadTail
) -> Optional[int]:
    """Run to completion or timeout; the exit code, or None when it timed out."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
    )
    pipes = _Pipes(proc, out, err)
    try:
        deadline = time.monotonic() + timeout
        pipes.pump(deadline, lambda: proc.poll() is not None)
        if not pipes.open and proc.returncode is None:
            # Output closed but the shell still runs (e.g. `exec >&-; sleep 9`).
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(deadline - time.monotonic(), 0))
        if proc.poll() is not None:
            # Finished. Background children may hold the pipes open; read what
            # they have for a moment, then let them be.
            pipes.pump(time.monotonic() + DRAIN_AFTER_EXIT_S, lambda: False)
            return _exit_code(proc.returncode)
        _kill_group(proc, signal.SIGTERM)
        grace_end = time.monotonic() + TERM_GRACE_S
        pipes.pump(grace_end, lambda: _group_gone(proc))
        while not _group_gone(proc) and time.monotonic() < grace_end:
            time.sleep(_POLL_S)  # pipes closed, but something still runs
        _kill_group(proc, signal.SIGKILL)
        proc.wait()
        pipes.pump(time.monotonic() + DRAIN_AFTER_EXIT_S, lambda: False)
        return None
    finally:
        pipes.close()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        if proc.returncode is None:  # an exception on the way: leave nothing behind
            _kill_group(proc, signal.SIGKILL)
            proc.wait()


def execute(
    ctx: Context, command: Any, timeout: Any = None, env: Any = None, cwd: Any = None
) -> Dict[str, Any]:
    if not ctx.execute_enabled:
        raise SandboxError(
            ErrorCode.EXECUTE_DISABLED, "command execution is disabled for this sandbox"
        )
    text = require_str("command", command, allow_empty=False)
    if "\x00" in text:
        raise invalid("command contains a NUL byte")
    if not text.strip():
        raise invalid("command must not be blank")
    seconds = _timeout(ctx, timeout)
    extra = require_env(env)
    real_cwd = _directory(ctx, cwd)
    shell = pick_shell()
    real_command = ctx.mapping.unmask(text)
    if len(real_command.encode("utf-8", "surrogateescape")) > MAX_COMMAND_BYTES:
        raise invalid("command is longer than %d bytes" % MAX_COMMAND_BYTES)
    environment = _environment(ctx, _home(ctx, real_cwd), shell, extra)

    redactor = Redactor(ctx.secrets)
    margin = margin_for(redactor)
    cap = max(ctx.limits.exec_output_bytes, 0)
    out = HeadTail(cap // 2, cap - cap // 2, margin)
    err = HeadTail(cap // 2, cap - cap // 2, margin)

    started = time.monotonic()
    try:
        exit_code = _run([shell, "-c", real_command], real_cwd, environment, seconds, out, err)
    except OSError as exc:
        raise to_sandbox_error(ctx.mapping, exc) from None
    except ValueError as exc:  # e.g. an env value Popen refuses
        raise invalid(ctx.mapping.mask(str(exc))) from None
    duration_ms = (time.monotonic() - started) * 1000.0

    def clean(value: str) -> str:
        return ctx.mapping.mask(redactor(value))

    return {
        "exit_code": exit_code,
        "stdout": out.render(clean),
        "stderr": err.render(clean),
        "timed_out": exit_code is None,
        "truncated": out.truncated or err.truncated,
        "duration_ms": round(duration_ms, 3),
    }
