"""Virtual <-> real path mapping: the jail every operation goes through.

Stdlib only. On the host the mounts point at thread directories; inside a
container the same class runs with identity roots (each mount sits at its
virtual path), so the jail and its error codes are literally the same code
everywhere.
"""

from __future__ import annotations

import os
import posixpath
import re

from .errors import ErrorCode, SandboxError
from .values import Value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

USER_DATA = "/mnt/user-data"
WORKSPACE = USER_DATA + "/workspace"
UPLOADS = USER_DATA + "/uploads"
OUTPUTS = USER_DATA + "/outputs"
SKILLS = "/mnt/skills"
RESERVED_PREFIXES = (USER_DATA, SKILLS)

MAX_PATH_CHARS = 4096
MAX_NAME_BYTES = 255
HIDDEN_ROOT_MARKER = "[hidden]"

# A character that may continue a path segment: a root followed by one of
# these is a different name (`/data/ws2` is not under `/data/ws`).
_SEGMENT_CONTINUES = r"(?![\w.\-~])"
# A character that may precede a path inside a larger path.
_SEGMENT_PRECEDED = r"(?<![\w.\-~/])"


class Mount(Value):
    virtual: str
    real: str
    read_only: bool

    def __init__(self, virtual: str, real: str, read_only: bool = False) -> None:
        self._init(locals())

    def to_dict(self) -> Dict[str, Any]:
        return {"virtual": self.virtual, "real": self.real, "read_only": self.read_only}


class Resolved(Value):
    """A checked path: `real` is symlink-free and inside `mount`."""

    virtual: str
    real: str
    mount: Mount

    def __init__(self, virtual: str, real: str, mount: Mount) -> None:
        self._init(locals())


def is_within(path: str, root: str) -> bool:
    """True when `path` equals `root` or lies below it on a segment boundary."""
    if root == "/":
        return path.startswith("/")
    return path == root or path.startswith(root + "/")


def overlaps(a: str, b: str) -> bool:
    return is_within(a, b) or is_within(b, a)


def normalize_virtual(path: object, default_dir: str = WORKSPACE) -> str:
    """Lexically normalise a caller's path; relative paths hang off `default_dir`."""
    if not isinstance(path, str):
        raise SandboxError(ErrorCode.INVALID_ARGUMENT, "path must be a string")
    if path == "":
        raise SandboxError(ErrorCode.INVALID_ARGUMENT, "path must not be empty")
    if "\x00" in path:
        raise SandboxError(ErrorCode.INVALID_ARGUMENT, "path contains a NUL byte")
    if len(path) > MAX_PATH_CHARS:
        raise SandboxError(
            ErrorCode.INVALID_ARGUMENT,
            "path is longer than %d characters" % MAX_PATH_CHARS,
        )
    try:
        encoded = os.fsencode(path)
    except UnicodeEncodeError:
        raise SandboxError(
            ErrorCode.INVALID_ARGUMENT, "path is not valid unicode (lone surrogate)"
        ) from None
    # Every component as given counts, also one that a later `..` cancels.
    for name in encoded.split(b"/"):
        if len(name) > MAX_NAME_BYTES:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT,
                "a path component is longer than %d bytes" % MAX_NAME_BYTES,
            )
    if not path.startswith("/"):
        path = default_dir + "/" + path
    normal = posixpath.normpath(path)
    if normal.startswith("//"):
        normal = "/" + normal.lstrip("/")
    return normal


