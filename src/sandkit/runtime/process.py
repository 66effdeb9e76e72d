"""execute: one shell command, bounded in time and output, in its own process group.

The command runs under bash (or /bin/sh when bash is missing) in a new
session; when the shell exits or the timeout passes, the whole process
group is ended, so nothing the command started in its group outlives the
call. Both pipes are read
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

from . import fdwait, readyshell
from .cancel import Cancel, Cancelled
from .capture import HeadTail, Redactor, margin_for
from .context import BOUNDS_FAILED, Context
from .errors import ErrorCode, SandboxError
from .oserrors import to_sandbox_error
from .streaming import StreamCleaner, cleaner_for
from .validate import invalid, require_env, require_number, require_str
from .values import Value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple

SHELLS = ("/bin/bash", "/bin/sh")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Inherited from the runtime's own environment when set (and not scrubbed).
INHERITED_ENV = ("PATH", "TZ", "TMPDIR", "USER", "LOGNAME")
# Linux refuses a single argv string longer than this (MAX_ARG_STRLEN).
MAX_COMMAND_BYTES = 128 * 1024 - 1

TERM_GRACE_S = 1.0  # between SIGTERM and SIGKILL of the group on timeout
# How long a group is killed again while members outlive a SIGKILL (see _kill_until_gone).
KILL_SETTLE_S = 5.0
DRAIN_AFTER_EXIT_S = 0.2  # how long pipes held by a process that left the group are read
_POLL_S = 0.05
_CHUNK = 1 << 16
# Past its deadline a pump still reads what the pipes hold, up to this much: both pipes
# at their largest capacity (fs.pipe-max-size, 1 MiB by default), so a writer that keeps
# writing cannot keep it reading.
_LATE_BYTES = 2 << 20


if TYPE_CHECKING:

    class Sink(Protocol):
        """Where a pipe's bytes go (a HeadTail, or a tap that also streams them)."""

        def feed(self, data: bytes) -> None: ...


def _exited_or(proc: "subprocess.Popen[bytes]", cancel: Cancel) -> Callable[[], bool]:
    return lambda: cancel.is_set() or exited(proc)


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
    env.update(ctx.env)
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


class Pipes:
    """Both output pipes of a child, read without blocking into bounded buffers.

    Where the kernel offers a pidfd (Linux >= 5.3) the child's exit wakes the
    reader at once; otherwise `stop` is polled.
    """

    def __init__(
        self,
        proc: "subprocess.Popen[bytes]",
        out: Sink,
        err: Sink,
        cancel: Optional[Cancel] = None,
    ) -> None:
        self._selector = selectors.DefaultSelector()
        self._pipes = 0
        for stream, sink in ((proc.stdout, out), (proc.stderr, err)):
            assert stream is not None
            os.set_blocking(stream.fileno(), False)
            self._selector.register(stream.fileno(), selectors.EVENT_READ, sink)
            self._pipes += 1
        self._pidfd = -1
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is not None:
            with contextlib.suppress(OSError):  # an older kernel: poll instead
                self._pidfd = pidfd_open(proc.pid)
                self._selector.register(self._pidfd, selectors.EVENT_READ, None)
        self._wake = [self._pidfd] if self._pidfd >= 0 else []
        if cancel is not None:  # a cancel wakes the reader at once
            self._selector.register(cancel.fileno(), selectors.EVENT_READ, None)
            self._wake.append(cancel.fileno())

    @property
    def open(self) -> bool:
        return self._pipes > 0

    def pump(self, until: float, stop: Callable[[], bool]) -> None:
        """Read until both pipes hit EOF, `until` passes or `stop()` says so.

        `until` ends the waiting, not the reading: what the pipes already hold
        is read even when this thread gets the CPU (or the GIL) only after
        `until` (a loaded machine, 50 threads in one process), up to
        _LATE_BYTES. `stop` is asked when the child exits and at most every
        _POLL_S otherwise, so it may cost a few syscalls.
        """
        next_check = 0.0
        late = 0
        while self.open:
            now = time.monotonic()
            if now >= next_check:
                if stop():
                    return
                next_check = now + _POLL_S
            past = now >= until
            events = self._selector.select(0 if past else min(until - now, _POLL_S))
            if past and (late >= _LATE_BYTES or not events):
                return
            for key, _ in events:
                if key.data is None:  # the pidfd (the child exited) or a cancel
                    self._selector.unregister(key.fd)
                    next_check = 0.0
                    continue
                try:
                    data = os.read(key.fd, _CHUNK)
                except BlockingIOError:
                    continue
                if data:
                    key.data.feed(data)
                    late += len(data) if past else 0
                else:
                    self._selector.unregister(key.fd)
                    self._pipes -= 1

    def wait(self, until: float, stop: Callable[[], bool]) -> None:
        """Until `stop()` or `until`, sleeping on the pidfd (and the cancel) meanwhile."""
        pause = 0.001
        while not stop():
            now = time.monotonic()
            if now >= until:
                return
            if self._wake:
                # Level-triggered: an exited child's pidfd stays readable.
                fdwait.readable(self._wake, min(until - now, _POLL_S))
            else:  # no pidfd: poll, soon at first (most exits are visible within 1 ms)
                time.sleep(min(pause, until - now))
                pause = min(pause * 2, _POLL_S)

    def close(self) -> None:
        self._selector.close()
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1


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
        return _group_exists(pgid)
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
    return not _group_alive(proc.pid)


