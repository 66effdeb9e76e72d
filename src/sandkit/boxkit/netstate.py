"""Small files a box provider keeps about its boxes' network: each key's egress policy
(set_egress survives a release and a provider restart) and JSON written atomically."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger("sandkit.boxkit")


def write_json(path: Path, data: Any, mode: int = 0o644) -> None:
    """Replace `path` with `data` as JSON in one step (a reader sees old or new, never half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, sort_keys=True)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: Path) -> Any:
    """The JSON in `path`, or None when it is missing or unreadable (logged)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring %s: %s", path.name, exc)
        return None


def remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
