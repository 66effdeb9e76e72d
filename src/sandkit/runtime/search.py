"""`glob` and `grep`: argument checks, engine choice, result assembly.

Two grep engines, one result. The Python engine walks the tree and scans
files itself (pyscan.py). The ripgrep engine lets ripgrep pick the files:
when the pattern's translation is exact (rxinfo.py) ripgrep's per-file
counts and line numbers are used as they are, otherwise ripgrep only
pre-selects candidate files (a superset) and the Python scanner decides.
Either way paths, order, line cutting, context and pagination come from the
same code, and ripgrep is skipped whenever it cannot give the same answer
(untranslatable pattern, regex too big for it, binary missing, a file that
changed between two passes). See docs/search.md for the user-facing rules.
"""

from __future__ import annotations

import errno
import os
import stat

from . import pyscan, scanworker
from .context import Context
from .errors import ErrorCode, SandboxError
from .globbing import (
    KIND_DIR,
    KIND_FILE,
    KIND_LINK,
    KIND_OTHER,
    Deadline,
    GlobError,
    GlobPattern,
    TimeUp,
    open_exact,
    walk,
)
from .pathmap import WORKSPACE, Mount, PathMapping, Resolved
from .rg import BASE_ARGS as RG_BASE_ARGS
from .rg import (
    RgRegexError,
    RgUnusable,
    find_rg,
    match_positions,
    parse_counts,
    parse_files,
    parse_json_blocks,
    parse_json_lines,
    run_bounded,
    tree_args,
)
from .rg import run as run_rg
from .rxinfo import PatternError, PatternInfo, pattern_info
from .validate import clamp_results, invalid, require_bool, require_int, require_str

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Sequence, Tuple

__all__ = ["find_rg", "glob", "grep"]

OUTPUT_MODES = ("content", "files_with_matches", "count")
# The file of the warm-up's sample tree (warm): a few lines with matches.
WARM_SAMPLE = "class Sample:\n    def sample(self):\n        return 1\n"


def _timeout() -> SandboxError:
    return SandboxError(ErrorCode.TIMEOUT, "search took longer than its time limit")


def _stat_root(resolved: Resolved) -> os.stat_result:
    """The search root as it is now, refusing it if a symlink took its place after the check."""
    try:
        info = os.lstat(resolved.real)
        if stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode):
            # open_exact also refuses a directory above it that became a symlink.
            fd = open_exact(resolved.real, os.O_RDONLY | os.O_NONBLOCK)
            try:
                info = os.fstat(fd)
            finally:
                os.close(fd)
    except (FileNotFoundError, NotADirectoryError):
        raise SandboxError(ErrorCode.NOT_FOUND, "%s does not exist" % resolved.virtual) from None
    except PermissionError:
        raise SandboxError(
            ErrorCode.ACCESS_DENIED, "%s cannot be read" % resolved.virtual
        ) from None
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise _swapped(resolved) from None
    if stat.S_ISLNK(info.st_mode):
        raise _swapped(resolved)
    return info


def _swapped(resolved: Resolved) -> SandboxError:
    return SandboxError(
        ErrorCode.ACCESS_DENIED, "%s changed into a symlink during the search" % resolved.virtual
    )


def _join(vroot: str, rel: str) -> str:
    return vroot.rstrip("/") + "/" + rel


# -- glob ---------------------------------------------------------------------------


def glob(
    ctx: Context,
    pattern: Any,
    path: Any = WORKSPACE,
    include_dirs: Any = False,
    max_results: Any = None,
    offset: Any = 0,
) -> Dict[str, Any]:
    """Paths below `path` whose relative path matches `pattern`, sorted, capped.

    `offset` skips that many matches of the sorted order first (paging, as grep's);
    `truncated` says more existed past the page returned.
    """
    pattern = require_str("pattern", pattern)
    include_dirs = require_bool("include_dirs", include_dirs)
    limits = ctx.limits
    cap = clamp_results(
        "max_results", max_results, limits.glob_default_results, limits.glob_max_results
    )
    offset = require_int("offset", offset, minimum=0)
    try:
        compiled = GlobPattern(pattern)
    except GlobError as exc:
        raise SandboxError(ErrorCode.INVALID_PATTERN, str(exc)) from None
    resolved = ctx.mapping.resolve(path)
    info = _stat_root(resolved)
    if not stat.S_ISDIR(info.st_mode):
        raise SandboxError(ErrorCode.NOT_A_DIRECTORY, "%s is not a directory" % resolved.virtual)
    want: Tuple[str, ...] = (KIND_FILE, KIND_LINK, KIND_OTHER)
    if include_dirs:
        want += (KIND_DIR,)
    paths: List[str] = []
    truncated = False
    skip = offset
    try:
        for rel, _, _ in walk(resolved.real, compiled, Deadline(limits.search_timeout_s), want):
            if skip:
                skip -= 1
                continue
            if len(paths) == cap:
                truncated = True
                break
            paths.append(_join(resolved.virtual, rel))
    except TimeUp:
        raise _timeout() from None
    return {
        "path": resolved.virtual,
        "pattern": pattern,
        "paths": paths,
        "offset": offset,
        "truncated": truncated,
    }