def exited(proc: "subprocess.Popen[bytes]") -> bool:
    """Has the shell exited? It is not reaped, so its pid, the group's id, stays taken."""
    if proc.returncode is not None:
        return True
    waitid = getattr(os, "waitid", None)
    if waitid is None:  # no waitid (not Linux): reap; the pgid is then briefly reusable
        return proc.poll() is not None
    try:
        return waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return proc.poll() is not None


def exit_code(returncode: int) -> int:
    """A signal death reads like it does in a shell: 128 + the signal number."""
    return 128 - returncode if returncode < 0 else returncode


def _group_exists(pgid: int) -> bool:
    """Has the group any member, zombies included? One signal, no /proc scan."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def end_group(proc: "subprocess.Popen[bytes]", pipes: Pipes) -> None:
    """SIGTERM to the whole group, SIGKILL to what is left after the grace, reap the shell.

    The shell is reaped only once it has exited; any member still in the group
    keeps the group's id from being reused, so no signal can hit another group.
    A group with nothing left but the shell costs two signals and no wait.
    """
    _kill_group(proc, signal.SIGTERM)
    grace_end = time.monotonic() + TERM_GRACE_S
    pause = 0.001  # most groups are gone within a few ms of the signal: look early
    while True:
        if exited(proc):
            proc.wait()
            if not _group_exists(proc.pid):
                return  # empty: nothing to kill, and the id may be anyone's now
        if _group_gone(proc) or time.monotonic() >= grace_end:
            break  # only zombies are left, or the grace is over
        until = min(time.monotonic() + pause, grace_end)
        if pipes.open:
            pipes.pump(until, lambda: False)
        else:
            time.sleep(max(until - time.monotonic(), 0))
        pause = min(pause * 2, _POLL_S)
    _kill_until_gone(proc)
    proc.wait()


def _kill_until_gone(proc: "subprocess.Popen[bytes]") -> None:
    """SIGKILL the group, and again while a member still runs, for up to KILL_SETTLE_S.

    Linux makes a group kill and a fork exclude each other; a kernel that does not (a
    CI run under gVisor saw a fork bomb hold its box's process slots long after its call
    had ended it) lets a child forked while the signal went out miss it. Killed tasks
    are gone in milliseconds, so this costs one /proc scan where nothing escaped. The
    shell is not reaped yet (or the group has live members): the id is still ours.
    """
    _kill_group(proc, signal.SIGKILL)
    end = time.monotonic() + KILL_SETTLE_S
    pause = 0.001
    while _group_alive(proc.pid) and time.monotonic() < end:
        time.sleep(pause)
        pause = min(pause * 2, _POLL_S)
        _kill_group(proc, signal.SIGKILL)


def _popen(
    argv: List[str],
    cwd: str,
    env: Dict[str, str],
    preexec: Optional[Callable[[], None]],
    pass_fds: Tuple[int, ...] = (),
) -> "subprocess.Popen[bytes]":
    """A command's shell: no stdin, both outputs piped, a session (and group) of its own."""
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
        pass_fds=pass_fds,
        preexec_fn=preexec,
    )


