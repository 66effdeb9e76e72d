"""Pool storage on the host: each pool box's fresh thread dirs, handed to a key by a rename.

Docker and Kubernetes (storage hostPath) bind-mount a pool box's storage from under
`{data_root}/.sandkit/pool/{owner}/{slot}`. A claim renames its `user-data` to the key's
thread dir: the mount follows the directory, so nothing is copied, and the rename is the
atomic step that lets one replica win a box and one box win a key. The rename must
never replace what is there: Linux's plain rename(2) replaces an empty directory, which
could be a cold start's half-prepared one, so the claim asks for RENAME_NOREPLACE.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import cast

from ..config import Settings
from ..errors import ErrorCode, SandboxError
from ..paths import ThreadLayout
from .pool import Claim, pool_key

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def pool_root(settings: Settings, owner: str) -> Path:
    return settings.data_root.expanduser().absolute() / ".sandkit" / "pool" / owner


def pool_layout(settings: Settings, owner: str, slot: str) -> ThreadLayout:
    return ThreadLayout.at(settings, pool_key(slot), pool_root(settings, owner) / slot)


def storage_identity(path: Path) -> str | None:
    """Which directory `path` is (device and inode), or None if it is none: a claim moves a
    pool box's storage without changing it, so a box labelled with its storage's identity
    at its start is found again from the key's thread dir after the claim."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return f"{st.st_dev}:{st.st_ino}" if stat.S_ISDIR(st.st_mode) else None


def claim_storage(settings: Settings, owner: str, slot: str, target: ThreadLayout) -> Claim:
    """Move the slot's fresh `user-data` to the key's (CLAIMED), or say why not: GONE (no
    such storage: another replica claimed or removed the box) or TAKEN (the key has a
    thread dir now)."""
    storage = pool_layout(settings, owner, slot).user_data_dir
    destination = target.user_data_dir
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        _rename_noreplace(storage, destination)
    except FileNotFoundError:
        return Claim.GONE
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
            return Claim.TAKEN
        raise SandboxError(ErrorCode.UNAVAILABLE, f"claiming a pool box: {exc.strerror}") from None
    with contextlib.suppress(OSError):
        (pool_root(settings, owner) / slot).rmdir()
    return Claim.CLAIMED


def retire_storage(settings: Settings, owner: str, slot: str) -> bool:
    """Before a pool box is removed: move its storage aside, out of reach of claims (True),
    or find it gone (False): a key claimed it, and the box is that key's now, to be left
    alone. The same atomic rename as a claim, so a removal and a claim never both win."""
    slot_dir = pool_root(settings, owner) / slot
    aside = slot_dir / f"retired-{os.urandom(4).hex()}"
    try:
        _rename_noreplace(pool_layout(settings, owner, slot).user_data_dir, aside)
    except OSError:
        return False
    return True


def _rename_noreplace(source: Path, destination: Path) -> None:
    """rename(2) that fails with EEXIST when `destination` exists (renameat2, Linux >= 3.15,
    glibc >= 2.28). Without it: a check, then a rename, which a rival could slip between."""
    renameat2 = _renameat2()
    if renameat2 is not None:
        flags = _RENAME_NOREPLACE
        if renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(destination), flags):
            code = ctypes.get_errno()
            if code not in (errno.ENOSYS, errno.EINVAL):  # EINVAL: a filesystem without it
                raise OSError(code, os.strerror(code), str(source))
        else:
            return
    if os.path.lexists(destination):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(destination))
    os.rename(source, destination)


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = (
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    )
    function.restype = ctypes.c_int
    return cast("Callable[..., int]", function)
