"""Hostile patterns and commands on every provider: each bounded, answered as documented,
and the box usable for the next call.

One box per provider kind serves the whole module (a box per case would cost
minutes on Kubernetes). Every case runs through `Cases.run`, which times it
against a bound (the operation's own limit plus `SLACK_S`), then makes a
follow-up grep and command that must answer exactly. A case that overruns its
bound, escapes a limit (a memory hog that survives, a fork bomb nothing
stops, output past the cap) or leaves the box unusable counts as unbounded;
a wrong answer or error code is a failure too. Figures: `inputs_tried` and
`unbounded` per kind; the timings the report quotes are printed (`-s`).

The box is made with limits a hostile operator could pick: `grep_max_file_bytes`
at its 1 GiB ceiling, so the 1 GiB file is really searched (at the default
10 MiB it is skipped outright); small local command bounds (`exec_max_processes`
64, `exec_memory_bytes` 256 MiB) so the local fork bomb stays small. A fork
bomb only runs after a probe (a Python forking up to PROBE_MAX sleepers)
showed that process creation is bounded in the box: never an unbounded bomb
on this host.

Big data: the million tiny files live on a tmpfs (creating and deleting them
on disk costs minutes): for the host-directory kinds one tree under /dev/shm,
made once per session and mounted read-only at /mnt/million; the E2B stand-in
keeps thread data inside its container, so there a tmpfs is mounted at
/mnt/million in the box's mount namespace and filled from the host (nsenter:
the data is the box's, the memory is not billed to its 512 MiB). The 1 GiB
file is written inside the box by one command and removed at the end.

The E2B stand-in's containers have no resource limits (the real service
bounds a sandbox by its VM size: 512 MiB reported by `get_info`); the box
fixture gives the stand-in container the VM's bounds (512 MiB, 256 tasks) so
that a fork bomb cannot reach this host's PID table.
"""

from __future__ import annotations

import contextlib
import dataclasses
import resource
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandkit import SandboxKey
from sandkit.config import LimitsSettings, MountSpec
from sandkit.errors import ErrorCode, SandboxError
from sandkit.provider import SandboxProvider
from sandkit.sandbox import Sandbox
from sandkit.testing.conformance.suite import assert_clean

from .figures import Figures
from .targets import LIMITS, OWNER, SESSION, Target, forbidden_for

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
WORKSPACE = "/mnt/user-data/workspace"
MILLION = "/mnt/million"
MILLION_DIRS = 1000
FILES_PER_DIR = 1000  # one in NEEDLE_EVERY holds a line, the rest are empty
NEEDLE_EVERY = 100
SEARCH_S = LIMITS.search_timeout_s
SLACK_S = 5.0  # two shared cores, other suites running: generous, still a bound
BOX_PROCESSES = 64  # local only: exec_max_processes of the module's box
BOX_MEMORY = 256 * MIB  # local only: exec_memory_bytes
PROBE_MAX = 400  # a probe that reaches this many processes found no bound
BIG_BYTES = GIB  # over the grep_max_file_bytes ceiling: skipped whatever the configuration
# The largest file grep may be configured to search: it must stay bounded in time and memory.
CEILING_BYTES = int(LimitsSettings.model_fields["grep_max_file_bytes"].metadata[-1].le)
BIG_NEEDLE = "needle-at-the-end\n"
BIG_LINE = "the quick brown fox jumps over the lazy dog 0123456789\n"


def needle_line(size: int) -> int:
    """`yes BIG_LINE` cut at size - len(BIG_NEEDLE), then the needle ends that partial line."""
    return (size - len(BIG_NEEDLE)) // len(BIG_LINE) + 1


NEEDLE_LINE = needle_line(BIG_BYTES)
SENTINEL = "sentinel-7c1f"
PROVIDER_GROWTH = 512 * MIB  # local: more than this held by one operation is unbounded

BOX_LIMITS = LimitsSettings(
    search_timeout_s=SEARCH_S,
    exec_max_processes=BOX_PROCESSES,
    exec_memory_bytes=BOX_MEMORY,
    exec_default_timeout_s=60.0,
)
# What a careless operator could configure: files up to the ceiling are really searched.
CEILING_LIMITS = BOX_LIMITS.model_copy(update={"grep_max_file_bytes": CEILING_BYTES})