# -- grep ---------------------------------------------------------------------------


class _Inconsistent(Exception):
    """ripgrep's two passes disagree (a file changed): answer with the Python engine."""


class _Query:
    """A checked grep request."""

    def __init__(
        self,
        ctx: Context,
        info: PatternInfo,
        resolved: Resolved,
        root_is_file: bool,
        glob_text: Optional[str],
        glob_filter: Optional[GlobPattern],
        mode: str,
        before: int,
        after: int,
        offset: int,
        cap: int,
    ) -> None:
        self.ctx = ctx
        self.info = info
        self.root = resolved.real
        self.vroot = resolved.virtual
        self.root_is_file = root_is_file
        self.glob_text = glob_text
        self.glob_filter = glob_filter
        self.mode = mode
        self.before = before
        self.after = after
        self.offset = offset
        self.cap = cap
        self.limits = ctx.limits
        self.deadline = Deadline(ctx.limits.search_timeout_s)

    def scan_request(self, candidates: Optional[List[Tuple[str, str]]]) -> Dict[str, Any]:
        return {
            "spec": self.info.scan_spec(),
            "root": self.root,
            "vroot": self.vroot,
            "root_is_file": self.root_is_file,
            "glob": self.glob_text,
            "candidates": candidates,
            "mode": self.mode,
            "offset": self.offset,
            "max_results": self.cap,
            "before": self.before,
            "after": self.after,
            "line_chars": self.limits.grep_line_chars,
            "max_file_bytes": self.limits.grep_max_file_bytes,
            "timeout": self.deadline.remaining(),
        }


# A grep has run in this process (what `warm` would take ahead is taken).
_searched = False


def grep(
    ctx: Context,
    pattern: Any,
    path: Any = WORKSPACE,
    glob: Any = None,
    literal: Any = False,
    case_sensitive: Any = False,
    output_mode: Any = "content",
    before: Any = 0,
    after: Any = 0,
    multiline: Any = False,
    max_results: Any = None,
    offset: Any = 0,
) -> Dict[str, Any]:
    """Search file contents with a Python-dialect regex (or a literal)."""
    global _searched
    pattern = require_str("pattern", pattern, allow_empty=False)
    literal = require_bool("literal", literal)
    case_sensitive = require_bool("case_sensitive", case_sensitive)
    multiline = require_bool("multiline", multiline)
    if output_mode not in OUTPUT_MODES:
        raise invalid("output_mode must be one of %s" % ", ".join(OUTPUT_MODES))
    limits = ctx.limits
    before = min(require_int("before", before, minimum=0), limits.grep_max_context)
    after = min(require_int("after", after, minimum=0), limits.grep_max_context)
    offset = require_int("offset", offset, minimum=0)
    cap = clamp_results(
        "max_results", max_results, limits.grep_default_results, limits.grep_max_results
    )
    glob_text: Optional[str] = None
    glob_filter: Optional[GlobPattern] = None
    if glob is not None:
        glob_text = require_str("glob", glob)
        if glob_text == "":
            glob_text = None
        else:
            try:
                glob_filter = GlobPattern(glob_text, anywhere=True)
            except GlobError as exc:
                raise SandboxError(
                    ErrorCode.INVALID_PATTERN, "invalid glob filter: %s" % exc
                ) from None
    try:
        info = pattern_info(pattern, literal, case_sensitive, multiline)
    except PatternError as exc:
        raise SandboxError(ErrorCode.INVALID_PATTERN, str(exc)) from None
    resolved = ctx.mapping.resolve(path)
    root_stat = _stat_root(resolved)
    mode_bits = root_stat.st_mode
    if ctx.rg_path and stat.S_ISDIR(mode_bits):
        info.translate()
    result: Dict[str, Any] = {
        "path": resolved.virtual,
        "pattern": pattern,
        "output_mode": output_mode,
        "matches": [],
        "files": [],
        "counts": [],
        "offset": offset,
        "truncated": False,
    }
    if not stat.S_ISDIR(mode_bits) and not stat.S_ISREG(mode_bits):
        return result  # a FIFO, socket or device is never read
    query = _Query(
        ctx,
        info,
        resolved,
        stat.S_ISREG(mode_bits),
        glob_text,
        glob_filter,
        output_mode,
        before,
        after,
        offset,
        cap,
    )
    items, more = _run(query)
    _searched = True
    key = {"content": "matches", "files_with_matches": "files", "count": "counts"}[output_mode]
    result[key] = items
    result["truncated"] = more
    return result


