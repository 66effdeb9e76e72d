"""Hostile background processes and streams on every provider (issue 12).

Twenty background processes flooding output at once; a fork bomb as a background
process; processes that ignore SIGTERM at `end_processes`, `release` and `shutdown`;
stream consumers that disappear (a `break`, a dropped iterator, a cancelled asyncio
task, a consumer leaving a flood); the box killed from outside while streams run; what
is left after `shutdown`; and the codes of the hostile calls (past `process_max_live`,
stdin of an ended process or of one that never reads, bogus signals, offsets out of
range, bad waits and handles).

What a user can rely on, and what each case checks: every call returns (a result or one
clear `SandboxError` with a stable code, never a hang or an exception from deep inside),
a process that was ended is gone — seen from outside the box, through the platform's
own exec or this host's /proc (`processes_support`) — and the box answers the next
call over the same channel. Waits are for events (output seen, a process gone, a fork
failing), polled up to bounds that only a real failure reaches.

A fork bomb only runs after a probe showed that process creation is bounded in the box
(as in test_inputs_commands): never an unbounded bomb on this host.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandkit import ErrorCode, ExecuteResult, SandboxError, SandboxKey
from sandkit.config import LimitsSettings
from sandkit.models import OutputChunk, ProcessInfo, ProcessOutput
from sandkit.provider import SandboxProvider
from sandkit.runtime.processes import STDIN_STALL_S

from .faults_support import ERROR_BOUND_S, wait_no_boxes
from .inputs_support import KIB, SLACK_S, Box, fails_with, opened_box
from .processes_support import (
    GONE_S,
    box_ids,
    box_marked,
    box_state,
    host_marked,
    host_sees_boxes,
    host_tasks_of,
    poll,
    rss_bytes,
)
from .provider_process import WORKSPACE, agents_in_box, provider_process
from .targets import GVISOR_KINDS, K8S_SMALL_RESOURCES, LIMITS, SECRET, Target

TERM_GRACE_S = 1.0  # SIGTERM to SIGKILL of a process group (docs/operations.md)
FLOODS = 20
FLOOD_BYTES = 4 * 1024 * KIB  # each flood prints at least this much before the checks
# Under gVisor a pipe moves ~15 MB/s on a loaded CI machine: less, still 32x the buffer.
GVISOR_FLOOD_BYTES = 2 * 1024 * KIB
OUTPUT_BYTES = 64 * KIB  # process_output_bytes of the module's box: head + tail kept
MAX_LIVE = 24  # process_max_live of the module's box (the floods plus room)
HEAD_CHECKED = 256  # the first bytes of each flood are checked whole (inside the head)
# exec_max_processes: the bound of the local sandbox's cgroup, and under gVisor the box's
# in-kernel one (runtime/appkernel.py). Small, as in test_inputs_commands: under gVisor
# every forked Python costs the box ~4 MiB of its memory, and 256 of them (the default)
# took a 1 GiB box to its memory limit, where the host kills the whole box (the Sentry).
BOX_PROCESSES = 64
PROBE_MAX = 400  # a fork probe that reaches this many processes found no bound
BOMB_SPARE = 8  # process slots that may still be held by zombies waiting for a reaper
# A call that must answer does so within this (round trips on two loaded cores, and the
# SIGTERM grace where a call ends processes); only a hang reaches it.
ANSWER_S = TERM_GRACE_S + SLACK_S + 25.0

# Forks sleeping children until fork fails or PROBE_MAX is reached, kills and reaps
# them, prints the count (see test_inputs_commands.PROBE).
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
# Exit 0 if one fork works, 1 if it fails (the box is full). Run by the interpreter's own
# path: a wrapper script on PATH (pyenv's shim on a host) would fork through bash, whose
# fork retry waits 15 s when the box is full.
FORK_ONCE = (
    "import os, sys\ntry:\n pid = os.fork()\nexcept OSError:\n sys.exit(1)\n"
    "if pid == 0:\n os._exit(0)\nos.waitpid(pid, 0)"
)
BOMB = "bomb() { bomb | bomb & }; bomb"


def marker(name: str) -> str:
    return f"hk{name}{uuid.uuid4().hex[:10]}"


# The limits of every provider the module makes.
PROCESS_LIMITS: LimitsSettings = LIMITS.model_copy(
    update={
        "process_max_live": MAX_LIVE,
        "process_output_bytes": OUTPUT_BYTES,
        "exec_default_timeout_s": 60.0,
        "exec_max_processes": BOX_PROCESSES,
    }
)


@pytest.fixture(scope="module")
def box(target: Target, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    data_root = tmp_path_factory.mktemp(f"procs-{target.kind}")
    with opened_box(target, data_root, "procs", PROCESS_LIMITS) as made:
        made.sandbox.write_file("probe.py", PROBE)
        made.sandbox.write_file("fork_once.py", FORK_ONCE)
        made.sandbox.write_file("notes.txt", "notes\n" * 100)
        yield made


@pytest.fixture(scope="module")
def python(box: Box) -> str:
    """The box's python3 interpreter, by its real path (see FORK_ONCE)."""
    found = box.sandbox.execute("python3 -c 'import sys; print(sys.executable)'", timeout=30)
    assert found.exit_code == 0 and found.stdout.startswith("/"), found
    return found.stdout.strip()