# Forks sleeping children until fork fails or PROBE_MAX is reached; prints the count.
PROBE = f"""\
import os, time
n = 0
try:
    while n < {PROBE_MAX}:
        if os.fork() == 0:
            time.sleep(20)
            os._exit(0)
        n += 1
except OSError:
    pass
print(n)
"""
# Touches up to 4 GiB, 64 MiB at a time; "survived" means no limit stopped it.
HOG = """\
chunks = []
for _ in range(64):
    chunks.append(b"x" * (64 << 20))
print("survived", len(chunks))
"""
# argv[1]: root of the tree. Empty files, one in NEEDLE_EVERY with a line.
FILL = f"""\
import os, sys
root = sys.argv[1]
for d in range({MILLION_DIRS}):
    path = "%s/d%03d" % (root, d)
    os.mkdir(path)
    for f in range({FILES_PER_DIR}):
        fd = os.open("%s/f%03d.txt" % (path, f), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        if f % {NEEDLE_EVERY} == 0:
            os.write(fd, b"needle %d %d\\n" % (d, f))
        os.close(fd)
"""
# Exit 0 when PID is gone (or a zombie waiting for its reaper).
DEAD = 's=$(sed -n "s/^State:[[:space:]]*\\([A-Z]\\).*/\\1/p" /proc/{pid}/status 2>/dev/null); ' + (
    '[ -z "$s" ] || [ "$s" = Z ]'
)


class Unbounded(AssertionError):
    """A limit did not hold: a hog survived, output passed its cap, nothing stopped a bomb."""


@dataclasses.dataclass
class Box:
    target: Target
    provider: SandboxProvider
    key: SandboxKey
    sandbox: Sandbox
    forbidden: list[str]
    agent_pid: str  # the parent of every command (the agent; pytest on local)

    @property
    def kind(self) -> str:
        return self.target.kind

    def run(self, command: str, timeout: float = 60.0) -> Any:
        return self.sandbox.execute(command, timeout=timeout)

    def usable(self) -> None:
        """The next call works: a grep with an exact answer and a command."""
        found = self.sandbox.grep(
            SENTINEL, path=f"{WORKSPACE}/sentinel", output_mode="files_with_matches"
        )
        assert found.files == [f"{WORKSPACE}/sentinel/here.txt"], found
        result = self.run("echo ok $PPID", timeout=30)
        assert result.exit_code == 0 and result.stdout.startswith("ok "), result
        parent, self.agent_pid = self.agent_pid, result.stdout.split()[1]
        # The same agent answers: it was not killed (by the OOM killer, say) and replaced.
        assert self.agent_pid == parent, f"the agent died and was replaced ({parent} -> ...)"

    def dead(self, pid: str, wait_s: float = 3.0) -> bool:
        """Is a process of the box gone? Waits a moment for a reaper."""
        end = time.monotonic() + wait_s
        while True:
            if self.run(DEAD.format(pid=int(pid)), timeout=30).exit_code == 0:
                return True
            if time.monotonic() > end:
                return False
            time.sleep(0.1)


@dataclasses.dataclass
class Cases:
    """Runs cases against one box; counts them and what went wrong, per kind."""

    box: Box
    figures: Figures
    tried: int = 0
    unbounded: list[str] = dataclasses.field(default_factory=list)
    wrong: list[str] = dataclasses.field(default_factory=list)
    timings: dict[str, float] = dataclasses.field(default_factory=dict)

    def run(
        self, name: str, bound_s: float, case: Callable[[], Any], box: Box | None = None
    ) -> None:
        """Run `case` (checks inside raise), time it, then check the box still answers."""
        box = box or self.box
        self.tried += 1
        problem = ""
        unbounded = False
        peak = _peak_rss()
        started = time.monotonic()
        try:
            value = case()
            assert_clean(value, box.forbidden)
            if box.kind == "local" and _peak_rss() - peak > PROVIDER_GROWTH:
                # Operations run in this process: what they hold is the provider's memory.
                raise Unbounded(f"the provider process grew by {(_peak_rss() - peak) >> 20} MiB")
        except Unbounded as exc:
            unbounded, problem = True, f"not bounded: {exc}"
        except SandboxError as exc:
            problem = f"unexpected {exc.code.value}: {exc.message}"
        except AssertionError as exc:
            problem = f"wrong result: {exc}"
        elapsed = time.monotonic() - started
        self.timings[name] = round(elapsed, 2)
        if elapsed > bound_s:
            unbounded = True
            problem += f" took {elapsed:.1f} s (bound {bound_s:.1f} s)"
        try:
            box.usable()
        except (AssertionError, SandboxError) as exc:
            unbounded = True
            problem += f" box unusable after: {exc}"
        if problem:
            (self.unbounded if unbounded else self.wrong).append(f"{name}: {problem.strip()}")

    def finish(self) -> None:
        kind = self.box.kind
        self.figures.add(kind, "inputs_tried", self.tried)
        self.figures.add(kind, "unbounded", len(self.unbounded))
        print(f"\n[{kind}] timings (s): {self.timings}")
        problems = self.unbounded + self.wrong
        assert not problems, f"{len(problems)} of {self.tried} cases:\n" + "\n".join(problems)


