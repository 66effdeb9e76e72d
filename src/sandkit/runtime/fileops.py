"""File operations on virtual paths: read, write, edit, bytes up/down, list.

Every path goes through `ctx.mapping.resolve`, then through `safefs`, which
walks from the mount root without following symlinks, so a symlink swapped
in after the check cannot redirect the operation. Results carry canonical
virtual paths (symlinks inside the sandbox resolved). docs/operations.md
describes the semantics for users.
"""

from __future__ import annotations

import contextlib
import os
import stat

from . import ignore, safefs, textio
from .context import Context
from .errors import ErrorCode, SandboxError
from .oserrors import to_sandbox_error
from .pathmap import WORKSPACE, Resolved
from .validate import invalid, optional_int, require_bool, require_int, require_str
from .values import Value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterator, List, Optional, Tuple

CUT_MARKER = "\n[... line %d cut: %d of %d bytes shown; read_bytes returns the whole file ...]\n"


class _Target(Value):
    """A resolved path split into its mount root and the components below it."""

    virtual: str  # canonical virtual path, for results and messages
    root: str
    parts: Tuple[str, ...]

    def __init__(self, virtual: str, root: str, parts: Tuple[str, ...]) -> None:
        self._init(locals())

    @property
    def name(self) -> str:
        return self.parts[-1]


def _target(ctx: Context, path: Any, for_write: bool = False) -> _Target:
    resolved: Resolved = ctx.mapping.resolve(path, for_write=for_write)
    root = ctx.mapping.real_root(resolved.mount)
    rest = resolved.real[len(root) :].strip("/")
    parts = tuple(rest.split("/")) if rest else ()
    return _Target(ctx.mapping.to_virtual(resolved.real), root, parts)