@pytest.fixture(autouse=True)
def _nothing_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each case starts and ends with no background process in the module's box."""
    yield
    if "box" in request.fixturenames:
        made: Box = request.getfixturevalue("box")
        with contextlib.suppress(SandboxError):
            made.sandbox.end_processes()


def text_bytes(page: ProcessOutput) -> int:
    return sum(len(chunk.text.encode()) for chunk in page.chunks)


def checked_read(box: Box, info: ProcessInfo, since: int, wait_s: float = 0.0) -> ProcessOutput:
    """One process_output, with the offset arithmetic every page must satisfy."""
    page = box.sandbox.process_output(info.handle, since=since, wait_s=wait_s)
    got = text_bytes(page)
    assert page.offset == since + page.elided_bytes + got, (since, page.offset, page.elided_bytes)
    assert got <= box.sandbox.limits.exec_output_bytes, f"one read returned {got} bytes"
    if since < OUTPUT_BYTES // 2:  # inside the head: nothing before it was elided
        assert page.elided_bytes == 0, (since, page.elided_bytes)
    return page


def read_all(box: Box, info: ProcessInfo) -> tuple[str, int, int]:
    """Everything kept of a process that ended: text, bytes elided, the final offset."""
    offset, text, elided = 0, "", 0
    while True:
        page = checked_read(box, info, offset)
        text += page.stdout + page.stderr
        elided += page.elided_bytes
        if page.offset == offset:
            assert page.chunks == [] and not page.running, page
            return text, elided, offset
        offset = page.offset


def wait_output(box: Box, info: ProcessInfo, needle: str) -> str:
    """The process's output once it holds `needle` (long polls, bounded)."""
    deadline = time.monotonic() + ANSWER_S
    offset, text = 0, ""
    while needle not in text:
        left = deadline - time.monotonic()
        assert left > 0, f"{needle!r} not in the output of {info.command!r}: {text[-300:]!r}"
        page = box.sandbox.process_output(info.handle, since=offset, wait_s=min(left, 5.0))
        text += page.stdout + page.stderr
        offset = page.offset
        assert page.running or needle in text, f"{info.command!r} ended: {page}"
    return text


def _until_none(find: Callable[[], list[str]], wait_s: float = GONE_S) -> list[str]:
    """[] once `find()` finds nothing (polled); what it still finds after `wait_s`."""
    left: list[str] = []

    def check() -> bool:
        left[:] = find()
        return not left

    poll(check, wait_s, pause=0.2)
    return left


def gone(target: Target, key: SandboxKey, mark: str, wait_s: float = GONE_S) -> list[str]:
    """The marked processes of the key's box, seen through the platform, once gone."""
    return _until_none(lambda: box_marked(target, key, mark), wait_s)