def _peak_rss() -> int:
    """Peak resident memory of this process, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def result_or_timeout(call: Callable[[], Any]) -> Any:
    """The answer, or None when the search hit its time limit (TIMEOUT, documented)."""
    try:
        return call()
    except SandboxError as exc:
        assert exc.code == ErrorCode.TIMEOUT, f"{exc.code.value}: {exc.message}"
        return None


def fails_with(code: ErrorCode, call: Callable[[], Any]) -> SandboxError:
    try:
        value = call()
    except SandboxError as exc:
        assert exc.code == code, f"{exc.code.value} instead of {code.value}: {exc.message}"
        return exc
    raise AssertionError(f"no {code.value}: {value!r}"[:300])


def lines_of(result: Any) -> list[tuple[str, int]]:
    return [(m.path, m.line_number) for m in result.matches]


# -- the box ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def million_host() -> Iterator[Path]:
    """The host directory the host-directory kinds mount at /mnt/million (tmpfs)."""
    root = Path("/dev/shm") / f"sandkit-hardening-{SESSION}" / "million"
    root.mkdir(parents=True)
    yield root
    shutil.rmtree(root.parent, ignore_errors=True)


_filled: set[str] = set()


def fill_million(box: Box, host_root: Path) -> float:
    """Make the million files where `box` sees them at /mnt/million; seconds spent."""
    started = time.monotonic()
    if box.kind == "e2b":
        container = standin_container(box.key)
        pid = str(container.attrs["State"]["Pid"])
        script = (
            f"mount -t tmpfs -o size=128m,nr_inodes={MILLION_DIRS * FILES_PER_DIR + 10000},"
            f"mode=0755 sandkit-million {MILLION} && python3 -c {shlex.quote(FILL)} {MILLION}"
        )
        subprocess.run(["nsenter", "-t", pid, "-m", "--", "sh", "-c", script], check=True)
    elif "host" not in _filled:
        subprocess.run([sys.executable, "-c", FILL, str(host_root)], check=True)
        _filled.add("host")
    return time.monotonic() - started


def standin_container(key: SandboxKey) -> Any:
    import docker
    from e2b_standin import META_PREFIX

    client = docker.from_env()
    found = client.containers.list(
        filters={"label": f"{META_PREFIX}sandkit.sandbox-id={key.sandbox_id}"}
    )
    assert len(found) == 1, f"stand-in containers for {key}: {found}"
    return found[0]


@contextlib.contextmanager
def opened_box(
    target: Target, data_root: Path, name: str, limits: LimitsSettings, **settings: Any
) -> Iterator[Box]:
    """A provider of `target`'s kind and one sandbox of it, shut down afterwards.

    Each has its own owner: a provider's shutdown removes every box of its owner.
    """
    options = {} if target.kind == "local" else {"owner": f"{OWNER}-{name}"}
    provider = target.make(data_root, limits=limits, options=options, **settings)
    try:
        key = SandboxKey("hardening", f"{name}-{target.kind}")
        sandbox = provider.acquire(key)
        sandbox.write_file("sentinel/here.txt", f"{SENTINEL}\n")
        parent = sandbox.execute("echo $PPID", timeout=30)
        yield Box(target, provider, key, sandbox, forbidden_for(data_root), parent.stdout.strip())
    finally:
        provider.shutdown()


@pytest.fixture(scope="module")
def box(
    target: Target, million_host: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Box]:
    """The module's box: default limits but small local command bounds, /mnt/million."""
    data_root = tmp_path_factory.mktemp(f"inputs-{target.kind}")
    # E2B seeds its box from the host: an empty dir there, the files on a tmpfs in the box.
    mounted = tmp_path_factory.mktemp("million-seed") if target.kind == "e2b" else million_host
    million = MountSpec(virtual=MILLION, host=mounted, read_only=True)
    with opened_box(target, data_root, "inputs", BOX_LIMITS, mounts=[million]) as made:
        made.sandbox.write_file("probe.py", PROBE)
        made.sandbox.write_file("hog.py", HOG)
        yield made


@pytest.fixture
def cases(box: Box, figures: Figures) -> Cases:
    return Cases(box, figures)


# -- patterns --------------------------------------------------------------------------

HOSTILE_TEXT = "a" * 40 + "b\n" + "aaa\n" + "x" * 5000 + "\n" + "ab" * 30 + "\nword999 here\n"
# pattern -> matching line numbers of HOSTILE_TEXT (reasoned by hand: Python's `re`
# cannot be the oracle, it would backtrack for hours on some of them).
CATASTROPHIC = {
    r"(a+)+$": [2],
    r"(a|aa)+$": [2],
    r"(x+x+)+y": [],
    r"^(a?){30}a{30}$": [],
    r"(?:x*)*y": [],
    r"((a*)*)*b$": [1, 4],
    r"(.*a){20}": [1, 4],
    r"(\w+\s?)+$": [1, 2, 3, 4, 5],
    r"(a+)+b(?=c)": [],
    "a{1000000}": [],
}
# Also searched in one file (the Python engine, whose deadline is a signal).
CATASTROPHIC_SINGLE_FILE = (r"(a+)+$", r"(x+x+)+y", r"^(a?){30}a{30}$")
INVALID = [
    "(",
    "[z-a]",
    "a{2,1}",
    "(?P<x>a)(?P<x>b)",
    "\\",
    "(?<=a+)b",
    "a{4294967296}",
    "x" * 10_001,
    "|".join(f"word{i}" for i in range(2000)),  # 17 890 characters
]


