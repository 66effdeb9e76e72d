"""A host application's way into a thread's uploads (docs/operations.md#uploads).

Uploads are read-only to the agent, so they never travel through it: the
provider writes them where the thread's data lives, outside the box — the
host directory behind the read-only mount (local, Docker, Kubernetes), which
a running box sees at once. Paths follow the file operations' rules and
codes (relative paths hang off /mnt/user-data/uploads; anything that leaves it
is ACCESS_DENIED), every step goes through `runtime.safefs` (no symlink is
followed), and an upload replaces a file of the same name, as `write_bytes`
does. What an upload creates gets the owner of the directory it is created
in, so a box's uid keeps owning its thread's tree; files are 0644 and
directories 0755, whatever the host process's umask, so the box can read them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from .errors import ErrorCode, SandboxError
from .models import WriteResult
from .runtime import safefs
from .runtime.limits import Limits
from .runtime.oserrors import to_sandbox_error
from .runtime.pathmap import UPLOADS, Mount, PathMapping, is_within, normalize_virtual

__all__ = ["HostUploads", "UploadList", "UploadedFile"]

FILE_MODE = 0o644
DIR_MODE = 0o755


class UploadedFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(description="Virtual path, below /mnt/user-data/uploads.")
    size: int = Field(description="Bytes.")


class UploadList(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    files: list[UploadedFile] = Field(description="Every uploaded file, sorted by path.")
    truncated: bool = Field(description="True when more files exist than list_max_entries.")


class HostUploads:
    """One thread's uploads directory on this host, seen through the uploads jail."""

    def __init__(self, directory: Path, limits: Limits, hidden_root: Path) -> None:
        self.directory = directory
        self.limits = limits
        self.mapping = PathMapping(
            [Mount(UPLOADS, str(directory), False)], UPLOADS, hidden_roots=(str(hidden_root),)
        )

    # -- the three calls ------------------------------------------------------------------

    def put(self, path: str, data: bytes) -> WriteResult:
        """Create or replace the file at `path` with `data` (at most transfer_max_bytes)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise SandboxError(ErrorCode.INVALID_ARGUMENT, "data must be bytes")
        payload = bytes(data)
        virtual, parts = self._parts(path)
        limit = self.limits.transfer_max_bytes
        if len(payload) > limit:
            raise SandboxError(
                ErrorCode.TOO_LARGE,
                f"{virtual}: {len(payload)} bytes is over the upload limit of {limit} bytes "
                "(limits.transfer_max_bytes)",
            )
        with self._os_errors(virtual):
            self._make_root()
            dir_fd = self._open_parent(parts, create=True)
            try:
                existing = safefs.lstat_at(dir_fd, parts[-1])
                if existing is not None and stat.S_ISDIR(existing.st_mode):
                    raise SandboxError(ErrorCode.IS_A_DIRECTORY, f"{virtual} is a directory")
                safefs.atomic_replace(dir_fd, parts[-1], payload, FILE_MODE)
                _give(dir_fd, parts[-1])
            finally:
                os.close(dir_fd)
        return WriteResult(path=virtual, bytes_written=len(payload), created=existing is None)

    def list_files(self) -> UploadList:
        """Every regular file below the uploads directory (sorted, up to list_max_entries)."""
        found: list[UploadedFile] = []
        if not self.directory.is_dir():
            return UploadList(files=[], truncated=False)
        with self._os_errors(UPLOADS):
            fd = safefs.open_dir(str(self.directory), ())
            try:
                self._walk(fd, UPLOADS, found)
            finally:
                os.close(fd)
        found.sort(key=lambda f: f.path)
        cap = self.limits.list_max_entries
        return UploadList(files=found[:cap], truncated=len(found) > cap)

    def remove(self, path: str) -> UploadedFile:
        """Delete the file at `path` (NOT_FOUND when there is none), then the directories
        it leaves empty; the uploads directory itself stays."""
        virtual, parts = self._parts(path)
        with self._os_errors(virtual):
            dir_fd = self._open_parent(parts, create=False)
            try:
                info = safefs.lstat_at(dir_fd, parts[-1])
                if info is None:
                    raise SandboxError(ErrorCode.NOT_FOUND, f"{virtual} does not exist")
                if stat.S_ISDIR(info.st_mode):
                    raise SandboxError(
                        ErrorCode.IS_A_DIRECTORY, f"{virtual} is a directory; remove its files"
                    )
                os.unlink(parts[-1], dir_fd=dir_fd)
            finally:
                os.close(dir_fd)
            self._prune(parts[:-1])
        return UploadedFile(path=virtual, size=info.st_size if stat.S_ISREG(info.st_mode) else 0)

    # -- helpers --------------------------------------------------------------------------

    def _parts(self, path: object) -> tuple[str, tuple[str, ...]]:
        """The canonical virtual path and its components below the uploads directory."""
        virtual = normalize_virtual(path, UPLOADS)
        if not is_within(virtual, UPLOADS):
            raise SandboxError(ErrorCode.ACCESS_DENIED, f"{virtual} is not in {UPLOADS}")
        if virtual == UPLOADS:
            raise SandboxError(ErrorCode.IS_A_DIRECTORY, f"{UPLOADS} is a directory")
        return virtual, tuple(virtual[len(UPLOADS) + 1 :].split("/"))

    @contextlib.contextmanager
    def _os_errors(self, virtual: str) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise to_sandbox_error(self.mapping, exc, virtual) from None

    def _make_root(self) -> None:
        """The uploads directory (and the thread's above it) for a key never acquired."""
        missing = []
        path = self.directory
        while not path.exists():
            missing.append(path)
            path = path.parent
        for directory in reversed(missing):
            parent = os.open(str(directory.parent), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.close(_subdir(parent, directory.name, create=True))
            finally:
                os.close(parent)

    def _open_parent(self, parts: tuple[str, ...], create: bool) -> int:
        fd = safefs.open_dir(str(self.directory), ())
        try:
            for name in parts[:-1]:
                child = _subdir(fd, name, create)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _walk(self, fd: int, virtual: str, found: list[UploadedFile]) -> None:
        with os.scandir(fd) as entries:
            children = sorted((e.name, e.stat(follow_symlinks=False)) for e in entries)
        for name, info in children:
            if safefs.is_temp_name(name):  # an upload still being written
                continue
            if stat.S_ISREG(info.st_mode):
                found.append(UploadedFile(path=f"{virtual}/{name}", size=info.st_size))
            elif stat.S_ISDIR(info.st_mode):
                try:
                    child = safefs.open_subdir(fd, name)
                except OSError:  # gone or swapped meanwhile: not listed
                    continue
                try:
                    self._walk(child, f"{virtual}/{name}", found)
                finally:
                    os.close(child)

    def _prune(self, parents: tuple[str, ...]) -> None:
        """rmdir the now-empty directories on the way back up (not the uploads root)."""
        for depth in range(len(parents), 0, -1):
            try:
                fd = safefs.open_dir(str(self.directory), parents[: depth - 1])
            except OSError:
                return
            try:
                os.rmdir(parents[depth - 1], dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                    return
                raise
            finally:
                os.close(fd)


def _subdir(fd: int, name: str, create: bool) -> int:
    """`safefs.open_subdir`; a directory it makes gets DIR_MODE and its parent's owner."""
    try:
        return safefs.open_subdir(fd, name)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):  # made concurrently: fine
        os.mkdir(name, DIR_MODE, dir_fd=fd)
    child = safefs.open_subdir(fd, name)
    try:
        os.fchmod(child, DIR_MODE)
        _give(fd, name)
    except BaseException:
        os.close(child)
        raise
    return child


def _give(dir_fd: int, name: str) -> None:
    """Hand `name` to the owner of the directory it is in (a root provider writing into a
    box uid's tree); nothing to do, or not allowed, otherwise."""
    parent = os.fstat(dir_fd)
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if (info.st_uid, info.st_gid) != (parent.st_uid, parent.st_gid):
        with contextlib.suppress(PermissionError):
            os.chown(name, parent.st_uid, parent.st_gid, dir_fd=dir_fd, follow_symlinks=False)
