"""glob and grep against a directory swapped for a symlink between check and use.

`PathMapping.resolve` checks the search root once; the walk lists
directories and the scanner reads files by path afterwards. Something in
the sandbox can swap a directory on such a path for a symlink at any moment
(tests/hardening/test_paths.py does it for real, concurrently). These tests
make the swap happen deterministically at each step and check that nothing
from outside the mount comes back: no name, no line.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandkit.runtime import globbing, pyscan, search
from sandkit.runtime.context import Context
from sandkit.runtime.errors import ErrorCode, SandboxError
from sandkit.runtime.limits import Limits
from sandkit.runtime.pathmap import WORKSPACE, Mount, PathMapping, Resolved
from sandkit.runtime.rg import find_rg

RG = find_rg()
OUTSIDE = "OUTSIDE-MARKER"


class Tree:
    def __init__(self, root: Path) -> None:
        self.ws = root / "ws"
        self.d = self.ws / "race" / "d"
        self.outside = root / "outside"
        for base, text in ((self.d, "inside"), (self.outside, OUTSIDE)):
            (base / "sub").mkdir(parents=True)
            (base / "f.txt").write_text(f"{text} f\n")
            (base / "sub" / "g.txt").write_text(f"{text} g\n")
        (self.outside / "secret-only.txt").write_text(f"{OUTSIDE} secret\n")
        (self.outside / "sub" / "secret-only.txt").write_text(f"{OUTSIDE} secret\n")

    def swap(self, directory: Path) -> None:
        """Replace `directory` (d or d/sub) with a symlink to its twin outside."""
        twin = self.outside / directory.relative_to(self.d)
        directory.rename(directory.with_name(directory.name + ".real"))
        directory.symlink_to(twin)


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


@pytest.fixture(params=["rg", "python"])
def engine(request: pytest.FixtureRequest) -> str:
    if request.param == "rg" and RG is None:
        pytest.skip("ripgrep is not installed")
    return str(request.param)


class SwapAfterResolve(PathMapping):
    """A mapping that swaps the directory right after checking a path (the worst moment)."""

    def __init__(self, tree: Tree) -> None:
        super().__init__([Mount(WORKSPACE, str(tree.ws))])
        self.tree = tree

    def resolve(self, path: object, for_write: bool = False) -> Resolved:
        resolved = super().resolve(path, for_write)
        self.tree.swap(self.tree.d)
        return resolved


def context(tree: Tree, engine: str = "python", mapping: PathMapping | None = None) -> Context:
    return Context(
        mapping=mapping or PathMapping([Mount(WORKSPACE, str(tree.ws))]),
        limits=Limits(),
        rg_path=RG if engine == "rg" else None,
    )


def assert_nothing_from_outside(result: dict[str, Any]) -> None:
    text = repr(result)
    assert OUTSIDE not in text and "secret-only" not in text, text


D = f"{WORKSPACE}/race/d"


def test_grep_root_swapped_after_the_check_is_access_denied(tree: Tree, engine: str) -> None:
    ctx = context(tree, engine, SwapAfterResolve(tree))
    with pytest.raises(SandboxError) as info:
        search.grep(ctx, ".", path=D)
    assert info.value.code is ErrorCode.ACCESS_DENIED
    assert str(tree.ws) not in info.value.message


def test_glob_root_swapped_after_the_check_is_access_denied(tree: Tree) -> None:
    ctx = context(tree, mapping=SwapAfterResolve(tree))
    with pytest.raises(SandboxError) as info:
        search.glob(ctx, "**/*", path=D)
    assert info.value.code is ErrorCode.ACCESS_DENIED


@pytest.fixture
def swap_sub_when_listed(tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    """d/sub becomes a symlink out right after the walk has seen it as a directory."""
    real_kind = globbing.entry_kind

    def kind_then_swap(entry: os.DirEntry[str]) -> str:
        kind = real_kind(entry)
        if entry.name == "sub" and kind == globbing.KIND_DIR and not (tree.d / "sub").is_symlink():
            tree.swap(tree.d / "sub")
        return kind

    monkeypatch.setattr(globbing, "entry_kind", kind_then_swap)


@pytest.mark.usefixtures("swap_sub_when_listed")
def test_glob_never_lists_a_directory_swapped_during_the_walk(tree: Tree) -> None:
    result = search.glob(context(tree), "**/*", path=D, include_dirs=True)
    assert_nothing_from_outside(result)
    assert f"{D}/f.txt" in result["paths"]


@pytest.mark.usefixtures("swap_sub_when_listed")
def test_grep_never_reads_a_directory_swapped_during_the_walk(tree: Tree) -> None:
    result = search.grep(context(tree), ".", path=D)
    assert_nothing_from_outside(result)
    assert [m["path"] for m in result["matches"]] == [f"{D}/f.txt"]


@pytest.fixture
def swap_d_before_reading(tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    """The files are chosen (by the walk or by ripgrep), then d is swapped before they are read."""
    real_iter = pyscan._iter_files

    def iter_then_swap(req: dict[str, Any], deadline: Any) -> Iterator[tuple[str, str]]:
        chosen = list(real_iter(req, deadline))
        if not tree.d.is_symlink():
            tree.swap(tree.d)
        yield from chosen

    monkeypatch.setattr(pyscan, "_iter_files", iter_then_swap)
    for name in ("run_rg", "run_bounded"):
        real_run = getattr(search, name)

        def run_then_swap(*args: Any, _real: Any = real_run, **kwargs: Any) -> Any:
            out = _real(*args, **kwargs)
            if not tree.d.is_symlink():
                tree.swap(tree.d)
            return out

        monkeypatch.setattr(search, name, run_then_swap)


@pytest.mark.usefixtures("swap_d_before_reading")
@pytest.mark.parametrize("mode", ["content", "files_with_matches", "count"])
def test_grep_never_reads_a_file_through_a_directory_swapped_after_the_walk(
    tree: Tree, engine: str, mode: str
) -> None:
    result = search.grep(context(tree, engine), ".", path=D, output_mode=mode)
    assert_nothing_from_outside(result)
    assert not result["matches"], "the files are gone from d: nothing of theirs is shown"


def test_open_exact_refuses_a_path_through_a_symlink(tree: Tree) -> None:
    inside = str(tree.d / "f.txt")
    fd = globbing.open_exact(inside, os.O_RDONLY)
    os.close(fd)
    tree.swap(tree.d)
    with pytest.raises(OSError):
        globbing.open_exact(inside, os.O_RDONLY)
    with pytest.raises(OSError):
        globbing.open_exact(str(tree.d), os.O_RDONLY | os.O_DIRECTORY)


def test_open_exact_without_proc_walks_the_components(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the kernel cannot name an open file, every component is opened without following."""
    monkeypatch.setattr(globbing, "_kernel_path", lambda fd: None)
    inside = str(tree.d / "f.txt")
    fd = globbing.open_exact(inside, os.O_RDONLY)
    assert os.read(fd, 100) == b"inside f\n"
    os.close(fd)
    tree.swap(tree.d)
    with pytest.raises(OSError):
        globbing.open_exact(inside, os.O_RDONLY)