def test_catastrophic_and_invalid_regexes(box: Box, cases: Cases) -> None:
    box.sandbox.write_file("re/hostile.txt", HOSTILE_TEXT)
    directory, single = f"{WORKSPACE}/re", f"{WORKSPACE}/re/hostile.txt"
    bound = SEARCH_S + SLACK_S

    def search(pattern: str, path: str, expected: list[int], **kw: Any) -> Callable[[], Any]:
        def case() -> Any:
            result = result_or_timeout(lambda: box.sandbox.grep(pattern, path=path, **kw))
            if result is not None:
                assert lines_of(result) == [(single, n) for n in expected], lines_of(result)
            return result

        return case

    for pattern, expected in CATASTROPHIC.items():
        cases.run(f"grep dir {pattern[:30]}", bound, search(pattern, directory, expected))
    for pattern in CATASTROPHIC_SINGLE_FILE:
        expected = CATASTROPHIC[pattern]
        cases.run(f"grep file {pattern}", bound, search(pattern, single, expected))
    cases.run(
        "grep multiline (a+)+$",
        bound,
        lambda: result_or_timeout(
            lambda: box.sandbox.grep(r"(a+)+$", path=directory, multiline=True)
        ),
    )
    alternation = "|".join(f"word{i}" for i in range(1000))  # 7 889 characters: allowed
    cases.run("grep 1000 alternatives", bound, search(alternation, directory, [5]))
    for pattern in INVALID:
        cases.run(
            f"grep invalid {pattern[:20]}",
            bound,
            lambda p=pattern: fails_with(
                ErrorCode.INVALID_PATTERN, lambda: box.sandbox.grep(p, path=directory)
            ),
        )
    cases.run(
        "grep empty pattern",
        bound,
        lambda: fails_with(
            ErrorCode.INVALID_ARGUMENT, lambda: box.sandbox.grep("", path=directory)
        ),
    )
    cases.finish()


DASH_LINES = [
    "--pre=sh",
    "-e",
    "--files",
    "-f/etc/passwd",
    "--no-config",
    "$(touch pwned)",
    "`touch pwned2`",
    "; touch pwned3",
]
# Patterns that look like ripgrep options; none has a regex metacharacter.
DASHES = ["--pre=sh", "-e", "--files", "-f/etc/passwd", "--no-config", "--", "-", "--help", "-r"]
DASH_FILES = ("-e", "--pre=sh", "--files/inner.txt", "-f/etc/passwd")
DASH_GLOBS = {
    "-*": ["--pre=sh", "-e"],
    "**/-*": ["--pre=sh", "-e"],
    "--pre=sh": ["--pre=sh"],
    "-e": ["-e"],
    "--*/*": ["--files/inner.txt"],
    "-f/etc/passwd": ["-f/etc/passwd"],
    "--": [],
}


def assert_equal(actual: Any, expected: Any) -> Any:
    assert actual == expected, f"{actual!r} != {expected!r}"
    return actual


def test_leading_dash_and_shell_patterns_are_plain_text(box: Box, cases: Cases) -> None:
    sb = box.sandbox
    base = f"{WORKSPACE}/dash"
    notes = f"{base}/notes.txt"
    sb.write_file("dash/notes.txt", "".join(line + "\n" for line in DASH_LINES))
    for name in DASH_FILES:
        sb.write_file(f"dash/{name}", f"inside {name}\n")
    bound = SEARCH_S + SLACK_S

    def lines_with(pattern: str, literal: bool) -> Callable[[], Any]:
        def case() -> Any:
            result = sb.grep(pattern, path=notes, literal=literal)
            expected = [(notes, i + 1) for i, line in enumerate(DASH_LINES) if pattern in line]
            assert_equal(lines_of(result), expected)
            return result

        return case

    for pattern in DASHES:
        cases.run(f"grep literal {pattern}", bound, lines_with(pattern, True))
        cases.run(f"grep regex {pattern}", bound, lines_with(pattern, False))
    for pattern in DASH_LINES[5:]:
        cases.run(f"grep {pattern}", bound, lines_with(pattern, True))

    def files_with(
        pattern: str, names: list[str], path: str = base, **kw: Any
    ) -> Callable[[], Any]:
        def case() -> Any:
            result = sb.grep(pattern, path=path, output_mode="files_with_matches", **kw)
            assert_equal(result.files, sorted(f"{base}/{name}" for name in names))
            return result

        return case

    cases.run("grep dir --pre=sh", bound, files_with("--pre=sh", ["--pre=sh", "notes.txt"]))
    for glob in ("--pre=sh", "-e", "-f/etc/passwd", "--files/*"):
        names = [n for n in DASH_FILES if n == glob or n.startswith(glob.rstrip("*"))]
        cases.run(f"grep glob={glob}", bound, files_with("inside", names, glob=glob))
    cases.run(
        "grep path=--files",
        bound,
        files_with("inside", ["--files/inner.txt"], path=f"{base}/--files"),
    )
    cases.run(
        "grep path=-e (relative)",
        bound,
        lambda: assert_equal(lines_of(sb.grep("inside", path="dash/-e")), [(f"{base}/-e", 1)]),
    )
    cases.run(
        "grep path=/etc/passwd",
        bound,
        lambda: fails_with(ErrorCode.ACCESS_DENIED, lambda: sb.grep("root", path="/etc/passwd")),
    )
    for pattern, names in DASH_GLOBS.items():
        cases.run(
            f"glob {pattern}",
            bound,
            lambda p=pattern, n=names: assert_equal(
                sb.glob(p, path=base).paths, sorted(f"{base}/{x}" for x in n)
            ),
        )
    cases.run(
        "read_file -e", bound, lambda: assert_equal(sb.read_file("dash/-e").content, "inside -e\n")
    )
    cases.run(
        "list_dir --files",
        bound,
        lambda: assert_equal([e.name for e in sb.list_dir("dash/--files").entries], ["inner.txt"]),
    )
    cases.run(
        "no file made by a pattern",
        bound,
        lambda: assert_equal(sb.glob("**/*pwned*", path=WORKSPACE).paths, []),
    )
    cases.finish()


