"""The virtual layout of a thread and where it lives on the host.

`PathMapping` itself is in the stdlib-only runtime (it runs in containers
too); this module knows the host data layout and builds mappings from it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .config import Settings
from .errors import ErrorCode, SandboxError
from .provider import SandboxKey
from .runtime.pathmap import (
    OUTPUTS,
    SKILLS,
    UPLOADS,
    USER_DATA,
    WORKSPACE,
    Mount,
    PathMapping,
)
from .runtime.safefs import chown_tree

__all__ = [
    "OUTPUTS",
    "SKILLS",
    "UPLOADS",
    "USER_DATA",
    "WORKSPACE",
    "Mount",
    "PathMapping",
    "ThreadLayout",
]

USER_DATA_DIRS = ("workspace", "uploads", "outputs")


@dataclasses.dataclass(frozen=True)
class ThreadLayout:
    """Host directories and mounts of one (user, thread)."""

    data_root: Path
    key: SandboxKey
    mounts: tuple[Mount, ...]
    # The thread's own directories (workspace, uploads, outputs) are below this: the
    # key's place in the data root, or a warm pool box's storage before it has a key.
    user_data_dir: Path

    @classmethod
    def for_key(cls, settings: Settings, key: SandboxKey) -> ThreadLayout:
        root = settings.data_root.expanduser().absolute()
        return cls.at(settings, key, root / "users" / key.user_id / "threads" / key.thread_id)

    @classmethod
    def at(cls, settings: Settings, key: SandboxKey, thread_dir: Path) -> ThreadLayout:
        """The layout with the thread's directories below `thread_dir/user-data`."""
        root = settings.data_root.expanduser().absolute()
        user_data = thread_dir / "user-data"
        mounts = [
            Mount(WORKSPACE, str(user_data / "workspace"), False),
            Mount(UPLOADS, str(user_data / "uploads"), settings.uploads_read_only),
            Mount(OUTPUTS, str(user_data / "outputs"), False),
        ]
        if settings.skills_dir is not None:
            mounts.append(Mount(SKILLS, str(settings.skills_dir.expanduser().absolute()), True))
        mounts += [
            Mount(m.virtual, str(m.host.expanduser().absolute()), m.read_only)
            for m in settings.mounts
        ]
        return cls(root, key, tuple(mounts), user_data)

    def create_dirs(self) -> None:
        """Create the thread's own directories (not shared skills or custom mounts)."""
        for name in USER_DATA_DIRS:
            (self.user_data_dir / name).mkdir(parents=True, exist_ok=True)

    def hand_over(self, uid: int, gid: int) -> bool:
        """Give the thread's own directories to the box's uid:gid.

        A whole tree is chowned only the first time (a top directory already
        owned by uid:gid is left alone). False when this process may not chown.
        """
        for name in USER_DATA_DIRS:
            top = self.user_data_dir / name
            try:
                info = top.lstat()
                if (info.st_uid, info.st_gid) != (uid, gid):
                    chown_tree(str(top), uid, gid)
            except PermissionError:
                return False
            except OSError as exc:  # never the host path: the caller shows this to users
                raise SandboxError(
                    ErrorCode.UNAVAILABLE,
                    f"cannot give the thread's {name} to the box's user: {exc.strerror}",
                ) from None
        return True

    def host_mapping(self) -> PathMapping:
        """Mapping for operations run on this host (local provider)."""
        return PathMapping(self.mounts, WORKSPACE, hidden_roots=(str(self.data_root),))

    def identity_mapping(self) -> PathMapping:
        """Mapping for a box where each mount sits at its virtual path."""
        return PathMapping(
            [Mount(m.virtual, m.virtual, m.read_only) for m in self.mounts], WORKSPACE
        )
