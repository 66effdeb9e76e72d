"""Thread data between the host's data_root and a sandbox, as tar archives.

An E2B sandbox keeps its files in the sandbox (on E2B's side), not on this
host. The host copy under `data_root` is what a *new* sandbox for the key is
seeded from, and what a sandbox the provider kills is copied back into
first (when `sync_back`). Archives from the sandbox are untrusted: only
regular files, directories and symlinks are extracted, nothing lands outside
the staging directory (symlinks are stored, never followed), ownership is
this process's.

Both directions walk the host tree by directory descriptors, one component at
a time, never by full path: a box may create a file 4 KiB below its mount,
whose host path (data_root and the thread's directories before it) is then
longer than PATH_MAX, and a path-based copy would fail on it — and with it the
release or shutdown that copies the box's files back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import stat
import tarfile
import tempfile
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from sandkit.paths import Mount

log = logging.getLogger("sandkit.e2b")


def archive_name(mount: Mount) -> str:
    """A mount's place in the archives: its virtual path without the leading slash."""
    return mount.virtual.lstrip("/")


# -- host -> sandbox ---------------------------------------------------------------


def build_seed(mounts: Sequence[Mount]) -> IO[bytes] | None:
    """The host side of every mount as one tar (a temp file), or None when all are empty."""
    handle = tempfile.TemporaryFile()  # noqa: SIM115 - returned open to the caller
    try:
        with tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT) as tar:
            content = sum(_add_tree(tar, Path(m.real), archive_name(m)) for m in mounts)
    except BaseException:
        handle.close()
        raise
    if not content:
        handle.close()
        return None
    handle.seek(0)
    return handle


def _add_tree(tar: tarfile.TarFile, root: Path, arcname: str) -> int:
    """Add what is under `root` as `arcname/...`: directories, regular files, symlinks
    (FIFOs, sockets, devices are nothing a new box needs); how many entries."""
    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    added = 0
    stack = [(top, arcname)]  # a stack, not recursion: 2,000 levels fit in 4 KiB
    while stack:
        dir_fd, prefix = stack.pop()
        try:
            for name in sorted(os.listdir(dir_fd)):
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                info = tarfile.TarInfo(f"{prefix}/{name}")
                info.mtime, info.mode = int(st.st_mtime), stat.S_IMODE(st.st_mode)
                info.uname = info.gname = "root"
                if stat.S_ISDIR(st.st_mode):
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                    stack.append((os.open(name, flags, dir_fd=dir_fd), info.name))
                elif stat.S_ISREG(st.st_mode):
                    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
                    with os.fdopen(fd, "rb") as data:
                        info.size = os.fstat(data.fileno()).st_size
                        tar.addfile(info, data)
                elif stat.S_ISLNK(st.st_mode):
                    info.type = tarfile.SYMTYPE
                    info.linkname = os.readlink(name, dir_fd=dir_fd)
                    tar.addfile(info)
                else:
                    continue
                added += 1
        finally:
            os.close(dir_fd)
    return added


# -- sandbox -> host -----------------------------------------------------------------


def pack_command(mounts: Sequence[Mount], remote_tar: str) -> str:
    """Shell (run as root in the sandbox): archive the mounts, print the archive's size.

    Hard links are stored as files (the host side refuses links); GNU tar's
    exit status 1 ("file changed as we read it") is not a failure.
    """
    names = " ".join(shlex.quote(archive_name(m)) for m in mounts)
    target = shlex.quote(remote_tar)
    return (
        f"tar --hard-dereference -C / -cf {target} {names}; rc=$?; "
        f'[ "$rc" -le 1 ] || exit "$rc"; stat -c %s {target}'
    )