# -- glob bombs ------------------------------------------------------------------------

CHAIN_DEPTH = 1000
BUSH_DEPTH = 6  # 4**6 leaf directories
LONG_NAME = "a" * 200
MAKE_TREE = f"""\
import os
os.makedirs("tree/chain")
os.makedirs("tree/bush")
top = os.getcwd()
os.chdir("tree/chain")
for _ in range({CHAIN_DEPTH}):
    os.mkdir("d")
    os.chdir("d")
open("leaf.txt", "w").write("deep leaf\\n")
os.chdir(top)
def grow(base, depth):
    if depth == 0:
        open(base + "/leaf.txt", "w").write("bush leaf\\n")
        return
    for letter in "abcd":
        os.mkdir(base + "/" + letter)
        grow(base + "/" + letter, depth - 1)
grow("tree/bush", {BUSH_DEPTH})
open("tree/{LONG_NAME}", "w").write("long name\\n")
"""


def bush_leaves(min_d: int) -> list[str]:
    """Bush leaves whose path has at least `min_d` segments named d."""
    found = []
    for n in range(4**BUSH_DEPTH):
        letters = ["abcd"[(n >> (2 * i)) & 3] for i in reversed(range(BUSH_DEPTH))]
        if letters.count("d") >= min_d:
            found.append("bush/" + "/".join(letters) + "/leaf.txt")
    return found


def test_glob_bombs(box: Box, cases: Cases) -> None:
    sb = box.sandbox
    made = box.run(f"python3 -c {shlex.quote(MAKE_TREE)}", timeout=120)
    assert made.exit_code == 0, made
    tree = f"{WORKSPACE}/tree"
    chain_leaf = "chain/" + "d/" * CHAIN_DEPTH + "leaf.txt"
    bound = SEARCH_S + SLACK_S

    def globbed(pattern: str, check: Callable[[list[str]], None], **kw: Any) -> Callable[[], Any]:
        def case() -> Any:
            result = result_or_timeout(lambda: sb.glob(pattern, path=tree, **kw))
            if result is not None:
                check([p[len(tree) + 1 :] for p in result.paths])
            return result

        return case

    def exactly(expected: list[str]) -> Callable[[list[str]], None]:
        def check(paths: list[str]) -> None:
            assert_equal(paths, sorted(expected)[:200])

        return check

    def deep_enough(segments: int) -> Callable[[list[str]], None]:
        def check(paths: list[str]) -> None:
            assert len(paths) == 200, len(paths)
            assert all(p.count("/") + 1 >= segments for p in paths), paths[:3]

        return check

    everything = result_or_timeout(lambda: sb.glob("**/*", path=tree))
    cases.run(
        "glob **/ x30",
        bound,
        globbed(
            "**/" * 30 + "*",
            (lambda p: assert_equal(p, [x[len(tree) + 1 :] for x in everything.paths]))
            if everything is not None
            else deep_enough(1),
        ),
    )
    cases.run("glob (**/*/) x7", bound, globbed("**/*/" * 6 + "**/*", deep_enough(7)))
    four_d = [*bush_leaves(4), chain_leaf]
    cases.run("glob **/d/ x4 leaf", bound, globbed("**/d/" * 4 + "**/leaf.txt", exactly(four_d)))
    cases.run("glob **/d/ x4 nomatch", bound, globbed("**/d/" * 4 + "**/nope.txt", exactly([])))
    cases.run(
        "glob **/[a-d]/ x3 leaf",
        bound,
        globbed("**/[a-d]/" * 3 + "**/leaf.txt", exactly([*bush_leaves(0), chain_leaf])),
    )
    cases.run("glob chain/**/leaf.txt", bound, globbed("chain/**/leaf.txt", exactly([chain_leaf])))
    star_a = "*a" * 11
    cases.run("glob *a x11 b", bound, globbed(star_a + "*b", exactly([])))
    cases.run("glob *a x11 *", bound, globbed(star_a + "*", exactly([LONG_NAME])))
    cases.run("glob {a,b} x8 (256)", bound, globbed("{a,b}" * 8, exactly([])))
    extensions = "**/*.{" + ",".join(f"e{i}" for i in range(256)) + "}"
    cases.run("glob 256 extensions", bound, globbed(extensions, exactly([])))
    for name, pattern in {
        "{a,b} x9 (512)": "{a,b}" * 9,
        "braces nested 60": "{a," * 60 + "b" + "}" * 60,
        "unclosed [": "**/[abc",
        "4097 characters": "*" * 4097,
        "..": "**/../*",
        "absolute": "/etc/*",
    }.items():
        cases.run(
            f"glob invalid {name}",
            bound,
            lambda p=pattern: fails_with(ErrorCode.INVALID_PATTERN, lambda: sb.glob(p, path=tree)),
        )

    def grep_glob(glob: str, expected: list[str] | None) -> Callable[[], Any]:
        def case() -> Any:
            result = result_or_timeout(
                lambda: sb.grep("leaf", path=tree, glob=glob, output_mode="files_with_matches")
            )
            if result is not None and expected is not None:
                assert_equal(result.files, [f"{tree}/{p}" for p in sorted(expected)[:100]])
            return result

        return case

    cases.run("grep glob (**/*/) x5", bound, grep_glob("**/*/" * 4 + "**/*", None))
    cases.run("grep glob **/d/ x4", bound, grep_glob("**/d/" * 4 + "**/leaf.txt", four_d))
    cases.run("grep glob *a x11 b", bound, grep_glob(star_a + "*b", []))
    cases.run(
        "list_dir chain depth 10",
        bound,
        lambda: assert_equal(len(sb.list_dir("tree/chain", max_depth=10).entries), 10),
    )
    assert box.run("rm -rf tree", timeout=120).exit_code == 0
    cases.finish()


