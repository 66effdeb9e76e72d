"""File access that cannot be redirected by a symlink swapped in after resolve.

`PathMapping.resolve` checks a path once; a process in the sandbox could then
replace a directory on that path with a symlink to somewhere else before we
open it. So every operation walks from the mount root one component at a
time with O_NOFOLLOW, relative to directory fds, and works on the final
name through its parent's fd. A symlink found on the way is refused (ELOOP),
never followed. POSIX only (Linux and macOS), like the rest of the runtime.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional, Sequence

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_TEMP_PREFIX = ".sandkit-"
_TEMP_SUFFIX = ".tmp"


def is_temp_name(name: str) -> bool:
    """Whether `name` is one of `atomic_replace`'s temp files (a write in progress)."""
    return name.startswith(_TEMP_PREFIX) and name.endswith(_TEMP_SUFFIX)


def _symlink_error(name: str) -> OSError:
    return OSError(errno.ELOOP, "is a symbolic link", name)


def lstat_at(dir_fd: int, name: str) -> Optional[os.stat_result]:
    """lstat of `name` inside `dir_fd`, or None when it does not exist."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def open_subdir(dir_fd: int, name: str, create: bool = False) -> int:
    """Open the directory `name` inside `dir_fd`; mkdir it first when asked."""
    try:
        return _same_as_name(dir_fd, name, os.open(name, _DIR_FLAGS, dir_fd=dir_fd))
    except FileNotFoundError:
        if not create:
            raise
    except NotADirectoryError:
        # O_DIRECTORY|O_NOFOLLOW reports a symlink as ENOTDIR; tell them apart.
        info = lstat_at(dir_fd, name)
        if info is not None and stat.S_ISLNK(info.st_mode):
            raise _symlink_error(name) from None
        raise
    with contextlib.suppress(FileExistsError):  # created concurrently: fine
        os.mkdir(name, 0o777, dir_fd=dir_fd)
    return open_subdir(dir_fd, name, create=False)


def _same_as_name(dir_fd: int, name: str, fd: int) -> int:
    """`fd` if it is the directory `name` names in `dir_fd` now; else ELOOP.

    O_DIRECTORY|O_NOFOLLOW does not refuse a symlink everywhere: gVisor's kernel
    follows it (Linux says ENOTDIR), so a directory swapped for a symlink between
    our check and this open would be entered. The opened directory must be the one
    the name (not followed) refers to: a followed symlink has another inode, whether
    the link is still there or was swapped back meanwhile.
    """
    try:
        opened = os.fstat(fd)
        named = lstat_at(dir_fd, name)
    except BaseException:
        os.close(fd)
        raise
    if named is None or (named.st_dev, named.st_ino) != (opened.st_dev, opened.st_ino):
        os.close(fd)
        raise _symlink_error(name)
    return fd


def open_dir(root: str, parts: Sequence[str], create: bool = False) -> int:
    """Open `root/parts...` as a directory without following any symlink below root."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in parts:
            child = open_subdir(fd, name, create)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(dir_fd: int, name: str, flags: int, mode: int = 0o666) -> int:
    """os.open relative to `dir_fd`, refusing a symlink and never blocking on a FIFO."""
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _symlink_error(name) from None
        raise


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_all(fd: int, size: int) -> bytes:
    """The first `size` bytes of an open file (fewer if it is shorter), from offset 0."""
    chunks = []
    offset = 0
    while offset < size:
        chunk = os.pread(fd, min(size - offset, 1 << 20), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def fsync_dir(dir_fd: int) -> None:
    """Make a rename durable; some file systems refuse, which is not our failure."""
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)