def warm(ctx: Context) -> Optional[Dict[str, Any]]:
    """Take a first grep's one-time costs ahead of it (an agent's warm-up thread calls this
    after `initialize` and the Unicode tables, `rxinfo.warm`): one whole grep of a sample
    tree of its own (a temporary directory; no user file is read) with the box's limits
    and ripgrep, so the binary is paged in and every step of a search with matches
    (resolve, translate, ripgrep's JSON, the line assembly) has run once. Returns that
    result, for the caller to encode once too; None when a caller's grep has run already
    (it paid those costs, and the sample would only share the machine with the next one)."""
    if _searched:
        return None
    import shutil
    import tempfile

    sample = tempfile.mkdtemp(prefix="sandkit-warm-")
    try:
        with open(os.path.join(sample, "sample.py"), "w") as f:
            f.write(WARM_SAMPLE)
        private = Context(
            PathMapping([Mount(WORKSPACE, sample)]), limits=ctx.limits, rg_path=ctx.rg_path
        )
        return grep(private, "def sample", WORKSPACE, before=1)
    finally:
        shutil.rmtree(sample, ignore_errors=True)


def _run(query: _Query) -> Tuple[List[Any], bool]:
    try:
        if query.ctx.rg_path and not query.root_is_file and query.info.rust is not None:
            try:
                return _rg_engine(query, query.ctx.rg_path)
            except (RgRegexError, RgUnusable, _Inconsistent):
                pass
        return _python_engine(query, None)
    except TimeUp:
        raise _timeout() from None


def _python_engine(
    query: _Query, candidates: Optional[List[Tuple[str, str]]]
) -> Tuple[List[Any], bool]:
    request = query.scan_request(candidates)
    if query.info.safe:
        try:
            reply = pyscan.search(request, query.deadline)
        except pyscan.ScanError as exc:
            raise SandboxError(ErrorCode(exc.code), exc.message) from None
    else:
        reply = scanworker.run(request, query.deadline.remaining())
    return reply["items"], reply["more"]


# -- ripgrep engine -------------------------------------------------------------------


def _relative(query: _Query, paths: Sequence[str]) -> List[str]:
    """Relative paths of ripgrep's output that pass the glob filter, in result order."""
    prefix = query.root.rstrip("/") + "/"
    rels = []
    for path in paths:
        if not path.startswith(prefix):
            continue
        rel = path[len(prefix) :]
        if query.glob_filter is None or query.glob_filter.match_path(rel):
            rels.append(rel)
    rels.sort()
    return rels


def _rg_tree(query: _Query, rg_path: str, extra: Sequence[str]) -> bytes:
    info = query.info
    basename_globs = query.glob_filter.rg_basename_globs() if query.glob_filter else None
    args = tree_args(query.limits.grep_max_file_bytes, basename_globs, info.multiline)
    args += list(extra)
    args += ["--regexp=" + (info.rust or ""), "--", query.root]
    return run_rg(rg_path, args, query.deadline.remaining())


