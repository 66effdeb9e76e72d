"""A shell started before its command: the fork, exec and start of bash off a call's path.

Starting a process is most of what a short command costs (measured in a Docker box:
`bash -c true` 1.2 ms, of which 0.2 ms is bash running it). So after a command is handed
over, the sandbox starts the next one's shell ahead: `bash -c WAIT`, with the argv0,
environment, working directory, session, bounds and pipes a command gets, blocked reading
one NUL-ended command from a pipe. The next call with the same start takes it, writes its
command, and from then on it is that command's shell: pid, process group, output and exit
code are the command's.

WAIT keeps what the command sees as under `bash -c COMMAND`: BASH_EXECUTION_STRING is
the command, `$_` the shell's path, `$LINENO` counts from 1, `$SECONDS` from the hand-over,
its pipes' descriptors are closed, and a command bash cannot parse (checked first in a
subshell under `set -n`, which runs nothing) is run by `exec bash -c COMMAND`, so its
syntax error reads as it does there. Before running anything it says it has the command
(one byte back): a shell killed meanwhile never does, and the call starts its own. What
differs is written down in docs/operations.md (#ready-shells): bash does not exec the last
command itself, and `set` lists SECONDS and PIPESTATUS.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import weakref

from . import fdwait

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from typing import Callable, Hashable, Optional, Tuple

    # Starts `bash -c WAIT` with the command pipe's read end and the ack's write end.
    Starter = Callable[[int, int], "subprocess.Popen[bytes]"]

# bash reads a pipe one byte per system call: longer commands start their own shell.
MAX_COMMAND_BYTES = 4096
# How long a hand-over waits for the shell to say it has the command (it is woken by it).
ACK_WAIT_S = 30.0

# One line, so that $LINENO in the command counts from 1. {fd}: the command pipe's read
# end; {ack}: where it says it has the command (one killed before that never runs it).
WAIT = (
    "IFS= read -r -d '' BASH_EXECUTION_STRING <&{fd} || exit 0; "
    "printf . >&{ack}; exec {fd}<&- {ack}>&-; "
    '( eval "set -n"$\'\\n\'"$BASH_EXECUTION_STRING" ) 2>/dev/null'
    ' || exec "$0" -c "$BASH_EXECUTION_STRING"; '
    'SECONDS=0; : "$0"; eval "$BASH_EXECUTION_STRING"'
)


def usable(shell: str, command: str) -> bool:
    """Can a ready shell run `command`? (bash only: `read -d ''` is not POSIX.)"""
    return (
        os.path.basename(shell) == "bash"
        and len(command.encode("utf-8", "surrogateescape")) < MAX_COMMAND_BYTES
    )


class _Ready:
    """One started shell: the write end of its command pipe, the read end of its ack."""

    def __init__(self, key: Hashable, start: Starter) -> None:
        self.key = key
        command_in, self._feed = os.pipe()
        self._ack, ack_out = os.pipe()
        try:
            self.proc = start(command_in, ack_out)
        except BaseException:
            self._close()
            raise
        finally:
            os.close(command_in)
            os.close(ack_out)

    def hand(self, command: str) -> bool:
        """Give the shell its command; False when it did not take it (then discard it)."""
        try:
            if self.proc.poll() is not None:
                return False
            # A command may have stopped it (it is the sandbox user's process); SIGCONT
            # also drops a stop still pending. It is unreaped: the pid is still its own.
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
            data = command.encode("utf-8", "surrogateescape") + b"\0"
            try:
                # Less than a pipe's capacity, into an empty pipe: all of it or nothing
                # (were it less, `read` would end at EOF without the NUL: exit, nothing run).
                if os.write(self._feed, data) != len(data):
                    return False
            except OSError:  # it exited meanwhile (EPIPE)
                return False
            os.close(self._feed)
            self._feed = -1
            # Killed meanwhile (a command's `kill` lands late under load), it never says so:
            # its end of the ack pipe closes. No word in time (stopped again): the call's own
            # timeout bounds it, as any command's.
            if fdwait.readable([self._ack], ACK_WAIT_S):
                return os.read(self._ack, 1) == b"."
            return True
        finally:
            self._close()

    def _close(self) -> None:
        for fd in (self._feed, self._ack):
            if fd >= 0:
                os.close(fd)
        self._feed = self._ack = -1

    def discard(self) -> None:
        """End an idle shell (EOF on its pipe) and reap it; nothing of it is left."""
        self._close()
        proc = self.proc
        if proc.returncode is None:  # not reaped: the group id is still its own
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class ReadyShells:
    """A sandbox's shell started ahead, for the next command with the same start (see
    _Slot). Closed when the sandbox is (release, dormancy) or, failing that, when it is
    garbage: an idle shell never outlives the context that would use it."""

    def __init__(self) -> None:
        self._slot = _Slot()
        weakref.finalize(self, self._slot.close)

    @property
    def ready_pid(self) -> Optional[int]:
        """The pid of the shell waiting now, if any (diagnostics and tests)."""
        return self._slot.ready_pid

    def take(self, key: Hashable, command: str) -> Optional[subprocess.Popen[bytes]]:
        """The ready shell, running `command` now; None when there is none for `key`."""
        return self._slot.take(key, command)

    def refill(self, key: Hashable, start: Starter) -> None:
        """Have a shell for `key` started ahead (soon, once the sandbox is quiet)."""
        self._slot.refill(key, start)

    def discard(self) -> None:
        """End the ready shell, if any (another may start after)."""
        self._slot.discard()

    def close(self) -> None:
        """End the ready shell and start no more."""
        self._slot.close()


class _Slot:
    """The shell itself and the thread that starts it.

    A thread of its own starts the shell once the sandbox has been quiet for QUIET_S: a start
    costs ~1 ms of CPU (Python waits ~0.9 ms for the child's exec, then bash loads), and
    made at once it would compete with the answer going out and the next call coming in
    (measured in a Docker box on two cores: execute 1.86 ms at once, 1.55 ms after a
    pause). Back-to-back calls therefore start their own shells, as before."""

    QUIET_S = 0.002

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._ready: Optional[_Ready] = None
        self._wanted: Optional[Tuple[Hashable, Starter]] = None
        self._last_call = 0.0
        self._starter: Optional[threading.Thread] = None
        self._starting = False
        self._closed = False

    @property
    def ready_pid(self) -> Optional[int]:
        ready = self._ready
        return ready.proc.pid if ready is not None else None

    def take(self, key: Hashable, command: str) -> Optional[subprocess.Popen[bytes]]:
        with self._lock:
            self._last_call = time.monotonic()
            ready, self._ready = self._ready, None
        if ready is None:
            return None
        if ready.key == key and ready.hand(command):
            return ready.proc
        ready.discard()  # another start (env, cwd), or it died
        return None

    def refill(self, key: Hashable, start: Starter) -> None:
        with self._lock:
            if self._closed:
                return
            self._last_call = time.monotonic()
            self._wanted = (key, start)
            if self._starter is None:
                self._starter = threading.Thread(
                    target=self._start_loop, name="sandkit-ready-shell", daemon=True
                )
                self._starter.start()
            self._lock.notify()

    def discard(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, None
        if ready is not None:
            ready.discard()

    def close(self) -> None:
        """A start in progress is waited for, so that nothing it made outlives this."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
            self._lock.wait_for(lambda: not self._starting)
        self.discard()

    def _start_loop(self) -> None:
        while True:
            with self._lock:
                if not self._wait_until_due():
                    return
                assert self._wanted is not None
                (key, start), self._wanted = self._wanted, None
                stale, self._ready = self._ready, None
                self._starting = True
            try:
                if stale is not None:  # made for another start
                    stale.discard()
                self._place(_start_quietly(key, start))
            finally:
                del key, start  # what the start refers to need not live on while idle
                with self._lock:
                    self._starting = False
                    self._lock.notify_all()

    def _place(self, ready: Optional[_Ready]) -> None:
        if ready is None:
            return
        with self._lock:
            if not self._closed and self._ready is None:
                self._ready, ready = ready, None
        if ready is not None:  # closed meanwhile
            ready.discard()

    def _wait_until_due(self) -> bool:
        """Under the lock: until a start is wanted and the sandbox is quiet; False once
        closed."""
        while not self._closed:
            wanted, ready = self._wanted, self._ready
            if wanted is None or (ready is not None and ready.key == wanted[0]):
                self._wanted = None  # nothing to start, or the ready one fits
                self._lock.wait()
                continue
            left = self._last_call + self.QUIET_S - time.monotonic()
            if left <= 0:
                return True
            self._lock.wait(left)
        return False


def _start_quietly(key: Hashable, start: Starter) -> Optional[_Ready]:
    """A started shell, or None when it cannot start now: the next command's own start
    reports why (too many processes, a launcher that fails, ...)."""
    try:
        return _Ready(key, start)
    except Exception:
        return None