def atomic_replace(dir_fd: int, name: str, data: bytes, mode: Optional[int]) -> None:
    """Write `data` to a temp file next to `name`, fsync, then rename over `name`.

    Readers see the old content or the new, never a mix; the temp file is
    removed on any failure. `mode` keeps an existing file's permissions;
    None means a new file (0o666 minus umask).

    Where the kernel and file system allow it (Linux O_TMPFILE), the data goes
    to an unnamed file that gets its temp name only once it is complete, so a
    writer killed outright (SIGKILL, a killed container) leaves no temp file
    behind; only the instant between naming and rename remains.
    """
    temp = _TEMP_PREFIX + os.urandom(8).hex() + _TEMP_SUFFIX
    try:
        if not _write_unnamed(dir_fd, temp, data, mode):
            fd = os.open(
                temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666, dir_fd=dir_fd
            )
            try:
                _fill(fd, data, mode)
            finally:
                os.close(fd)
        # rename(2) replaces the target atomically (os.replace takes no dir fds
        # on some Pythons; on POSIX the two are the same call).
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    fsync_dir(dir_fd)


# O_TMPFILE unsupported: by the file system (EOPNOTSUPP), or by an old kernel,
# which takes the flag for O_DIRECTORY (EISDIR).
_NO_TMPFILE = (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL)


def _fill(fd: int, data: bytes, mode: Optional[int]) -> None:
    write_all(fd, data)
    if mode is not None:
        os.fchmod(fd, stat.S_IMODE(mode))
    os.fsync(fd)


def _write_unnamed(dir_fd: int, temp: str, data: bytes, mode: Optional[int]) -> bool:
    """Write `data` to an O_TMPFILE file in `dir_fd`, then link it there as `temp`.

    False (nothing written) where O_TMPFILE or /proc (needed to link it) is missing.
    """
    flag = getattr(os, "O_TMPFILE", 0)
    if not flag or not os.path.isdir("/proc/self/fd"):
        return False
    try:
        fd = os.open(".", os.O_WRONLY | flag, 0o666, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _NO_TMPFILE:
            return False
        raise
    try:
        _fill(fd, data, mode)
        # linkat(AT_SYMLINK_FOLLOW) through /proc names the open file; unlike
        # AT_EMPTY_PATH it needs no capability.
        os.link("/proc/self/fd/%d" % fd, temp, dst_dir_fd=dir_fd)
    finally:
        os.close(fd)
    return True


def chown_tree(top: str, uid: int, gid: int) -> None:
    """chown `top` and everything below it to uid:gid, never leaving the tree.

    For host code over a tree a running box may change: every entry is chowned by name
    in its parent's descriptor without following it (fchownat, AT_SYMLINK_NOFOLLOW), and
    a subdirectory is entered only through `open_subdir` (a directory the box swapped
    for a symlink is not entered). Entries that vanish meanwhile are skipped: the box
    may delete its own files at any moment."""
    fd = os.open(top, _DIR_FLAGS)
    try:
        os.fchown(fd, uid, gid)
        _chown_below(fd, uid, gid)
    finally:
        os.close(fd)


def _chown_below(top_fd: int, uid: int, gid: int) -> None:
    # Depth-first with an explicit stack (a tree may be deeper than Python's recursion
    # limit): each frame holds an open directory and the subdirectories still to enter.
    stack = [(top_fd, _chown_entries(top_fd, uid, gid))]
    try:
        while stack:
            dir_fd, subdirs = stack[-1]
            if not subdirs:
                stack.pop()
                if dir_fd != top_fd:
                    os.close(dir_fd)
                continue
            name = subdirs.pop()
            try:
                child = open_subdir(dir_fd, name)
            except (FileNotFoundError, NotADirectoryError):
                continue  # removed, or replaced by something else, meanwhile
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    continue  # swapped for a symlink: its target is not ours to touch
                raise
            try:
                entries = _chown_entries(child, uid, gid)
            except BaseException:
                os.close(child)
                raise
            stack.append((child, entries))
    finally:
        for dir_fd, _ in stack:
            if dir_fd != top_fd:
                os.close(dir_fd)


def _chown_entries(dir_fd: int, uid: int, gid: int) -> List[str]:
    """chown each entry of `dir_fd` itself (links not followed); the names of its dirs."""
    subdirs = []
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            try:
                os.chown(entry.name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
            except FileNotFoundError:
                continue
    return subdirs
