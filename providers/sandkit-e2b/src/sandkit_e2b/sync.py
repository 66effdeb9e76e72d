"""Thread data between the host's data_root and a sandbox, as tar archives.

An E2B sandbox keeps its files in the sandbox (on E2B's side), not on this
host. The host copy under `data_root` is what a *new* sandbox for the key is
seeded from, and what a sandbox the provider kills is copied back into
first (when `sync_back`). Archives from the sandbox are untrusted: only
regular files, directories and symlinks are extracted, nothing lands outside
the staging directory (symlinks are stored, never followed), ownership is
this process's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
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
    content = 0

    def keep(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
        nonlocal content
        if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
            return None  # FIFOs, sockets, devices: nothing a new box needs
        member.uid = member.gid = 0
        member.uname = member.gname = "root"
        content += 1
        return member

    try:
        with tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for mount in mounts:
                root = Path(mount.real)
                if not root.is_dir():
                    continue
                for child in sorted(os.listdir(root)):
                    tar.add(root / child, arcname=f"{archive_name(mount)}/{child}", filter=keep)
    except BaseException:
        handle.close()
        raise
    if not content:
        handle.close()
        return None
    handle.seek(0)
    return handle


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
            with tarfile.open(fileobj=spool, mode="r:") as tar:
                tar.extractall(staging / "tree", filter=_host_filter)
        for mount in mounts:
            src = staging / "tree" / archive_name(mount)
            src.mkdir(parents=True, exist_ok=True)
            _swap_in(src, Path(mount.real))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


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