def _run(
    proc: "subprocess.Popen[bytes]",
    timeout: float,
    out: Sink,
    err: Sink,
    cancel: Cancel,
) -> Optional[int]:
    """Run to completion or timeout; the exit code, or None when it timed out.

    Either way the call ends with its process group: what the shell started
    in the background is stopped when the shell exits. A `cancel` that is set
    (the consumer of a stream went away) ends the group too and raises Cancelled.
    """
    pipes = Pipes(proc, out, err, cancel)
    try:
        deadline = time.monotonic() + timeout
        stop = _exited_or(proc, cancel)
        pipes.pump(deadline, stop)
        # Output closed but the shell may still run (`exec >&-; sleep 9`), or its exit
        # is not visible yet: wait for the exit itself, woken by the pidfd.
        pipes.wait(deadline, stop)
        if cancel.is_set():
            end_group(proc, pipes)
            raise Cancelled()
        timed_out = not exited(proc)
        end_group(proc, pipes)
        # A process that left the group may still hold the pipes: read what it
        # has for a moment, then close them.
        pipes.pump(time.monotonic() + DRAIN_AFTER_EXIT_S, lambda: False)
        return None if timed_out else exit_code(proc.returncode)
    finally:
        pipes.close()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        if proc.returncode is None:  # an exception on the way: leave nothing behind
            _kill_group(proc, signal.SIGKILL)
            proc.wait()


class Launch(Value):
    """A checked command, ready to start: argv (with the bounds' launcher), cwd, env.
    `launcher`: argv starts with the bounds' launcher, whose exit 126 and BOUNDS_FAILED
    mean that it could not apply them (the command never ran). `shell` and `command`
    (unmasked) are what argv runs, for a shell started ahead (readyshell.py)."""

    argv: List[str]
    cwd: str
    env: Dict[str, str]
    preexec: Optional[Callable[[], None]]
    launcher: bool
    shell: str
    command: str

    def __init__(
        self,
        argv: List[str],
        cwd: str,
        env: Dict[str, str],
        preexec: Optional[Callable[[], None]],
        launcher: bool = False,
        shell: str = "",
        command: str = "",
    ) -> None:
        self._init(locals())


def prepare(ctx: Context, command: Any, env: Any, cwd: Any) -> Launch:
    """Check a command and build what starts it (execute, streams and background alike)."""
    if not ctx.execute_enabled:
        raise SandboxError(
            ErrorCode.EXECUTE_DISABLED, "command execution is disabled for this sandbox"
        )
    text = require_str("command", command, allow_empty=False)
    if "\x00" in text:
        raise invalid("command contains a NUL byte")
    if not text.strip():
        raise invalid("command must not be blank")
    extra = require_env(env)
    real_cwd = _directory(ctx, cwd)
    shell = pick_shell()
    real_command = ctx.mapping.unmask(text)
    if len(real_command.encode("utf-8", "surrogateescape")) > MAX_COMMAND_BYTES:
        raise invalid("command is longer than %d bytes" % MAX_COMMAND_BYTES)
    environment = _environment(ctx, _home(ctx, real_cwd), shell, extra)
    command_argv: List[str] = [shell, "-c", real_command]
    argv, preexec = command_argv, None
    if ctx.bounds is not None:
        argv, preexec = ctx.bounds.launch(command_argv)
    launcher = argv != command_argv
    preexec = _with_default_signals(preexec)
    return Launch(argv, real_cwd, environment, preexec, launcher, shell, real_command)