def host_gone(mark: str) -> list[str]:
    """The marked processes on this host, once gone."""
    return _until_none(lambda: host_marked(mark))


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    value = call()
    return value, time.monotonic() - started


def procd_rss(box: Box) -> int:
    """Resident memory of the box's process supervisor (read in the box)."""
    script = (
        "import os\n"
        "for p in os.listdir('/proc'):\n"
        "    try:\n"
        "        argv = open('/proc/%s/cmdline' % p, 'rb').read().split(b'\\0')\n"
        "    except OSError:\n"
        "        continue\n"
        "    if b'--procd' in argv:\n"
        "        print(open('/proc/%s/status' % p).read())\n"
    )
    found = box.sandbox.execute(f"python3 -c {shlex_quote(script)}", timeout=30)
    assert found.exit_code == 0 and "VmRSS" in found.stdout, found
    return rss_bytes(found.stdout)


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def own_rss() -> int:
    return rss_bytes(Path("/proc/self/status").read_text())


# -- twenty floods ---------------------------------------------------------------------


def test_twenty_background_floods(box: Box) -> None:
    """Twenty processes print without end: each keeps its bounded head and tail with
    consistent offsets, the box answers meanwhile, and no process's memory grows."""
    sandbox = box.sandbox
    infos = []
    for i in range(FLOODS):
        # One prints the configured secret: never shown, in part or whole.
        word = SECRET if i == 0 else f"flood-{i}"
        infos.append(sandbox.spawn(f"echo head-{i}; exec yes {word}"))
    # Memory from here on (the supervisor exists once something was spawned).
    host_before = own_rss()
    procd_before = procd_rss(box) if box.kind != "local" else 0
    lines = ["[REDACTED]" if i == 0 else f"flood-{i}" for i in range(FLOODS)]
    offsets = [0] * FLOODS
    heads = [""] * FLOODS
    answers: list[float] = []
    # Until every flood has printed FLOOD_BYTES: read each in turn, check each page, and
    # between rounds make ordinary calls that must answer exactly.
    each = GVISOR_FLOOD_BYTES if box.kind in GVISOR_KINDS else FLOOD_BYTES
    # Memory held past a quarter of what flowed would be the output kept unbounded.
    growth_bound = FLOODS * each // 4
    while min(offsets) < each:
        for i, info in enumerate(infos):
            page = checked_read(box, info, offsets[i], wait_s=5.0)
            assert page.running, f"flood {i} ended: {page}"
            text = page.stdout
            assert SECRET not in text and SECRET[: len(SECRET) // 2] not in text
            if offsets[i] < HEAD_CHECKED:  # the first pages: the head, whole
                heads[i] += text
            else:
                inner = text.split("\n")[1:-1]  # the first and last line may be cut
                assert set(inner) <= {lines[i]}, f"flood {i}: {set(inner) - {lines[i]}}"
            offsets[i] = page.offset
        content, spent = timed(lambda: sandbox.read_file("notes.txt").content)
        assert content == "notes\n" * 100
        answers.append(spent)
        assert sandbox.execute("echo ok", timeout=30).stdout == "ok\n"
    for i, head in enumerate(heads):
        assert head.startswith(f"head-{i}\n{lines[i]}\n"), head[:80]
    host_growth = own_rss() - host_before
    procd_growth = procd_rss(box) - procd_before if box.kind != "local" else 0
    flowed = sum(offsets)
    assert flowed >= FLOODS * each
    # The local processes live in this process: its growth covers their buffers too.
    assert host_growth < growth_bound, f"this process grew {host_growth >> 20} MiB"
    assert procd_growth < growth_bound, f"the supervisor grew {procd_growth >> 20} MiB"
    ended, spent = timed(sandbox.end_processes)
    assert spent < ANSWER_S
    assert sorted(p.handle for p in ended.processes) == sorted(i.handle for i in infos)
    assert all(p.exit_code == 143 and not p.running for p in ended.processes), ended
    for i, info in enumerate(infos):
        text, elided, total = read_all(box, info)
        assert total >= offsets[i]
        assert len(text.encode()) + elided == total
        assert len(text.encode()) <= OUTPUT_BYTES, len(text)
        assert elided > 0 and text.startswith(f"head-{i}\n")
        assert SECRET not in text
    print(
        f"\n[{box.kind}] {FLOODS} floods: {flowed >> 20} MiB printed; read_file answered "
        f"{len(answers)} times, max {max(answers) * 1000:.1f} ms; this process grew "
        f"{host_growth >> 20} MiB, the supervisor {procd_growth >> 20} MiB; "
        f"end_processes {spent:.2f} s"
    )


# -- a fork bomb -----------------------------------------------------------------------


def probe(box: Box) -> int:
    result = box.sandbox.execute("python3 probe.py", timeout=60)
    assert result.exit_code == 0, result
    return int(result.stdout)


def full(box: Box, python: str) -> bool:
    """Does a fork in the box fail (the bomb holds every slot)? Any other error fails."""
    try:
        result = box.sandbox.execute(f"exec {python} fork_once.py", timeout=30)
    except SandboxError as exc:
        assert exc.code is ErrorCode.CAPACITY, f"{exc.code.value}: {exc.message}"
        return True
    return result.exit_code != 0


def test_background_fork_bomb(box: Box, python: str) -> None:
    """A bomb spawned in the background fills the box up to its process bound, the box
    still answers, end_processes (what release, destroy and shutdown run) ends it, and
    then nothing of it is left. (signal_process is the same group kill, checked below.)"""
    capacity = probe(box)
    assert capacity < PROBE_MAX, f"{capacity} processes made: nothing bounds a fork bomb"
    mark = marker("bomb")
    # The shell starts the bomb, then becomes a marked sleep (exec: no fork needed).
    # Every subshell of the bomb carries the -c text, so the marker too.
    info = box.sandbox.spawn(f"echo started; {BOMB}; exec -a {mark} sleep 600")
    assert poll(lambda: full(box, python), ANSWER_S, pause=0.05), "the bomb never filled the box"
    # The box answers while the bomb holds it (nothing here needs a new process).
    assert box.sandbox.read_file("notes.txt").content == "notes\n" * 100
    listed = {p.handle: p for p in box.sandbox.list_processes().processes}
    assert listed[info.handle].running
    ended, spent = timed(box.sandbox.end_processes)
    assert [p.handle for p in ended.processes] == [info.handle]
    assert not ended.processes[0].running and ended.processes[0].exit_code in (137, 143)
    assert spent < ANSWER_S
    left = gone(box.target, box.key, mark)
    assert not left, f"{len(left)} processes of the bomb still run: {left[:3]}"
    free: list[int] = []

    def capacity_back() -> bool:
        free.append(probe(box))
        return free[-1] >= capacity - BOMB_SPARE

    assert poll(capacity_back, GONE_S), f"capacity {free[-1]} of {capacity} after the bomb"
    print(
        f"\n[{box.kind}] background bomb ended by end_processes in {spent:.2f} s; "
        f"{free[-1]} of {capacity} processes free again"
    )


# -- SIGTERM ignored -------------------------------------------------------------------


def ignoring(mark: str) -> str:
    """A process group that ignores SIGTERM: the shell's child and the shell itself."""
    return f"trap '' TERM; (exec -a {mark} sleep 600) & echo ready; exec -a {mark} sleep 600"


def test_sigterm_ignored_at_end_processes(box: Box) -> None:
    mark = marker("term")
    info = box.sandbox.spawn(ignoring(mark))
    wait_output(box, info, "ready")
    assert len(box_marked(box.target, box.key, mark)) == 2
    box.sandbox.signal_process(info.handle, "TERM")
    # Ignored: still running after a wait (a correct outcome never changes with time).
    assert box.sandbox.wait_process(info.handle, timeout=TERM_GRACE_S / 2).running
    ended, spent = timed(box.sandbox.end_processes)
    assert spent < ANSWER_S
    (entry,) = ended.processes
    assert entry.handle == info.handle and not entry.running and entry.exit_code == 137
    left = gone(box.target, box.key, mark)
    assert not left, f"left running after end_processes: {left}"


# -- stream consumers that disappear --------------------------------------------------


def _leave_by_break(box: Box, command: str) -> None:
    for item in box.sandbox.execute_stream(command, timeout=600):
        assert isinstance(item, OutputChunk)
        break


def _leave_a_flood(box: Box, command: str) -> None:
    flood = command.replace("sleep 600", "yes flood")
    for seen, item in enumerate(box.sandbox.execute_stream(flood, timeout=600)):
        assert isinstance(item, OutputChunk)
        if seen == 5:
            break


def _drop(box: Box, command: str) -> None:
    stream = box.sandbox.execute_stream(command, timeout=600)
    first = next(stream)
    assert isinstance(first, OutputChunk)
    del stream  # no close(): the last reference goes


def _cancel_task(box: Box, command: str) -> None:
    async def run() -> None:
        started = asyncio.Event()

        async def consume() -> None:
            async for item in box.sandbox.aexecute_stream(command, timeout=600):
                assert isinstance(item, OutputChunk)
                started.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(started.wait(), ANSWER_S)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(run())


def _async_break(box: Box, command: str) -> None:
    async def run() -> None:
        async for item in box.sandbox.aexecute_stream(command, timeout=600):
            assert isinstance(item, OutputChunk)
            break  # the generator is finalised by the loop (asyncio.run closes it)

    asyncio.run(run())


LEAVERS: dict[str, Callable[[Box, str], None]] = {
    "break": _leave_by_break,
    "break out of a flood": _leave_a_flood,
    "dropped iterator": _drop,
    "cancelled asyncio task": _cancel_task,
    "async break": _async_break,
}


@pytest.mark.parametrize("how", list(LEAVERS))
def test_stream_consumer_disappears(box: Box, how: str) -> None:
    """The command ends with its consumer (its child too), and the same channel serves
    the next calls, a whole stream among them."""
    mark = marker("str")
    command = f"(exec -a {mark} sleep 600) & echo go; exec -a {mark} sleep 600"
    agent = box.sandbox.execute("echo $PPID", timeout=30).stdout
    LEAVERS[how](box, command)
    gc.collect()
    left = gone(box.target, box.key, mark)
    assert not left, f"left running after the consumer went ({how}): {left}"
    # The same agent answers (its channel was not dropped to end the stream).
    assert box.sandbox.execute("echo $PPID", timeout=30).stdout == agent
    items = list(box.sandbox.execute_stream("echo one; echo two >&2", timeout=30))
    assert isinstance(items[-1], ExecuteResult) and items[-1].stdout == "one\n", items
    if box.kind != "local":
        assert agents_in_box(box.sandbox) == 1


# -- the box killed while streaming ----------------------------------------------------


def _stream_in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {"items": []}

    def run() -> None:
        try:
            call(outcome["items"])
        except BaseException as exc:  # handed to the test
            outcome["error"] = exc
        outcome["ended"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_box_killed_while_streaming(
    target: Target,
    make_provider: Callable[..., SandboxProvider],
    data_root: Path,
) -> None:
    """A sync and an async stream end with UNAVAILABLE when the box dies under them; the
    next acquire works and knows nothing of the old box's processes."""
    if not target.can_kill_box:
        _local_provider_killed_while_streaming(target, make_provider, data_root)
        return
    provider = make_provider(limits=PROCESS_LIMITS)
    key = SandboxKey("hardening", f"killed-{uuid.uuid4().hex[:8]}")
    sandbox = provider.acquire(key)
    mark = marker("kill")
    command = f"echo go; exec -a {mark} sleep 600"
    background = sandbox.spawn(f"exec -a {mark} sleep 600")

    def sync(items: list[Any]) -> None:
        for item in sandbox.execute_stream(command, timeout=600):
            items.append(item)

    def asynchronous(items: list[Any]) -> None:
        async def run() -> None:
            async for item in sandbox.aexecute_stream(command, timeout=600):
                items.append(item)

        asyncio.run(run())

    streams = [_stream_in_thread(sync), _stream_in_thread(asynchronous)]
    for _, outcome in streams:
        assert poll(lambda o=outcome: bool(o["items"]), ANSWER_S), "a stream never began"
    died = target.kill_box(key)
    for thread, outcome in streams:
        thread.join(ERROR_BOUND_S)
        assert not thread.is_alive(), f"a stream still hangs {ERROR_BOUND_S} s after the kill"
        error = outcome.get("error")
        assert isinstance(error, SandboxError), f"not a SandboxError: {error!r} {outcome}"
        assert error.code is ErrorCode.UNAVAILABLE, error
        assert outcome["ended"] - died < ERROR_BOUND_S
    again, spent = timed(lambda: provider.acquire(key))
    assert again.execute("echo back").stdout == "back\n"
    fails_with(ErrorCode.NOT_FOUND, lambda: again.process_output(background.handle))
    assert [p for p in again.list_processes().processes if p.running] == []
    assert not gone(target, key, mark)
    print(
        f"\n[{target.kind}] box killed while streaming: UNAVAILABLE after "
        f"{max(o['ended'] for _, o in streams) - died:.2f} s; acquired again in {spent:.2f} s"
    )


def _local_provider_killed_while_streaming(
    target: Target, make_provider: Callable[..., SandboxProvider], data_root: Path
) -> None:
    """Local has no box: the provider process dies mid-stream instead. What its stream
    ran must not outlive it past the next provider's start (its cgroup sweep)."""
    mark = marker("lkill")
    key = SandboxKey("hardening", f"killed-{uuid.uuid4().hex[:8]}")
    spec = {
        "kind": target.kind,
        "data_root": str(data_root),
        "mode": "busy",
        "op": "stream",
        "path": f"{WORKSPACE}/stream.pid",
        "command": f"echo go; exec -a {mark} sleep 600",
        "key": [key.user_id, key.thread_id],
    }
    with provider_process(spec) as child:
        child.wait_for("STARTED")
        assert poll(lambda: bool(host_marked(mark)), ANSWER_S), "the stream never began"
        child.kill()
    provider = make_provider(limits=PROCESS_LIMITS)
    sandbox = provider.acquire(key)
    left = host_gone(mark)
    assert not left, f"the stream's command outlived its provider: {left}"
    assert sandbox.execute("echo back").stdout == "back\n"


# -- release and shutdown -------------------------------------------------------------


def _hostile_set(sandbox: Any, mark: str, escapee: bool) -> tuple[ProcessInfo, Any]:
    """In one box: a SIGTERM-ignoring group, a plain process and a running stream (4
    marked processes), and with `escapee` one that left its group (setsid: 2 more); the
    first handle and the stream."""
    info = sandbox.spawn(ignoring(mark))
    if escapee:
        sandbox.spawn(f"setsid -w bash -c 'exec -a {mark} sleep 600' </dev/null >/dev/null 2>&1")
    sandbox.spawn(f"exec -a {mark} sleep 600")
    text, offset = "", 0
    while "ready" not in text:
        page = sandbox.process_output(info.handle, since=offset, wait_s=5.0)
        text, offset = text + page.stdout, page.offset

    def run(items: list[Any]) -> None:
        for item in sandbox.execute_stream(f"echo go; exec -a {mark} sleep 600", timeout=600):
            items.append(item)

    return info, _stream_in_thread(run)


def _stream_ended(stream: tuple[threading.Thread, dict[str, Any]], what: str) -> None:
    thread, outcome = stream
    thread.join(ERROR_BOUND_S)
    assert not thread.is_alive(), f"a stream still hangs after {what}"
    error = outcome.get("error")
    assert error is None or isinstance(error, SandboxError), repr(error)


def test_release_and_shutdown_end_everything(
    target: Target, make_provider: Callable[..., SandboxProvider]
) -> None:
    """Two boxes, each with a SIGTERM-ignoring process group, a plain one and a running
    stream. The release of one ends all of them (the next acquire knows none of them).
    The other also has a process that left its group (setsid), which is no longer
    sandkit's but the box's: a release that keeps the box (E2B's pause) keeps it too,
    the shutdown ends it with the box. Then nothing of either box runs, in the box or on
    this host.

    Up to three boxes at once (the released one may still be going): on Kubernetes with
    small requests, since three Guaranteed gVisor pods (500m each) beside other workers'
    did not fit the two-core node (CAPACITY at the second acquire, in a CI run). Nothing
    here comes near a limit."""
    small = {"resources": K8S_SMALL_RESOURCES} if target.kind.startswith("kubernetes") else {}
    provider = make_provider(limits=PROCESS_LIMITS, options=small)
    released, shut = (SandboxKey("hardening", f"{n}-{uuid.uuid4().hex[:8]}") for n in "rs")
    marks = {key: marker("end") for key in (released, shut)}  # local sees both boxes'
    handles, streams = {}, {}
    expected = {released: 4, shut: 6}
    for key in (released, shut):
        sandbox = provider.acquire(key)
        handles[key], streams[key] = _hostile_set(sandbox, marks[key], key == shut)
    for key, (_, outcome) in streams.items():
        assert poll(lambda o=outcome: bool(o["items"]), ANSWER_S), "a stream never began"
        found = poll(lambda k=key: len(box_marked(target, k, marks[k])) == expected[k], ANSWER_S)
        assert found, box_marked(target, key, marks[key])

    _, released_in = timed(lambda: provider.release(released))
    assert released_in < ANSWER_S + 60.0, f"release took {released_in:.1f} s"
    _stream_ended(streams[released], "release")
    if host_sees_boxes(target):  # seen from this host, before anything starts again
        left = host_gone(marks[released])
        assert not left, f"outlived the release: {left}"
    again = provider.acquire(released)
    assert not gone(target, released, marks[released]), "a process outlived the release"
    try:
        seen = again.wait_process(handles[released].handle, timeout=0)
    except SandboxError as exc:  # a new box (or a new local table) does not know it
        assert exc.code is ErrorCode.NOT_FOUND, exc
    else:  # a box that kept its memory (E2B pause) keeps the record: ended
        assert not seen.running, seen
    assert again.execute("echo back").stdout == "back\n"
    assert box_marked(target, shut, marks[shut]), (
        f"the other box's processes went too; its box: {box_state(target, shut)}"
    )

    ids = [i for key in (released, shut) for i in box_ids(target, key)]
    _, shut_in = timed(provider.shutdown)
    _stream_ended(streams[shut], "shutdown")
    assert wait_no_boxes(target, provider) == []
    if host_sees_boxes(target):
        left = host_gone(marks[shut])
        assert not left, f"still running after shutdown: {left}"
    if ids:  # nothing of the boxes on this host either (a gVisor box's sandbox included)
        tasks = _until_none(lambda: ["task"] * host_tasks_of(target, ids))
        assert not tasks, f"{len(tasks)} host tasks still in the cgroups of the shut boxes"
    print(
        f"\n[{target.kind}] hostile processes: release {released_in:.2f} s, "
        f"shutdown {shut_in:.2f} s"
    )


# -- codes ------------------------------------------------------------------------------


def test_spawn_past_the_live_cap_is_capacity(box: Box) -> None:
    started = [box.sandbox.spawn("exec sleep 600") for _ in range(MAX_LIVE)]
    error = fails_with(ErrorCode.CAPACITY, lambda: box.sandbox.spawn("exec sleep 600"))
    assert "process_max_live" in error.message and str(MAX_LIVE) in error.message
    box.sandbox.signal_process(started[0].handle, "KILL")
    assert box.sandbox.wait_process(started[0].handle, timeout=ANSWER_S).exit_code == 137
    box.sandbox.spawn("true")  # room again


def test_stdin_of_ended_and_deaf_processes(box: Box) -> None:
    sandbox = box.sandbox
    ended = sandbox.spawn("exit 3")
    assert sandbox.wait_process(ended.handle, timeout=ANSWER_S).exit_code == 3
    fails_with(ErrorCode.INVALID_ARGUMENT, lambda: sandbox.write_stdin(ended.handle, "late\n"))
    # A process that never reads its stdin: the write cannot hang once the pipe is full.
    deaf = sandbox.spawn("exec sleep 600")
    _, spent = timed(
        lambda: fails_with(ErrorCode.TIMEOUT, lambda: sandbox.write_stdin(deaf.handle, "x" * 2**20))
    )
    assert spent < STDIN_STALL_S + SLACK_S, f"write_stdin took {spent:.1f} s"
    assert sandbox.list_processes().processes  # the box answers
    # Its stdin can still be closed, and a reader gets what was written.
    sandbox.write_stdin(deaf.handle, eof=True)
    reader = sandbox.spawn("wc -c")
    sandbox.write_stdin(reader.handle, "x" * 100_000, eof=True)
    assert sandbox.wait_process(reader.handle, timeout=ANSWER_S).exit_code == 0
    assert sandbox.process_output(reader.handle).stdout.strip() == "100000"


BOGUS_SIGNALS: list[Any] = ["SEGV-PLEASE", "", "KILLL", "SIGSEGV", 0, -9, 9999, 2**40, 9.0, True]


def test_bogus_signals(box: Box) -> None:
    info = box.sandbox.spawn("exec sleep 600")
    for value in BOGUS_SIGNALS:
        fails_with(
            ErrorCode.INVALID_ARGUMENT, lambda v=value: box.sandbox.signal_process(info.handle, v)
        )
    assert box.sandbox.wait_process(info.handle, timeout=0).running  # none was sent
    assert box.sandbox.signal_process(info.handle, "sigkill").handle == info.handle
    assert box.sandbox.wait_process(info.handle, timeout=ANSWER_S).exit_code == 137


def test_offsets_and_waits_out_of_range(box: Box) -> None:
    sandbox = box.sandbox
    info = sandbox.spawn("echo 0123456789")
    assert sandbox.wait_process(info.handle, timeout=ANSWER_S).exit_code == 0
    whole = sandbox.process_output(info.handle)
    assert whole.stdout == "0123456789\n" and whole.offset == 11
    end = sandbox.process_output(info.handle, since=11)  # the end itself is valid
    assert end.chunks == [] and end.offset == 11
    for since in (-1, 12, 2**62, "0", True, 1.5, None):
        error = fails_with(
            ErrorCode.INVALID_ARGUMENT, lambda s=since: sandbox.process_output(info.handle, since=s)
        )
        assert "since" in error.message, error.message
    for wait in (-1, float("nan"), "1", True):
        fails_with(
            ErrorCode.INVALID_ARGUMENT, lambda w=wait: sandbox.process_output(info.handle, wait_s=w)
        )
        fails_with(
            ErrorCode.INVALID_ARGUMENT, lambda w=wait: sandbox.wait_process(info.handle, timeout=w)
        )
    # A wait far past the cap is clamped, not refused (and an ended process answers now).
    assert not sandbox.wait_process(info.handle, timeout=1e9).running
    for handle in ("", "p-000000000000", "x" * 100_000, "../../etc/passwd"):
        error = fails_with(ErrorCode.NOT_FOUND, lambda h=handle: sandbox.process_output(h))
        assert len(error.message) < 200, "the message echoes the whole handle"
    for handle in (12, None, ["p-1"]):
        fails_with(ErrorCode.INVALID_ARGUMENT, lambda h=handle: sandbox.signal_process(h))
    assert re.fullmatch(r"p-[0-9a-f]{12}", info.handle)