# -- big data --------------------------------------------------------------------------


def make_big_file(box: Box, name: str = "big.log", size: int = BIG_BYTES) -> None:
    started = time.monotonic()
    made = box.run(
        f"mkdir -p big && yes {shlex.quote(BIG_LINE.rstrip())} | "
        f"head -c {size - len(BIG_NEEDLE)} > big/{name} && "
        f"echo needle-at-the-end >> big/{name} && wc -c < big/{name}",
        timeout=300,
    )
    print(f"\n[{box.kind}] {size >> 20} MiB file written in {time.monotonic() - started:.1f} s")
    assert made.exit_code == 0 and int(made.stdout) == size, made


def test_one_gib_file(box: Box, cases: Cases, tmp_path: Path) -> None:
    """A 1 GiB log is skipped by grep (over any size cap); a file at the ceiling is searched."""
    directory, big = f"{WORKSPACE}/big", f"{WORKSPACE}/big/big.log"
    bound = SEARCH_S + SLACK_S

    def searched(
        sb: Sandbox, check: Callable[[Any], None], pattern: str, **kw: Any
    ) -> Callable[[], Any]:
        def case() -> Any:
            result = result_or_timeout(lambda: sb.grep(pattern, **kw))
            if result is not None:
                check(result)
            return result

        return case

    def nothing(result: Any) -> None:
        assert_equal((result.matches, result.counts, result.files), ([], [], []))

    def needle(result: Any) -> None:
        assert_equal(lines_of(result), [(big, NEEDLE_LINE)])

    sb = box.sandbox
    make_big_file(box)
    try:  # default limits: grep skips the file (over grep_max_file_bytes), reads are paged
        for name, path in (("dir", directory), ("file", big)):
            cases.run(
                f"grep 1 GiB {name}, default cap",
                bound,
                searched(sb, nothing, "needle-at-the-end", path=path),
            )

        def first_page() -> Any:
            page = sb.read_file("big/big.log")
            assert (page.end_line, page.total_lines, page.truncated) == (2000, NEEDLE_LINE, True)
            return page

        cases.run("read_file 1 GiB first page", 30.0, first_page)
        cases.run(
            "read_file 1 GiB last line",
            30.0,
            lambda: assert_equal(
                sb.read_file("big/big.log", start_line=NEEDLE_LINE).content[-18:], BIG_NEEDLE
            ),
        )
        cases.run(
            "read_bytes 1 GiB",
            bound,
            lambda: fails_with(ErrorCode.TOO_LARGE, lambda: sb.read_bytes("big/big.log")),
        )
        cases.run(
            "edit_file 1 GiB",
            bound,
            lambda: fails_with(
                ErrorCode.TOO_LARGE, lambda: sb.edit_file("big/big.log", "needle", "pin")
            ),
        )
    finally:
        assert box.run("rm -rf big", timeout=120).exit_code == 0

    # grep_max_file_bytes at its ceiling: a file of exactly that size is searched, the
    # 1 GiB one is still skipped.
    edge = f"{WORKSPACE}/big/edge.log"

    def edge_needle(result: Any) -> None:
        assert_equal(lines_of(result), [(edge, needle_line(CEILING_BYTES))])

    with opened_box(box.target, tmp_path / "data", "ceiling", CEILING_LIMITS) as high:
        sb = high.sandbox
        make_big_file(high)
        make_big_file(high, "edge.log", CEILING_BYTES)
        try:
            for name, check, pattern, kw in [
                ("dir", edge_needle, "needle-at-the-end", {"path": directory}),
                ("1 GiB file", nothing, "needle-at-the-end", {"path": big}),
                ("file literal", edge_needle, "needle-at-the-end", {"path": edge}),
                ("file regex", edge_needle, r"needle-\w+-the-end", {"path": edge}),
                (
                    "count",
                    lambda r: assert_equal([(c.path, c.count) for c in r.counts], [(edge, 1)]),
                    "needle-at-the-end",
                    {"path": directory, "output_mode": "count"},
                ),
                (
                    "first page",
                    lambda r: assert_equal(
                        (lines_of(r), r.truncated), ([(edge, 1), (edge, 2)], True)
                    ),
                    "fox",
                    {"path": directory, "max_results": 2},
                ),
                ("catastrophic", nothing, r"(o+)+$", {"path": directory}),
            ]:
                cases.run(
                    f"grep {name}, cap at the ceiling",
                    bound,
                    searched(sb, check, pattern, **kw),
                    box=high,
                )
        finally:
            assert high.run("rm -rf big", timeout=120).exit_code == 0
    cases.finish()


