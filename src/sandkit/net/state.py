"""The egress proxy's state directory: one layout, written by providers, read by the proxy.

    <root>/proxy.json                        hosts table, denied addresses, limits
    <root>/control.sock                      the proxy's: "sync", "ping", "stats"
    <root>/boxes/<name>/policy.json          one box's policy (+ "address": TCP identity)
    <root>/boxes/<name>/egress/egress.sock   made by the proxy: the box's way in (unix mode)

Docker writes it on the host (the proxy container mounts it), Kubernetes through
`agent.pyz --net policy` in the proxy pod, and the proxy only reads it. Every file is
replaced in one step, so the proxy sees the old or the new, never half (stdlib: it runs
inside the agent's zipapp).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from typing import Any, Dict, Optional, Union

log = logging.getLogger("sandkit.net")

CONFIG = "proxy.json"
CONTROL = "control.sock"
BOXES = "boxes"
POLICY = "policy.json"
EGRESS = "egress"
SOCKET = "egress.sock"

PathLike = Union[str, "os.PathLike[str]"]


def box_dir(root: PathLike, name: str) -> str:
    return os.path.join(root, BOXES, name)


def policy_file(root: PathLike, name: str) -> str:
    return os.path.join(root, BOXES, name, POLICY)


def write_policy(
    root: PathLike, name: str, policy: Dict[str, Any], address: Optional[str] = None
) -> None:
    """Write box `name`'s policy (checked first: the proxy would refuse a bad one and
    enforce nothing for that box); `address` is how the proxy knows the box in TCP mode."""
    from .policy import Policy

    Policy.from_dict({k: policy[k] for k in ("mode", "allow", "deny") if k in policy})
    data = dict(policy, address=address) if address else policy
    write_json(policy_file(root, name), data)


def remove_policy(root: PathLike, name: str) -> None:
    """The proxy forgets the box at its next sync (its directory goes when empty)."""
    remove(policy_file(root, name))
    with contextlib.suppress(OSError):
        os.rmdir(box_dir(root, name))


def write_json(path: PathLike, data: Any, mode: int = 0o644) -> None:
    """Replace `path` with `data` as JSON in one step (a reader sees old or new, never half)."""
    directory = os.path.dirname(os.fspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, sort_keys=True)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: PathLike) -> Any:
    """The JSON in `path`, or None when it is missing or unreadable (logged)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring %s: %s", os.path.basename(os.fspath(path)), exc)
        return None


def remove(path: PathLike) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