def _host_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    if not (member.isreg() or member.isdir() or member.issym()):
        log.warning("sync back: skipped %s (not a file, directory or symlink)", member.name)
        return None
    try:
        member = tarfile.tar_filter(member, dest)
    except tarfile.FilterError as exc:
        log.warning("sync back: skipped %s (%s)", member.name, exc)
        return None
    # Directories and links get the umask's mode (None), files at least rw for us.
    mode = (member.mode | 0o600) & 0o755 if member.isreg() else None
    # None is what tarfile's own data filter uses for "not set" (typeshed says int/str).
    unset: Any = None
    return member.replace(
        uid=unset, gid=unset, uname=unset, gname=unset, mode=mode or unset, deep=False
    )


def apply_archive(chunks: Iterable[bytes], staging_parent: Path, mounts: Sequence[Mount]) -> None:
    """Replace each mount's host directory with its content from the sandbox's archive.

    The archive is spooled to disk, extracted into a staging directory next
    to the data, then each mount's directory is swapped in by rename; a
    failure before the swap leaves the host copy as it was.
    """
    staging_parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".sandkit-sync-", dir=staging_parent))
    try:
        with tempfile.TemporaryFile(dir=staging_parent) as spool:
            for chunk in chunks:
                spool.write(chunk)
            spool.seek(0)
            tree = staging / "tree"
            tree.mkdir()
            with tarfile.open(fileobj=spool, mode="r:") as tar:
                _extract(tar, tree)
        for mount in mounts:
            src = staging / "tree" / archive_name(mount)
            src.mkdir(parents=True, exist_ok=True)
            _swap_in(src, Path(mount.real))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _extract(tar: tarfile.TarFile, root: Path) -> None:
    """Extract the members `_host_filter` keeps under `root`, by directory descriptors. A
    member below a symlink (or anything but a directory) is skipped: links are never
    followed."""
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for member in tar:
            kept = _host_filter(member, str(root))
            parts = [p for p in (kept.name if kept else "").split("/") if p not in ("", ".")]
            if kept is None or not parts:
                continue
            try:
                parent = _open_dirs(root_fd, parts[:-1])
            except OSError as exc:
                log.warning("sync back: skipped %s (%s)", member.name, exc.strerror)
                continue
            try:
                _extract_one(tar, kept, parts[-1], parent)
            except OSError as exc:
                log.warning("sync back: skipped %s (%s)", member.name, exc.strerror)
            finally:
                if parent != root_fd:
                    os.close(parent)
    finally:
        os.close(root_fd)


def _open_dirs(root_fd: int, parts: Sequence[str]) -> int:
    """The directory `parts` below `root_fd`, made where missing, opened without
    following a link on the way; the caller closes it (unless it is `root_fd`)."""
    fd = root_fd
    for part in parts:
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, 0o755, dir_fd=fd)
        try:
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        finally:
            if fd != root_fd:
                os.close(fd)
        fd = child
    return fd


def _extract_one(tar: tarfile.TarFile, member: tarfile.TarInfo, name: str, parent: int) -> None:
    if member.isdir():
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent)
        return
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        os.unlink(name, dir_fd=parent)  # a name the archive repeats: the last one wins
    if member.issym():
        os.symlink(member.linkname, name, dir_fd=parent)
        return
    source = tar.extractfile(member)
    mode = member.mode if member.mode is not None else 0o644
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(name, flags, mode, dir_fd=parent), "wb") as out:
        if source is not None:
            shutil.copyfileobj(source, out)
        if member.mtime is not None:
            os.utime(out.fileno(), (member.mtime, member.mtime))


def _swap_in(src: Path, target: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    target.parent.mkdir(parents=True, exist_ok=True)
    fresh = target.parent / f".{target.name}.sandkit-new-{tag}"
    old = target.parent / f".{target.name}.sandkit-old-{tag}"
    shutil.move(str(src), fresh)  # a rename when staging shares the filesystem
    had_old = os.path.lexists(target)
    if had_old:
        os.rename(target, old)
    try:
        os.rename(fresh, target)
    except BaseException:
        if had_old:
            with contextlib.suppress(OSError):
                os.rename(old, target)
        raise
    if had_old:
        shutil.rmtree(old, ignore_errors=True)