def test_a_million_tiny_files(box: Box, cases: Cases, million_host: Path) -> None:
    sb = box.sandbox
    spent = fill_million(box, million_host)
    print(f"\n[{box.kind}] million files made in {spent:.1f} s (0 if another kind made them)")
    listed = box.run(f"ls {MILLION} | wc -l; ls {MILLION}/d999 | wc -l", timeout=60)
    assert listed.stdout.split() == [str(MILLION_DIRS), str(FILES_PER_DIR)], listed
    bound = SEARCH_S + SLACK_S
    needles = [
        f"{MILLION}/d{d:03d}/f{f:03d}.txt"
        for d in range(MILLION_DIRS)
        for f in range(0, FILES_PER_DIR, NEEDLE_EVERY)
    ]

    def grepped(check: Callable[[Any], None], pattern: str, **kw: Any) -> Callable[[], Any]:
        def case() -> Any:
            kw.setdefault("path", MILLION)
            result = result_or_timeout(lambda: sb.grep(pattern, **kw))
            if result is not None:
                check(result)
            return result

        return case

    def globbed(pattern: str, expected: list[str]) -> Callable[[], Any]:
        def case() -> Any:
            result = result_or_timeout(lambda: sb.glob(pattern, path=MILLION))
            if result is not None:
                assert_equal(result.paths, expected[:200])
                assert result.truncated == (len(expected) > 200)
            return result

        return case

    cases.run(
        "grep million files_with_matches",
        bound,
        grepped(
            lambda r: assert_equal((r.files, r.truncated), (needles[:100], True)),
            "needle",
            output_mode="files_with_matches",
        ),
    )
    one = f"{MILLION}/d999/f900.txt"
    cases.run(
        "grep million one needle",
        bound,
        grepped(lambda r: assert_equal(lines_of(r), [(one, 1)]), "needle 999 900"),
    )
    cases.run(
        "grep million count",
        bound,
        grepped(
            lambda r: assert_equal([c.path for c in r.counts], needles[:100]),
            "needle",
            output_mode="count",
        ),
    )
    cases.run(
        "grep million glob=f900.txt",
        bound,
        grepped(
            lambda r: assert_equal(r.files, [n for n in needles if n.endswith("f900.txt")][:100]),
            "needle",
            glob="f900.txt",
            output_mode="files_with_matches",
        ),
    )
    cases.run(
        "grep one dir of a thousand",
        bound,
        grepped(
            lambda r: assert_equal(
                [m.path for m in r.matches], [n for n in needles if "/d500/" in n]
            ),
            "needle",
            path=f"{MILLION}/d500",
        ),
    )
    every = [f"{MILLION}/d000/f{f:03d}.txt" for f in range(FILES_PER_DIR)]
    cases.run("glob million **/*.txt", bound, globbed("**/*.txt", every))
    cases.run(
        "glob million d999/f99?.txt",
        bound,
        globbed("d999/f99?.txt", [f"{MILLION}/d999/f99{i}.txt" for i in range(10)]),
    )
    cases.run(
        "glob million **/f999.txt",
        bound,
        globbed("**/f999.txt", [f"{MILLION}/d{d:03d}/f999.txt" for d in range(MILLION_DIRS)]),
    )

    def listing() -> Any:
        result = sb.list_dir(MILLION, max_depth=2)
        names = [e.path for e in result.entries]
        assert_equal(
            (names, result.truncated), ([f"{MILLION}/d{d:03d}" for d in range(1000)], True)
        )
        return result

    cases.run("list_dir million", bound, listing)
    cases.finish()


