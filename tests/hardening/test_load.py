"""Load: fifty conversations at once on every provider, and a hundred acquires of one key.

Fifty Python threads each own one `SandboxKey` (fifty boxes on Docker,
Kubernetes and E2B) and run 200 mixed operations on it at the same time.
Every write is remembered; reads, `wc`/`sha256sum` in the box, greps and
listings are checked against what the thread wrote, and at the end each
thread re-reads every file it wrote and lists its workspace: a lost, torn or
foreign file (another thread's) is a failure, as is any error. Then the
provider shuts down and none of its boxes may be left, Terminating pods
included (they are waited for, within a bound, and the wait is reported).

Mix per thread (200 operations, order shuffled per thread, seeded):
40 write_file (one in ten about 48 KiB, the rest under 2 KiB), 40 edit_file,
40 read_file, 40 execute (1 in 5: `wc -c`, `sha256sum` or a file written
by the shell), 20 grep, 10 list_dir, 10 glob.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import random
import re
import shlex
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from sandkit import SandboxKey
from sandkit.config import LimitsSettings
from sandkit.provider import SandboxProvider
from sandkit.sandbox import Sandbox

from .figures import Figures
from .targets import Target

WORKSPACE = "/mnt/user-data/workspace"
THREADS = 50
OPS_PER_THREAD = 200
MIX = {
    "write": 40,
    "edit": 40,
    "read": 40,
    "execute": 40,
    "grep": 20,
    "list_dir": 10,
    "glob": 10,
}
FILES_PER_THREAD = 8  # write_file targets; shell-written files come on top
BIG_LINES = 1200  # a "big" write: ~48 KiB, under the read caps (2000 lines, 256 KiB)
PARALLEL_ACQUIRES = 100
# The pool variant: this many boxes claimed by the first acquires (more would take the
# pool's fill time, ~1 s a box here, from CI), and how long filling it may take.
POOL_SIZE = 10
POOL_READY_S = 240.0
# After shutdown() returns, how long a box may still be on its way out (a
# Terminating pod) before it counts as left behind.
GONE_WAIT_S = 60.0

assert sum(MIX.values()) == OPS_PER_THREAD


def _tag(index: int) -> str:
    return f"c{index:02d}"


TAG_RE = re.compile(r"c\d\d")


def _content(tag: str, name: str, version: int, rev: int, lines: int) -> str:
    """A file body: a grep needle, one `rev=` line for edits, then numbered lines."""
    body = "".join(f"{tag} {name} v{version} line {n}\n" for n in range(lines))
    return f"needle-{tag} {name} version {version}\nrev={rev}\n{body}"


@dataclasses.dataclass
class Conversation:
    """One thread's sandbox, what it wrote, and everything it measured or saw go wrong."""

    index: int
    sandbox: Sandbox
    rng: random.Random
    files: dict[str, str] = dataclasses.field(default_factory=dict)  # virtual path -> content
    revs: dict[str, int] = dataclasses.field(default_factory=dict)
    latencies: dict[str, list[float]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(list)
    )
    errors: list[str] = dataclasses.field(default_factory=list)
    lost: list[str] = dataclasses.field(default_factory=list)  # lost or torn writes
    foreign: list[str] = dataclasses.field(default_factory=list)  # another thread's files
    version: int = 0
    shell_files: int = 0
    slowest: list[tuple[float, str, int]] = dataclasses.field(default_factory=list)

    @property
    def tag(self) -> str:
        return _tag(self.index)

    @property
    def home(self) -> str:
        return f"{WORKSPACE}/{self.tag}"

    # -- bookkeeping ------------------------------------------------------------------

    def timed(self, kind: str, call: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        try:
            return call()
        finally:
            ms = (time.perf_counter() - started) * 1000.0
            self.latencies[kind].append(ms)
            # Which call of the thread it was: the first grep or execute of a box is cold.
            self.slowest.append((ms, kind, len(self.latencies[kind])))
            self.slowest = sorted(self.slowest, reverse=True)[:3]

    def check_own(self, paths: list[str], what: str) -> None:
        """Every path a result names must be this thread's own."""
        for path in paths:
            for tag in TAG_RE.findall(path):
                if tag != self.tag:
                    self.foreign.append(f"{what}: {path}")

    def pick(self) -> str:
        return self.rng.choice(sorted(self.files))

    def new_content(self, name: str, big: bool = False) -> tuple[str, int]:
        self.version += 1
        rev = self.rng.randrange(1000)
        lines = BIG_LINES if big else self.rng.randrange(1, 40)
        return _content(self.tag, name, self.version, rev, lines), rev

    # -- operations -------------------------------------------------------------------

    def write(self) -> None:
        path = f"{self.home}/d{self.rng.randrange(3)}/f{self.rng.randrange(FILES_PER_THREAD)}.txt"
        content, rev = self.new_content(path.rsplit("/", 1)[1], big=self.rng.random() < 0.1)
        result = self.timed("write", lambda: self.sandbox.write_file(path, content))
        assert result.bytes_written == len(content.encode()), result
        self.files[path], self.revs[path] = content, rev

    def edit(self) -> None:
        path = self.pick()
        rev = self.revs[path]
        old, new = f"rev={rev}\n", f"rev={rev + 1}\n"
        result = self.timed("edit", lambda: self.sandbox.edit_file(path, old, new))
        assert result.replacements == 1, result
        self.files[path] = self.files[path].replace(old, new, 1)
        self.revs[path] = rev + 1

    def read(self) -> None:
        path = self.pick()
        result = self.timed("read", lambda: self.sandbox.read_file(path))
        if result.content != self.files[path] or result.truncated:
            self.lost.append(f"read_file {path}: {len(result.content)} chars, not the last write")

    def execute(self) -> None:
        choice = self.rng.randrange(3)
        if choice == 2:  # a file written by the shell, tracked like any other
            self.shell_files += 1
            path = f"{self.home}/sh/s{self.shell_files % 5}.txt"
            content, rev = self.new_content(path.rsplit("/", 1)[1])
            command = f"mkdir -p {self.tag}/sh && printf %s {shlex.quote(content)} > {path}"
            result = self.timed("execute", lambda: self.sandbox.execute(command, timeout=60))
            assert result.exit_code == 0, result
            self.files[path], self.revs[path] = content, rev
            return
        path = self.pick()
        data = self.files[path].encode()
        if choice == 0:
            command, expected = f"wc -c < {shlex.quote(path)}", str(len(data))
        else:
            command = f"sha256sum {shlex.quote(path)}"
            expected = f"{hashlib.sha256(data).hexdigest()}  {path}"
        result = self.timed("execute", lambda: self.sandbox.execute(command, timeout=60))
        assert result.exit_code == 0 and not result.timed_out, result
        if result.stdout.strip() != expected:
            self.lost.append(f"{command}: {result.stdout.strip()!r}, expected {expected!r}")

    def grep(self) -> None:
        if self.rng.random() < 0.5:
            # The needle of every thread, over the whole workspace: only ours may match.
            result = self.timed(
                "grep",
                lambda: self.sandbox.grep(
                    r"needle-c\d\d", WORKSPACE, output_mode="files_with_matches", max_results=500
                ),
            )
            self.check_own(result.files, "grep")
            if set(result.files) != set(self.files):
                missing = sorted(set(self.files) - set(result.files))
                self.lost.append(f"grep files_with_matches misses {missing[:3]}")
        else:
            result = self.timed(
                "grep",
                lambda: self.sandbox.grep(
                    r"^rev=\d+$", self.home, output_mode="content", max_results=500
                ),
            )
            self.check_own([m.path for m in result.matches], "grep")
            seen = {m.path: m.text for m in result.matches}
            expected = {p: f"rev={r}" for p, r in self.revs.items()}
            if seen != expected:
                self.lost.append(f"grep rev= lines differ: {len(seen)} vs {len(expected)} files")

    def list_dir(self) -> None:
        result = self.timed("list_dir", lambda: self.sandbox.list_dir(WORKSPACE, max_depth=4))
        paths = [e.path for e in result.entries]
        self.check_own(paths, "list_dir")
        files = {e.path for e in result.entries if e.kind == "file"}
        if files != set(self.files):
            self.lost.append(f"list_dir: {sorted(set(self.files) - files)[:3]} missing")

    def glob(self) -> None:
        result = self.timed(
            "glob", lambda: self.sandbox.glob("**/*.txt", WORKSPACE, max_results=1000)
        )
        self.check_own(result.paths, "glob")
        if set(result.paths) != set(self.files):
            self.lost.append(f"glob: {sorted(set(self.files) - set(result.paths))[:3]} missing")

    # -- the run ------------------------------------------------------------------------

    def plan(self) -> list[str]:
        ops = [kind for kind, count in MIX.items() for _ in range(count)]
        self.rng.shuffle(ops)
        ops.remove("write")
        return ["write", *ops]  # every other operation needs a file to exist

    def run(self, start: threading.Barrier) -> None:
        operations: dict[str, Callable[[], None]] = {
            "write": self.write,
            "edit": self.edit,
            "read": self.read,
            "execute": self.execute,
            "grep": self.grep,
            "list_dir": self.list_dir,
            "glob": self.glob,
        }
        plan = self.plan()
        start.wait()
        for kind in plan:
            try:
                operations[kind]()
            except Exception as exc:  # counted and reported, the run goes on
                self.errors.append(f"{self.tag} {kind}: {type(exc).__name__}: {exc}"[:300])

    def verify(self) -> None:
        """After the run: every file holds its last write, and nothing else is there."""
        for path, content in sorted(self.files.items()):
            try:
                result = self.sandbox.read_file(path)
            except Exception as exc:
                self.lost.append(f"final read {path}: {type(exc).__name__}: {exc}"[:300])
                continue
            if result.content != content:
                self.lost.append(f"final read {path}: not the last write")
        try:
            listing = self.sandbox.list_dir(WORKSPACE, max_depth=4)
        except Exception as exc:
            self.errors.append(f"{self.tag} final list_dir: {type(exc).__name__}: {exc}"[:300])
            return
        self.check_own([e.path for e in listing.entries], "final list_dir")
        files = {e.path for e in listing.entries if e.kind == "file"}
        for path in sorted(set(self.files) - files):
            self.lost.append(f"final list_dir: {path} is gone")
        for path in sorted(files - set(self.files)):
            self.foreign.append(f"final list_dir: unexpected {path}")


# -- reporting ----------------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


class _LoadReport:
    """A terminal-summary section with the per-operation latencies and timings of each kind."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.lines:
            terminalreporter.section("hardening load")
            for line in self.lines:
                terminalreporter.write_line(line)


@pytest.fixture
def load_report(request: pytest.FixtureRequest) -> _LoadReport:
    manager = request.config.pluginmanager
    report = manager.get_plugin("sandkit-hardening-load")
    if report is None:
        report = _LoadReport()
        manager.register(report, "sandkit-hardening-load")
    assert isinstance(report, _LoadReport)
    return report


def _shut_down(target: Target, *providers: SandboxProvider) -> tuple[float, float, int]:
    """shutdown() each; seconds it took, seconds until no box was left, boxes left then."""
    started = time.monotonic()
    for provider in providers:
        provider.shutdown()
    returned = time.monotonic() - started
    deadline = started + returned + GONE_WAIT_S
    left = target.boxes(provider)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = target.boxes(provider)
    return returned, time.monotonic() - started, len(left)


def _acquire_all(provider: SandboxProvider, keys: list[SandboxKey]) -> list[Sandbox]:
    with ThreadPoolExecutor(len(keys), thread_name_prefix="load-acquire") as pool:
        return list(pool.map(provider.acquire, keys))


# -- the tests ----------------------------------------------------------------------


def test_fifty_threads_of_mixed_operations(
    target: Target,
    make_provider: Callable[..., SandboxProvider],
    figures: Figures,
    load_report: _LoadReport,
) -> None:
    """50 conversations x 200 operations at once: no error, no lost or torn write, no leak."""
    # The default search time limit: this case asks for no error under load, and a plain
    # grep on a loaded 2-core host may take longer than the 3 s the hostile cases use.
    provider = make_provider(limits=LimitsSettings())
    _fifty_conversations(target, provider, figures, load_report, target.kind, "load")


def test_fifty_threads_with_a_warm_pool(
    target: Target,
    make_provider: Callable[..., SandboxProvider],
    figures: Figures,
    load_report: _LoadReport,
) -> None:
    """The same load with a warm pool: the first acquires claim pool boxes while the pool
    refills and the rest start cold, all at once; a claimed box never holds another
    thread's files, and shutdown leaves no box, pool boxes included."""
    pool_options = {"size": POOL_SIZE, "refill_interval_s": 0.2}
    provider = make_provider(limits=LimitsSettings(), options={"warm_pool": pool_options})
    pool = getattr(provider, "_pool", None)
    assert pool is not None and pool.wait_ready(POOL_SIZE, POOL_READY_S), "the pool never filled"
    claimed: list[SandboxKey] = []
    claim = pool.claim

    def counted(key: SandboxKey) -> Any:  # observes the real claim, changes nothing
        got = claim(key)
        if got is not None:
            claimed.append(key)
        return got

    pool.claim = counted
    _fifty_conversations(
        target, provider, figures, load_report, f"{target.kind} + pool", "pool_load"
    )
    figures.add(target.kind, "pool_claims", len(claimed))
    assert len(claimed) >= POOL_SIZE, f"only {len(claimed)} of {THREADS} acquires claimed"


def _fifty_conversations(
    target: Target,
    provider: SandboxProvider,
    figures: Figures,
    load_report: _LoadReport,
    label: str,
    latency_figure: str,
) -> None:
    kind = target.kind
    keys = [SandboxKey("load", f"thread-{_tag(i)}") for i in range(THREADS)]

    started = time.monotonic()
    sandboxes = _acquire_all(provider, keys)
    acquire_s = time.monotonic() - started
    assert len({s.key.sandbox_id for s in sandboxes}) == THREADS
    assert len(target.boxes(provider)) >= THREADS  # a refilled pool's boxes come on top

    conversations = [
        Conversation(i, sandbox, random.Random(f"load-{i}")) for i, sandbox in enumerate(sandboxes)
    ]
    start = threading.Barrier(THREADS)
    workers = [
        threading.Thread(target=c.run, args=(start,), name=f"load-{c.tag}") for c in conversations
    ]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    run_s = time.monotonic() - started
    with ThreadPoolExecutor(THREADS, thread_name_prefix="load-verify") as pool:
        list(pool.map(Conversation.verify, conversations))

    shutdown_s, gone_s, left = _shut_down(target, provider)

    latencies: dict[str, list[float]] = collections.defaultdict(list)
    for conversation in conversations:
        for op, values in conversation.latencies.items():
            latencies[op].extend(values)
    every = [v for values in latencies.values() for v in values]
    errors = [e for c in conversations for e in c.errors]
    lost = [e for c in conversations for e in c.lost]
    foreign = [e for c in conversations for e in c.foreign]

    figures.add(kind, "load_ops", THREADS * OPS_PER_THREAD)
    figures.add(kind, "load_errors", len(errors))
    figures.add(kind, "files_lost", len(lost))
    figures.set(kind, f"{latency_figure}_p50_ms", round(_percentile(every, 50), 1))
    figures.set(kind, f"{latency_figure}_p95_ms", round(_percentile(every, 95), 1))
    figures.set(kind, "boxes_after_shutdown", left)

    report = load_report.lines
    report.append(
        f"[{label}] {len(every)} ops ({THREADS} threads x {OPS_PER_THREAD}) in {run_s:.1f} s "
        f"({len(every) / run_s:.0f} ops/s); acquire {THREADS} boxes {acquire_s:.1f} s; "
        f"shutdown {shutdown_s:.1f} s, no box left after {gone_s:.1f} s; "
        f"errors {len(errors)}, lost/torn {len(lost)}, foreign {len(foreign)}"
    )
    for op in sorted(latencies):
        values = latencies[op]
        report.append(
            f"[{label}]   {op:<8} n={len(values):<5} p50 {_percentile(values, 50):7.1f} ms"
            f"   p95 {_percentile(values, 95):7.1f} ms   max {max(values):7.1f} ms"
        )
    slowest = sorted((s for c in conversations for s in c.slowest), reverse=True)[:5]
    report.append(
        f"[{label}]   slowest: "
        + ", ".join(f"{op} #{n} of its thread {ms / 1000:.1f} s" for ms, op, n in slowest)
    )

    assert not errors, f"{len(errors)} errors under load, e.g. {errors[:5]}"
    assert not lost, f"{len(lost)} lost or torn writes, e.g. {lost[:5]}"
    assert not foreign, f"threads saw other threads' files: {foreign[:5]}"
    assert left == 0, f"{left} boxes still exist {GONE_WAIT_S:.0f} s after shutdown returned"


def test_parallel_acquires_of_one_key_create_one_box(
    target: Target,
    make_provider: Callable[..., SandboxProvider],
    figures: Figures,
    load_report: _LoadReport,
) -> None:
    """100 acquires of one key at the same moment: one box, and every handle works.

    One provider instance: across instances (replicas) the providers' own
    lifecycle tests race two of them; on E2B that is best effort (see
    docs/providers/e2b.md).
    """
    kind = target.kind
    provider = make_provider()
    key = SandboxKey("load", "one-key")
    start = threading.Barrier(PARALLEL_ACQUIRES)

    def acquire_and_use(n: int) -> Sandbox:
        start.wait()
        sandbox = provider.acquire(key)
        sandbox.write_file(f"{WORKSPACE}/acquirers/{n:03d}.txt", f"acquirer {n}\n")
        return sandbox

    started = time.monotonic()
    with ThreadPoolExecutor(PARALLEL_ACQUIRES, thread_name_prefix="load-one-key") as pool:
        sandboxes = list(pool.map(acquire_and_use, range(PARALLEL_ACQUIRES)))
    acquire_s = time.monotonic() - started
    boxes = target.boxes(provider)
    figures.add(kind, "parallel_acquires", PARALLEL_ACQUIRES)
    figures.set(kind, "boxes_created", len(boxes))

    listing = sandboxes[-1].list_dir(f"{WORKSPACE}/acquirers")
    names = sorted(e.name for e in listing.entries)
    shutdown_s, gone_s, left = _shut_down(target, provider)
    figures.set(kind, "boxes_after_shutdown", left)
    load_report.lines.append(
        f"[{kind}] {PARALLEL_ACQUIRES} parallel acquires of one key: {len(boxes)} box(es), "
        f"{acquire_s:.1f} s with one write each; shutdown {shutdown_s:.1f} s, "
        f"no box left after {gone_s:.1f} s"
    )

    assert len(boxes) == 1, boxes
    assert names == [f"{n:03d}.txt" for n in range(PARALLEL_ACQUIRES)]
    assert left == 0, f"{left} boxes still exist {GONE_WAIT_S:.0f} s after shutdown returned"
