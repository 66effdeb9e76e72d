"""Big data on every provider: a 1 GiB log and a million tiny files.

grep skips the 1 GiB file whatever the configuration (it is over the
`grep_max_file_bytes` ceiling), reads of it are paged, and a file at the ceiling is
searched within the search time limit. A million files are grepped, globbed and
listed within that limit too, each with the exact (capped) answer or TIMEOUT.

The box of the ceiling cases is made with limits a careless operator could pick:
`grep_max_file_bytes` at its ceiling, so files up to it are really searched.

The million tiny files live on a tmpfs (creating and deleting them on disk costs
minutes): for the host-directory kinds one tree under /dev/shm, made once per session
and mounted read-only at /mnt/million; the E2B stand-in keeps thread data inside its
container, so there a tmpfs is mounted at /mnt/million in the box's mount namespace and
filled from the host (nsenter: the data is the box's, the memory is not billed to its
512 MiB). The 1 GiB file is written inside the box by one command and removed at the
end.
"""

from __future__ import annotations

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
from sandkit.errors import ErrorCode
from sandkit.sandbox import Sandbox

from .figures import Figures
from .inputs_support import (
    BOX_LIMITS,
    GIB,
    SEARCH_S,
    SLACK_S,
    WORKSPACE,
    Box,
    Cases,
    assert_equal,
    fails_with,
    lines_of,
    opened_box,
    result_or_timeout,
)
from .targets import SESSION, Target

MILLION = "/mnt/million"
MILLION_DIRS = 1000
FILES_PER_DIR = 1000  # one in NEEDLE_EVERY holds a line, the rest are empty
NEEDLE_EVERY = 100
BIG_BYTES = GIB  # over the grep_max_file_bytes ceiling: skipped whatever the configuration
# The largest file grep may be configured to search: it must stay bounded in time and memory.
CEILING_BYTES = int(LimitsSettings.model_fields["grep_max_file_bytes"].metadata[-1].le)
BIG_NEEDLE = "needle-at-the-end\n"
BIG_LINE = "the quick brown fox jumps over the lazy dog 0123456789\n"
# A paged read of the 1 GiB file counts all its lines: work that grows with the file and
# has no time limit of its own. It costs about what writing the file cost the box just
# before (2 s quiet, more under load), so its bound is a multiple of that, never less
# than READ_FLOOR_S.
READ_PER_WRITE = 10
READ_FLOOR_S = 120.0  # a paged read under the load of parallel suites took 39.8 s once


def needle_line(size: int) -> int:
    """`yes BIG_LINE` cut at size - len(BIG_NEEDLE), then the needle ends that partial line."""
    return (size - len(BIG_NEEDLE)) // len(BIG_LINE) + 1


NEEDLE_LINE = needle_line(BIG_BYTES)
# What a careless operator could configure: files up to the ceiling are really searched.
CEILING_LIMITS = BOX_LIMITS.model_copy(update={"grep_max_file_bytes": CEILING_BYTES})

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


@pytest.fixture(scope="session")
def million_host() -> Iterator[Path]:
    """The host directory the host-directory kinds mount at /mnt/million (tmpfs)."""
    root = Path("/dev/shm") / f"sandkit-hardening-{SESSION}" / "million"
    root.mkdir(parents=True)
    yield root
    shutil.rmtree(root.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def box(
    target: Target, million_host: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Box]:
    """The module's box: the modules' limits, and /mnt/million mounted read-only."""
    data_root = tmp_path_factory.mktemp(f"files-{target.kind}")
    # E2B seeds its box from the host: an empty dir there, the files on a tmpfs in the box.
    mounted = tmp_path_factory.mktemp("million-seed") if target.kind == "e2b" else million_host
    million = MountSpec(virtual=MILLION, host=mounted, read_only=True)
    with opened_box(target, data_root, "files", BOX_LIMITS, mounts=[million]) as made:
        yield made


@pytest.fixture
def cases(box: Box, figures: Figures) -> Cases:
    return Cases(box, figures)


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
    """The E2B stand-in's container of `key` (a docker SDK Container)."""
    import docker
    from e2b_standin import META_PREFIX

    client = docker.from_env()
    found = client.containers.list(
        filters={"label": f"{META_PREFIX}sandkit.sandbox-id={key.sandbox_id}"}
    )
    assert len(found) == 1, f"stand-in containers for {key}: {found}"
    return found[0]


# -- big data --------------------------------------------------------------------------


def make_big_file(box: Box, name: str = "big.log", size: int = BIG_BYTES) -> float:
    """Write `size` bytes of BIG_LINE ending in BIG_NEEDLE in the box; seconds it took."""
    started = time.monotonic()
    made = box.run(
        f"mkdir -p big && yes {shlex.quote(BIG_LINE.rstrip())} | "
        f"head -c {size - len(BIG_NEEDLE)} > big/{name} && "
        f"echo needle-at-the-end >> big/{name} && wc -c < big/{name}",
        timeout=300,
    )
    spent = time.monotonic() - started
    print(f"\n[{box.kind}] {size >> 20} MiB file written in {spent:.1f} s")
    assert made.exit_code == 0 and int(made.stdout) == size, made
    return spent


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
    read_bound = max(READ_FLOOR_S, READ_PER_WRITE * make_big_file(box))
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

        cases.run("read_file 1 GiB first page", read_bound, first_page)
        cases.run(
            "read_file 1 GiB last line",
            read_bound,
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