def _ready_key(launch: Launch) -> Any:
    """What a ready shell must have been started with to run this command (None: a ready
    shell cannot run it)."""
    if not readyshell.usable(launch.shell, launch.command):
        return None
    return (launch.shell, launch.cwd, tuple(sorted(launch.env.items())))


def _start(ctx: Context, launch: Launch, key: Any) -> "subprocess.Popen[bytes]":
    """The command's shell: the sandbox's ready one when it fits (readyshell.py), else a
    new one."""
    proc = None if key is None else ctx.calls.ready.take(key, launch.command)
    if proc is None:
        proc = _popen(launch.argv, launch.cwd, launch.env, launch.preexec)
    return proc


def _start_ahead(ctx: Context, launch: Launch, key: Any) -> None:
    """Have the next command's shell started while this call's answer goes out (after the
    command: a start meanwhile would compete with it)."""
    if key is None:
        return

    bounds = ctx.bounds  # not ctx: a starter that held it would keep the context alive

    def start_waiting(command_in: int, ack_out: int) -> "subprocess.Popen[bytes]":
        script = readyshell.WAIT.format(fd=command_in, ack=ack_out)
        argv, preexec = [launch.shell, "-c", script], None
        if bounds is not None:
            argv, preexec = bounds.launch(argv)
        fds = (command_in, ack_out)
        return _popen(argv, launch.cwd, launch.env, _with_default_signals(preexec), fds)

    ctx.calls.ready.refill(key, start_waiting)


# Signals a host started in the background (`nohup ... &`, a job-control-less shell) passes on
# ignored: an ignored disposition survives exec, and a shell cannot trap or reset a signal
# ignored on entry, so `signal_process(h, "INT")` would do nothing. Commands start with them
# at their default, as from a terminal; the cost (a Python step in the child) only when needed.
_INHERITED_IGNORES = (signal.SIGINT, signal.SIGQUIT)


def _with_default_signals(preexec: Optional[Callable[[], None]]) -> Optional[Callable[[], None]]:
    ignored = [s for s in _INHERITED_IGNORES if signal.getsignal(s) == signal.SIG_IGN]
    if not ignored:
        return preexec

    def restore() -> None:
        for number in ignored:
            signal.signal(number, signal.SIG_DFL)
        if preexec is not None:
            preexec()

    return restore


def cleaner(ctx: Context) -> Callable[[str], str]:
    """What every piece of command output goes through: secrets redacted, paths masked."""
    redactor = Redactor(ctx.secrets)
    return lambda value: ctx.mapping.mask(redactor(value))


def stream_cleaner(ctx: Context) -> StreamCleaner:
    return cleaner_for(cleaner(ctx), ctx.secrets, ctx.mapping.masked_strings)


def start_failure(ctx: Context, exc: BaseException) -> SandboxError:
    """A command that could not be started, as a SandboxError."""
    if isinstance(exc, subprocess.SubprocessError):  # the preexec step failed
        return SandboxError(ErrorCode.UNAVAILABLE, BOUNDS_FAILED)
    if isinstance(exc, OSError):
        return to_sandbox_error(ctx.mapping, exc)
    return invalid(ctx.mapping.mask(str(exc)))  # e.g. an env value Popen refuses


if TYPE_CHECKING:
    Emit = Callable[[Dict[str, Any]], None]


