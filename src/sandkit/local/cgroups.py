"""Cgroups of this host for processes started on it: one per sandbox or box, below ours.

The local provider bounds each sandbox's commands with one (`hostlimits`); a provider
whose boxes are host processes does the same for a box (examples/sandkit-bwrap). A
cgroup is made under the cgroup this process runs in, in every hierarchy that has
`pids` or `memory` (cgroup v1: one per controller; v2: the unified one, with the
controllers delegated to children first), so every limit above it still holds. A
process joins through a one-line `sh` launcher that moves itself in and then execs
the command: what it starts is inside from its first instruction, and the caller
needs no preexec step (which would make Python fork, not vfork, the whole process).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import shlex
import signal
import time

CONTROLLERS = ("pids", "memory")
LAUNCHER_SHELL = "/bin/sh"
KILL_ROUNDS_S = 3.0  # how long `remove` keeps killing and retrying rmdir


@dataclasses.dataclass(frozen=True)
class Made:
    """The cgroups made for one name, and which limits took."""

    paths: tuple[str, ...] = ()
    pids: bool = False
    memory: bool = False


def parents(proc_root: str = "/proc") -> dict[str, str]:
    """Our own cgroup's directory for each of CONTROLLERS (one dir under v2).

    Raises OSError or ValueError where /proc cannot tell (not Linux, no cgroup fs)."""
    with open(os.path.join(proc_root, "self", "cgroup")) as f:
        memberships = [line.rstrip("\n").split(":", 2) for line in f if line.strip()]
    with open(os.path.join(proc_root, "self", "mountinfo")) as f:
        mounts = [line.split() for line in f]
    v1: dict[str, tuple[str, str]] = {}  # controller -> (mount root, mount point)
    v2: tuple[str, str] | None = None
    for fields in mounts:
        sep = fields.index("-")
        fstype, options = fields[sep + 1], fields[sep + 3].split(",")
        root, point = _unescape(fields[3]), _unescape(fields[4])
        if fstype == "cgroup":
            for controller in CONTROLLERS:
                if controller in options:
                    v1[controller] = (root, point)
        elif fstype == "cgroup2" and v2 is None:
            v2 = (root, point)
    found: dict[str, str] = {}
    for hierarchy, controllers, path in memberships:
        if hierarchy == "0" and controllers == "" and v2 is not None:
            where = _join(v2, path)
            if where is not None:
                try:
                    with open(os.path.join(where, "cgroup.controllers")) as f:
                        available = f.read().split()
                except OSError:
                    continue
                for controller in CONTROLLERS:
                    if controller in available and controller not in v1:
                        found[controller] = where
            continue
        for controller in controllers.split(","):
            if controller in v1:
                where = _join(v1[controller], path)
                if where is not None:
                    found[controller] = where
    return found


def paths(name: str, proc_root: str = "/proc") -> list[str]:
    """Where cgroups named `name` are or would be (none where /proc cannot tell)."""
    try:
        return sorted({os.path.join(parent, name) for parent in parents(proc_root).values()})
    except (OSError, ValueError):
        return []


def make(
    name: str,
    max_processes: int,
    memory_bytes: int,
    proc_root: str = "/proc",
    places: dict[str, str] | None = None,
) -> Made:
    """A cgroup `name` under each of our cgroups (`places`: `parents()`, when the caller
    has it already), with `pids.max` and the memory limit (no swap) written; a limit of 0
    is none. Best effort: a hierarchy we may not write to is passed over, and `Made` says
    what took. One of that name left by a crashed process (it may hold processes) is
    removed first. Raises OSError/ValueError like `parents`."""
    if places is None:
        places = parents(proc_root)
    by_parent: dict[str, list[str]] = {}
    for controller, parent in sorted(places.items()):
        by_parent.setdefault(parent, []).append(controller)
    made: list[str] = []
    pids = memory = False
    for parent, controllers in sorted(by_parent.items()):
        v2 = os.path.exists(os.path.join(parent, "cgroup.subtree_control"))
        if v2:
            controllers = [c for c in controllers if _delegate(parent, c)]
        if not controllers:
            continue
        path = os.path.join(parent, name)
        remove(path)
        try:
            os.mkdir(path)
        except OSError:
            continue  # read-only or not ours to write
        made.append(path)
        if "pids" in controllers:
            pids = _write(path, "pids.max", max_processes) if max_processes else True
        if "memory" in controllers:
            memory = _limit_memory(path, memory_bytes, v2) if memory_bytes else True
    return Made(tuple(made), pids, memory)


def launcher(cgroups: tuple[str, ...] | list[str], failed: str) -> list[str]:
    """The argv prefix that joins `cgroups`, then execs the rest; when it cannot join, it
    prints `failed` on stderr and exits 126 (nothing runs unbounded)."""
    if not cgroups:
        return []
    procs = [shlex.quote(os.path.join(path, "cgroup.procs")) for path in cgroups]
    joins = " && ".join(f"echo $$ > {path}" for path in procs)
    fail = f"{{ echo {shlex.quote(failed)} >&2; exit 126; }}"
    script = f'{{ {joins}; }} 2>/dev/null || {fail}; exec "$@"'
    return [LAUNCHER_SHELL, "-c", script, "sandkit-join"]


def remove(path: str, wait_s: float = KILL_ROUNDS_S) -> bool:
    """Kill everything in `path` (a fork bomb refills it: repeat) and delete it; False when
    it is still there after `wait_s` (or not ours to delete)."""
    end = time.monotonic() + wait_s
    killer = os.path.join(path, "cgroup.kill")  # v2, Linux >= 5.14: atomic
    while True:
        if os.path.exists(killer):
            _write(path, "cgroup.kill", 1)
        for pid in _members(path):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        try:
            os.rmdir(path)
            return True
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return True
            if exc.errno != errno.EBUSY or time.monotonic() > end:
                return False
        time.sleep(0.01)


def _join(mount: tuple[str, str], path: str) -> str | None:
    root, point = mount
    if root == "/":
        return point + path if path != "/" else point
    if path == root or path.startswith(root.rstrip("/") + "/"):
        return point + path[len(root.rstrip("/")) :]
    return None  # our cgroup is not visible through this mount


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _delegate(parent: str, controller: str) -> bool:
    """Is `controller` enabled for children of `parent` (enabling it if we may)?"""
    control = os.path.join(parent, "cgroup.subtree_control")
    try:
        with open(control) as f:
            if controller in f.read().split():
                return True
        with open(control, "w") as f:  # EBUSY when our own cgroup holds processes
            f.write("+" + controller)
        return True
    except OSError:
        return False


def _limit_memory(path: str, memory: int, v2: bool) -> bool:
    if v2:
        took = _write(path, "memory.max", memory)
        _write(path, "memory.swap.max", 0)  # no swap: the limit is a real one
        return took
    took = _write(path, "memory.limit_in_bytes", memory)
    _write(path, "memory.memsw.limit_in_bytes", memory)  # with swap accounting only
    return took


def _write(path: str, name: str, value: int) -> bool:
    try:
        with open(os.path.join(path, name), "w") as f:
            f.write(str(value))
        return True
    except OSError:
        return False


def _members(path: str) -> list[int]:
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return [int(line) for line in f if line.strip()]
    except OSError:
        return []