def _rg_engine(query: _Query, rg_path: str) -> Tuple[List[Any], bool]:
    max_bytes = query.limits.grep_max_file_bytes
    if not query.info.rust_exact:
        if query.mode == "content" and not query.info.multiline:
            verified = _rg_content_single(query, rg_path, SINGLE_PASS_MAX_OUTPUT, verify=True)
            if verified is not None:
                return verified
        out = _rg_tree(query, rg_path, ["--files-with-matches", "--null"])
        rels = _relative(query, parse_files(out))
        candidates = [(_join(query.vroot, rel), query.root + "/" + rel) for rel in rels]
        return _python_engine(query, candidates)
    if query.mode == "content":
        # One ripgrep pass whose JSON gives the lines, unless that output grows too
        # big (then count first and read only the page). A pattern that might
        # backtrack gets a bigger budget: its fallback needs a second ripgrep run.
        budget = SINGLE_PASS_SAFE_OUTPUT if query.info.safe else SINGLE_PASS_MAX_OUTPUT
        single = _rg_content_single(query, rg_path, budget)
        if single is not None:
            return single
    if query.mode == "files_with_matches":
        out = _rg_tree(query, rg_path, ["--files-with-matches", "--null"])
        rows = [(rel, 1) for rel in _relative(query, parse_files(out))]
    else:
        out = _rg_tree(query, rg_path, ["--count", "--null"])
        counts = dict(parse_counts(out))
        rows = [(rel, counts[query.root + "/" + rel]) for rel in _relative(query, list(counts))]
    if query.mode == "content":
        return _rg_content(query, rg_path, rows)
    items: List[Any] = []
    skip = query.offset
    for rel, count in rows:
        query.deadline.check(32)
        if not pyscan.probe(query.root + "/" + rel, max_bytes):
            continue
        if skip:
            skip -= 1
            continue
        if len(items) == query.cap:
            return items, True
        vpath = _join(query.vroot, rel)
        if query.mode == "files_with_matches":
            items.append(vpath)
        else:
            items.append({"path": vpath, "count": count})
    return items, False


def _rg_content(
    query: _Query, rg_path: str, rows: Sequence[Tuple[str, int]]
) -> Tuple[List[Any], bool]:
    max_bytes = query.limits.grep_max_file_bytes
    skip = query.offset
    pages: List[Tuple[str, str, int, int]] = []  # vpath, real, skip in file, count
    taken = 0
    more = False
    for rel, count in rows:
        query.deadline.check(32)
        real = query.root + "/" + rel
        if not pyscan.probe(real, max_bytes):
            continue
        if taken == query.cap:
            more = True
            break
        if skip >= count:
            skip -= count
            continue
        need = min(count - skip, query.cap - taken)
        pages.append((_join(query.vroot, rel), real, skip, count))
        taken += need
        if need < count - skip:
            more = True
            break
        skip = 0
    if not pages:
        return [], more
    if query.info.safe:
        return _page_in_python(query, pages, taken), more
    max_count = max(min(count, page_skip + query.cap) for _, _, page_skip, count in pages)
    args = [*RG_BASE_ARGS, "--json", "--max-count=%d" % max_count]
    args += ["--regexp=" + (query.info.rust or ""), "--", *(real for _, real, _, _ in pages)]
    found = parse_json_lines(run_rg(rg_path, args, query.deadline.remaining()))
    inputs = []
    for vpath, real, page_skip, count in pages:
        lines = found.get(real, [])
        data = pyscan.read_searchable(real, max_bytes)
        if len(lines) != min(count, max_count) or data is None:
            raise _Inconsistent()
        inputs.append((vpath, data, lines, page_skip))
    items = pyscan.content_from_lines(
        inputs, query.cap, query.before, query.after, query.limits.grep_line_chars
    )
    if items is None:
        raise _Inconsistent()
    return items, more


def _page_in_python(
    query: _Query, pages: Sequence[Tuple[str, str, int, int]], taken: int
) -> List[Any]:
    """The page's lines found by the Python scanner (a pattern that cannot backtrack).

    Cheaper than a second ripgrep run over the page's files; ripgrep's counts
    still decide which files and how many lines, and must agree per file.
    """
    request = query.scan_request([(vpath, real) for vpath, real, _, _ in pages])
    request["offset"] = pages[0][2]
    request["max_results"] = taken
    try:
        items: List[Dict[str, Any]] = pyscan.search(request, query.deadline)["items"]
    except pyscan.ScanError:
        raise _Inconsistent() from None
    got: Dict[str, int] = {}
    for item in items:
        got[item["path"]] = got.get(item["path"], 0) + 1
    left = taken
    for vpath, _, page_skip, count in pages:
        expected = min(count - page_skip, left)
        if got.get(vpath, 0) != expected:
            raise _Inconsistent()
        left -= expected
    return items


# One `--json` pass answers a content query when its output stays small; past
# this many bytes ripgrep is stopped and the count-then-page route is used.
SINGLE_PASS_MAX_OUTPUT = 1 << 20
SINGLE_PASS_SAFE_OUTPUT = 512 << 10