class PathMapping:
    """Resolves virtual paths to real ones and masks real paths back."""

    def __init__(
        self,
        mounts: Iterable[Mount],
        default_dir: str = WORKSPACE,
        hidden_roots: Sequence[str] = (),
    ) -> None:
        ordered: List[Mount] = []
        for mount in mounts:
            virtual = posixpath.normpath(mount.virtual)
            if not virtual.startswith("/") or virtual == "/":
                raise SandboxError(
                    ErrorCode.INVALID_ARGUMENT,
                    "mount point must be an absolute path below /: %r" % mount.virtual,
                )
            if any(m.virtual == virtual for m in ordered):
                raise SandboxError(ErrorCode.INVALID_ARGUMENT, "duplicate mount point %s" % virtual)
            ordered.append(Mount(virtual, os.path.abspath(mount.real), mount.read_only))
        ordered.sort(key=lambda m: len(m.virtual), reverse=True)
        self.mounts: Tuple[Mount, ...] = tuple(ordered)
        self.default_dir = default_dir
        self._real_roots = {m.virtual: os.path.realpath(m.real) for m in self.mounts}
        self._hidden_roots = tuple(
            sorted(
                {r for root in hidden_roots for r in (root, os.path.realpath(root))} - {"/", ""},
                key=len,
                reverse=True,
            )
        )
        self._mask_re, self._mask_to = self._build_mask()
        self._unmask_re, self._unmask_to = self._build_unmask()

    # -- resolution ---------------------------------------------------------

    def match(self, virtual: str) -> Optional[Mount]:
        for mount in self.mounts:
            if is_within(virtual, mount.virtual):
                return mount
        return None

    def real_root(self, mount: Mount) -> str:
        return self._real_roots[mount.virtual]

    def resolve(self, path: object, for_write: bool = False) -> Resolved:
        virtual = normalize_virtual(path, self.default_dir)
        mount = self.match(virtual)
        if mount is None:
            raise SandboxError(
                ErrorCode.ACCESS_DENIED, "%s is outside the sandbox's mounts" % virtual
            )
        root = self._real_roots[mount.virtual]
        rest = virtual[len(mount.virtual) :].lstrip("/")
        candidate = os.path.join(root, rest) if rest else root
        try:
            real = os.path.realpath(candidate)
        except (OSError, ValueError) as exc:  # symlink loops on old Pythons
            raise SandboxError(ErrorCode.ACCESS_DENIED, "%s cannot be resolved" % virtual) from exc
        if not is_within(real, root):
            raise SandboxError(
                ErrorCode.ACCESS_DENIED,
                "%s resolves outside its mount %s" % (virtual, mount.virtual),
            )
        if for_write and mount.read_only:
            raise SandboxError(
                ErrorCode.READ_ONLY, "%s is on the read-only mount %s" % (virtual, mount.virtual)
            )
        return Resolved(virtual, real, mount)

    def to_virtual(self, real: str) -> str:
        """Virtual path of a real path that lies inside a mount."""
        best: Optional[Tuple[str, str]] = None
        for mount in self.mounts:
            root = self._real_roots[mount.virtual]
            if is_within(real, root) and (best is None or len(root) > len(best[0])):
                best = (root, mount.virtual)
        if best is None:
            return self.mask(real)
        root, virtual = best
        rest = real[len(root) :].lstrip("/")
        return virtual + "/" + rest if rest else virtual

    # -- masking ------------------------------------------------------------

    def _build_mask(self) -> Tuple[Optional["re.Pattern[str]"], Dict[str, str]]:
        mapping: Dict[str, str] = {}
        for mount in self.mounts:
            for real in (mount.real, self._real_roots[mount.virtual]):
                if real != mount.virtual and real != "/":
                    current = mapping.get(real)
                    if current is None or len(mount.virtual) > len(current):
                        mapping[real] = mount.virtual
        for hidden in self._hidden_roots:
            mapping.setdefault(hidden, HIDDEN_ROOT_MARKER)
        if not mapping:
            return None, {}
        alternatives = sorted(mapping, key=len, reverse=True)
        pattern = "|".join(
            re.escape(r) + ("" if mapping[r] == HIDDEN_ROOT_MARKER else _SEGMENT_CONTINUES)
            for r in alternatives
        )
        return re.compile(pattern), mapping

    def _build_unmask(self) -> Tuple[Optional["re.Pattern[str]"], Dict[str, str]]:
        mapping = {
            m.virtual: self._real_roots[m.virtual]
            for m in self.mounts
            if self._real_roots[m.virtual] != m.virtual
        }
        if not mapping:
            return None, {}
        alternatives = sorted(mapping, key=len, reverse=True)
        pattern = "|".join(
            _SEGMENT_PRECEDED + re.escape(v) + _SEGMENT_CONTINUES for v in alternatives
        )
        return re.compile(pattern), mapping

    def mask(self, text: str) -> str:
        """Replace every real mount root (and hidden root) with its virtual form."""
        if self._mask_re is None or not text:
            return text
        return self._mask_re.sub(lambda m: self._mask_to[m.group(0)], text)

    @property
    def masked_strings(self) -> Tuple[str, ...]:
        """Every string `mask` may replace (for cleaning a stream chunk by chunk)."""
        return tuple(self._mask_to)

    def unmask(self, text: str) -> str:
        """Turn virtual mount paths in a command into real ones (host execution)."""
        if self._unmask_re is None or not text:
            return text
        return self._unmask_re.sub(lambda m: self._unmask_to[m.group(0)], text)

    @property
    def is_identity(self) -> bool:
        return all(self._real_roots[m.virtual] == m.virtual for m in self.mounts)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "mounts": [m.to_dict() for m in self.mounts],
            "default_dir": self.default_dir,
            "hidden_roots": list(self._hidden_roots),
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "PathMapping":
        return cls(
            [Mount(**m) for m in data["mounts"]],
            default_dir=data.get("default_dir", WORKSPACE),
            hidden_roots=data.get("hidden_roots", ()),
        )
