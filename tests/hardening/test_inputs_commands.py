"""Hostile commands on every provider: floods of output, commands that ignore SIGTERM,
background children, a memory hog and fork bombs. Each call returns within its own
timeout plus the runtime's SIGTERM grace, with the documented result, leaves nothing of
its process group running, and the box answers the next call (`inputs_support.Cases`).

A fork bomb only runs after a probe (a Python forking up to PROBE_MAX sleepers) showed
that process creation is bounded in the box: never an unbounded bomb on this host. The
local box has small command bounds (`exec_max_processes` 64, `exec_memory_bytes`
256 MiB); Docker and the E2B stand-in bound a box at 256 tasks, Kubernetes through the
kubelet's `podPidsLimit` (256 on the dev cluster).

What a bomb's call returns depends on a race the runtime does not control. In
`b() { b | b & }; b` the shell forks the two halves of the pipeline one after the
other; when the first half's descendants fill the process table before the second fork
(the shell was not scheduled in time: a loaded machine), bash retries the fork after
1, 2, 4 and 8 s. The shell then exits late or the call reaches its timeout. Both are
correct: the case checks the bound, not which one happened. Where the outcome is
decided by the command itself (the bomb started by a background subshell, so the shell
needs no fork after it; or a shell that sleeps after the bomb) the case checks it too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sandkit import ErrorCode, SandboxError

from .figures import Figures
from .inputs_support import (
    BOX_LIMITS,
    GIB,
    MIB,
    SLACK_S,
    Box,
    Cases,
    Unbounded,
    opened_box,
)
from .targets import GVISOR_KINDS, Target

TERM_GRACE_S = 1.0  # SIGTERM to SIGKILL of a command's group (docs/operations.md)
# How long a killed process may take to disappear (or a freed process slot to come back)
# before it counts as left running. Polled: a quiet machine waits milliseconds.
GONE_S = 30.0
PROBE_MAX = 400  # a probe that reaches this many processes found no bound
PROBE_TIMEOUT_S = 60.0
BOMB_SPARE = 8  # process slots that may still be held by zombies waiting for their reaper

# Forks sleeping children until fork fails or PROBE_MAX is reached; prints the count.
# It kills and reaps them itself: left to the group kill they would be orphans, and an
# orphan holds its process slot until init reaps it (on local the host's init, which
# may take seconds), so the next probe or bomb would find the slots still taken.
PROBE = f"""\
import os, signal, time
children = []
try:
    while len(children) < {PROBE_MAX}:
        pid = os.fork()
        if pid == 0:
            time.sleep(20)
            os._exit(0)
        children.append(pid)
except OSError:
    pass
for pid in children:
    os.kill(pid, signal.SIGKILL)
for pid in children:
    os.waitpid(pid, 0)
print(len(children))
"""
# Touches up to 4 GiB, 64 MiB at a time; "survived" means no limit stopped it.
HOG = """\
chunks = []
for _ in range(64):
    chunks.append(b"x" * (64 << 20))
