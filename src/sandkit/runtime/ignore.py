"""The one ignore set shared by list_dir, glob and grep (both engines).

Rule: the set applies to entries *below* the directory an operation was
asked about, never to that directory itself, so an agent that names
`node_modules/pkg` explicitly still gets an answer.
"""

from __future__ import annotations

import fnmatch
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import FrozenSet, Tuple

IGNORED_DIRS: FrozenSet[str] = frozenset(
    {
        # version control
        ".git",
        ".hg",
        ".svn",
        ".bzr",
        "_darcs",
        "CVS",
        # dependencies and virtual environments
        "node_modules",
        "bower_components",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        "__pypackages__",
        ".eggs",
        # caches
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        ".cache",
        ".gradle",
        ".parcel-cache",
        ".turbo",
        # build output
        "build",
        "dist",
        "target",
        ".next",
        ".nuxt",
        "htmlcov",
    }
)
IGNORED_DIR_GLOBS: Tuple[str, ...] = ("*.egg-info",)
# `.sandkit-*.tmp`: the runtime's own temp file of an atomic write (safefs.atomic_replace).
# Where O_TMPFILE is missing (gVisor's file systems, some network file systems) it has a
# name while it is written, and a writer killed outright leaves it behind: never shown.
IGNORED_FILE_GLOBS: Tuple[str, ...] = (
    "*.pyc",
    "*.pyo",
    ".DS_Store",
    "Thumbs.db",
    ".sandkit-*.tmp",
)


_FILE_RE = re.compile("|".join(fnmatch.translate(g) for g in IGNORED_FILE_GLOBS))
# ripgrep's `!*.pyc`-style negations exclude directories of that name too; every
# operation follows the same rule so grep, glob and list_dir agree.
_DIR_RE = re.compile("|".join(fnmatch.translate(g) for g in IGNORED_DIR_GLOBS + IGNORED_FILE_GLOBS))


def is_ignored_dir(name: str) -> bool:
    """Also the rule for a symlink: a link named node_modules is still node_modules."""
    return name in IGNORED_DIRS or _DIR_RE.match(name) is not None


def is_ignored_file(name: str) -> bool:
    return _FILE_RE.match(name) is not None


def rg_ignore_globs() -> Tuple[str, ...]:
    """The same set as ripgrep `--glob` negations."""
    globs = ["!" + d + "/" for d in sorted(IGNORED_DIRS)]
    globs += ["!" + g + "/" for g in IGNORED_DIR_GLOBS]
    globs += ["!" + g for g in IGNORED_FILE_GLOBS]
    return tuple(globs)
