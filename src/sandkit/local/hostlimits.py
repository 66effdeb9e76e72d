"""What a local sandbox's commands may use of the host: processes and memory.

Host-side only (not part of the runtime shipped into boxes): in a container
the box itself bounds processes and memory. On the host the local
provider gives each sandbox its own cgroup, made under the cgroup the
provider itself runs in (so every limit above it still holds): `pids.max`
bounds the number of tasks, the memory limit the memory of all the sandbox's
commands together (the kernel's OOM killer then picks inside the cgroup).
Each command starts behind a one-line `sh` launcher that moves itself into
the cgroup and then execs the command, so nothing it starts is outside;
`remove()` kills whatever is left in it and deletes it.

cgroup v1 (a hierarchy per controller) and v2 (one unified hierarchy) are
both understood. Where no cgroup can be made (a read-only cgroup fs, no
delegation, not Linux) each command gets rlimits instead, which are per
process, not per sandbox: RLIMIT_NPROC (counted per user, so the user's
current task count plus the limit; root ignores it) and RLIMIT_DATA (the
writable memory of each process; unlike RLIMIT_AS it does not count address
space merely reserved, which the JVM, Go and V8 reserve plenty of).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import secrets
import shlex
import signal
import time
from collections.abc import Callable
from typing import Any

from ..runtime.context import BOUNDS_FAILED

resource: Any
try:
    import resource
except ImportError:  # not Unix: no rlimits to set
    resource = None

PREFIX = "sandkit-"
LAUNCHER_SHELL = "/bin/sh"
_STALE = re.compile(r"^sandkit-(\d+)-[0-9a-f]+$")
_KILL_ROUNDS_S = 3.0  # how long remove() keeps killing and retrying rmdir


@dataclasses.dataclass(frozen=True)
class ProcessBounds:
    """The limits one sandbox's commands run under, and how they are enforced.

    It is the `runtime.context.CommandBounds` of a local sandbox's context.
    """

    max_processes: int
    memory_bytes: int
    # Cgroup directories a command joins (one per v1 hierarchy, or one v2 dir).
    cgroups: tuple[str, ...] = ()
    pids_by_cgroup: bool = False
    memory_by_cgroup: bool = False

    @property
    def mechanism(self) -> dict[str, str]:
        """What bounds each resource: 'cgroup', 'rlimit' or 'none' (rlimit as root)."""
        nproc = "cgroup" if self.pids_by_cgroup else "none" if os.geteuid() == 0 else "rlimit"
        return {"processes": nproc, "memory": "cgroup" if self.memory_by_cgroup else "rlimit"}

    def launch(
        self, argv: list[str], proc_root: str = "/proc"
    ) -> tuple[list[str], Callable[[], None] | None]:
        """The command behind a launcher that joins the cgroups, plus any rlimit step.

        The launcher is a tiny `sh` that writes its own pid into each
        cgroup's `cgroup.procs`, then execs the command: the command starts
        inside. Doing that in a preexec step instead would make Python fork
        (not vfork) the whole provider process for every command, which costs
        ~4x under fifty threads. rlimits still need the step (fallback only).
        """
        limits: list[tuple[int, int]] = []
        if resource is not None:
            if not self.pids_by_cgroup and os.geteuid() != 0:
                used = _tasks_of_user(os.getuid(), proc_root)
                limits.append((resource.RLIMIT_NPROC, used + self.max_processes))
            if not self.memory_by_cgroup:
                limits.append((resource.RLIMIT_DATA, self.memory_bytes))
            limits = [(which, _capped(which, value)) for which, value in limits]
        if self.cgroups:
            procs = [shlex.quote(os.path.join(d, "cgroup.procs")) for d in self.cgroups]
            joins = " && ".join(f"echo $$ > {path}" for path in procs)
            failed = f"{{ echo {shlex.quote(BOUNDS_FAILED)} >&2; exit 126; }}"
            script = f'{{ {joins}; }} 2>/dev/null || {failed}; exec "$@"'
            argv = [LAUNCHER_SHELL, "-c", script, "sandkit-launch", *argv]
        if not limits:
            return argv, None

        def enter() -> None:
            for which, value in limits:
                resource.setrlimit(which, (value, value))

        return argv, enter

    def remove(self) -> None:
        """Kill every process left in the cgroups and delete them (idempotent)."""
        for path in self.cgroups:
            _remove_cgroup(path)


def _capped(which: int, value: int) -> int:
    """A limit never above the current hard one (only root may raise that)."""
    hard = resource.getrlimit(which)[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def _tasks_of_user(uid: int, proc_root: str) -> int:
    """Tasks (threads included, as RLIMIT_NPROC counts them) owned by `uid`."""
    count = 0
    try:
        names = os.listdir(proc_root)
    except OSError:
        return 0
    for name in names:
        if not name.isdigit():
            continue
        base = os.path.join(proc_root, name)
        try:
            if os.stat(base).st_uid == uid:
                count += len(os.listdir(os.path.join(base, "task")))
        except OSError:
            continue  # exited meanwhile
    return count


# -- making the cgroup ------------------------------------------------------------------


def create(max_processes: int, memory_bytes: int, proc_root: str = "/proc") -> ProcessBounds:
    """Bounds for one sandbox: its own cgroup where one can be made, rlimits otherwise."""
    plain = ProcessBounds(max_processes, memory_bytes)
    try:
        places = _our_cgroups(proc_root)
    except (OSError, ValueError):
        return plain
    name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
    by_parent: dict[str, list[str]] = {}
    for controller, parent in sorted(places.items()):
        by_parent.setdefault(parent, []).append(controller)
    made: list[str] = []
    pids = memory = False
    for parent, controllers in sorted(by_parent.items()):
        v2 = os.path.exists(os.path.join(parent, "cgroup.subtree_control"))
        if v2:
            controllers = [c for c in controllers if _v2_delegate(parent, c)]
        if not controllers:
            continue
        try:
            path = _make(parent, name)
        except OSError:
            continue  # read-only or not ours to write
        made.append(path)
        got_pids, got_memory = _limit(path, controllers, max_processes, memory_bytes, v2)
        pids, memory = pids or got_pids, memory or got_memory
    if not (pids or memory):
        for path in made:
            _remove_cgroup(path)
        return plain
    return ProcessBounds(max_processes, memory_bytes, tuple(made), pids, memory)


def _our_cgroups(proc_root: str) -> dict[str, str]:
    """Directory of our own cgroup for `pids` and `memory` (the same one under v2)."""
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
            for controller in ("pids", "memory"):
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
                for controller in ("pids", "memory"):
                    if controller in available and controller not in v1:
                        found[controller] = where
            continue
        for controller in controllers.split(","):
            if controller in v1:
                where = _join(v1[controller], path)
                if where is not None:
                    found[controller] = where
    return found


def _join(mount: tuple[str, str], path: str) -> str | None:
    root, point = mount
    if root == "/":
        return point + path if path != "/" else point
    if path == root or path.startswith(root.rstrip("/") + "/"):
        return point + path[len(root.rstrip("/")) :]
    return None  # our cgroup is not visible through this mount


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _v2_delegate(parent: str, controller: str) -> bool:
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


def _make(parent: str, name: str) -> str:
    _sweep_stale(parent)
    path = os.path.join(parent, name)
    os.mkdir(path)
    return path


def _limit(
    path: str, controllers: list[str], processes: int, memory: int, v2: bool
) -> tuple[bool, bool]:
    """Write the limits; which of them took."""
    pids = "pids" in controllers and _write(path, "pids.max", processes)
    got_memory = False
    if "memory" in controllers:
        if v2:
            got_memory = _write(path, "memory.max", memory)
            _write(path, "memory.swap.max", 0)  # no swap: the limit is a real one
        else:
            got_memory = _write(path, "memory.limit_in_bytes", memory)
            _write(path, "memory.memsw.limit_in_bytes", memory)  # with swap accounting only
    return pids, got_memory


def _write(path: str, name: str, value: int) -> bool:
    try:
        with open(os.path.join(path, name), "w") as f:
            f.write(str(value))
        return True
    except OSError:
        return False


# -- removing it ------------------------------------------------------------------------


def _members(path: str) -> list[int]:
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return [int(line) for line in f if line.strip()]
    except OSError:
        return []


def _remove_cgroup(path: str) -> None:
    """Kill everything in `path` (a fork bomb refills it: repeat) and rmdir it."""
    end = time.monotonic() + _KILL_ROUNDS_S
    killer = os.path.join(path, "cgroup.kill")  # v2, Linux >= 5.14: atomic
    while True:
        if os.path.exists(killer):
            _write(path, "cgroup.kill", 1)
        for pid in _members(path):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        try:
            os.rmdir(path)
            return
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return
            if exc.errno != errno.EBUSY or time.monotonic() > end:
                return  # left for the next sweep of stale cgroups
        time.sleep(0.01)


def _sweep_stale(parent: str) -> None:
    """Remove cgroups a dead provider process of ours left behind."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        match = _STALE.match(name)
        if match is None or int(match.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(match.group(1)), 0)
            continue  # that provider still runs
        except ProcessLookupError:
            _remove_cgroup(os.path.join(parent, name))
        except OSError:
            continue
