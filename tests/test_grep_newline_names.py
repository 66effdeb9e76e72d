"""ripgrep and Python engines agree on files whose name holds a newline (issue 13).

`rg --count --null` prints `path NUL count NEWLINE`; a newline inside a path used to
split the record, so such files dropped out of `count` results and out of `content`
results whenever the single ripgrep pass fell back to counting first.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from sandkit.runtime import search
from sandkit.runtime.context import Context
from sandkit.runtime.limits import Limits
from sandkit.runtime.pathmap import WORKSPACE, Mount, PathMapping
from sandkit.runtime.rg import parse_counts
from sandkit.runtime.search import find_rg, grep

RG = find_rg()
pytestmark = pytest.mark.skipif(RG is None, reason="no ripgrep binary")


@pytest.fixture
def contexts() -> Iterator[tuple[Context, Context]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        (root / "two\nlines.txt").write_text("needle\nhay\nneedle\n")
        (root / "plain.txt").write_text("needle\n")
        (root / "sub\ndir").mkdir()
        (root / "sub\ndir" / "x\n").write_text("a needle\n")
        mapping = PathMapping([Mount(WORKSPACE, str(root))])
        yield (
            Context(mapping=mapping, limits=Limits(), rg_path=RG),
            Context(mapping=mapping, limits=Limits(), rg_path=None),
        )


def test_parse_counts_keeps_newlines_in_paths() -> None:
    out = b"a\nb\x003\nplain\x001\n\nlead\x0012\n"
    assert parse_counts(out) == [("a\nb", 3), ("plain", 1), ("\nlead", 12)]


@pytest.mark.parametrize("mode", ["count", "files_with_matches", "content"])
def test_engines_agree(contexts: tuple[Context, Context], mode: str) -> None:
    with_rg, python_only = contexts
    request: dict[str, Any] = {"pattern": "needle", "output_mode": mode}
    fast, slow = grep(with_rg, **request), grep(python_only, **request)
    assert fast == slow
    paths = [m["path"] for m in fast.get("matches") or fast.get("counts") or []] or fast["files"]
    assert f"{WORKSPACE}/two\nlines.txt" in paths
    assert f"{WORKSPACE}/sub\ndir/x\n" in paths


def test_content_through_the_count_first_route(contexts: tuple[Context, Context]) -> None:
    with_rg, python_only = contexts
    with (
        mock.patch.object(search, "SINGLE_PASS_SAFE_OUTPUT", 0),
        mock.patch.object(search, "SINGLE_PASS_MAX_OUTPUT", 0),
    ):
        fast = grep(with_rg, pattern="needle", output_mode="content")
    assert fast == grep(python_only, pattern="needle", output_mode="content")
    assert len(fast["matches"]) == 4