class _Tap:
    """One stream of a streamed command: into the HeadTail like `execute`, and out as
    cleaned events up to `exec_stream_bytes`; past that, one `elided` event and no
    more (the result still carries the head and tail `execute` would)."""

    def __init__(self, name: str, keep: HeadTail, ctx: Context, emit: Emit) -> None:
        self.name = name
        self.keep = keep
        self._budget = max(ctx.limits.exec_stream_bytes, 0)
        self._elided = False
        self._cleaner = stream_cleaner(ctx)
        self._emit = emit

    def feed(self, data: bytes) -> None:
        self.keep.feed(data)
        if self._elided:
            return
        if len(data) <= self._budget:
            self._budget -= len(data)
            self._send(self._cleaner.feed(data))
            return
        self._send(self._cleaner.feed(data[: self._budget]))
        self._budget = 0
        self._elided = True
        # What the cleaner holds back is part of the elided middle: never shown in part.
        self._emit({"stream": self.name, "text": "", "elided": True})

    def finish(self) -> None:
        if not self._elided:
            self._send(self._cleaner.flush())

    def _send(self, text: str) -> None:
        if text:
            self._emit({"stream": self.name, "text": text, "elided": False})


def _execute(
    ctx: Context,
    command: Any,
    timeout: Any,
    env: Any,
    cwd: Any,
    emit: Optional[Emit] = None,
    cancel: Optional[Cancel] = None,
) -> Dict[str, Any]:
    seconds = _timeout(ctx, timeout)
    launch = prepare(ctx, command, env, cwd)
    key = _ready_key(launch)
    margin = margin_for(Redactor(ctx.secrets))
    cap = max(ctx.limits.exec_output_bytes, 0)
    out = HeadTail(cap // 2, cap - cap // 2, margin)
    err = HeadTail(cap // 2, cap - cap // 2, margin)
    taps: List[_Tap] = []
    sinks: List[Sink] = [out, err]
    if emit is not None:
        taps = [_Tap("stdout", out, ctx, emit), _Tap("stderr", err, ctx, emit)]
        sinks = list(taps)
    started = time.monotonic()
    call = cancel or Cancel()  # a plain execute has one too: a release may end it
    try:
        with ctx.calls.running(call):
            exit_code = _run(_start(ctx, launch, key), seconds, sinks[0], sinks[1], call)
        _start_ahead(ctx, launch, key)
    except (subprocess.SubprocessError, OSError, ValueError) as exc:
        raise start_failure(ctx, exc) from None
    except Cancelled:
        if call.ended:
            raise SandboxError(
                ErrorCode.UNAVAILABLE, "the sandbox was released while the command ran"
            ) from None
        raise
    finally:
        if call is not cancel:
            call.close()
    duration_ms = (time.monotonic() - started) * 1000.0
    for tap in taps:
        tap.finish()
    clean = cleaner(ctx)
    stderr = err.render(clean)
    if exit_code == 126 and launch.launcher and stderr.startswith(BOUNDS_FAILED):
        raise SandboxError(ErrorCode.UNAVAILABLE, BOUNDS_FAILED)  # the launcher gave up
    return {
        "exit_code": exit_code,
        "stdout": out.render(clean),
        "stderr": stderr,
        "timed_out": exit_code is None,
        "truncated": out.truncated or err.truncated,
        "duration_ms": round(duration_ms, 3),
    }


def execute(
    ctx: Context, command: Any, timeout: Any = None, env: Any = None, cwd: Any = None
) -> Dict[str, Any]:
    return _execute(ctx, command, timeout, env, cwd)


def execute_stream(
    ctx: Context,
    command: Any,
    timeout: Any = None,
    env: Any = None,
    cwd: Any = None,
    *,
    emit: Emit,
    cancel: Optional[Cancel] = None,
) -> Dict[str, Any]:
    """`execute`, with each piece of output passed to `emit` as it happens (cleaned, in
    order per stream); the result is `execute`'s. A set `cancel` ends the command."""
    return _execute(ctx, command, timeout, env, cwd, emit, cancel)
