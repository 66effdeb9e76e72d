"""SandkitBackend answers what deepagents' own BaseSandbox answers, over generated inputs.

The reference (`tests/deepagents_standard.ReferenceSandbox`) runs deepagents' scripts in
the same kind of box; both backends get the same file tree (each under its own root)
and the same calls to ls, read, write, edit, glob and grep. Results are compared
with the root taken off the paths; failures are compared as failures (the wording is
each backend's own). This is what makes the suite tests the reference fails too
(docs/integrations.md) a statement about deepagents' semantics rather than ours.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandkit import SandboxKey, Settings
from sandkit.config import MountSpec
from sandkit.integrations.deepagents import SandkitBackend
from sandkit.local import LocalProvider
from tests.deepagents_standard import ReferenceSandbox

NAMES = st.sampled_from(["a", "b", "ab", "x.py", "y.txt", "z.md", ".hid", "é.txt", "s p.py"])
DIRS = st.sampled_from(["", "d/", "d/e/", "f/", ".dot/"])
LINE = st.text(alphabet="ab xy\t.é(", min_size=0, max_size=12)
CONTENT = st.lists(LINE, min_size=0, max_size=6).map("\n".join)
TREE = st.dictionaries(st.tuples(DIRS, NAMES).map("".join), CONTENT, min_size=1, max_size=6)
GLOBS = st.sampled_from(
    ["*", "*.py", "**/*.py", "*.{py,md}", "d/*", "d/**", "**/*", "?.py", "[ab]*", ".*", "/*.txt"]
)
# grep's file filter: deepagents' BaseSandbox hands a name pattern to `grep --include`,
# which has no `{a,b}`; sandkit expands it (docs/integrations.md), so no braces here.
GREP_GLOBS = st.sampled_from(["*.py", "**/*.py", "d/*", "d/**", "*", "?.py", ".*", "/*.txt"])
NEEDLES = st.sampled_from(["a", "ab", "x", " ", "é", "(", "a b", "zz"])

_run = itertools.count()


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, Path]]:
    base = tmp_path_factory.mktemp("reference-diff")
    ops = (base / "ops").resolve()
    ops.mkdir()
    provider = LocalProvider(
        Settings(
            data_root=base / "data",
            execute_enabled=True,
            mounts=[MountSpec(virtual=str(ops), host=ops, read_only=False)],
        )
    )
    box = provider.acquire(SandboxKey("diff", uuid.uuid4().hex[:8]))
    try:
        yield SandkitBackend(box), ReferenceSandbox(box), ops
    finally:
        provider.shutdown()


def _roots(ops: Path) -> tuple[str, str]:
    n = next(_run)
    return f"{ops}/s{n}", f"{ops}/r{n}"


def _seed(backend: Any, root: str, tree: dict[str, str]) -> None:
    for rel, text in tree.items():
        assert backend.upload_files([(f"{root}/{rel}", text.encode())])[0].error is None


def _rel(path: str, root: str) -> str:
    return path[len(root) :] if path.startswith(root) else path


def _same(ours: Any, theirs: Any) -> None:
    assert ours == theirs


DIFF = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)


@DIFF
@given(tree=TREE, where=DIRS)
def test_ls(backends: tuple[Any, Any, Path], tree: dict[str, str], where: str) -> None:
    ours, ref, ops = backends
    sroot, rroot = _roots(ops)
    _seed(ours, sroot, tree)
    _seed(ref, rroot, tree)
    a, b = ours.ls(f"{sroot}/{where}".rstrip("/")), ref.ls(f"{rroot}/{where}".rstrip("/"))
    assert (a.error is None) == (b.error is None), (a, b)
    if a.error is None:
        assert sorted((_rel(e["path"], sroot), e["is_dir"]) for e in a.entries) == sorted(
            (_rel(e["path"], rroot), e["is_dir"]) for e in b.entries
        )


@DIFF
@given(text=CONTENT, offset=st.integers(-2, 8), limit=st.integers(-1, 8))
def test_read(backends: tuple[Any, Any, Path], text: str, offset: int, limit: int) -> None:
    ours, ref, ops = backends
    sroot, rroot = _roots(ops)
    _seed(ours, sroot, {"f.txt": text})
    _seed(ref, rroot, {"f.txt": text})
    a, b = ours.read(f"{sroot}/f.txt", offset, limit), ref.read(f"{rroot}/f.txt", offset, limit)
    assert (a.error is None) == (b.error is None), (a, b)
    if a.error is None:
        assert a.file_data == b.file_data


@DIFF
@given(text=CONTENT, again=st.none() | CONTENT, where=DIRS)
def test_write(backends: tuple[Any, Any, Path], text: str, again: str | None, where: str) -> None:
    ours, ref, ops = backends
    sroot, rroot = _roots(ops)
    results = []
    for backend, root in ((ours, sroot), (ref, rroot)):
        path = f"{root}/{where}w.txt"
        first = backend.write(path, text)
        second = backend.write(path, again) if again is not None else first
        [got] = backend.download_files([path])
        results.append(
            (first.error is None, second.error is None, _rel(first.path or "", root), got.content)
        )
    _same(*results)


@DIFF
@given(text=CONTENT, old=LINE, new=LINE, replace_all=st.booleans())
def test_edit(
    backends: tuple[Any, Any, Path], text: str, old: str, new: str, replace_all: bool
) -> None:
    ours, ref, ops = backends
    sroot, rroot = _roots(ops)
    results = []
    for backend, root in ((ours, sroot), (ref, rroot)):
        _seed(backend, root, {"e.txt": text})
        result = backend.edit(f"{root}/e.txt", old, new, replace_all)
        [got] = backend.download_files([f"{root}/e.txt"])
        results.append((result.error is None, result.occurrences, got.content))
    _same(*results)


@DIFF
@given(tree=TREE, pattern=GLOBS, where=st.sampled_from(["", "d"]))
def test_glob(
    backends: tuple[Any, Any, Path], tree: dict[str, str], pattern: str, where: str
) -> None:
    ours, ref, ops = backends
    sroot, rroot = _roots(ops)
    _seed(ours, sroot, tree)
    _seed(ref, rroot, tree)
    sdir, rdir = f"{sroot}/{where}".rstrip("/"), f"{rroot}/{where}".rstrip("/")
    a, b = ours.glob(pattern, sdir), ref.glob(pattern, rdir)
    assert (a.error is None) == (b.error is None), (a, b)
    if a.error is None:
        assert sorted((_rel(m["path"], sroot), m["is_dir"]) for m in a.matches) == sorted(
            (_rel(m["path"], rroot), m["is_dir"]) for m in b.matches
        )


@DIFF
@given(tree=TREE, needle=NEEDLES, include=st.none() | GREP_GLOBS, cap=st.none() | st.integers(0, 4))
def test_grep(
    backends: tuple[Any, Any, Path],
    tree: dict[str, str],
    needle: str,
    include: str | None,
    cap: int | None,
) -> None:
    ours, ref, ops = backends
    sroot, rroot = _roots(ops)
    _seed(ours, sroot, tree)
    _seed(ref, rroot, tree)
    a = ours.grep(needle, sroot, include, max_count=cap)
    b = ref.grep(needle, rroot, include, max_count=cap)
    assert (a.error is None) == (b.error is None), (a, b)
    if a.error is None:
        key = lambda m, root: (_rel(m["path"], root), m["line"], m["text"])  # noqa: E731
        ours_found = sorted(key(m, sroot) for m in a.matches)
        theirs_found = sorted(key(m, rroot) for m in b.matches)
        if cap is None:
            assert ours_found == theirs_found
        else:  # which `cap` matches is each engine's order; how many and truncation agree
            assert len(ours_found) == len(theirs_found)
            assert bool(a.truncated) == bool(b.truncated)
