"""What a local sandbox's commands may use of the host: processes and memory.

Host-side only (not part of the runtime shipped into boxes): in a container
the box itself bounds processes and memory. On the host the local
provider gives each sandbox its own cgroup, made under the cgroup the
provider itself runs in (so every limit above it still holds): `pids.max`
bounds the number of tasks, the memory limit the memory of all the sandbox's
commands together (the kernel's OOM killer then picks inside the cgroup).
Each command starts behind a one-line `sh` launcher that moves itself into
the cgroup and then execs the command, so nothing it starts is outside;
`remove()` kills whatever is left in it and deletes it. The cgroup mechanics
(finding ours, making one, the launcher, removal) are `cgroups`'.

cgroup v1 (a hierarchy per controller) and v2 (one unified hierarchy) are
both understood. Where no cgroup can be made (a read-only cgroup fs, no
delegation, not Linux) each command gets rlimits instead, which are per
process, not per sandbox: RLIMIT_NPROC (counted per user, so the user's
current task count plus the limit; root ignores it) and RLIMIT_DATA (the
writable memory of each process; unlike RLIMIT_AS it does not count address
space merely reserved, which the JVM, Go and V8 reserve plenty of).
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
from collections.abc import Callable
from typing import Any

from ..runtime.context import BOUNDS_FAILED
from . import cgroups

resource: Any
try:
    import resource
except ImportError:  # not Unix: no rlimits to set
    resource = None

PREFIX = "sandkit-"
_STALE = re.compile(r"^sandkit-(\d+)-[0-9a-f]+$")


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
        argv = [*cgroups.launcher(self.cgroups, BOUNDS_FAILED), *argv]
        if not limits:
            return argv, None

        def enter() -> None:
            for which, value in limits:
                resource.setrlimit(which, (value, value))

        return argv, enter

    def remove(self) -> None:
        """Kill every process left in the cgroups and delete them (idempotent)."""
        for path in self.cgroups:
            cgroups.remove(path)  # one still busy is left for the next sweep


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
        places = cgroups.parents(proc_root)
        for parent in set(places.values()):
            _sweep_stale(parent)
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        made = cgroups.make(name, max_processes, memory_bytes, proc_root, places)
    except (OSError, ValueError):
        return plain
    if not (made.pids or made.memory):
        for path in made.paths:
            cgroups.remove(path)
        return plain
    return ProcessBounds(max_processes, memory_bytes, made.paths, made.pids, made.memory)


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
            cgroups.remove(os.path.join(parent, name))
        except OSError:
            continue