def _rg_content_single(
    query: _Query, rg_path: str, budget: int, verify: bool = False
) -> Optional[Tuple[List[Any], bool]]:
    """A content page from one `rg --json` pass; None when its output passed `budget`.

    With `verify`, ripgrep's pattern is a superset: its lines are candidates
    that Python's regex checks one by one (per-line semantics make that exact).
    """
    info = query.info
    needed = query.offset + query.cap + 1
    basename_globs = query.glob_filter.rg_basename_globs() if query.glob_filter else None
    args = tree_args(query.limits.grep_max_file_bytes, basename_globs, False)
    args += ["--json", "--max-count=%d" % needed, "--regexp=" + (info.rust or ""), "--", query.root]
    out = run_bounded(rg_path, args, query.deadline.remaining(), budget)
    if out is None:
        return None
    blocks = parse_json_blocks(out)
    prefix = query.root.rstrip("/") + "/"
    by_rel = {
        path[len(prefix) :]: records for path, records in blocks.items() if path.startswith(prefix)
    }
    rels = _relative(query, [prefix + rel for rel in by_rel])
    max_bytes = query.limits.grep_max_file_bytes
    positions: Dict[str, List[Tuple[int, int, int]]]
    contents: Dict[str, bytes] = {}
    if verify:
        checked = _verify_candidates(query, rels, by_rel, needed, contents)
        if checked is None:
            return None
        positions, rels = checked
    else:
        positions = {rel: match_positions(by_rel[rel]) for rel in rels}
    skip = query.offset
    inputs = []
    taken = 0
    more = False
    for rel in rels:
        query.deadline.check(32)
        found = positions[rel]
        count = len(found)
        real = query.root + "/" + rel
        if taken == query.cap or skip >= count:
            if not pyscan.probe(real, max_bytes):
                continue
            if taken == query.cap:
                more = True
                break
            skip -= count
            continue
        data = contents.get(rel) or pyscan.read_searchable(real, max_bytes)
        if data is None:
            continue
        need = min(count - skip, query.cap - taken)
        inputs.append((_join(query.vroot, rel), data, found, skip))
        taken += need
        if need < count - skip:
            more = True
            break
        skip = 0
    if not inputs:
        return [], more
    items = pyscan.content_from_lines(
        inputs, query.cap, query.before, query.after, query.limits.grep_line_chars
    )
    if items is None:
        raise _Inconsistent()
    return items, more


def _verify_candidates(
    query: _Query,
    rels: List[str],
    by_rel: Dict[str, List[bytes]],
    needed: int,
    contents: Dict[str, bytes],
) -> Optional[Tuple[Dict[str, List[Tuple[int, int, int]]], List[str]]]:
    """Keep the candidate lines that Python's regex really matches.

    Returns per file its true matches as (line, offset, -1 - character column)
    and the files that still have any, in order. None when a file's candidates
    reached ripgrep's --max-count (true matches might lie further down): the
    caller then scans whole files instead. The files' bytes land in `contents`.
    """
    max_bytes = query.limits.grep_max_file_bytes
    plan = []
    lines: List[str] = []
    for rel in rels:
        query.deadline.check(32)
        found = match_positions(by_rel[rel])
        if len(found) >= needed:
            return None
        raw = pyscan.read_searchable(query.root + "/" + rel, max_bytes)
        if raw is None:
            continue  # binary or too big: skipped by both engines
        contents[rel] = raw
        data = pyscan.strip_bom(raw)
        for _, offset, _ in found:
            end = data.find(b"\n", offset)
            line = data[offset : end if end >= 0 else len(data)]
            lines.append(line.decode("utf-8", "surrogateescape"))
        plan.append((rel, found))
    columns: List[int]
    if query.info.safe:
        columns = pyscan.verify_lines(query.info.scan_spec(), lines)
    else:
        request = {"op": "verify", "spec": query.info.scan_spec(), "lines": lines}
        columns = scanworker.run(request, query.deadline.remaining())
    kept: Dict[str, List[Tuple[int, int, int]]] = {}
    order: List[str] = []
    index = 0
    for rel, found in plan:
        true = []
        for number, offset, _ in found:
            column = columns[index]
            index += 1
            if column >= 0:
                true.append((number, offset, -1 - column))
        if true:
            kept[rel] = true
            order.append(rel)
    return kept, order
