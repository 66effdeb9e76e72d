"""What the hostile-input modules share: one box per module, and `Cases`, which runs each
case against a bound and then checks that the box still answers.

The three modules (`test_inputs_patterns`, `test_inputs_files`, `test_inputs_commands`)
each open one box per provider kind (`opened_box`; a box per case would cost minutes
on Kubernetes). Every case runs through `Cases.run`, which times it against a bound,
then makes a follow-up grep and command that must answer exactly. A case that overruns
its bound, escapes a limit (a memory hog that survives, a fork bomb nothing stops,
output past the cap) or leaves the box unusable counts as unbounded; a wrong answer or
error code is a failure too. Figures: `inputs_tried` and `unbounded` per kind; the
timings the report quotes are printed (`-s`).

Bounds are what the contract promises plus `SLACK_S`: a search is cut at its
`search_timeout_s`, a command at its own timeout plus the runtime's SIGTERM grace.
They are never a guess at how fast a loaded machine is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import resource
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sandkit import SandboxKey
from sandkit.config import LimitsSettings
from sandkit.errors import ErrorCode, SandboxError
from sandkit.provider import SandboxProvider
from sandkit.sandbox import Sandbox
from sandkit.testing.conformance.suite import assert_clean

from .figures import Figures
from .targets import LIMITS, OWNER, Target, forbidden_for

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
WORKSPACE = "/mnt/user-data/workspace"
SEARCH_S = LIMITS.search_timeout_s
# Added to every bound for the round trips around the operation: two shared cores with
# other suites running. It covers latency, never the operation's own work.
SLACK_S = 5.0
SENTINEL = "sentinel-7c1f"
PROVIDER_GROWTH = 512 * MIB  # local: more than this held by one operation is unbounded
BOX_PROCESSES = 64  # local only: exec_max_processes of the modules' boxes
BOX_MEMORY = 256 * MIB  # local only: exec_memory_bytes

# Small local command bounds, so that the local fork bomb and memory hog stay small.
BOX_LIMITS = LimitsSettings(
    search_timeout_s=SEARCH_S,
    exec_max_processes=BOX_PROCESSES,
    exec_memory_bytes=BOX_MEMORY,
    exec_default_timeout_s=60.0,
)


class Unbounded(AssertionError):
    """A limit did not hold: a hog survived, output passed its cap, nothing stopped a bomb."""


@dataclasses.dataclass
class Box:
    """One sandbox of a provider made for a module, with what its checks need."""

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
    """The SandboxError `call` raises, which must carry `code`."""
    try:
        value = call()
    except SandboxError as exc:
        assert exc.code == code, f"{exc.code.value} instead of {code.value}: {exc.message}"
        return exc
    raise AssertionError(f"no {code.value}: {value!r}"[:300])


def lines_of(result: Any) -> list[tuple[str, int]]:
    return [(m.path, m.line_number) for m in result.matches]


def assert_equal(actual: Any, expected: Any) -> Any:
    assert actual == expected, f"{actual!r} != {expected!r}"
    return actual


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