@contextlib.contextmanager
def _os_errors(ctx: Context, virtual: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise to_sandbox_error(ctx.mapping, exc, virtual) from None


def _not_regular(virtual: str) -> SandboxError:
    return invalid("%s is not a regular file" % virtual)


def _binary(virtual: str) -> SandboxError:
    return invalid(
        "%s is a binary file (NUL byte or not UTF-8 in its first %d bytes); "
        "use read_bytes to download it" % (virtual, textio.SNIFF_BYTES)
    )


def _open_regular(target: _Target) -> int:
    """A read fd for a regular file, or the error a user expects for anything else."""
    if not target.parts:
        raise SandboxError(ErrorCode.IS_A_DIRECTORY, "%s is a directory" % target.virtual)
    dir_fd = safefs.open_dir(target.root, target.parts[:-1])
    try:
        fd = safefs.open_file(dir_fd, target.name, os.O_RDONLY)
    finally:
        os.close(dir_fd)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise SandboxError(ErrorCode.IS_A_DIRECTORY, "%s is a directory" % target.virtual)
        if not stat.S_ISREG(mode):
            raise _not_regular(target.virtual)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _encode(name: str, text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid("%s is not valid Unicode text (lone surrogate)" % name) from None


def _too_large(what: str, size: int, limit: int) -> SandboxError:
    return SandboxError(
        ErrorCode.TOO_LARGE, "%s would be %d bytes; the limit is %d" % (what, size, limit)
    )


# -- read_file -----------------------------------------------------------------


def read_file(
    ctx: Context, path: Any, start_line: Any = None, end_line: Any = None
) -> Dict[str, Any]:
    start = optional_int("start_line", start_line, minimum=1)
    end = optional_int("end_line", end_line, minimum=1)
    first = 1 if start is None else start
    if end is not None and end < first:
        raise invalid("end_line (%d) must be >= start_line (%d)" % (end, first))
    limits = ctx.limits
    last = first + max(limits.read_max_lines, 1) - 1
    if end is not None:
        last = min(last, end)
    target = _target(ctx, path)
    with _os_errors(ctx, target.virtual):
        fd = _open_regular(target)
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(fd).st_size
            head = f.read(textio.SNIFF_BYTES)
            if textio.looks_binary(head, complete=len(head) >= size):
                raise _binary(target.virtual)
            f.seek(0)
            window = textio.read_window(f, first, last, max(limits.read_max_bytes, 1))
    if first > max(window.total, 1):
        raise invalid(
            "start_line %d is past the end of %s (%d lines)" % (first, target.virtual, window.total)
        )
    content = window.data.decode("utf-8", "replace")
    if window.cut is not None:
        content += CUT_MARKER % (window.last, window.cut[0], window.cut[1])
    served = window.last >= window.first
    more = window.total > window.last
    return {
        "path": target.virtual,
        "content": content,
        "start_line": window.first if served else 0,
        "end_line": window.last if served else 0,
        "total_lines": window.total,
        "truncated": more,
        "next_start_line": window.last + 1 if more else None,
    }


# -- write_file / write_bytes / edit_file ----------------------------------------


def _existing_for_write(dir_fd: int, target: _Target) -> Optional[os.stat_result]:
    """lstat of the target, refusing what an atomic replace must not clobber."""
    info = safefs.lstat_at(dir_fd, target.name)
    if info is None:
        return None
    if stat.S_ISDIR(info.st_mode):
        raise SandboxError(ErrorCode.IS_A_DIRECTORY, "%s is a directory" % target.virtual)
    if stat.S_ISLNK(info.st_mode):
        raise SandboxError(
            ErrorCode.ACCESS_DENIED, "%s changed into a symlink during the write" % target.virtual
        )
    if not stat.S_ISREG(info.st_mode):
        raise _not_regular(target.virtual)
    # A file without any write bit is read-only for everyone, root included: os.access
    # alone would let a runtime running as root (local, CI) replace it where a box's
    # non-root agent cannot.
    if not info.st_mode & 0o222 or not os.access(target.name, os.W_OK, dir_fd=dir_fd):
        raise SandboxError(ErrorCode.ACCESS_DENIED, "%s is not writable" % target.virtual)
    return info


def _write_target(ctx: Context, path: Any) -> _Target:
    target = _target(ctx, path, for_write=True)
    if not target.parts:
        raise SandboxError(ErrorCode.IS_A_DIRECTORY, "%s is a directory" % target.virtual)
    return target


def _replace(ctx: Context, target: _Target, data: bytes) -> Dict[str, Any]:
    with _os_errors(ctx, target.virtual):
        dir_fd = safefs.open_dir(target.root, target.parts[:-1], create=True)
        try:
            existing = _existing_for_write(dir_fd, target)
            mode = existing.st_mode if existing is not None else None
            safefs.atomic_replace(dir_fd, target.name, data, mode)
        finally:
            os.close(dir_fd)
    return {"path": target.virtual, "bytes_written": len(data), "created": existing is None}


def _append(ctx: Context, target: _Target, data: bytes) -> Dict[str, Any]:
    limit = ctx.limits.write_max_bytes
    with _os_errors(ctx, target.virtual):
        dir_fd = safefs.open_dir(target.root, target.parts[:-1], create=True)
        try:
            existing, fd = _open_for_append(dir_fd, target, len(data), limit)
            try:
                before = os.fstat(fd)
                if not stat.S_ISREG(before.st_mode):
                    raise _not_regular(target.virtual)
                if before.st_size + len(data) > limit:
                    raise _too_large(target.virtual, before.st_size + len(data), limit)
                if before.st_nlink > 1:
                    # Another name shares this inode (a hard link, perhaps to a file
                    # outside every mount): appending in place would change the file
                    # there too. Replace this name instead, like write_file does.
                    old = _read_same_file(dir_fd, target, before)
                    safefs.atomic_replace(dir_fd, target.name, old + data, before.st_mode)
                else:
                    try:
                        safefs.write_all(fd, data)
                        os.fsync(fd)
                    except BaseException:
                        os.ftruncate(fd, before.st_size)  # no half-appended content
                        raise
            finally:
                os.close(fd)
        finally:
            os.close(dir_fd)
    return {"path": target.virtual, "bytes_written": len(data), "created": existing is None}


def _open_for_append(
    dir_fd: int, target: _Target, size: int, limit: int
) -> Tuple[Optional[os.stat_result], int]:
    """(lstat before, write fd) of the file to append to; created (O_EXCL) when missing.

    A file that appears between the check and the create (made by something
    else in the sandbox) is appended to like any existing file.
    """
    for _ in range(3):
        existing = _existing_for_write(dir_fd, target)
        if existing is not None and existing.st_size + size > limit:
            raise _too_large(target.virtual, existing.st_size + size, limit)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        if existing is None:
            flags |= os.O_EXCL
        try:
            return existing, safefs.open_file(dir_fd, target.name, flags)
        except FileExistsError:
            continue
    raise SandboxError(ErrorCode.INTERNAL, "%s keeps appearing and vanishing" % target.virtual)


def _read_same_file(dir_fd: int, target: _Target, expected: os.stat_result) -> bytes:
    """The content of `target`, provided the name still is the inode `expected` describes."""
    fd = safefs.open_file(dir_fd, target.name, os.O_RDONLY)
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (expected.st_dev, expected.st_ino):
            raise SandboxError(
                ErrorCode.ACCESS_DENIED, "%s was replaced during the write" % target.virtual
            )
        return safefs.read_all(fd, expected.st_size)
    finally:
        os.close(fd)


def write_file(ctx: Context, path: Any, content: Any, append: Any = False) -> Dict[str, Any]:
    text = require_str("content", content)
    append = require_bool("append", append)
    target = _write_target(ctx, path)
    data = _encode("content", text)
    limit = ctx.limits.write_max_bytes
    if len(data) > limit:
        raise _too_large("content", len(data), limit)
    if append:
        return _append(ctx, target, data)
    return _replace(ctx, target, data)


def write_bytes(ctx: Context, path: Any, data: Any) -> Dict[str, Any]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise invalid("data must be bytes")
    payload = bytes(data)
    target = _write_target(ctx, path)
    limit = ctx.limits.transfer_max_bytes
    if len(payload) > limit:
        raise _too_large("data", len(payload), limit)
    return _replace(ctx, target, payload)


def edit_file(
    ctx: Context, path: Any, old: Any, new: Any, replace_all: Any = False
) -> Dict[str, Any]:
    old_text = require_str("old", old, allow_empty=False)
    new_text = require_str("new", new)
    replace_all = require_bool("replace_all", replace_all)
    if old_text == new_text:
        raise invalid("old and new are the same text; nothing to edit")
    _encode("old", old_text)
    _encode("new", new_text)
    target = _write_target(ctx, path)
    limit = ctx.limits.write_max_bytes
    with _os_errors(ctx, target.virtual):
        fd = _open_regular(target)
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(fd).st_size
            if size > limit:
                raise _too_large(target.virtual, size, limit)
            raw = f.read(limit + 1)
    if len(raw) > limit:
        raise _too_large(target.virtual, len(raw), limit)
    head = raw[: textio.SNIFF_BYTES]
    if textio.looks_binary(head, complete=len(head) == len(raw)):
        raise _binary(target.virtual)
    # surrogateescape: a stray invalid byte past the first 8 KiB survives the
    # round trip unchanged instead of being "fixed" into U+FFFD.
    text = raw.decode("utf-8", "surrogateescape")
    first = text.find(old_text)
    if first < 0:
        raise invalid("old text not found in %s" % target.virtual)
    count = text.count(old_text)
    if not replace_all and count > 1:
        raise invalid(
            "old text occurs %d times in %s; pass more context to make it unique "
            "or set replace_all" % (count, target.virtual)
        )
    if not replace_all and text.find(old_text, first + 1) >= 0:
        raise invalid(
            "old text occurs more than once in %s (the occurrences overlap); "
            "pass more context to make it unique" % target.virtual
        )
    result = text.replace(old_text, new_text).encode("utf-8", "surrogateescape")
    if len(result) > limit:
        raise _too_large(target.virtual, len(result), limit)
    _replace(ctx, target, result)
    return {"path": target.virtual, "replacements": count}


# -- read_bytes ------------------------------------------------------------------


def read_bytes(ctx: Context, path: Any) -> bytes:
    target = _target(ctx, path)
    limit = ctx.limits.transfer_max_bytes
    with _os_errors(ctx, target.virtual):
        fd = _open_regular(target)
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(fd).st_size
            if size > limit:
                raise _too_large(target.virtual, size, limit)
            data = f.read(limit + 1)
    if len(data) > limit:
        raise _too_large(target.virtual, len(data), limit)
    return data


# -- list_dir --------------------------------------------------------------------


def _kind(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return "symlink"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    if entry.is_file(follow_symlinks=False):
        return "file"
    return "other"


def _ignored(name: str, kind: str) -> bool:
    if kind in ("dir", "symlink"):
        return ignore.is_ignored_dir(name)
    return ignore.is_ignored_file(name)


def _children(fd: int) -> List[Tuple[str, str, Optional[int]]]:
    """(name, kind, size) of the non-ignored entries of an open directory, sorted."""
    found = []
    with os.scandir(fd) as entries:
        for entry in entries:
            try:
                kind = _kind(entry)
                size = entry.stat(follow_symlinks=False).st_size if kind == "file" else None
            except OSError:
                continue  # vanished while we looked
            if not _ignored(entry.name, kind):
                found.append((entry.name, kind, size))
    found.sort()
    return found


def list_dir(ctx: Context, path: Any = WORKSPACE, max_depth: Any = 2) -> Dict[str, Any]:
    depth_limit = require_int("max_depth", max_depth, 1, ctx.limits.list_max_depth)
    cap = ctx.limits.list_max_entries
    target = _target(ctx, path)
    base = target.virtual.rstrip("/")
    collected: List[Tuple[Tuple[str, ...], str, Optional[int]]] = []
    truncated = False
    with _os_errors(ctx, target.virtual):
        try:
            root_fd = safefs.open_dir(target.root, target.parts)
        except NotADirectoryError:
            raise SandboxError(
                ErrorCode.NOT_A_DIRECTORY, "%s is not a directory" % target.virtual
            ) from None
        try:
            # Breadth first: when the cap is hit, shallow entries win over deep ones.
            level: List[Tuple[str, ...]] = [()]
            depth = 0
            while level and depth < depth_limit and not truncated:
                depth += 1
                next_level: List[Tuple[str, ...]] = []
                for rel in level:
                    try:
                        fd = safefs.open_dir(target.root, target.parts + rel) if rel else root_fd
                    except OSError:
                        if not rel:
                            raise
                        continue  # unreadable or replaced meanwhile: listed, not entered
                    try:
                        children = _children(fd)
                    except OSError:
                        if not rel:
                            raise
                        children = []
                    finally:
                        if rel:
                            os.close(fd)
                    for name, kind, size in children:
                        if len(collected) >= cap:
                            truncated = True
                            break
                        collected.append(((*rel, name), kind, size))
                        if kind == "dir":
                            next_level.append((*rel, name))
                    if truncated:
                        break
                level = next_level
        finally:
            os.close(root_fd)
    collected.sort(key=lambda item: item[0])
    entries = [
        {
            "path": base + "/" + "/".join(rel),
            "name": rel[-1],
            "kind": kind,
            "size": size,
            "depth": len(rel),
        }
        for rel, kind, size in collected
    ]
    return {"path": target.virtual, "entries": entries, "truncated": truncated}
