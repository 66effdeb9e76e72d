"""A thread's layout as a box sees it: the jail inside the box and the host dirs behind it."""

from __future__ import annotations

import logging
import os

from ..errors import ErrorCode, SandboxError
from ..paths import WORKSPACE, Mount, PathMapping, ThreadLayout
from ..runtime.pathmap import overlaps

log = logging.getLogger("sandkit.boxkit")


def box_mapping(layout: ThreadLayout, hidden: tuple[str, ...] = ()) -> PathMapping:
    """The jail inside a box: each mount at its virtual path.

    Host paths behind the mounts (and `hidden`) are hidden roots: the kernel
    shows mount sources in /proc/self/mountinfo, and masking turns them into
    `[hidden]` in anything a command prints. A thread's own directories are
    below the data root and hidden with it, so the mapping (and with it the
    agent's whole config) is the same for every key of a provider: a box
    started before its key was known (a warm pool's) needs no other.
    """
    root = str(layout.data_root)
    outside = {m.real for m in layout.mounts if not _below(m.real, root)}
    roots = {root} | outside | set(hidden)
    # A host path that is also a virtual prefix (data_root=/mnt, say) cannot be
    # masked without mangling the virtual paths themselves.
    roots = {h for h in roots if h and not any(overlaps(h, m.virtual) for m in layout.mounts)}
    return PathMapping(
        [Mount(m.virtual, m.virtual, m.read_only) for m in layout.mounts],
        WORKSPACE,
        hidden_roots=sorted(roots),
    )


def _below(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def prepare_host_dirs(layout: ThreadLayout, owner: tuple[int, int] | None) -> None:
    """Create the thread's dirs on the host (and hand them to the box's uid:gid).

    Every mount's host directory must exist; shared ones (skills, custom mounts)
    are the operator's to create.
    """
    layout.create_dirs()
    for mount in layout.mounts:
        if not os.path.isdir(mount.real):
            raise SandboxError(
                ErrorCode.UNAVAILABLE, f"the host directory behind {mount.virtual} does not exist"
            )
    if owner is not None and not layout.hand_over(*owner):
        log.warning(
            "cannot chown the thread dirs of %s to %d:%d; the box may not be able to write "
            "them (run as root or as that uid, or change the box's user)",
            layout.key,
            *owner,
        )