# -- commands --------------------------------------------------------------------------


def test_hostile_commands(box: Box, cases: Cases) -> None:
    cap = BOX_LIMITS.exec_output_bytes
    term_bound = 1.0 + 1.0 + SLACK_S  # timeout, SIGTERM grace, slack

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

    cases.run(
        "print 1 GiB",
        60.0,
        printed(f"head -c {GIB} /dev/zero | tr '\\0' x; echo END", "xEND\n", ("stdout",)),
    )
    cases.run(
        "print 1 GiB on both streams",
        60.0,
        printed(
            f"yes out | head -c {GIB} & yes err | head -c {GIB} >&2; wait; echo END; echo END >&2",
            "END\n",
            ("stdout", "stderr"),
        ),
    )
    cases.run(
        "print 64 MiB of random bytes",
        60.0,
        printed(f"head -c {64 * MIB} /dev/urandom; echo; echo END", "END\n", ("stdout",)),
    )

    def times_out(command: str) -> Callable[[], Any]:
        def case() -> Any:
            result = box.run(command, timeout=1)
            assert (result.timed_out, result.exit_code) == (True, None), result
            return result

        return case

    cases.run("ignores SIGTERM, sleeps", term_bound, times_out("trap '' TERM; sleep 600"))
    cases.run("ignores SIGTERM, spins", term_bound, times_out("trap '' TERM; while :; do :; done"))

    def ends_with_the_call(command: str, *, survives: bool = False) -> Callable[[], Any]:
        def case() -> Any:
            result = box.run(command, timeout=30)
            assert result.exit_code == 0 and not result.timed_out, result
            pid = result.stdout.split()[-1]
            if survives:  # its own session: it outlives the call, as documented
                assert not box.dead(pid, wait_s=0), f"{pid} did not outlive the call"
                assert box.run(f"kill -9 {pid}").exit_code == 0
            if not box.dead(pid):
                raise Unbounded(f"pid {pid} still runs after the call")
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
        1.0 + SLACK_S,
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
        result = box.run(
            "(while :; do echo tick; sleep 0.05; done) & echo $! > writer.pid; "
            "sleep 0.3; echo main-done",
            timeout=30,
        )
        assert "tick" in result.stdout and "main-done" in result.stdout, result
        pid = box.sandbox.read_file("writer.pid").content.strip()
        if not box.dead(pid):
            raise Unbounded(f"background writer {pid} still runs")
        return result

    cases.run("background writer on stdout", SLACK_S, writer)

    def hog() -> Any:
        result = box.run("python3 hog.py", timeout=120)
        if "survived" in result.stdout:
            raise Unbounded("the memory hog touched 4 GiB")
        assert result.exit_code not in (0, None), result
        return result

    cases.run("memory hog", 60.0, hog)

    def probe() -> int:
        result = box.run("python3 probe.py", timeout=60)
        assert result.exit_code == 0, result
        return int(result.stdout)

    capacity: list[int] = []

    def bounded_forks() -> Any:
        count = probe()
        capacity.append(count)
        if count >= PROBE_MAX:
            raise Unbounded(f"{count} processes made: nothing bounds a fork bomb")
        return count

    cases.run("fork probe", 30.0, bounded_forks)
    if capacity and capacity[0] < PROBE_MAX:  # never run a fork bomb nothing bounds

        def bomb(command: str, timeout: float, timed_out: bool) -> Callable[[], Any]:
            def case() -> Any:
                started = time.monotonic()
                result = box.run(command, timeout=timeout)
                returned = time.monotonic() - started
                assert result.timed_out == timed_out, result
                end = time.monotonic() + 10.0
                while (after := probe()) < capacity[0] - 8:  # zombies are still being reaped
                    if time.monotonic() > end:
                        raise Unbounded(f"capacity {after} of {capacity[0]} after the bomb")
                    time.sleep(0.5)
                print(
                    f"\n[{box.kind}] {command!r}: returned in {returned:.2f} s, "
                    f"{after} of {capacity[0]} processes free again after "
                    f"{time.monotonic() - started:.2f} s"
                )
                return result

            return case

        bash_bomb = "bomb() { bomb | bomb & }; bomb"
        cases.run("fork bomb, shell exits", 10.0 + 1.0 + SLACK_S, bomb(bash_bomb, 10.0, False))
        cases.run(
            "fork bomb, shell waits",
            3.0 + 1.0 + SLACK_S + 10.0,
            bomb(bash_bomb + "; sleep 60", 3.0, True),
        )
    cases.finish()