print("survived", len(chunks))
"""
# Exit 0 when PID is gone (or a zombie waiting for its reaper).
DEAD = 's=$(sed -n "s/^State:[[:space:]]*\\([A-Z]\\).*/\\1/p" /proc/{pid}/status 2>/dev/null); ' + (
    '[ -z "$s" ] || [ "$s" = Z ]'
)
# Prints the box's processes counted by (state, parent pid).
PROCESSES = """\
import collections, os
seen = collections.Counter()
for name in os.listdir("/proc"):
    try:
        with open("/proc/%s/stat" % name, "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        continue
    seen[(fields[0].decode(), int(fields[1]))] += 1
print(dict(sorted(seen.items())))
"""
# Prints how many processes of group argv[1] still run (zombies do not). Its own group is
# left out: a new group could get the old id if the kernel reused the number.
GROUP_LEFT = """\
import os, sys
pgid = int(sys.argv[1])
left = 0
names = os.listdir("/proc") if pgid != os.getpgrp() else []
for name in names:
    try:
        with open("/proc/%s/stat" % name, "rb") as f:
            data = f.read()
    except OSError:
        continue
    fields = data[data.rfind(b")") + 1 :].split()
    left += len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pgid
print(left)
"""
BOMB = "bomb() { bomb | bomb & }; bomb"


def reacquire(box: Box) -> None:
    """After the box died: acquire the key again (polled while the platform notices the
    death) until a new agent answers with the module's files; the box then counts as
    the new agent's."""
    deadline = time.monotonic() + GONE_S
    while True:
        try:
            box.sandbox = box.provider.acquire(box.key)
            found = box.sandbox.read_file("probe.py")
            assert "os.fork()" in found.content
            box.agent_pid = box.run("echo $PPID", timeout=30).stdout.strip()
            return
        except SandboxError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def call_bound(timeout: float) -> float:
    """A command's call returns by then, whatever it does: its timeout, the grace, slack."""
    return timeout + TERM_GRACE_S + SLACK_S


@pytest.fixture(scope="module")
def box(target: Target, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    """The module's box, one per kind, with the probe and the hog in its workspace."""
    data_root = tmp_path_factory.mktemp(f"commands-{target.kind}")
    with opened_box(target, data_root, "commands", BOX_LIMITS) as made:
        made.sandbox.write_file("probe.py", PROBE)
        made.sandbox.write_file("hog.py", HOG)
        made.sandbox.write_file("group_left.py", GROUP_LEFT)
        made.sandbox.write_file("processes.py", PROCESSES)
        yield made


@pytest.fixture
def cases(box: Box, figures: Figures) -> Cases:
    return Cases(box, figures)


def poll(check: Callable[[], bool], wait_s: float) -> bool:
    """True as soon as `check()` is; False if it is still false after `wait_s`."""
    end = time.monotonic() + wait_s
    while not check():
        if time.monotonic() > end:
            return False
        time.sleep(0.1)
    return True


def dead(box: Box, pid: str, wait_s: float = GONE_S) -> bool:
    """Is a process of the box gone (or a zombie)? Waits up to `wait_s` for it to go."""
    return poll(lambda: box.run(DEAD.format(pid=int(pid)), timeout=30).exit_code == 0, wait_s)


def group_left(box: Box, pgid: int) -> int:
    """Processes of group `pgid` still running in the box (zombies not counted)."""
    result = box.run(f"python3 group_left.py {pgid}", timeout=30)
    assert result.exit_code == 0, result
    return int(result.stdout)


def processes(box: Box) -> str:
    """The box's processes counted by (state, parent pid), for a failure's message."""
    result = box.run("python3 processes.py", timeout=30)
    return result.stdout.strip() or f"(could not list: {result.stderr[-200:]!r})"


def test_hostile_commands(box: Box, cases: Cases) -> None:
    cap = BOX_LIMITS.exec_output_bytes

    def printed(command: str, ends: str, streams: tuple[str, ...]) -> Callable[[], Any]:
        def case() -> Any:
            result = box.run(command, timeout=120)
            assert result.exit_code == 0 and not result.timed_out, result.stderr[-300:]
            for name in streams:
                text = getattr(result, name)
                if len(text) > cap + 200 or not result.truncated:
                    raise Unbounded(f"{name}: {len(text)} characters, truncated={result.truncated}")
                assert text.endswith(ends), text[-100:]
            return result

        return case

    # Under gVisor a pipe moves ~15 MB/s here (1 GiB: 70-95 s of a two-core CI machine);
    # the cap, the head and tail kept and the bound are the same code at a quarter of it.
    flood, size = (256 * MIB, "256 MiB") if box.kind in GVISOR_KINDS else (GIB, "1 GiB")
    cases.run(
        f"print {size}",
        call_bound(120),
        printed(f"head -c {flood} /dev/zero | tr '\\0' x; echo END", "xEND\n", ("stdout",)),
    )
    cases.run(
        f"print {size} on both streams",
        call_bound(120),
        printed(
            f"yes out | head -c {flood} & yes err | head -c {flood} >&2; wait; "
            "echo END; echo END >&2",
            "END\n",
            ("stdout", "stderr"),
        ),
    )
    cases.run(
        "print 64 MiB of random bytes",
        call_bound(120),
        printed(f"head -c {64 * MIB} /dev/urandom; echo; echo END", "END\n", ("stdout",)),
    )

    def times_out(command: str) -> Callable[[], Any]:
        def case() -> Any:
            result = box.run(command, timeout=1)
            assert (result.timed_out, result.exit_code) == (True, None), result
            return result

        return case

    cases.run("ignores SIGTERM, sleeps", call_bound(1), times_out("trap '' TERM; sleep 600"))
    cases.run(
        "ignores SIGTERM, spins", call_bound(1), times_out("trap '' TERM; while :; do :; done")
    )

    def ends_with_the_call(command: str, *, survives: bool = False) -> Callable[[], Any]:
        def case() -> Any:
            result = box.run(command, timeout=30)
            assert result.exit_code == 0 and not result.timed_out, result
            pid = result.stdout.split()[-1]
            if survives:  # its own session: it outlives the call, as documented
                assert not dead(box, pid, wait_s=0), f"{pid} did not outlive the call"
                assert box.run(f"kill -9 {pid}").exit_code == 0
            if not dead(box, pid):
                raise Unbounded(f"pid {pid} still runs {GONE_S:.0f} s after the call")
            return result

        return case

    cases.run("background sleep on stdout", SLACK_S, ends_with_the_call("sleep 600 & echo $!"))
    cases.run(
        "background sleep redirected",
        SLACK_S,
        ends_with_the_call("nohup sleep 600 >/dev/null 2>&1 & echo $!"),
    )
    cases.run(
        "background child ignoring SIGTERM",
        TERM_GRACE_S + SLACK_S,
        ends_with_the_call(
            "(trap '' TERM; touch ready; exec sleep 600) & "
            "until [ -e ready ]; do sleep 0.01; done; rm ready; echo $!"
        ),
    )
    cases.run(
        "child in its own session",
        SLACK_S,
        # The documented way out: sh runs in a new session and starts the sleep
        # there; -w: setsid returns only after sh did, so it left before the shell.
        ends_with_the_call("setsid -w sh -c 'sleep 600 >/dev/null 2>&1 & echo $!'", survives=True),
    )

    def writer() -> Any:
        # The shell exits once the writer has written (a marker, not a sleep): its
        # output up to then is kept, and the writer ends with the call.
        result = box.run(
            "(echo tick; touch ticked; while :; do echo tick; sleep 0.05; done) & "
            "echo $! > writer.pid; until [ -e ticked ]; do sleep 0.01; done; rm ticked; "
            "echo main-done",
            timeout=30,
        )
        assert "tick" in result.stdout and "main-done" in result.stdout, result
        pid = box.sandbox.read_file("writer.pid").content.strip()
        if not dead(box, pid):
            raise Unbounded(f"background writer {pid} still runs")
        return result

    cases.run("background writer on stdout", SLACK_S, writer)

    def hog() -> Any:
        try:
            result = box.run("python3 hog.py", timeout=120)
        except SandboxError as exc:
            # gVisor has no OOM handling of its own: over the limit the host kills one of
            # the sandbox's processes, the command's (as runc: exit 137) or, when it holds
            # more memory at that moment, the Sentry, and the box ends whole. That outcome
            # is the documented one for a dead box (docs/security.md): UNAVAILABLE, then
            # the next acquire brings the box back with its files.
            if box.kind not in GVISOR_KINDS or exc.code is not ErrorCode.UNAVAILABLE:
                raise
            reacquire(box)
            print(f"\n[{box.kind}] memory hog: the box ended whole; acquired again")
            return None
        if "survived" in result.stdout:
            raise Unbounded("the memory hog touched 4 GiB")
        assert result.exit_code not in (0, None), result
        return result

    cases.run("memory hog", call_bound(120), hog)

    def probe() -> int:
        result = box.run("python3 probe.py", timeout=PROBE_TIMEOUT_S)
        assert result.exit_code == 0, result
        return int(result.stdout)

    capacity: list[int] = []

    def bounded_forks() -> Any:
        count = probe()
        capacity.append(count)
        if count >= PROBE_MAX:
            raise Unbounded(f"{count} processes made: nothing bounds a fork bomb")
        return count

    cases.run("fork probe", call_bound(PROBE_TIMEOUT_S), bounded_forks)
    if capacity and capacity[0] < PROBE_MAX:  # never run a fork bomb nothing bounds
        fork_bombs(box, cases, probe, capacity[0])
    cases.finish()


def fork_bombs(box: Box, cases: Cases, probe: Callable[[], int], capacity: int) -> None:
    """Three fork bombs, each bounded by its call's timeout, then gone without a trace.

    `shell_exits` is what the call must report when the command decides it; None for
    the bomb whose shell races it for process slots (see the module docstring).
    """

    def bomb(command: str, timeout: float, shell_exits: bool | None) -> Callable[[], Any]:
        def case() -> Any:
            started = time.monotonic()
            result = box.run(f"echo $$; {command}", timeout=timeout)  # $$: the group's id
            returned = time.monotonic() - started
            if returned > call_bound(timeout):
                raise Unbounded(f"returned after {returned:.1f} s (timeout {timeout:.0f} s)")
            assert result.timed_out == (result.exit_code is None), result
            if shell_exits is not None:
                assert result.timed_out == (not shell_exits), result
            pgid = int(result.stdout.split()[0])
            # The next calls work at once (they must fork too), and the bomb is gone.
            if not poll(lambda: group_left(box, pgid) == 0, GONE_S):
                raise Unbounded(f"{group_left(box, pgid)} processes of the bomb still run")
            free: list[int] = []  # what each probe found

            def capacity_back() -> bool:
                free.append(probe())
                return free[-1] >= capacity - BOMB_SPARE

            if not poll(capacity_back, GONE_S):
                raise Unbounded(
                    f"capacity {free[-1]} of {capacity} after the bomb; the box's processes "
                    f"by (state, parent): {processes(box)}"
                )
            print(
                f"\n[{box.kind}] {command!r}: returned in {returned:.2f} s "
                f"(timed_out={result.timed_out}), nothing left and {free[-1]} of {capacity} "
                f"processes free again after {time.monotonic() - started:.2f} s"
            )
            return result

        return case

    # Cleanup is polled (GONE_S each): the bound covers the call and both polls.
    def bound(timeout: float) -> float:
        return call_bound(timeout) + 2 * GONE_S

    cases.run("fork bomb, shell races it", bound(5.0), bomb(BOMB, 5.0, None))
    background = f"({BOMB}) &"  # the shell forks once, before the bomb exists, then exits
    cases.run("fork bomb, shell exits", bound(30.0), bomb(background, 30.0, True))
    cases.run("fork bomb, shell waits", bound(3.0), bomb(f"{BOMB}; sleep 60", 3.0, False))
